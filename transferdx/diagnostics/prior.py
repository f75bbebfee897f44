"""The share of false negatives in a file under label shift, and probabilities at that share (design §3.9).

The audit reports :func:`em_prior_ci` per source as a diagnostic (``fn_prior``) and moves nothing to
it: on files mined the way users mine, label shift does not hold and the estimate covered the judged
share on only half of them (issue 54, experiments/results/fn_mined). :func:`identified` says when it
fell on a boundary; :func:`adjust` is the move itself, used by the experiments that measured it.

A probability calibrated where a share π_t of negatives are false negatives (the detector's training
prior) is not a probability on a file where the share is π. Under label shift (the features of a false
negative, and of a true one, look alike in both files; only the mix differs), Bayes' rule moves a
calibrated p to the prior π:

    p' = r·p / (r·p + s·(1 − p)),   r = π/π_t,   s = (1 − π)/(1 − π_t)          (:func:`adjust`)

and π itself is estimated by the EM procedure of Saerens, Latinne & Decaestecker (2002), "Adjusting
the outputs of a classifier to new a priori probabilities" (Neural Computation 14(1)): the fixed point
of π^{k+1} = mean_i p'_i(π^k), which is the maximum-likelihood prior of the mixture (:func:`em_prior`;
the root of the likelihood's slope, which falls with π, found by bisection to within 1e-8). Its interval is a
percentile bootstrap over records (:func:`em_prior_ci`): each resample weighs the negatives by how
often their record was drawn, and all resamples are solved together on a grid of :data:`GRID`
probability bins (each negative at its bin's centre, an error in p below 1/(2·GRID); only occupied
bins are kept) to within 1e-5, so that a resample costs O(min(n, GRID)) per step whatever the number
of negatives. The point estimate uses the probabilities themselves, to within 1e-8. Numpy and scipy.sparse.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from transferdx.resampling import percentile_bounds, resample_counts

TOL = 1e-8
BOOT_TOL = 1e-5  # a resample's π̂ (its percentiles are read to 3 decimals)
MAX_ITER = 1000
GRID = 256  # probability bins of the bootstrap (the point estimate is exact)
# priors and probabilities are kept in [PROBABILITY_EDGE, 1 − PROBABILITY_EDGE] so that r and s stay finite
PROBABILITY_EDGE = 1e-6


def adjust(p: np.ndarray, train_prior: float, prior: float | np.ndarray) -> np.ndarray:
    """p' = r·p / (r·p + s·(1 − p)) with r = π/π_t, s = (1 − π)/(1 − π_t), in [0, 1]; ``prior`` a
    scalar, or one π per row of a 2-D ``p`` (shape (B, 1) against (B, n)). p' = p when π = π_t."""
    p = np.clip(np.asarray(p, dtype=np.float64), 0.0, 1.0)
    pi_t = float(np.clip(train_prior, PROBABILITY_EDGE, 1 - PROBABILITY_EDGE))
    pi = np.clip(np.asarray(prior, dtype=np.float64), PROBABILITY_EDGE, 1 - PROBABILITY_EDGE)
    r, s = pi / pi_t, (1.0 - pi) / (1.0 - pi_t)
    num = r * p
    den = num + s * (1.0 - p)
    return np.asarray(np.where(den > 0, num / np.where(den > 0, den, 1.0), 0.0))


