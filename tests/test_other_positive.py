"""Negatives that are another query's positive (docs/design.md §3.5, absolute flag
``copies_other_positive``; experiments/results/fn_years/PLAN.md, "The missed defect"): the pure
per-negative function on hand-made records, its per-record count and source rate with the bootstrap
CI, the fixed rule, the demo's ``neighbor_positive`` control, and the verdict's re-mine advice."""

from __future__ import annotations

import numpy as np
import pytest

import transferdx as tdx
from transferdx.auditing.audit import audit_records
from transferdx.auditing.facts import SourceFacts
from transferdx.auditing.profiles import (
    ABSOLUTE_FLAG_RULES,
    OTHER_POSITIVE_STATS,
    absolute_flags,
    apply_flags,
    bootstrap_ratios,
    catch_rate,
)
from transferdx.auditing.verdict import Context, bottom_line, verdict_lines
from transferdx.diagnostics.other_positive import other_positive
from transferdx.diagnostics.suspicion import REASONS
from transferdx.diagnostics.tokens import alnum
from transferdx.inputs.records import LoadResult, Passage, Record
from transferdx.resampling import bootstrap_rng

from .verdicts import block

REASON = "of negatives are another query's positive"


def rec(qid: str, pos: list[Passage], neg: list[Passage], source: str = "a", kind: str = "genuine") -> Record:
    return Record(qid, f"query {qid}", tuple(pos), tuple(neg), source, kind)


def P(pid: str, text: str | None = None) -> Passage:
    return Passage(pid, text if text is not None else f"passage {pid}")


# ---------------------------------------------------------------------------------------------
# The per-negative function
# ---------------------------------------------------------------------------------------------


def test_other_positive_by_id_by_text_own_and_same_qid_across_sources():
    """Kills: the own-qid exclusion dropped (own positives counted), the join on the record rather
    than the qid (the same qid in another source counted as "another query"), the text key not
    normalised, ids ignored, and a passage that is a positive of its own qid and of another counted."""
    records = [
        # by id: p2 is q2's positive; p1 is q1's own; x is nobody's
        rec("q1", [P("p1")], [P("p2"), P("p1"), P("x")]),
        rec("q2", [P("p2"), P("p6")], [P("p1"), P("p6")]),
        # p6 is a positive of q2 and of q7: for q2 it is its own (not counted), for q8 another's
        rec("q7", [P("p6")], [P("p2")]),
        rec("q8", [P("p8")], [P("p6")]),
        # without ids: the normalised text is the identity
        rec("t3", [P("", "Alpha  Beta")], [P("", "gamma\t"), P("", "delta")], source="t"),
        rec("t4", [P("", "Gamma")], [P("", "ALPHA beta"), P("", "alpha beta gamma")], source="t"),
        # the same qid in two sources is one query: p5 is q1's own positive (in source c)
        rec("q1", [P("p1")], [P("p5")], source="b"),
        rec("q1", [P("p5")], [P("p9")], source="c"),
        # an id and a text are two identities: "passage p8" with another id is not p8
        rec("q9", [P("p9")], [P("other", "passage p8")], source="c"),
    ]
    got = other_positive(records).tolist()
    assert got == [
        True, False, False,  # q1: p2 (q2's), p1 (own), x
        True, False,  # q2: p1 (q1's), p6 (own, though q7's too)
        True,  # q7: p2 (q2's)
        True,  # q8: p6 (q2's and q7's)
        True, False,  # t3: "gamma\t" = t4's "Gamma", "delta"
        True, False,  # t4: "ALPHA beta" = t3's "Alpha  Beta", a longer text is another passage
        False,  # q1@b: p5 is q1's positive in source c
        True,  # q1@c: p9 is q9's
        False,  # q9: another id
    ]  # fmt: skip
    assert other_positive([]).dtype == bool and other_positive([]).shape == (0,)
    assert other_positive([rec("q", [P("p")], [])]).shape == (0,)


def lexical_audit(records: list[Record], resamples: int = 200):
    return audit_records(LoadResult(records), alnum, resamples=resamples, seed=3)


def test_audit_columns_count_and_rate_with_its_bootstrap_ci():
    """Kills: the rate as a mean of per-record shares (not Σ n_other_positive / Σ K), the per-record
    count off by record, a CI from another stream, and other_positive made a suspicion reason."""
    records = [
        rec("q1", [P("p1")], [P("p2"), P("p3"), P("x1")]),
        rec("q2", [P("p2")], [P("p1")]),
        rec("q3", [P("p3")], [P("x2"), P("x3"), P("x4"), P("x5")]),
        rec("q1", [P("p1")], [P("p3"), P("p2")], source="c", kind="control"),
    ]
    result = lexical_audit(records)
    neg = result.negatives
    assert neg["other_positive"].dtype == bool
    assert neg["other_positive"].tolist() == [True, True, False, True, False, False, False, False, True, True]
    rec_frame = result.records
    assert rec_frame["n_other_positive"].tolist() == [2, 1, 0, 2]
    rows = result.profile.to_frame().set_index("source")
    assert rows.loc["a", "other_positive_rate"] == pytest.approx(3 / 8)  # not the mean of 2/3, 1, 0
    assert rows.loc["c", "other_positive_rate"] == 1.0
    sub = rec_frame[rec_frame["source"] == "a"]
    num = sub[[s.num for s in OTHER_POSITIVE_STATS]].to_numpy(dtype=float)
    den = sub[[s.den for s in OTHER_POSITIVE_STATS]].to_numpy(dtype=float)
    low, high = bootstrap_ratios(num, den, bootstrap_rng(3, sub["qid"]), 200)
    np.testing.assert_equal(rows.loc["a", "other_positive_rate_ci_low"], low[0])
    np.testing.assert_equal(rows.loc["a", "other_positive_rate_ci_high"], high[0])
    # not a suspicion reason: fn_suspect does not see it
    assert "other_positive" not in REASONS
    assert not neg["fn_suspect"].any() and "other_positive" not in "".join(neg["fn_reasons"])
    # the control is flagged, the genuine source (3/8) is not
    assert rows.loc["c", "absolute_flags"] == "copies_other_positive"
    assert "copies_other_positive" not in rows.loc["a", "absolute_flags"]
    assert result.profile.catch_rate["absolute_by_flag"]["copies_other_positive"] == ["c"]


