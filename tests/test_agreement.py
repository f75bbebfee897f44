"""Rank agreement equals scipy on fixed inputs; known orderings are recovered; ψ matching restores
balance on a synthetic case with known imbalance."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import scipy.stats

from transferdx.analysis.agreement import (
    block_agreement,
    blocks_recovered,
    ordering,
    paired_tests,
    rank_agreement,
    recovers,
    tied_pairs,
    transfer_ordering_uncertainty,
)
from transferdx.analysis.matching import match_on_psi, matched_sample, max_smd, psi_bins
from transferdx.paper.tables import Study, TableInputs, rank_agreement_summary


def test_block_agreement_equals_scipy():
    diag = {"bm25": 0.288, "dense": 0.387, "llm": 0.531, "x": 0.41}
    transfer = {"bm25": 0.344, "dense": 0.373, "llm": 0.392, "x": 0.36}
    a = block_agreement(diag, transfer, name="psi")
    x, y = [diag[s] for s in sorted(diag)], [transfer[s] for s in sorted(diag)]
    assert a.pearson == pytest.approx(scipy.stats.pearsonr(x, y)[0], abs=1e-15)
    assert a.spearman == pytest.approx(scipy.stats.spearmanr(x, y)[0], abs=1e-15)
    assert a.kendall == pytest.approx(scipy.stats.kendalltau(x, y)[0], abs=1e-15)
    assert not a.recovered  # x sits between dense and llm in ψ but below dense in transfer
    flipped = block_agreement(diag, transfer, direction=-1)
    assert flipped.kendall == pytest.approx(-a.kendall)


def test_study_table_2_orderings():
    """The study's Table 2 (DistilBERT column): mean ψ recovers both settings' orderings."""
    psi = {"BM25": 0.288, "Dense": 0.387, "LLM": 0.531, "BM25+Dense": 0.338, "BM25+LLM": 0.410, "Dense+LLM": 0.461}
    ndcg = {"BM25": 0.344, "Dense": 0.373, "LLM": 0.392, "BM25+Dense": 0.349, "BM25+LLM": 0.359, "Dense+LLM": 0.381}
    profiles = pd.DataFrame({"psi_mean": psi, "inversion_rate": {k: 1 - v for k, v in psi.items()}})
    transfer = pd.DataFrame({"ndcg@10": ndcg})
    blocks = {"non-hybrid": ["BM25", "Dense", "LLM"], "hybrid": ["BM25+Dense", "BM25+LLM", "Dense+LLM"]}
    table = rank_agreement(profiles, transfer, blocks, {"psi_mean": 1, "inversion_rate": 1})
    summary = blocks_recovered(table)
    assert summary.loc["psi_mean", "label"] == "2/2" and summary.loc["inversion_rate", "label"] == "0/2"
    assert ordering(ndcg) == ("LLM", "Dense+LLM", "Dense", "BM25+LLM", "BM25+Dense", "BM25")


def test_diagnostic_tie_is_not_a_recovered_ordering():
    """The diagnostic ties a and b, transfer puts a above b. Sorting the tie by name also gives a > b,
    so the old rule (compare the two name-broken orderings) counted this block as recovered.

    Kills: ``recovered = ordering(diagnostic, direction) == ordering(transfer)`` in
    ``block_agreement`` (ties broken by name), and a ``recovers`` that skips the pairs the
    diagnostic ties (``np.all((d == t) | (d == 0))``)."""
    diag = {"a": 0.5, "b": 0.5, "c": 0.1}
    transfer = {"a": 0.40, "b": 0.35, "c": 0.30}
    assert ordering(diag) == ordering(transfer)  # the name tie-break agrees, by accident
    out = block_agreement(diag, transfer, name="inversion_rate")
    assert not out.recovered
    assert (out.ties, out.transfer_ties) == (1, 0)
    assert not recovers(diag, transfer)
    # the same for a diagnostic read with direction −1
    flipped = {k: -v for k, v in diag.items()}
    assert not block_agreement(flipped, transfer, direction=-1).recovered


def test_shared_tie_counts_as_recovered_and_a_transfer_tie_needs_one():
    """Both sides tie b and c: the block is recovered. Transfer ties b and c but the diagnostic
    orders them (in name order, so the old rule recovered it): not recovered.

    Kills: the name tie-break (it recovers the second case) and a ``recovers`` that treats every
    tied pair as a mismatch (``np.all((d == t) & (d != 0))``: the first case fails)."""
    transfer = {"a": 0.40, "b": 0.30, "c": 0.30}
    both = block_agreement({"a": 0.9, "b": 0.2, "c": 0.2}, transfer)
    assert both.recovered and (both.ties, both.transfer_ties) == (1, 1)
    one = block_agreement({"a": 0.9, "b": 0.3, "c": 0.2}, transfer)
    assert not one.recovered and (one.ties, one.transfer_ties) == (0, 1)
    assert tied_pairs({"a": 1.0, "b": 1.0, "c": 1.0, "d": 2.0}) == 3  # C(3, 2) pairs among three equal
    assert not recovers({"a": float("nan"), "b": 0.1}, {"a": 0.2, "b": 0.1})


def test_table4_counts_ties_and_does_not_recover_them():
    """Two blocks: ψ recovers only the hybrid one; the inversion rate ties the non-hybrid block's top
    two sources (transfer does not) and orders the hybrid block correctly: Table 4 says 1/2, 1 tie.

    Kills: a Ties cell summed over every diagnostic's rows (``agr["ties"]`` in ``table4``) and the
    name tie-break in ``block_agreement`` (which gives 2/2)."""
    profile = pd.DataFrame(
        {
            "kind": ["genuine"] * 6,
            "psi_mean": [0.3, 0.4, 0.5, 0.35, 0.45, 0.55],
            "inversion_rate": [0.1, 0.2, 0.2, 0.1, 0.2, 0.3],
        },
        index=["bm25", "dense", "llm", "bm25+dense", "bm25+llm", "dense+llm"],
    )
    transfer = pd.DataFrame({"ndcg@10": [0.30, 0.40, 0.35, 0.31, 0.32, 0.33]}, index=profile.index)
    # dense (0.40) > llm (0.35) in transfer; "dense" < "llm" by name, so the old tie-break agreed
    blocks = {"non-hybrid": ["bm25", "dense", "llm"], "hybrid": ["bm25+dense", "bm25+llm", "dense+llm"]}
    named = {f"x/{k}": v for k, v in blocks.items()}
    agreement = rank_agreement(profile, transfer, named, {"psi_mean": 1, "inversion_rate": 1})
    summary = blocks_recovered(agreement)
    assert summary.loc["inversion_rate", "label"] == "1/2" and summary.loc["inversion_rate", "ties"] == 1
    assert summary.loc["psi_mean", "label"] == "1/2" and summary.loc["psi_mean", "ties"] == 0
    study = Study("x", "study/x", pd.DataFrame(), profile, {})
    table = rank_agreement_summary(
        TableInputs((study,), blocks, {"psi_mean": 1, "inversion_rate": 1}, agreement, "agreement.csv")
    )
    assert table.columns[:4] == ("Variant", "Criterion", "Blocks", "Ties")
    rows = {r[0]: r for r in table.rows}
    assert (rows["Inversion rate"][2].value, rows["Inversion rate"][3].value) == ("1/2", 1)
    assert rows["Mean ψ only"][3].value == 0
    old = agreement.drop(columns=["ties", "transfer_ties"])  # an agreement.csv written before ties
    table = rank_agreement_summary(
        TableInputs((study,), blocks, {"psi_mean": 1, "inversion_rate": 1}, old, "agreement.csv")
    )
    assert {r[0]: r for r in table.rows}["Inversion rate"][3].value == "n/a"


def test_transfer_uncertainty_and_holm():
    rng = np.random.default_rng(0)
    base = rng.uniform(0, 1, 200)
    per_query = {
        "good": {"d1": np.clip(base + 0.10, 0, 1), "d2": np.clip(base + 0.10, 0, 1)},
        "mid": {"d1": np.clip(base + 0.05, 0, 1), "d2": np.clip(base + 0.05, 0, 1)},
        "same": {"d1": base, "d2": base + rng.normal(0, 1e-3, 200)},
    }
    out = transfer_ordering_uncertainty(per_query, resamples=300, seed=1)
    assert out["ordering"] == ["good", "mid", "same"]
    assert out["pairwise"]["good>mid"] == 1.0 and out["p_full_ordering"] > 0.95
    tests = paired_tests(per_query)
    assert len(tests) == 6 and (tests["p_holm"] >= tests["p"]).all()
    assert tests.set_index(["dataset", "a", "b"]).loc[("d1", "good", "mid"), "significant"]


def test_matching_balances_psi():
    rng = np.random.default_rng(2)
    # source b has much higher ψ than a (SMD ≈ 2) but overlapping support; a semantic statistic
    # depends on ψ only, so after matching the two sources should look alike
    a = pd.DataFrame({"source": "a", "psi": rng.beta(2, 5, 600)})
    b = pd.DataFrame({"source": "b", "psi": rng.beta(5, 2, 600)})
    frame = pd.concat([a, b], ignore_index=True)
    frame["noise"] = rng.normal(0, 1, len(frame))  # unrelated to source and ψ
    frame["real"] = (frame["source"] == "b") * 0.5 + rng.normal(0, 0.1, len(frame))  # a true source effect
    assert max_smd(frame) > 1.5
    sample = matched_sample(frame, 20, np.random.default_rng(0))
    assert max_smd(sample) < 0.1
    counts = sample.groupby("source").size()
    assert counts["a"] == counts["b"]
    out = match_on_psi(
        frame, {"noise": 1, "real": 1}, transfer_order=["b", "a"], resolutions=(5, 20), repetitions=40, seed=0
    )
    bal = out["balance"].set_index("resolution")
    assert bal.loc[20, "smd_after_max"] < 0.1 < bal.loc[20, "smd_before"]
    assert bal.loc[20, "smd_after_mean"] <= bal.loc[5, "smd_after_mean"]
    share = out["matched"].query("resolution == 20").groupby("statistic")["share_reproducing"].first()
    assert share["real"] == 1.0  # a source effect beyond ψ survives matching
    assert 0.2 < share["noise"] < 0.8  # noise orders the sources at chance


def test_psi_bins_edges():
    assert psi_bins(np.array([0.0, 0.5, 1.0]), 2).tolist() == [0, 1, 1]
    assert psi_bins(np.array([0.3, 0.3]), 4).tolist() == [0, 0]
    with pytest.raises(ValueError, match="n_bins"):
        psi_bins(np.array([0.1]), 0)
