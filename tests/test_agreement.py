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
    transfer_ordering_uncertainty,
)
from transferdx.analysis.matching import match, matched_sample, max_smd, psi_bins


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
    out = match(frame, {"noise": 1, "real": 1}, transfer_order=["b", "a"], resolutions=(5, 20), repetitions=40, seed=0)
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
