"""Miners, hybrids, perturbations and controls: invariants, seeds, and measured false negatives."""

from __future__ import annotations

import hashlib
import re
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from transferdx.auditing.audit import audit_records
from transferdx.diagnostics.tokens import alnum
from transferdx.embed import topk_chunked
from transferdx.inputs.records import OWN_POSITIVE_RELATION, Passage, QuerySet, Record
from transferdx.inputs.trec_dl import load_trec_dl_query_set
from transferdx.resampling import records_key
from transferdx.sources.build import build_from_context, hybrid
from transferdx.sources.context import BuildContext
from transferdx.sources.controls import CONTROLS, build_control, derangement, random_mix
from transferdx.sources.demo import demo_query_set
from transferdx.sources.miners import bm25_ranking, mine_bm25, mine_dense
from transferdx.sources.perturb import PERTURBATIONS, perturb


class FakeEncoder:
    """Deterministic unit vectors from text hashes, with a bag-of-words component so that
    similar texts are near (enough structure for rankings and neighbours)."""

    class spec:  # mimics EmbeddingCache.spec
        name = "fake"

    def embed(self, texts, role):
        out = np.zeros((len(texts), 64))
        for i, t in enumerate(texts):
            for tok in alnum(t):
                out[i, int(hashlib.md5(tok.encode()).hexdigest(), 16) % 64] += 1.0
            out[i] += 1e-3 * (np.arange(64) == int(hashlib.md5(t.encode()).hexdigest(), 16) % 64)
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)


@pytest.fixture(scope="module")
def demo_ctx():
    return BuildContext(demo_query_set(), k=8, seed=3, encoder=FakeEncoder())


WORDS = ["alpha", "beta", "gamma", "delta", "omega", "sigma", "kappa", "zeta"]


@st.composite
def query_sets(draw):
    n_pool = draw(st.integers(6, 25))
    pool = {
        f"d{i}": " ".join(draw(st.lists(st.sampled_from(WORDS), min_size=1, max_size=6))) + f" doc{i}"
        for i in range(n_pool)
    }
    n_q = draw(st.integers(1, 5))
    queries, positives = {}, {}
    for q in range(n_q):
        queries[f"q{q}"] = " ".join(draw(st.lists(st.sampled_from(WORDS), min_size=1, max_size=3)))
        positives[f"q{q}"] = draw(st.lists(st.sampled_from(sorted(pool)), min_size=1, max_size=4, unique=True))
    return QuerySet("random", queries, positives, pool)


@settings(max_examples=40, deadline=None)
@given(query_sets(), st.integers(1, 6), st.sampled_from(["[0:8]", "[2:7]", "[1:3]"]))
def test_miners_never_return_a_known_positive(qs, k, window):
    ctx = BuildContext(qs, k=k, slice_spec=window, encoder=FakeEncoder())
    for miner in (mine_bm25, mine_dense):
        for known in ("all", "p0"):
            for rec in miner(ctx, known=known).records:
                ids = {n.id for n in rec.negatives}
                forbidden = set(qs.positives[rec.qid]) if known == "all" else {qs.positives[rec.qid][0]}
                assert not ids & forbidden


def test_topk_chunked_matches_full_sort():
    rng = np.random.default_rng(0)
    q = rng.normal(size=(37, 8)).astype(np.float32)
    p = np.round(rng.normal(size=(300, 8)), 1).astype(np.float32)  # rounding makes ties
    idx, val = topk_chunked(q, p, 20, q_chunk=7, p_chunk=64)
    full = q @ p.T
    for i in range(len(q)):
        order = np.lexsort((np.arange(len(p)), -full[i]))[:20]
        assert idx[i].tolist() == order.tolist()
        np.testing.assert_allclose(val[i], full[i][order], rtol=1e-6)


def test_bm25_ranking_scores_positive_only(demo_ctx):
    ranked = bm25_ranking(demo_ctx.query_set, 10)
    qs = demo_ctx.query_set
    for qid, ids in ranked.items():
        q_tokens = set(alnum(qs.queries[qid]))
        assert all(q_tokens & set(alnum(qs.pool[i])) for i in ids)  # score > 0 ⇒ shares a term


def test_random_mix_endpoints(demo_ctx):
    parent = mine_bm25(demo_ctx).records
    zero = random_mix(demo_ctx, parent, "random_mix_0", share=0.0).records
    assert [r.negatives for r in zero] == [r.negatives for r in parent]
    full = build_control("random_mix_100", demo_ctx, parent).records
    for a, b in zip(parent, full, strict=True):
        assert not {n.id for n in a.negatives} & {n.id for n in b.negatives}
        assert len(a.negatives) == len(b.negatives)
        assert not {n.id for n in b.negatives} & set(demo_ctx.query_set.positives[a.qid])
    half = build_control("random_mix_50", demo_ctx, parent).records
    for a, b in zip(parent, half, strict=True):
        kept = len({n.id for n in a.negatives} & {n.id for n in b.negatives})
        assert kept == len(a.negatives) - int(np.floor(0.5 * len(a.negatives) + 0.5))


