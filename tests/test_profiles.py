"""Bootstrap CIs against scipy, per-record aggregation, and the profile's column contract."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import scipy.stats

from transferdx.auditing.audit import audit_records
from transferdx.auditing.profiles import PROFILE_COLUMNS, bootstrap_mean_ci, profile_sources
from transferdx.diagnostics.tokens import alnum
from transferdx.inputs.records import Exclusion, LoadResult

from .conftest import record


@pytest.mark.parametrize("n", [2, 7, 250])
def test_bootstrap_equals_scipy_percentile(n):
    values = np.random.default_rng(n).normal(size=n)
    ours = bootstrap_mean_ci(values, np.random.default_rng(42), resamples=1000, confidence=0.9)
    ref = scipy.stats.bootstrap(
        (values,), np.mean, n_resamples=1000, method="percentile", confidence_level=0.9, rng=np.random.default_rng(42)
    )
    assert ours == pytest.approx((ref.confidence_interval.low, ref.confidence_interval.high), abs=1e-12)


def test_bootstrap_degenerate_and_bad_arguments():
    assert bootstrap_mean_ci(np.full(5, 0.25), np.random.default_rng(0)) == (0.25, 0.25)
    assert all(math.isnan(v) for v in bootstrap_mean_ci(np.array([]), np.random.default_rng(0)))
    with pytest.raises(ValueError, match="confidence"):
        bootstrap_mean_ci(np.ones(3), np.random.default_rng(0), confidence=1.5)


def test_profile_aggregates_records():
    recs = [
        record("a", "red apple", ["red apple", "red"], source="x"),  # ψ = 0 and ψ(apple missing)
        record("b", "blue sky", ["green field"], source="x"),  # ψ = 1
        record("c", "?!", ["whatever"], source="x"),  # undefined
        record("a", "red apple", ["blue"], source="y", kind="control"),
    ]
    loaded = LoadResult(recs, [Exclusion("f", "3", "x", "d", "record", "", "negatives", "no negatives")])
    result = audit_records(loaded, alnum, seed=1, resamples=200)
    frame = result.profile.to_frame()
    assert list(frame.columns[: len(PROFILE_COLUMNS)]) == PROFILE_COLUMNS
    x = frame.set_index("source").loc["x"]
    per_record = result.records.set_index(["source", "qid"])["psi"]
    neg = result.negatives
    assert per_record[("x", "a")] == pytest.approx(neg[(neg.source == "x") & (neg.qid == "a")]["psi"].mean())
    assert x["psi_mean"] == pytest.approx(np.mean([per_record[("x", "a")], 1.0]))
    assert x["coverage_mean"] == pytest.approx(1 - x["psi_mean"])
    assert (x["n_records"], x["n_negatives"], x["n_psi_undefined"], x["n_excluded_records"]) == (3, 4, 1, 1)
    assert x["psi_ci_low"] <= x["psi_mean"] <= x["psi_ci_high"]
    assert frame.set_index("source").loc["y", "kind"] == "control"


def test_source_with_only_exclusions_still_has_a_row():
    ex = Exclusion("f", "", "empty", "q", "record", "", "negatives", "none")
    profile = profile_sources(
        pd.DataFrame(columns=["source", "kind", "qid", "n_negatives", "psi"]), [ex], sources=["empty"]
    )
    row = profile.to_frame().iloc[0]
    assert row["source"] == "empty" and row["n_records"] == 0 and math.isnan(row["psi_mean"])


def test_bootstrap_stream_is_per_source():
    """Adding a source changes nothing about another source's row (per-source IDF, own bootstrap seed)."""
    recs = [record(str(i), f"w{i} common word", [f"w{i}", "common", "word w1"], source="a") for i in range(30)]
    extra = [record(str(i), f"w{i} z", ["z"], source="b") for i in range(5)]
    alone = audit_records(LoadResult(recs), alnum, idf_corpus="per_source").profile.to_frame().set_index("source")
    both = (
        audit_records(LoadResult(recs + extra), alnum, idf_corpus="per_source").profile.to_frame().set_index("source")
    )
    pd.testing.assert_series_equal(alone.loc["a"], both.loc["a"])  # NaN (unmeasured rates) equals NaN
    assert alone.loc["a", "psi_ci_low"] < alone.loc["a", "psi_ci_high"]
