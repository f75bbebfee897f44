"""Bootstrap CIs of the margin quantiles and of the composites (DESIGN §3.4): against independent
reimplementations (scipy, plain Python loops over the same seeded resamples), degenerate cases where
the interval must collapse, and the record-level (not negative-level) resampling of the composites.

Every test names in its docstring one wrong implementation it catches (each was checked by hand)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import numpy as np
import pandas as pd
import pytest
import scipy.stats

from transferdx.auditing.audit import audit_records
from transferdx.auditing.profiles import QUANTILES, bootstrap_quantiles
from transferdx.auditing.report import render_report
from transferdx.auditing.values import SemanticSettings
from transferdx.diagnostics.composite import CompositeSettings, ci_resamples, composite, composite_bootstrap
from transferdx.diagnostics.tokens import alnum
from transferdx.inputs.records import LoadResult
from transferdx.resampling import percentile_ci, resample_counts

from .conftest import record

FORMS = ("logdet", "trace")


class HashEncoder:
    """A deterministic stand-in encoder: each (role, text) gets a seeded random unit vector."""

    def __init__(self, dim: int = 12):
        self.dim = dim

    def vector(self, text: str, role: str) -> np.ndarray:
        seed = int.from_bytes(hashlib.sha256(f"{role}\0{text}".encode()).digest()[:8], "little")
        v = np.random.default_rng(seed).normal(size=self.dim)
        return (v / np.linalg.norm(v)).astype(np.float32)

    def embed(self, texts, role):
        return np.stack([self.vector(t, role) for t in texts]) if len(texts) else np.zeros((0, self.dim), np.float32)

    def scorer(self):
        return {"encoder": "hash", "dim": self.dim}


def source_stream(seed: int, qids) -> np.random.Generator:
    """The documented per-source stream, (seed, sha256 of its sorted qids), written out independently."""
    key = hashlib.sha256(json.dumps(sorted(map(str, qids))).encode()).digest()[:4]
    return np.random.default_rng([seed, int.from_bytes(key, "little")])


def plain_resamples(n: int, rng: np.random.Generator, resamples: int) -> list[np.ndarray]:
    """The resampled record indices, one array per resample (drawn 200 resamples per call)."""
    out: list[np.ndarray] = []
    while len(out) < resamples:
        out += list(rng.integers(0, n, size=(min(200, resamples - len(out)), n)))
    return out


def plain_ci(values: list[float], confidence: float) -> tuple[float, float]:
    alpha = 1 - confidence
    low, high = np.quantile(np.asarray(values), [alpha / 2, 1 - alpha / 2])
    return float(low), float(high)


def unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def varied_source(seed: int = 0, d: int = 6, ks=(1, 5, 2, 9, 3, 1, 7, 4)):
    """Records with different K, negatives *not* grouped by record (shuffled owner)."""
    rng = np.random.default_rng(seed)
    owner = rng.permutation(np.repeat(np.arange(len(ks)), ks))
    q, p = unit(rng.normal(size=(len(ks), d))), unit(rng.normal(size=(len(ks), d)))
    e_n = unit(rng.normal(size=(len(owner), d)))
    w = rng.uniform(0.0, 1.0, len(owner))
    w[::5] = 0.0
    return q[owner], p[owner], e_n, w, owner


def loop_composites(e_q, e_p, e_n, w, owner, picks, s: CompositeSettings | None = None) -> dict[str, list[float]]:
    """The composite point estimate recomputed on each resample of records, a record bringing all
    its negatives (as many times as it is drawn)."""
    s = s or CompositeSettings()
    out: dict[str, list[float]] = {f: [] for f in FORMS}
    for pick in picks:
        rows = np.concatenate([np.flatnonzero(owner == j) for j in pick])
        values = composite(e_q[rows], e_p[rows], e_n[rows], w[rows], s)
        for f in FORMS:
            out[f].append(values[f])
    return out


# ---------------------------------------------------------------------------------------------
# Margin quantiles
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("q", sorted(QUANTILES.values()))
@pytest.mark.parametrize("n", [7, 60])
def test_quantile_ci_equals_scipy_percentile_bootstrap(q, n):
    """Same values as scipy.stats.bootstrap (percentile method, same generator) with numpy's default
    quantile. Kills: the bootstrap computing ``np.quantile(..., method="lower")`` (or any other method
    than the point estimate's)."""
    values = np.random.default_rng(n).normal(size=n)
    ours = bootstrap_quantiles(values, [q], np.random.default_rng(42), resamples=1000, confidence=0.9)
    ref = scipy.stats.bootstrap(
        (values,),
        lambda x, axis: np.quantile(x, q, axis=axis),
        n_resamples=1000,
        method="percentile",
        confidence_level=0.9,
        rng=np.random.default_rng(42),
    )
    assert (ours[0][0], ours[1][0]) == pytest.approx(
        (ref.confidence_interval.low, ref.confidence_interval.high), abs=1e-12
    )


def test_quantile_ci_collapses_on_identical_records_and_is_nan_without_records():
    """Every record has the same margin, so every resample's quantile is that margin. Kills: a
    bootstrap that adds a spread of its own, e.g. resampling ``np.arange(n)`` (indices) instead of the
    values."""
    low, high = bootstrap_quantiles(np.full(9, -0.25), [0.05, 0.1, 0.5], np.random.default_rng(0), 300)
    assert low.tolist() == [-0.25] * 3 and high.tolist() == [-0.25] * 3
    low, high = bootstrap_quantiles(np.zeros(0), [0.5], np.random.default_rng(0), 300)
    assert np.isnan(low).all() and np.isnan(high).all()


# ---------------------------------------------------------------------------------------------
# Composites
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("block", [None, 3 * 6 * 6])
def test_identity_resample_gives_the_point_composite(block):
    """Counts of 1 for every record reproduce ``composite`` exactly, with records of different K and
    negatives not grouped by record (and, with a tiny block, scatters recomputed in several record
    blocks). Kills: the bootstrap dropping ε, i.e. log det(I + M*) and tr(M*) instead of
    log det(I + M*/ε) and tr(M*)/ε."""
    e_q, e_p, e_n, w, owner = varied_source()
    point = composite(e_q, e_p, e_n, w)
    kw = {} if block is None else {"block": block}
    boot = composite_bootstrap(e_q, e_p, e_n, w, owner, [np.ones((2, owner.max() + 1))], **kw)
    for f in FORMS:
        np.testing.assert_allclose(boot[f], point[f], rtol=1e-12, atol=1e-15)


def test_composite_ci_collapses_when_every_record_is_the_same():
    """Identical records (same query, positive, negatives, weights): every resample has M* = M, so
    the CI is the point. Kills: normalising Σ c_j S_j by Σ c_j (records drawn) instead of Σ c_j K_j
    (negatives drawn)."""
    rng = np.random.default_rng(3)
    d, k, n_rec = 5, 4, 6
    q, p, neg = unit(rng.normal(size=(1, d))), unit(rng.normal(size=(1, d))), unit(rng.normal(size=(k, d)))
    w_one = rng.uniform(0.2, 1.0, k)
    owner = np.repeat(np.arange(n_rec), k)
    e_q, e_p, e_n, w = (
        np.repeat(q, len(owner), 0),
        np.repeat(p, len(owner), 0),
        np.tile(neg, (n_rec, 1)),
        np.tile(w_one, n_rec),
    )
    point = composite(e_q, e_p, e_n, w)
    boot = composite_bootstrap(e_q, e_p, e_n, w, owner, resample_counts(n_rec, np.random.default_rng(0), 300))
    for f in FORMS:
        low, high = percentile_ci(boot[f][:, None], 0.95)
        assert (low[0], high[0]) == pytest.approx((point[f], point[f]), rel=1e-12), f


@pytest.mark.parametrize("block", [None, 2 * 6 * 6])
def test_composite_bootstrap_equals_a_plain_loop_over_resampled_records(block):
    """Each resample's composite equals ``composite`` recomputed on the records drawn (with their
    multiplicity), for the same seeded counts. Kills: using presence (c_j > 0) instead of the count
    c_j, i.e. a record drawn twice counted once; also taking a record's negatives as contiguous rows
    (no sort by ``owner``), since here they are shuffled."""
    e_q, e_p, e_n, w, owner = varied_source(seed=1)
    n_rec = owner.max() + 1
    kw = {} if block is None else {"block": block}
    boot = composite_bootstrap(e_q, e_p, e_n, w, owner, resample_counts(n_rec, np.random.default_rng(7), 250), **kw)
    picks = plain_resamples(n_rec, np.random.default_rng(7), 250)
    ref = loop_composites(e_q, e_p, e_n, w, owner, picks)
    for f in FORMS:
        np.testing.assert_allclose(boot[f], ref[f], rtol=1e-10, atol=1e-14)


@pytest.mark.parametrize("d", [6, 48])
def test_dual_route_equals_the_primal_route_and_the_plain_loop(d):
    """Sylvester's identity (the dual route, m × m on the drawn residuals' Gram matrix) gives the
    primal d × d values to 1e-9, with n < d (every resample dual) and n > d (dual only where m < d,
    which ``route="dual"`` forces anyway). Kills: a dual route that divides the log-determinant by m
    instead of d, forgets the multiplicity inside D, or keeps undrawn rows (D_i = 0 but present)."""
    e_q, e_p, e_n, w, owner = varied_source(seed=2, d=d)
    n_rec = owner.max() + 1
    boot = {
        route: composite_bootstrap(
            e_q, e_p, e_n, w, owner, resample_counts(n_rec, np.random.default_rng(5), 300), route=route
        )
        for route in ("primal", "dual", "auto")
    }
    ref = loop_composites(e_q, e_p, e_n, w, owner, plain_resamples(n_rec, np.random.default_rng(5), 300))
    for f in FORMS:
        np.testing.assert_allclose(boot["dual"][f], boot["primal"][f], rtol=0, atol=1e-9)
        np.testing.assert_allclose(boot["auto"][f], boot["primal"][f], rtol=0, atol=1e-9)
        np.testing.assert_allclose(boot["dual"][f], ref[f], rtol=1e-10, atol=1e-12)


def test_auto_route_mixes_routes_per_resample_and_threads_change_no_byte():
    """One big record (K = 20) and seven of K = 1 in d = 24: resamples without the big record have
    m ≤ 7 < d (dual), most with it m ≥ 20 and some m ≥ d (primal); ``auto`` equals the primal route
    to 1e-9 on both kinds, and 1, 2 or 3 worker threads give the same bytes. Kills: a mixed chunk
    whose dual and primal results land in each other's resample slots."""
    rng = np.random.default_rng(11)
    d, ks = 24, (20, 1, 1, 1, 1, 1, 1, 1)
    owner = rng.permutation(np.repeat(np.arange(len(ks)), ks))
    e_q, e_p = unit(rng.normal(size=(len(ks), d)))[owner], unit(rng.normal(size=(len(ks), d)))[owner]
    e_n = unit(rng.normal(size=(len(owner), d)))
    w = rng.uniform(0.1, 1.0, len(owner))
    counts = list(resample_counts(len(ks), np.random.default_rng(3), 400))
    m = np.concatenate([(c > 0) @ np.asarray(ks) for c in counts])
    assert (m < d).any() and (m >= d).any()
    primal = composite_bootstrap(e_q, e_p, e_n, w, owner, counts, route="primal")
    auto = [composite_bootstrap(e_q, e_p, e_n, w, owner, counts, workers=k) for k in (1, 2, 3)]
    for f in FORMS:
        np.testing.assert_allclose(auto[0][f], primal[f], rtol=0, atol=1e-9)
        assert auto[0][f].tobytes() == auto[1][f].tobytes() == auto[2][f].tobytes()
    with pytest.raises(ValueError, match="route must be one of"):
        composite_bootstrap(e_q, e_p, e_n, w, owner, counts, route="fast")


def test_demo_audit_composite_intervals_same_by_either_route(monkeypatch):
    """The whole demo audit (384-dimensional stand-in vectors, so every source takes the dual route)
    against the same audit with the primal route forced: every profile column has the same value,
    composite CI bounds within 1e-9."""
    import functools

    import transferdx.diagnostics.composite as composite_module
    from transferdx.sources.demo import demo_sources

    loaded = demo_sources()
    fast = audit_records(loaded, alnum, encoder=HashEncoder(384), resamples=200).profile.to_frame()
    monkeypatch.setattr(composite_module, "composite_bootstrap", functools.partial(composite_bootstrap, route="primal"))
    slow = audit_records(loaded, alnum, encoder=HashEncoder(384), resamples=200).profile.to_frame()
    ci = [c for c in fast.columns if c.startswith("composite_") and "_ci_" in c]
    assert ci
    np.testing.assert_allclose(fast[ci].to_numpy(float), slow[ci].to_numpy(float), rtol=0, atol=1e-9)
    assert fast.drop(columns=ci).equals(slow.drop(columns=ci))


# ---------------------------------------------------------------------------------------------
# Through the audit: the same per-source stream, the configured confidence, the report
# ---------------------------------------------------------------------------------------------


def _loaded() -> LoadResult:
    words = ["apple", "river", "engine", "violin", "planet", "garden", "castle", "pepper", "stone", "cloud"]
    recs = []
    for i in range(14):  # source "a": K from 1 to 6
        k = 1 + (i * 5) % 6
        negs = [f"{words[(i + j) % 10]} {words[(3 * i + 2 * j) % 10]} {j}" for j in range(k)]
        recs.append(record(f"q{i:02d}", f"{words[i % 10]} {words[(i * 7) % 10]}", negs, "a", f"pos {i}"))
    for i in range(9):  # source "b": K = 3
        negs = [f"{words[(2 * i + j) % 10]} b{j}" for j in range(3)]
        recs.append(record(f"r{i:02d}", f"{words[(i * 3) % 10]} query", negs, "b", f"bpos {i}"))
    return LoadResult(recs)


@pytest.fixture(scope="module")
def audited():
    return audit_records(_loaded(), alnum, encoder=HashEncoder(), seed=4, resamples=300, confidence=0.8)


def test_margin_quantile_cis_in_the_profile_follow_the_source_stream(audited):
    """``margin_<q>_ci_low/high`` equal a plain loop over the source's own seeded resamples at the
    configured confidence (0.8). Kills: the profile calling the quantile bootstrap with the default
    confidence (0.95) instead of the configured one."""
    frame = audited.profile.to_frame().set_index("source")
    recs = audited.records
    for name in ("a", "b"):
        margins = recs.loc[recs["source"] == name, "margin"].to_numpy()
        picks = plain_resamples(len(margins), source_stream(4, recs.loc[recs["source"] == name, "qid"]), 300)
        for col, q in QUANTILES.items():
            low, high = plain_ci([float(np.quantile(margins[pick], q)) for pick in picks], 0.8)
            row = frame.loc[name]
            assert (row[f"{col}_ci_low"], row[f"{col}_ci_high"]) == pytest.approx((low, high), abs=1e-12), col
            assert row[f"{col}_ci_low"] <= row[col] <= row[f"{col}_ci_high"]


def source_inputs(result, loaded: LoadResult, name: str, enc: HashEncoder):
    """A source's composite inputs rebuilt independently: embeddings from the deterministic encoder,
    weights ρ·η·ψ from the per-negative table, the record (0 … n − 1) of each negative."""
    recs = {(r.source, r.qid): r for r in loaded.records}
    sub = result.negatives[result.negatives["source"] == name]
    qids = list(dict.fromkeys(sub["qid"]))
    owner = np.array([qids.index(q) for q in sub["qid"]])
    e_q = np.stack([enc.vector(recs[(name, q)].query, "query") for q in sub["qid"]])
    e_p = np.stack([enc.vector(recs[(name, q)].positives[0].text, "passage") for q in sub["qid"]])
    texts = [recs[(name, q)].negatives[i].text for q, i in zip(sub["qid"], sub["neg_index"], strict=True)]
    e_n = np.stack([enc.vector(t, "passage") for t in texts])
    w = np.nan_to_num(sub["rho"].to_numpy() * sub["eta"].to_numpy() * sub["psi"].to_numpy(), nan=0.0)
    return e_q, e_p, e_n, w, owner


def test_composite_cis_in_the_profile_resample_the_sources_records(audited):
    """The audit's ``composite_<form>_ci_low/high`` equal ``composite`` recomputed over the source's
    own seeded resamples of records (the embeddings rebuilt from the deterministic encoder, the
    weights ρ·η·ψ from negatives.csv), at the configured confidence 0.8. Kills: ``audit`` not passing
    ``confidence`` through to the composites (their CIs at the default 95%)."""
    frame = audited.profile.to_frame().set_index("source")
    for name in ("a", "b"):
        e_q, e_p, e_n, w, owner = source_inputs(audited, _loaded(), name, HashEncoder())
        qids = np.unique(owner)
        point = composite(e_q, e_p, e_n, w)
        stream = source_stream(4, audited.records.loc[audited.records["source"] == name, "qid"])
        ref = loop_composites(e_q, e_p, e_n, w, owner, plain_resamples(len(qids), stream, 300))
        row = frame.loc[name]
        for f in FORMS:
            col = f"composite_{f}"
            assert row[col] == pytest.approx(point[f], rel=1e-9)
            low, high = plain_ci(ref[f], 0.8)
            assert (row[f"{col}_ci_low"], row[f"{col}_ci_high"]) == pytest.approx((low, high), rel=1e-9), (name, f)


def test_same_seed_same_profile_and_report_shows_the_new_cis(audited):
    """A second audit with the same seed gives the same bytes; another seed moves the new CIs only.
    The report prints each new CI as ``value [low, high]``. Kills: the report keeping the old
    point-only margin/composite tables."""
    again = audit_records(_loaded(), alnum, encoder=HashEncoder(), seed=4, resamples=300, confidence=0.8)
    first = audited.profile.to_frame()
    assert first.to_csv(index=False) == again.profile.to_frame().to_csv(index=False)
    other = audit_records(
        _loaded(), alnum, encoder=HashEncoder(), seed=5, resamples=300, confidence=0.8
    ).profile.to_frame()
    assert (first["margin_median"] == other["margin_median"]).all()
    assert (first["composite_logdet"] == other["composite_logdet"]).all()
    assert (first["composite_logdet_ci_low"] != other["composite_logdet_ci_low"]).any()
    report = render_report(audited, {"seed": 4})
    row = first.set_index("source").loc["a"]
    for col, fmt in [
        ("margin_median", ".3f"),
        ("margin_p05", ".3f"),
        ("margin_p10", ".3f"),
        ("composite_logdet", ".4f"),
        ("composite_trace", ".4f"),
    ]:
        cell = f"{row[col]:{fmt}} [{row[f'{col}_ci_low']:{fmt}}, {row[f'{col}_ci_high']:{fmt}}]"
        assert cell in report, col


def test_composite_ci_resamples_records_not_negatives():
    """Records of very different K whose negatives are one repeated passage: resampling records
    keeps that clustering, resampling negatives averages it away, so the audit's CI must be much
    wider than a negative-level bootstrap's. Kills: the audit resampling the source's negatives
    instead of its records (``resample_counts(n_negatives, …)`` with ``owner = arange(n_negatives)``)."""
    words = ["apple", "river", "engine", "violin", "planet", "garden", "castle", "pepper", "stone", "cloud", "lake"]
    ks = [1, 2, 16, 3, 1, 24, 2, 5, 1, 12, 4]
    recs = [
        record(f"q{i:02d}", f"{words[i]} {words[(i + 3) % 11]}", [f"{words[(i + 5) % 11]} page"] * k, "c", f"pos {i}")
        for i, k in enumerate(ks)
    ]
    loaded = LoadResult(recs)
    result = audit_records(loaded, alnum, encoder=HashEncoder(8), seed=2, resamples=400)
    row = result.profile.to_frame().set_index("source").loc["c"]
    e_q, e_p, e_n, w, owner = source_inputs(result, loaded, "c", HashEncoder(8))
    assert np.bincount(owner).tolist() == ks
    neg_rng = np.random.default_rng(2)
    by_negatives: dict[str, list[float]] = {f: [] for f in FORMS}
    for _ in range(400):
        rows = neg_rng.integers(0, len(owner), len(owner))
        values = composite(e_q[rows], e_p[rows], e_n[rows], w[rows])
        for f in FORMS:
            by_negatives[f].append(values[f])
    for f in FORMS:
        col = f"composite_{f}"
        neg_low, neg_high = plain_ci(by_negatives[f], 0.95)
        assert row[f"{col}_ci_high"] - row[f"{col}_ci_low"] > 1.5 * (neg_high - neg_low), f


def test_a_source_past_max_negatives_gets_its_composite_without_a_ci():
    """With ``diagnostics.composite.max_negatives`` between the two sources' sizes, only the larger
    source's composites lose their CI (value unchanged, NaN bounds, ``composite_ci_resamples`` 0);
    the smaller keeps the same CI bytes as without a limit, every other profile column is unchanged,
    and the report names the source and the setting. An explicit ``resamples`` applies whatever the
    size. Kills: a limit on records instead of negatives, one applied to every source or to an
    explicit ``resamples``, and a skipped CI that shows without a word."""
    assert [ci_resamples(n, 300, CompositeSettings(max_negatives=30)) for n in (29, 30, 31)] == [300, 300, 0]
    assert ci_resamples(10**9, 300, CompositeSettings(max_negatives=None)) == 300
    assert ci_resamples(10**9, 300, CompositeSettings(resamples=7, max_negatives=30)) == 7
    with pytest.raises(ValueError, match="max_negatives"):
        CompositeSettings(max_negatives=0)

    def profile(**composite: Any) -> pd.DataFrame:
        semantic = SemanticSettings(composite=CompositeSettings(**composite))
        result = audit_records(_loaded(), alnum, encoder=HashEncoder(), seed=4, resamples=300, semantic=semantic)
        return result.profile.to_frame().set_index("source")

    full = profile(max_negatives=None)
    small, large = full["n_negatives"].astype(int).sort_values().index
    limit = int(full.loc[small, "n_negatives"])
    assert limit < int(full.loc[large, "n_negatives"])
    cut = profile(max_negatives=limit)
    ci = [c for c in full.columns if c.startswith("composite_") and "_ci_" in c and c != "composite_ci_resamples"]
    assert cut.loc[large, ci].isna().all() and full.loc[large, ci].notna().all()
    assert cut.loc[small, ci].to_numpy().tobytes() == full.loc[small, ci].to_numpy().tobytes()
    assert list(cut["composite_ci_resamples"]) == [0 if s == large else 300 for s in cut.index]
    rest = [c for c in full.columns if c not in ci and c != "composite_ci_resamples"]
    assert cut[rest].to_csv() == full[rest].to_csv()
    forced = profile(max_negatives=limit, resamples=300)
    assert forced[ci].to_numpy().tobytes() == full[ci].to_numpy().tobytes()

    settings = {"bootstrap_resamples": 300, "composite_ci_max_negatives": limit}
    semantic = SemanticSettings(composite=CompositeSettings(max_negatives=limit))
    report = render_report(
        audit_records(_loaded(), alnum, encoder=HashEncoder(), seed=4, resamples=300, semantic=semantic), settings
    )
    assert f"No composite CI for {large} (" in report and f"max_negatives = {limit:,}" in report
    assert "No composite CI" not in render_report(audit_records(_loaded(), alnum, encoder=HashEncoder()), settings)


def test_long_scoring_and_composite_ci_show_progress_bars(monkeypatch, capsys):
    """Past their thresholds the per-negative scoring and each source's composite CI show a bar on
    stderr (named, counting negatives and resamples); below them, none, and the profile is the same
    bytes either way. Kills: an audit of millions of negatives silent for many minutes."""
    import transferdx.auditing.pooling as pooling
    import transferdx.auditing.values as values

    quiet = audit_records(_loaded(), alnum, encoder=HashEncoder(), seed=4, resamples=50).profile.to_frame()
    assert "score negatives" not in capsys.readouterr().err
    monkeypatch.setattr(values, "PROGRESS_MIN", 1)
    monkeypatch.setattr(pooling, "COMPOSITE_PROGRESS_MIN", 1)
    shown = audit_records(_loaded(), alnum, encoder=HashEncoder(), seed=4, resamples=50).profile.to_frame()
    err = capsys.readouterr().err
    assert "score negatives" in err and "composite CI a" in err and "composite CI b" in err
    assert shown.to_csv(index=False) == quiet.to_csv(index=False)
