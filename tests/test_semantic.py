"""Frozen-encoder statistics: closed forms, hand-worked cases and invariants on explicit vectors."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.special import expit

from transferdx.diagnostics.composite import CompositeSettings, composite, residuals, weighted_scatter
from transferdx.diagnostics.semantic import BandCuts, bands, eta, hardness, in_batch_scores, record_scores, rho

TAU = 0.05


def unit(*xs: float) -> np.ndarray:
    v = np.asarray(xs, dtype=np.float64)
    return v / np.linalg.norm(v)


def test_rho_identical_and_orthogonal():
    q = unit(1, 0, 0)
    # identical negative and positive: s(q,p) = s(q,n) → ρ = 0.5
    assert rho(q @ unit(1, 1, 0), q @ unit(1, 1, 0), TAU) == 0.5
    # positive = query, negative orthogonal: ρ = σ((1 − 0)/τ) = σ(20)
    assert rho(q @ q, q @ unit(0, 1, 0), TAU) == pytest.approx(1 / (1 + math.exp(-20)), abs=1e-15)
    # and the mirror image
    assert rho(q @ unit(0, 1, 0), q @ q, TAU) == pytest.approx(1 / (1 + math.exp(20)), rel=1e-12)


def test_rho_matches_scipy_expit():
    rng = np.random.default_rng(0)
    sp, sn = rng.uniform(-1, 1, 1000), rng.uniform(-1, 1, 1000)
    np.testing.assert_allclose(rho(sp, sn, 0.07), expit((sp - sn) / 0.07), rtol=1e-12, atol=1e-300)


def test_eta_and_bands_and_hardness():
    assert eta(np.array([-0.3, 0.0, 0.4])).tolist() == [0.0, 0.0, 0.4]
    sp = np.full(5, 0.8)
    # w = exp((s_n − s_p)/τ): 0 → inverted; ln 0.6·τ → hard; ln 0.2·τ → medium; ln 0.05·τ → easy
    sn = 0.8 + TAU * np.log(np.array([1.0, 0.6, 0.2, 0.05, 1.0]))
    sn[4] = 0.9  # above the positive: inverted
    assert bands(sp, sn, TAU).tolist() == [0, 1, 2, 3, 0]
    with pytest.raises(ValueError, match="band cut-offs"):
        BandCuts(hard=0.1, medium=0.5)
    h = hardness(np.array([0.8, 0.8, 0.3]), np.array([0.8, 0.5, 0.9]), np.array([0.5, 0.5, 0.4]))
    assert h[0] == 1.0 and h[1] == 0.0 and math.isnan(h[2])  # s(q,p) ≤ b → undefined


def test_two_negative_case_by_hand():
    """q = e1; p at 0.9; negatives at 0.8 and 0.3 cosine to q (all in the plane of e1, e2, e3)."""
    q = unit(1, 0, 0)
    p = np.array([0.9, math.sqrt(1 - 0.81), 0.0])
    n1 = np.array([0.8, 0.0, math.sqrt(1 - 0.64)])
    n2 = np.array([0.3, -math.sqrt(1 - 0.09), 0.0])
    neg, rec = record_scores(q[None], p[None], np.stack([n1, n2]), np.array([2]), TAU)
    # softmax over [0.9, 0.8, 0.3]/0.05 = [18, 16, 6]
    z = math.exp(18) + math.exp(16) + math.exp(6)
    pi1, pi2 = math.exp(16) / z, math.exp(6) / z
    assert neg["pi"].tolist() == pytest.approx([pi1, pi2], rel=1e-12)
    assert rec["loss"][0] == pytest.approx(-math.log(math.exp(18) / z), rel=1e-12)
    d1, d2 = np.sum((n1 - p) ** 2), np.sum((n2 - p) ** 2)
    assert rec["energy"][0] == pytest.approx((pi1 / TAU) ** 2 * d1 + (pi2 / TAU) ** 2 * d2, rel=1e-12)
    assert rec["margin"][0] == pytest.approx(0.1, abs=1e-12)
    assert rec["inversion"][0] == 0.0
    assert rec["rho"][0] == pytest.approx((expit(0.1 / TAU) + expit(0.6 / TAU)) / 2, rel=1e-12)
    assert rec["eta"][0] == pytest.approx((0.8 + 0.3) / 2, rel=1e-12)


def test_negative_identical_to_positive():
    rng = np.random.default_rng(1)
    q, p = unit(*rng.normal(size=8)), unit(*rng.normal(size=8))
    other = unit(*rng.normal(size=8))
    neg, rec = record_scores(q[None], p[None], np.stack([p, other]), np.array([2]), TAU)
    assert neg["rho"][0] == 0.5
    assert rec["inversion"][0] == 1.0  # a tie counts against the positive
    assert rec["margin"][0] <= 0.0
    assert neg["band"][0] == 0  # inverted band


def test_permuting_negatives_changes_no_record_value():
    rng = np.random.default_rng(2)
    d, counts = 16, np.array([3, 5, 1, 4])
    e_q = np.stack([unit(*rng.normal(size=d)) for _ in counts])
    e_p = np.stack([unit(*rng.normal(size=d)) for _ in counts])
    e_n = np.stack([unit(*rng.normal(size=d)) for _ in range(counts.sum())])
    bg = unit(*rng.normal(size=d)) * 0.1
    _, a = record_scores(e_q, e_p, e_n, counts, TAU, bg)
    starts = np.cumsum(counts) - counts
    perm = np.concatenate([s + rng.permutation(k) for s, k in zip(starts, counts, strict=True)])
    _, b = record_scores(e_q, e_p, e_n[perm], counts, TAU, bg)
    for key in a:
        np.testing.assert_allclose(a[key], b[key], rtol=1e-12, atol=1e-12, err_msg=key)


def test_in_batch_negatives_add_to_the_softmax():
    rng = np.random.default_rng(3)
    e_q = np.stack([unit(*rng.normal(size=6)) for _ in range(4)])
    e_p = np.stack([unit(*rng.normal(size=6)) for _ in range(4)])
    e_n = np.stack([unit(*rng.normal(size=6)) for _ in range(4)])
    counts = np.ones(4, dtype=int)
    extra = in_batch_scores(e_q, e_p, 2, np.array([0, 1, 2, 3]))
    assert extra[0].tolist() == pytest.approx([e_q[0] @ e_p[1]])
    _, plain = record_scores(e_q, e_p, e_n, counts, TAU)
    _, batch = record_scores(e_q, e_p, e_n, counts, TAU, extra_negatives=extra)
    logits = np.array([e_q[0] @ e_p[0], e_q[0] @ e_n[0], e_q[0] @ e_p[1]]) / TAU
    expected = -(logits[0] - np.log(np.exp(logits).sum()))
    assert batch["loss"][0] == pytest.approx(expected, rel=1e-12)
    assert np.all(batch["loss"] > plain["loss"])
    with pytest.raises(ValueError, match="batch size"):
        in_batch_scores(e_q, e_p, 1, np.arange(4))


def test_records_need_negatives_and_positive_tau():
    e = np.eye(3)[:1]
    with pytest.raises(ValueError, match="at least one negative"):
        record_scores(e, e, np.zeros((0, 3)), np.array([0]), TAU)
    with pytest.raises(ValueError, match="τ must be > 0"):
        rho(0.5, 0.2, 0.0)


# ---------------------------------------------------------------------------------------------
# Composite
# ---------------------------------------------------------------------------------------------


def _reference_scatter(e_q, e_p, e_n, w, tol=1e-6):
    """M from explicit projections: r = (I − QQᵀ) n with Q an orthonormal basis of span{q, p}."""
    d = e_n.shape[1]
    m = np.zeros((d, d))
    for q, p, n, wk in zip(e_q, e_p, e_n, w, strict=True):
        basis, _ = np.linalg.qr(np.stack([q, p], axis=1))
        r = (np.eye(d) - basis @ basis.T) @ n
        if np.linalg.norm(r) >= tol:
            r = r / np.linalg.norm(r)
            m += wk * np.outer(r, r)
    return m / len(e_n)


def test_composite_against_slogdet_and_reference_projection():
    rng = np.random.default_rng(4)
    d, n = 6, 9
    e_q = np.stack([unit(*rng.normal(size=d)) for _ in range(n)])
    e_p = np.stack([unit(*rng.normal(size=d)) for _ in range(n)])
    e_n = np.stack([unit(*rng.normal(size=d)) for _ in range(n)])
    w = rng.uniform(0, 1, n)
    settings = CompositeSettings(eps=0.01, chunk=4)
    m = _reference_scatter(e_q, e_p, e_n, w)
    np.testing.assert_allclose(weighted_scatter(e_q, e_p, e_n, w, settings), m, atol=1e-12)
    out = composite(e_q, e_p, e_n, w, settings)
    sign, logdet = np.linalg.slogdet(np.eye(d) + m / 0.01)
    assert sign > 0 and out["logdet"] == pytest.approx(logdet / d, rel=1e-10)
    assert out["trace"] == pytest.approx(np.trace(m) / 0.01, rel=1e-10)
    # unit residuals: tr(M) = Σ w / n over non-zero residuals
    assert out["trace"] == pytest.approx(w.sum() / n / 0.01, rel=1e-10)


def test_zero_residual_convention_and_chunking():
    q, p = unit(1, 0, 0), unit(1, 1, 0)
    in_span = unit(2, -1, 0)  # lies in span{q, p}: contributes nothing
    off = unit(0, 0, 1)
    r = residuals(np.stack([q, q]), np.stack([p, p]), np.stack([in_span, off]))
    assert np.allclose(r[0], 0) and np.allclose(r[1], off)
    rng = np.random.default_rng(5)
    e = [np.stack([unit(*rng.normal(size=5)) for _ in range(20)]) for _ in range(3)]
    w = rng.uniform(size=20)
    a = composite(*e, w, CompositeSettings(chunk=1))
    b = composite(*e, w, CompositeSettings(chunk=4096))
    assert a == pytest.approx(b, rel=1e-12)