def _em(p: np.ndarray, weights: np.ndarray, train_prior: float, tol: float, max_iter: int) -> np.ndarray:
    """The EM fixed point for B weightings at once: ``weights`` (B, n) → π̂ per row (B,).

    The fixed point π = mean_i p'_i(π) is where the weighted log-likelihood of the mixture,
    Σ_i w_i log(π·λ_i + 1 − π) with λ_i = [p_i/(1 − p_i)] / [π_t/(1 − π_t)], has zero slope
    g(π) = Σ_i w_i (λ_i − 1)/(π·λ_i + 1 − π); g falls with π (the likelihood is concave), so the fixed
    point is its root in [0, 1] (π̂ = 0 where g(0) ≤ 0, 1 where g(1) ≥ 0), found by bisection to
    within ``tol``: the limit EM's iteration approaches, reached in ⌈log2(1/tol)⌉ + 1 steps instead of
    EM's slow crawl near 0 or 1."""
    pc = np.clip(np.asarray(p, dtype=np.float64), 1e-12, 1 - 1e-12)
    pi_t = float(np.clip(train_prior, PROBABILITY_EDGE, 1 - PROBABILITY_EDGE))
    lam = (pc / (1 - pc)) / (pi_t / (1 - pi_t))
    total = weights.sum(axis=1)

    d = lam - 1.0

    def slope(pi: np.ndarray) -> np.ndarray:
        return np.asarray((weights * (d / (pi[:, None] * d + 1.0))).sum(axis=1))

    b = weights.shape[0]
    low, high = np.zeros(b), np.ones(b)
    steps = min(max_iter, int(np.ceil(np.log2(1.0 / tol))) + 1)
    for _ in range(steps):
        mid = (low + high) / 2
        up = slope(mid) > 0
        low, high = np.where(up, mid, low), np.where(up, high, mid)
    out = (low + high) / 2
    out = np.where(slope(np.zeros(b)) <= 0, 0.0, out)
    out = np.where(slope(np.ones(b)) >= 0, 1.0, out)
    return np.where(total > 0, out, np.nan)


def em_prior(p: np.ndarray, train_prior: float, tol: float = TOL, max_iter: int = MAX_ITER) -> float:
    """π̂ ∈ [0, 1]: the Saerens–Latinne–Decaestecker EM estimate of the share of positives among the
    items whose calibrated probabilities (at training prior ``train_prior``) are ``p``. NaN for no
    items."""
    p = np.asarray(p, dtype=np.float64)
    if not len(p):
        return float("nan")
    return float(_em(p, np.ones((1, len(p))), train_prior, tol, max_iter)[0])


def identified(prior: float) -> bool:
    """Whether an :func:`em_prior` estimate identifies the share: strictly inside (0, 1). The fixed
    point sits on 0 exactly when g(0) = Σ(λ_i − 1) ≤ 0 (the items look, on average, no more like false
    negatives than the training's true negatives do) and on 1 when g(1) ≥ 0; either way no mix of the
    training's two classes explains the items — the label-shift assumption fails (e.g. negatives mined
    under the audit's own encoder with a margin, which removes what that encoder would flag) — and the
    boundary says nothing about the share. NaN (no items) is not identified."""
    return bool(0.0 < prior < 1.0)


@dataclass(frozen=True)
class PriorEstimate:
    """π̂ with its percentile bootstrap interval (NaN bounds without resamples)."""

    prior: float
    low: float
    high: float
    n: int


def em_prior_ci(
    p: np.ndarray,
    owner: np.ndarray,
    train_prior: float,
    rng: np.random.Generator,
    resamples: int = 1000,
    confidence: float = 0.95,
) -> PriorEstimate:
    """:func:`em_prior` and its percentile interval over ``resamples`` bootstrap draws of the records
    (``owner``: each item's record index, 0..R−1; a drawn record brings all its items). ``rng`` is the
    caller's stream (a source's :func:`~transferdx.resampling.bootstrap_rng` with a key of its own)."""
    p = np.asarray(p, dtype=np.float64)
    owner = np.asarray(owner, dtype=np.int64)
    if not len(p):
        return PriorEstimate(float("nan"), float("nan"), float("nan"), 0)
    point = em_prior(p, train_prior)
    if resamples < 1:
        return PriorEstimate(point, float("nan"), float("nan"), len(p))
    n_records = int(owner.max()) + 1
    bins = np.minimum((np.clip(p, 0.0, 1.0) * GRID).astype(np.int64), GRID - 1)
    used, column = np.unique(bins, return_inverse=True)  # only the occupied bins: at most min(n, GRID)
    centres = (used + 0.5) / GRID
    hist = sp.csr_matrix((np.ones(len(p)), (owner, column)), shape=(n_records, len(used)))  # items per (record, bin)
    values = [
        _em(centres, np.asarray(hist.T.dot(counts.T).T), train_prior, BOOT_TOL, MAX_ITER)
        for counts in resample_counts(n_records, rng, resamples)
    ]
    low, high = percentile_bounds(np.concatenate(values), confidence)
    return PriorEstimate(point, float(low), float(high), len(p))