def test_shuffle_is_a_derangement(demo_ctx):
    rng = np.random.default_rng(1)
    for n in (2, 3, 10, 101):
        perm = derangement(n, rng)
        assert sorted(perm.tolist()) == list(range(n)) and not np.any(perm == np.arange(n))
    parent = mine_bm25(demo_ctx).records
    shuffled = build_control("easy_shuffled", demo_ctx, parent).records
    donors = {tuple(n.id for n in r.negatives): r.qid for r in parent}
    for rec in shuffled:
        donor = donors.get(tuple(n.id for n in rec.negatives))
        assert donor is not None and donor != rec.qid


def test_own_positive_mix_and_neighbor_positive(demo_ctx):
    parent = mine_bm25(demo_ctx).records
    mixed = build_control("own_positive_mix", demo_ctx, parent).records
    for a, b in zip(parent, mixed, strict=True):
        own = [n for n in b.negatives if n.relation == OWN_POSITIVE_RELATION]
        assert len(own) == int(np.floor(0.5 * len(a.negatives) + 0.5))
        assert all(n.text == b.positives[0].text for n in own)
    neighbors = build_control("neighbor_positive", demo_ctx, parent).records
    all_p0 = {ps[0] for ps in demo_ctx.query_set.positives.values()}
    for rec in neighbors:
        ids = [n.id for n in rec.negatives]
        assert set(ids) <= all_p0 and rec.positives[0].id not in ids and len(ids) == len(set(ids)) == 8
    assert all(r.kind == "control" for r in neighbors)


def _parent(tag: str, sizes: dict[str, int], texts: dict[str, list[str]] | None = None) -> list[Record]:
    """One record per qid with ``sizes[qid]`` negatives whose ids start with ``tag`` (so each hybrid
    negative names its parent); texts default to distinct per parent."""
    texts = texts or {}
    out = []
    for qid, k in sizes.items():
        words = texts.get(qid, [f"{tag} passage {qid} {i}" for i in range(k)])
        negatives = tuple(Passage(f"{tag}:{qid}:{i}", w) for i, w in enumerate(words))
        out.append(Record(qid, f"query {qid}", (Passage(f"p:{qid}", f"positive {qid}"),), negatives, tag))
    return out


def test_hybrid_takes_half_from_each_parent():
    """docs/design.md §4: per record K = the larger parent count; ⌈K/2⌉ negatives from ``a`` (all of
    a's when it has fewer), the rest up to K from ``b`` without repeating a text; seeded; a query
    missing from either parent is a counted exclusion. Counts are written out per case.

    Kills: ⌊K/2⌋ from ``a`` (``k // 2`` in ``hybrid``) and dropping the repeated-text check."""
    same = {f"d{i}": [f"shared text {i} {j}" for j in range(4)] for i in range(6)}  # b repeats a's texts
    a = _parent("a", {"q8": 8, "q7": 7, "q2": 2, "q5": 5, **dict.fromkeys(same, 4), "only_a": 3}, same)
    b = _parent("b", {"q8": 8, "q7": 3, "q2": 8, "q5": 5, **dict.fromkeys(same, 4), "only_b": 2}, same)
    expected = {  # qid → (from a, from b): K = max(K_a, K_b), ⌈K/2⌉ from a, the rest from b
        "q8": (4, 4),  # K 8
        "q7": (4, 3),  # K 7: ⌈7/2⌉ = 4 from a, b has only 3
        "q2": (2, 6),  # K 8: a has only 2 of the 4, b fills up to 8
        "q5": (3, 2),  # K 5
        **dict.fromkeys(same, (2, 2)),  # K 4: b may only add the 2 texts a did not give
    }
    result = hybrid(a, b, "a+b", seed=0)
    got = {
        r.qid: (sum(n.id.startswith("a:") for n in r.negatives), sum(n.id.startswith("b:") for n in r.negatives))
        for r in result.records
    }
    assert got == expected
    for rec in result.records:
        texts = [n.text for n in rec.negatives]
        assert len(texts) == len(set(texts)), rec.qid
        assert rec.source == "a+b" and rec.positives == next(r.positives for r in a if r.qid == rec.qid)
    reasons = sorted((e.qid, e.reason) for e in result.exclusions)
    assert reasons == [
        ("only_a", "query missing from the second parent"),
        ("only_b", "query missing from the first parent"),
    ]
    again, other = hybrid(a, b, "a+b", seed=0), hybrid(a, b, "a+b", seed=1)
    assert again.records == result.records and other.records != result.records