def test_rule_is_fixed_and_strict():
    rule = {r.name: r for r in ABSOLUTE_FLAG_RULES}["copies_other_positive"]
    assert (rule.column, rule.threshold, rule.text) == ("other_positive_rate", 0.5, REASON)
    assert "assembled from the file's positives, not mined from the corpus" in rule.principle
    assert absolute_flags({"other_positive_rate": 0.6}) == {"copies_other_positive": f"0.600 > 0.5 {REASON}"}
    assert absolute_flags({"other_positive_rate": 0.5}) == {}
    assert absolute_flags({"other_positive_rate": float("nan")}) == {}
    rows = apply_flags(
        [
            {"source": "g", "kind": "genuine", "other_positive_rate": 0.7},
            {"source": "k", "kind": "control", "other_positive_rate": 0.2},
        ],
        {"mode": "envelope"},
    )
    catch = catch_rate(rows)
    assert catch["absolute_by_flag"]["copies_other_positive"] == ["g"]
    assert catch["genuine_absolute_flagged"] == ["g"]


# ---------------------------------------------------------------------------------------------
# The demo and the verdict
# ---------------------------------------------------------------------------------------------


def test_demo_flags_neighbor_positive_and_no_genuine_source():
    """The demo with its neighbor_positive control (built with the encoder from the demo's own
    passages): the control's negatives are all other queries' positives; no genuine source breaks the
    rule (PLAN P13 on the demo)."""
    result = tdx.audit("demo", controls=["neighbor_positive"], resamples=100)
    frame = result.profile.set_index("source")
    assert frame.loc["neighbor_positive", "kind"] == "control"
    assert frame.loc["neighbor_positive", "other_positive_rate"] > 0.5
    assert result.catch_rate["absolute_by_flag"]["copies_other_positive"] == ["neighbor_positive"]
    genuine = frame[frame["kind"] == "genuine"]
    assert len(genuine) and (genuine["other_positive_rate"] <= 0.5).all()
    assert REASON not in result.verdict()


def assembled(n: int = 32) -> list[Record]:
    """A file whose negatives are the next two queries' positives, plus one passage of its own."""

    def positive(i: int) -> Passage:
        return P(f"p{i % n}", f"topic{i % n} answer words")

    return [
        rec(f"q{i}", [positive(i)], [positive(i + 1), positive(i + 2), P(f"n{i}", f"topic{i} other text")], "assembled")
        for i in range(n)
    ]


def test_verdict_re_mines_a_source_assembled_from_the_files_positives(tmp_path):
    """A hand-built genuine file with no control: 2 of its 3 negatives per query are other queries'
    positives, so the bottom line is re-mine, naming the number; report.md and negatives.csv carry
    the rate and the column."""
    result = tdx.audit(assembled(), encoder=None, semantic=None, resamples=50, controls="none")
    row = result.profile.set_index("source").loc["assembled"]
    assert row["other_positive_rate"] == pytest.approx(2 / 3)
    assert row["absolute_flags"] == "copies_other_positive"
    verdict = result.verdict()
    line = next(x for x in verdict.splitlines() if x.startswith("- **assembled**"))
    assert "bottom line: re-mine." in line and f"0.667 > 0.5 {REASON}" in line
    act = block(verdict, "assembled")[0]
    assert act.startswith("re-mine from the corpus") and "mine_hard_negatives" in act
    result.save(tmp_path)
    assert "| other_positive |" in (tmp_path / "report.md").read_text(encoding="utf-8")
    header = (tmp_path / "negatives.csv").read_text(encoding="utf-8").splitlines()[0].split(",")
    assert "other_positive" in header


def test_verdict_from_a_profile_row_and_its_place_among_the_re_mine_advice():
    """The advice reads the flag alone (a profile row built by hand); with mostly_inverted too, the
    inverted sentence comes first (ADVICE order), both under re-mine."""
    (row,) = apply_flags(
        [{"source": "s", "kind": "genuine", "n_records": 40, "n_negatives": 320, "other_positive_rate": 0.9}],
        {"mode": "envelope"},
    )
    action, said = bottom_line(row, Context(SourceFacts(n_negatives=320), "envelope", {}))
    assert action == "re-mine" and len(said) == 3
    assert said[0] == f"0.900 > 0.5 {REASON}" and said[1].startswith("re-mine from the corpus")
    lines = verdict_lines([row], {}, {})
    assert any(x.startswith("- **s** (40 records) — **bottom line: re-mine.**") and REASON in x for x in lines)
    (both,) = apply_flags([{**row, "band_inverted": 0.8}], {"mode": "envelope"})
    action, said = bottom_line(both, Context(SourceFacts(n_negatives=320), "envelope", {}))
    assert action == "re-mine" and said[0].startswith("0.800 > 0.5 of negatives score at least as high")
    assert REASON in "\n".join(said[1:])
