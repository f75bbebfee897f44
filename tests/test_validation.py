"""Known-truth validation (issue 14): transfer with query and seed noise, established differences,
the audit's flags and diagnostics against a transfer whose direction is known — on synthetic
scores with a planted truth, against scipy/statsmodels/numpy references, and through the tables."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import scipy.stats

from transferdx import pipeline
from transferdx.analysis import validation as v
from transferdx.pipeline import training_plan, training_seeds

N = 300
KINDS = {
    "bm25": "genuine",
    "dense": "genuine",
    "own_positive_mix": "control",
    "random_mix_25": "control",
    "random_mix_75": "control",
    "random_passages": "control",
    "easy_shuffled": "control",
}
TRUTH = {  # planted transfer shift over the frozen model
    "bm25": 0.05,
    "dense": 0.045,
    "own_positive_mix": -0.12,
    "random_mix_25": 0.03,
    "random_mix_75": 0.0,
    "random_passages": -0.01,
    "easy_shuffled": 0.046,  # an unflagged control that trains as well as a genuine source
}
DOSES = {"bm25": 0.0, "random_mix_25": 0.25, "random_mix_75": 0.75, "random_passages": 1.0}


def planted(seed: int = 0, seed_noise: float = 0.002) -> tuple[dict, np.ndarray]:
    rng = np.random.default_rng(seed)
    frozen = rng.uniform(0.2, 0.9, N)
    scores = {}
    for s, shift in TRUTH.items():
        seeds = [0, 1, 2] if KINDS[s] == "genuine" else [0, 1]
        scores[s] = {
            "scifact": {
                k: np.clip(frozen + shift + rng.normal(0, seed_noise) + rng.normal(0, 0.03, N), 0, 1) for k in seeds
            }
        }
    return scores, frozen


def profile() -> pd.DataFrame:
    """η rises with false negatives (own positive) and falls with random slots; the flags as the
    envelope would set them."""
    rows = {
        "bm25": (0.40, 0.05, ""),
        "dense": (0.50, 0.06, ""),
        "own_positive_mix": (0.80, 0.55, "eta_high;fn_suspect_high"),
        "random_mix_25": (0.32, 0.04, ""),
        "random_mix_75": (0.15, 0.01, "inversion_low"),
        "random_passages": (0.08, 0.0, "inversion_low"),
        "easy_shuffled": (0.10, 0.0, "inversion_low"),
    }
    frame = pd.DataFrame(
        [
            {"source": s, "kind": KINDS[s], "eta_mean": e, "fn_suspect_rate": f, "flags": g}
            for s, (e, f, g) in rows.items()
        ]
    )
    return frame.set_index("source")


def test_point_and_seed_values_closed_form():
    scores, _ = planted()
    t, per_seed = v.point(scores), v.seed_values(scores)
    for s, by in scores.items():
        means = [float(np.mean(x)) for x in by["scifact"].values()]
        assert per_seed[s] == pytest.approx(dict(zip(by["scifact"], means, strict=True)))
        assert t[s] == pytest.approx(np.mean(means))


def test_identical_seeds_make_the_two_level_interval_the_query_interval():
    """When every seed scores every query alike, resampling seeds adds nothing: the query+seed
    draws equal the query-only draws exactly (same generator, same query draws)."""
    rng = np.random.default_rng(1)
    base = rng.uniform(0, 1, 50)
    scores = {s: {"d": {0: base + i * 0.01, 1: base + i * 0.01}} for i, s in enumerate(["a", "b"])}
    both = v.resample(scores, None, 500, seed=3)
    queries = v.resample(scores, None, 500, seed=3, seeds=False)
    np.testing.assert_allclose(both.values, queries.values)


def test_resample_is_a_paired_query_bootstrap():
    """One source, one seed: each resample's T is the mean of the per-query scores at the drawn
    indices, the draw the frozen model gets too (so T − frozen is the mean of paired differences)."""
    rng = np.random.default_rng(2)
    x, f = rng.uniform(0, 1, 40), rng.uniform(0, 1, 40)
    boot = v.resample({"a": {"d": {0: x}}}, {"d": f}, 200, seed=5)
    g = np.random.default_rng([5, 0x7A])
    idx = g.integers(0, 40, size=(200, 40))
    np.testing.assert_allclose(boot.of("a"), x[idx].mean(axis=1))
    np.testing.assert_allclose(boot.frozen, f[idx].mean(axis=1))


def test_bootstrap_p_closed_forms():
    assert v.bootstrap_p(np.ones(999)) == pytest.approx(2 / 1000)
    assert v.bootstrap_p(np.r_[np.ones(500), -np.ones(500)]) == 1.0
    assert v.bootstrap_p(np.r_[np.ones(900), -np.ones(100)]) == pytest.approx(2 * 101 / 1001)


def test_transfer_estimates_recovers_the_planted_ordering_and_frozen_deltas():
    scores, frozen = planted()
    table = v.transfer_estimates(scores, {"scifact": frozen}, KINDS, resamples=2000)
    last = table.iloc[-1]
    assert last["source"] == v.FROZEN and last["ndcg10"] == pytest.approx(frozen.mean())
    assert last["ci_low"] < last["ndcg10"] < last["ci_high"]
    table = table.iloc[:-1]
    assert list(table["source"])[-1] == "own_positive_mix"
    assert table["source"].iloc[0] in {"bm25", "dense", "easy_shuffled"}  # planted within 0.005 of each other
    for r in table.to_dict("records"):
        assert r["ci_low"] <= r["ndcg10"] <= r["ci_high"]
        assert r["query_ci_low"] <= r["ndcg10"] <= r["query_ci_high"]
        vals = [float(np.mean(a)) for a in scores[r["source"]]["scifact"].values()]
        assert r["seed_sd"] == pytest.approx(np.std(vals, ddof=1))
        assert r["delta_frozen"] == pytest.approx(r["ndcg10"] - frozen.mean())
        assert r["delta_ci_low"] <= r["delta_frozen"] <= r["delta_ci_high"]
    own = table.set_index("source").loc["own_positive_mix"]
    assert own["delta_ci_high"] < 0 and own["p_frozen"] < 0.01


def test_pairwise_holm_matches_statsmodels_and_established_needs_seed_consistency():
    from statsmodels.stats.multitest import multipletests

    scores, _ = planted()
    pairs = v.pairwise_differences(scores, resamples=4000)
    assert len(pairs) == len(TRUTH) * (len(TRUTH) - 1) // 2
    assert (pairs["diff"] >= 0).all()
    np.testing.assert_allclose(pairs["p_holm"], multipletests(pairs["p"], method="holm")[1])
    row = pairs[(pairs["a"] == "bm25") & (pairs["b"] == "own_positive_mix")].iloc[0]
    assert row["established"] and row["ci_low"] > 0.15
    either = {frozenset((r["a"], r["b"])): r for r in pairs.to_dict("records")}
    close = either[frozenset(("bm25", "easy_shuffled"))]
    assert not close["established"]
    # a pair whose seeds overlap is never established, however small its p
    rigged = {"a": {"d": {0: np.full(N, 0.9), 1: np.full(N, 0.1)}}, "b": {"d": {0: np.full(N, 0.4)}}}
    out = v.pairwise_differences(rigged, resamples=500)
    assert not out["seed_consistent"].iloc[0] and not out["established"].iloc[0]


def test_flag_check_a_and_missed_defects():
    scores, frozen = planted()
    table = v.transfer_estimates(scores, {"scifact": frozen}, KINDS, resamples=2000)
    pairs = v.pairwise_differences(scores, resamples=4000)
    flags = v.flag_check(profile(), table, pairs, ["eta_high", "fn_suspect_high", "inversion_low", "psi_high"])
    by = {(r["flag"], r["source"]): r for r in flags.to_dict("records")}
    assert by[("eta_high", "own_positive_mix")]["worse_than_all"]
    assert by[("eta_high", "own_positive_mix")]["established_vs_all"]
    assert by[("eta_high", "own_positive_mix")]["weakest_genuine"] == "dense"
    t = table.set_index("source")["ndcg10"]
    assert by[("eta_high", "own_positive_mix")]["margin"] == pytest.approx(t["dense"] - t["own_positive_mix"])
    # easy_shuffled is flagged (inversion_low) yet trains as well as dense: the claim fails for it
    assert not by[("inversion_low", "easy_shuffled")]["worse_than_all"]
    assert by[("psi_high", "")]["n_unflagged_genuine"] == 2  # a rule that flags nothing: one empty row
    assert {s for (f, s) in by if f == "any"} == {
        "own_positive_mix",
        "random_mix_75",
        "random_passages",
        "easy_shuffled",
    }
    # planted 0.015–0.17 below both genuine sources: established-worse; unflagged ⇒ missed
    worse = ["own_positive_mix", "random_mix_25", "random_mix_75", "random_passages"]
    assert v.missed_defects(profile().assign(flags=""), table, pairs) == worse
    assert v.missed_defects(profile(), table, pairs) == ["random_mix_25"]


def test_spearman_rows_equals_scipy():
    rng = np.random.default_rng(4)
    x = rng.normal(size=7)
    y = rng.normal(size=(50, 7))
    y[3] = y[3, 0]  # a constant row → NaN
    got = v.spearman_rows(x, y)
    for r in range(50):
        if r == 3:
            assert np.isnan(got[r])
        else:
            assert got[r] == pytest.approx(scipy.stats.spearmanr(x, y[r]).statistic)


def test_diagnostic_agreement_b_against_scipy():
    scores, _ = planted()
    boot = v.resample(scores, None, 1000)
    t = v.point(scores)
    out = v.diagnostic_agreement(profile(), boot, t, KINDS, {"eta_mean": 1, "fn_suspect_rate": -1, "n_flags": -1})
    prof = profile()
    for r in out.to_dict("records"):
        members = [s for s in sorted(t) if r["subset"] == "all" or KINDS[s] == "genuine"]
        assert r["n_sources"] == len(members)
        if len(members) < 3:
            assert np.isnan(r["spearman"])
            continue
        if r["diagnostic"] == "n_flags":
            x = -np.array([len([f for f in prof.loc[s, "flags"].split(";") if f]) for s in members], float)
        else:
            x = r["direction"] * prof.loc[members, r["diagnostic"]].to_numpy(float)
        y = [t[s] for s in members]
        assert r["spearman"] == pytest.approx(scipy.stats.spearmanr(x, y).statistic)
        assert r["kendall"] == pytest.approx(scipy.stats.kendalltau(x, y).statistic)
        assert r["spearman_ci_low"] <= r["spearman_ci_high"]
    n_flags = out[(out["diagnostic"] == "n_flags") & (out["subset"] == "all")].iloc[0]
    assert n_flags["spearman"] > 0.4  # more flags, worse transfer: as planted


def test_dose_response_c_slope_is_ols_and_monotone_truth_is_recovered():
    scores, frozen = planted()
    table = v.transfer_estimates(scores, {"scifact": frozen}, KINDS, resamples=2000)
    boot = v.resample(scores, None, 2000)
    rungs, trend = v.dose_response(profile(), table, boot, DOSES, ["eta_mean", "fn_suspect_rate"])
    assert list(rungs["source"]) == ["bm25", "random_mix_25", "random_mix_75", "random_passages"]
    t = table.set_index("source")["ndcg10"]
    dose = np.array(list(DOSES.values()))
    slope = np.polyfit(dose, [t[s] for s in DOSES], 1)[0]
    row = trend.set_index("measure").loc["transfer (nDCG@10)"]
    assert row["slope"] == pytest.approx(slope)
    assert row["spearman_dose"] == -1.0 and row["slope_ci_high"] < 0 and row["p_slope_negative"] == 1.0
    eta = trend.set_index("measure").loc["eta_mean"]
    assert eta["spearman_dose"] == -1.0
    assert eta["slope"] == pytest.approx(np.polyfit(dose, profile().loc[list(DOSES), "eta_mean"], 1)[0])


def test_training_plan_round_robin_and_seed_errors():
    kinds = {"a": "genuine", "b": "control"}
    plan = training_plan(["a", "b"], kinds, {"genuine": [0, 1, 2], "control": [0, 1]})
    assert plan == [("a", 0), ("b", 0), ("a", 1), ("b", 1), ("a", 2)]
    assert training_plan(["a"], kinds, None, default=7) == [("a", 7)]
    assert training_seeds("genuine", [3, 4], 0) == [3, 4]
    with pytest.raises(ValueError, match="kind 'control'"):
        training_seeds("control", {"genuine": [0]}, 0)
    with pytest.raises(ValueError, match="repeats"):
        training_seeds("genuine", [1, 1], 0)


# ---------------------------------------------------------------------------------------------
# The study layout → validate → tables, byte-stable


def write_validation_study(folder: Path) -> Path:
    """A study folder as transferdx-study writes it with seeds and trained controls."""
    scores, frozen = planted()
    qids = [f"t{i:03d}" for i in range(N)]
    rows = []

    def per_query(path: Path, values: np.ndarray) -> None:
        path.mkdir(parents=True, exist_ok=True)
        (path / "per_query.csv").write_text(
            pd.DataFrame({"qid": qids, "ndcg@10": values}).to_csv(index=False, lineterminator="\n")
        )

    per_query(folder / "evaluate/frozen/scifact", frozen)
    rows.append(
        {
            "backbone": "minilm_l6",
            "source": "(frozen)",
            "kind": "frozen",
            "dataset": "scifact",
            "ndcg@10": float(frozen.mean()),
        }
    )
    for s, by in scores.items():
        for k, values in by["scifact"].items():
            per_query(folder / f"evaluate/{s}/seed{k}/scifact", values)
            rows.append(
                {
                    "backbone": "minilm_l6",
                    "source": s,
                    "kind": KINDS[s],
                    "seed": k,
                    "dataset": "scifact",
                    "ndcg@10": float(values.mean()),
                }
            )
    (folder / "study.csv").write_text(pd.DataFrame(rows).to_csv(index=False, lineterminator="\n"))
    audit = folder / "audit"
    audit.mkdir(parents=True)
    prof = profile().reset_index()
    prof["psi_mean"] = [0.3, 0.4, 0.2, 0.5, 0.7, 0.9, 0.8]
    for column, prefix in (("eta_mean", "eta"), ("psi_mean", "psi")):
        prof[f"{prefix}_ci_low"], prof[f"{prefix}_ci_high"] = prof[column] - 0.02, prof[column] + 0.02
    (audit / "profile.csv").write_text(prof.to_csv(index=False, lineterminator="\n"))
    descriptors = {s: {"parent_source": "bm25"} for s in KINDS if s.startswith("random_mix")}
    (audit / "profile.json").write_text(json.dumps({"settings": {}, "descriptors": descriptors}))
    pd.DataFrame({"source": ["bm25"], "qid": ["q1"], "psi": [0.3]}).to_csv(audit / "records.csv", index=False)
    pd.DataFrame({"source": ["bm25"], "qid": ["q1"], "neg_index": [0]}).to_csv(audit / "negatives.csv", index=False)
    return folder


def test_validate_reads_the_seeded_layout_and_the_tables_render_byte_stable(tmp_path):
    study = write_validation_study(tmp_path / "study")
    settings = pipeline.AnalysisSettings(validation={**pipeline.AnalysisSettings().validation, "resamples": 2000})
    read = pipeline.read_studies([study])[0]
    assert read.kinds["own_positive_mix"] == "control" and sorted(read.per_query_seeds["bm25"]["scifact"]) == [
        0,
        1,
        2,
    ]
    out = pipeline.validate([study], settings)["minilm_l6"]
    rungs = out["ladder_rungs"]
    assert list(rungs["source"]) == ["bm25", "random_mix_25", "random_mix_75", "random_passages"]  # parent at 0
    assert list(rungs["dose"]) == [0.0, 0.25, 0.75, 1.0]

    first, second = tmp_path / "t1", tmp_path / "t2"
    for folder in (first, second):
        pipeline.render_tables([study], folder, settings)
    for name in ("validation_transfer", "validation_pairs", "validation_audit", "validation_ladder"):
        assert (first / f"{name}.md").read_bytes() == (second / f"{name}.md").read_bytes(), name
        assert (first / f"{name}.csv").is_file() and (first / f"{name}.trace.csv").is_file()
    assert (first / "figures/validation_ladder.png").read_bytes() == (
        second / "figures/validation_ladder.png"
    ).read_bytes()
    for csv in sorted((first / "validation/minilm_l6").glob("*.csv")):
        assert csv.read_bytes() == (second / "validation/minilm_l6" / csv.name).read_bytes(), csv.name
    transfer = pd.read_csv(first / "validation_transfer.csv")
    assert transfer["Source"].iloc[-1] == "(frozen)"
    assert transfer.loc[transfer["Source"] == "(frozen)", "nDCG@10"].iloc[0] == pytest.approx(
        read.frozen["scifact"].mean()
    )
    audit_md = (first / "validation_audit.md").read_text()
    assert "Own positive mix" in audit_md and "eta_high" in audit_md
    # every number in the tables names the artifact it came from, and the artifact holds it
    trace = pd.read_csv(first / "validation_transfer.trace.csv")
    frame = pd.read_csv(first / "validation/minilm_l6/transfer.csv").set_index("source")
    for r in trace[trace["artifact"].str.endswith("transfer.csv")].to_dict("records"):
        source = r["locator"].split(";")[0].split("=")[1]
        column = r["locator"].split("column=")[1]
        assert float(r["value"]) == pytest.approx(frame.loc[source, column])


def test_tables_without_a_validation_say_why(tmp_path):
    from .synthetic import write_study

    study = write_study(tmp_path / "s", "distilbert", 0)
    rendered = pipeline.render_tables([study], tmp_path / "t")
    assert "trained controls too" in rendered["validation_audit"]
    assert not (tmp_path / "t/figures/validation_ladder.png").exists()