def test_perturbations_keep_query_overlap_tokens():
    qs = demo_query_set()
    allowed_changes = {"negation": {"not", "no"}, "predicate_swap": None, "number_swap": None}
    applied = Counter()
    for qid, pos in qs.positives.items():
        text = qs.pool[pos[0]]
        overlap = set(alnum(qs.queries[qid])) & set(alnum(text))
        for relation in PERTURBATIONS:
            edit = perturb(text, relation)
            if edit is None:
                continue
            applied[relation] += 1
            new, changed = edit
            assert new != text
            kept = overlap - set(changed)
            assert kept <= set(alnum(new)), (relation, kept - set(alnum(new)))
            if relation in ("entity_swap", "role_reversal"):
                assert Counter(alnum(new)) == Counter(alnum(text))  # a reordering only
            if allowed_changes.get(relation):
                assert set(changed) <= allowed_changes[relation]
    assert all(applied[r] > 0 for r in PERTURBATIONS), applied
    assert perturb("Completely plain text here", "number_swap") is None
    with pytest.raises(ValueError, match="unknown perturbation"):
        perturb("x", "paraphrase")


def test_same_seed_same_sources():
    names = ["bm25", "perturb", "bm25+perturb"]

    def run(seed):
        ctx = BuildContext(demo_query_set(), seed=seed, encoder=FakeEncoder())
        return build_from_context(ctx, names, list(CONTROLS))

    a, b, c = run(5), run(5), run(6)
    assert a.records == b.records and a.exclusions == b.exclusions
    rnd = lambda x: [r for r in x.records if r.source == "random_passages"]  # noqa: E731
    assert rnd(a) != rnd(c)
    assert {r.source for r in a.records} == set(names) | set(CONTROLS)
    assert all(r.kind == "control" for r in a.records if r.source in CONTROLS)


@pytest.mark.slow
def test_dl19_false_negatives_measured(data):
    qs = load_trec_dl_query_set(data / "msmarco-dl19")
    assert len(qs.queries) == 43 and len(qs.pool) > 14000
    ctx = BuildContext(qs, k=8, seed=0)
    built = build_from_context(ctx, ["bm25", "perturb"], ["random_passages", "own_positive_mix"])
    assert "perturb" not in built.false_negatives  # edits of p0 are not judged passages
    fn = dict(built.false_negatives)
    assert set(fn) == {"bm25", "random_passages", "own_positive_mix"}
    ranked = bm25_ranking(qs, ctx.depth())
    for qid, n_fn, n in fn["bm25"][:10]:
        single = [p for p in ranked[qid] if p != qs.positives[qid][0]][:8]
        assert (n_fn, n) == (sum(qs.judgments[qid].get(p, -1) >= 2 for p in single), len(single))
    # the audited negatives never contain a judged-relevant passage
    for rec in built.records:
        if rec.source == "bm25":
            assert all((n.judgment or 0) < 2 for n in rec.negatives)
    rate = lambda s: sum(r[1] for r in fn[s]) / sum(r[2] for r in fn[s])  # noqa: E731
    assert rate("own_positive_mix") > rate("bm25") > rate("random_passages")
    result = audit_records(built, alnum, resamples=200)
    row = result.profile.to_frame().set_index("source")
    assert row.loc["perturb", "false_negative_rate"] == "not_measured"
    assert row.loc["bm25", "false_negative_rate"] == pytest.approx(rate("bm25"))
    # the CI, recomputed: records resampled with replacement (rng.integers(0, n, (B, n)) from the
    # stream false_negative_rates seeds with (seed, records_key(qids), 0xF1)), the ratio
    # of sums per resample, 2.5 / 97.5 percentiles. Kills: the ratio bootstrapped without its
    # denominator (``counts @ num / counts.sum(1)`` in ``bootstrap_ratios``).
    num, den = np.array([r[1] for r in fn["bm25"]], float), np.array([r[2] for r in fn["bm25"]], float)
    key = records_key([r[0] for r in fn["bm25"]])
    idx = np.random.default_rng([0, key, 0xF1]).integers(0, len(num), size=(200, len(num)))
    low, high = np.percentile(num[idx].sum(axis=1) / den[idx].sum(axis=1), [2.5, 97.5])
    assert row.loc["bm25", "false_negative_rate_ci_low"] == pytest.approx(low, abs=1e-12)
    assert row.loc["bm25", "false_negative_rate_ci_high"] == pytest.approx(high, abs=1e-12)
    assert re.match(r"^\d+$", fn["bm25"][0][0])


def test_topk_chunked_all_ties_prefers_low_indices():
    q = np.ones((3, 2), dtype=np.float32)
    p = np.ones((50, 2), dtype=np.float32)
    idx, val = topk_chunked(q, p, 7, q_chunk=2, p_chunk=16)
    assert idx.tolist() == [list(range(7))] * 3 and np.all(val == 2.0)
