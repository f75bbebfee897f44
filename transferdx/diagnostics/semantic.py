"""Frozen-encoder diagnostics (docs/design.md §3), pure functions on unit-normalised embeddings.

Notation: record i with query q, reference positive p, negatives n_1..n_K; s(a, b) = e_a · e_b;
τ the temperature. Records are contiguous: ``counts[i]`` negatives of record i follow those of i−1.

Per negative:
- ρ_ik = σ((s(q,p) − s(q,n_k)) / τ) ∈ (0, 1); higher = the encoder ranks the positive above n_k.
- η_ik = max(0, s(q,n_k)) ∈ [0, 1]; higher = the negative sits closer to the query.
- h_ik = (s(q,n_k) − b(q)) / (s(q,p) − b(q)), b(q) = mean similarity of q to a background sample;
  1 = as close as the positive, 0 = as close as a random passage; undefined when s(q,p) ≤ b(q).
- band from w = exp((s(q,n) − s(q,p))/τ): ``inverted`` s(q,n) ≥ s(q,p); ``hard`` w ≥ 0.5;
  ``medium`` 0.1 ≤ w < 0.5; ``easy`` otherwise.
- failure buckets: ρ < 0.5 (strictly inverted) and η ≤ 0.25 (unrelated), :data:`RHO_BUCKET_CUT`
  and :data:`ETA_BUCKET_CUT`; the lexical one, C ≥ 0.5, is in :mod:`transferdx.diagnostics.lexical`.
Per record:
- inversion inv_i = 1[max_k s(q,n_k) ≥ s(q,p)] ∈ {0, 1} (a tie counts against the positive).
- margin m_i = s(q,p) − max_k s(q,n_k) ∈ [−2, 2]; < 0 inverted, = 0 tie, > 0 positive first.
- loss L_i = −log π_0 ≥ 0 with π = softmax([s(q,p), s(q,n_1..K), (in-batch s(q,p_j))] / τ).
- gradient energy E_i = Σ_k ‖(π_k/τ)(e_{n_k} − e_p)‖² ≥ 0 (InfoNCE gradient w.r.t. e_q, per negative).

Every value is per negative or per record, so records may be scored a chunk at a time with the same
bytes (``transferdx.auditing.values`` scores ``chunk_negatives`` at a time).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import expit

from transferdx.diagnostics.rows import Rows

BANDS = ("inverted", "hard", "medium", "easy")


@dataclass(frozen=True)
class BandCuts:
    """InfoNCE-weight cut-offs: hard if w ≥ ``hard``, medium if ``medium`` ≤ w < ``hard``."""

    hard: float = 0.5
    medium: float = 0.1

    def __post_init__(self) -> None:
        if not 0 < self.medium < self.hard <= 1:
            raise ValueError(f"band cut-offs need 0 < medium < hard ≤ 1, got medium={self.medium}, hard={self.hard}")


# Failure buckets (DESIGN §3.2): each source reports the share of its negatives in each bucket
# (profile columns ``bucket_<name>``, per-record counts ``n_bucket_<name>``).
RHO_BUCKET_CUT = 0.5
"""Bucket ``rho_lt_05``: ρ < 0.5 ⇔ s(q,n) > s(q,p), the negative strictly outscores the positive
(ρ ∈ (0, 1), 0.5 at a tie, so a tie is not in the bucket)."""
ETA_BUCKET_CUT = 0.25
"""Bucket ``eta_le_025``: η ≤ 0.25, the negative looks unrelated to the query (η ∈ [0, 1])."""


def rho(s_qp: np.ndarray, s_qn: np.ndarray, tau: float) -> np.ndarray:
    """ρ = σ((s(q,p) − s(q,n))/τ) ∈ (0, 1); 0.5 when the negative ties with the positive."""
    _check_tau(tau)
    z = (np.asarray(s_qp, dtype=np.float64) - np.asarray(s_qn, dtype=np.float64)) / tau
    return expit(z)  # the logistic, accurate in both tails


def eta(s_qn: np.ndarray) -> np.ndarray:
    """η = max(0, s(q,n)) ∈ [0, 1]."""
    return np.maximum(0.0, np.asarray(s_qn, dtype=np.float64))


def hardness(s_qp: np.ndarray, s_qn: np.ndarray, b: np.ndarray) -> np.ndarray:
    """h = (s(q,n) − b)/(s(q,p) − b); NaN where s(q,p) ≤ b. 1 ≈ positive-like, 0 ≈ random-like."""
    denom = np.asarray(s_qp, dtype=np.float64) - b
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(denom > 0, (np.asarray(s_qn, dtype=np.float64) - b) / denom, np.nan)


def bands(s_qp: np.ndarray, s_qn: np.ndarray, tau: float, cuts: BandCuts = BandCuts()) -> np.ndarray:
    """Band index per negative (0 inverted, 1 hard, 2 medium, 3 easy; see ``BANDS``)."""
    _check_tau(tau)
    diff = np.asarray(s_qn, dtype=np.float64) - np.asarray(s_qp, dtype=np.float64)
    w = np.exp(np.minimum(diff / tau, 0.0))
    return np.select([diff >= 0, w >= cuts.hard, w >= cuts.medium], [0, 1, 2], default=3).astype(np.int8)


def buckets(rho_values: np.ndarray, eta_values: np.ndarray) -> dict[str, np.ndarray]:
    """Failure-bucket membership per negative, by bucket name: ``rho_lt_05`` ρ < :data:`RHO_BUCKET_CUT`
    (strictly inverted), ``eta_le_025`` η ≤ :data:`ETA_BUCKET_CUT` (unrelated). Boolean arrays."""
    return {
        "rho_lt_05": np.asarray(rho_values) < RHO_BUCKET_CUT,
        "eta_le_025": np.asarray(eta_values) <= ETA_BUCKET_CUT,
    }


def _check_tau(tau: float) -> None:
    if not tau > 0:
        raise ValueError(f"temperature τ must be > 0, got {tau}")


def segment_max(values: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Max of each contiguous segment (every segment must be non-empty)."""
    if np.any(counts <= 0):
        raise ValueError("every record needs at least one negative")
    starts = np.cumsum(counts) - counts
    return np.maximum.reduceat(values, starts)


def segment_sum(values: np.ndarray, counts: np.ndarray) -> np.ndarray:
    owner = np.repeat(np.arange(len(counts)), counts)
    return np.bincount(owner, weights=values, minlength=len(counts))


def in_batch_scores(e_q: Rows, e_p: Rows, batch_size: int, order: np.ndarray) -> list[np.ndarray]:
    """For each record, s(q_i, p_j) over the other records j of its batch (B − 1 extra negatives).

    Batches are consecutive runs of ``batch_size`` records in ``order`` (a seeded permutation);
    ``e_q``/``e_p`` may be lazy gathers (:class:`~transferdx.diagnostics.rows.IndexedRows`).
    """
    if batch_size < 2:
        raise ValueError(f"in-batch negatives need a batch size ≥ 2, got {batch_size}")
    extra: list[np.ndarray] = [np.zeros(0)] * len(e_q)
    for start in range(0, len(order), batch_size):
        members = order[start : start + batch_size]
        sims = e_q[members] @ e_p[members].T
        for row, i in enumerate(members):
            extra[i] = np.delete(sims[row], row)
    return extra


def record_scores(
    e_q: np.ndarray,
    e_p: np.ndarray,
    e_n: np.ndarray,
    counts: np.ndarray,
    tau: float = 0.05,
    background: np.ndarray | None = None,
    cuts: BandCuts = BandCuts(),
    extra_negatives: list[np.ndarray] | None = None,
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """All per-negative and per-record frozen-encoder values.

    ``e_q``, ``e_p``: (n_records × d); ``e_n``: (n_negatives × d), records contiguous with
    ``counts``; ``background``: mean embedding of the background sample (b(q) = e_q · background);
    ``extra_negatives``: optional in-batch scores per record added to the softmax of the loss.
    Returns (per_negative, per_record) dicts of arrays.
    """
    _check_tau(tau)
    counts = np.asarray(counts, dtype=np.int64)
    owner = np.repeat(np.arange(len(counts)), counts)
    s_qp = np.einsum("ij,ij->i", e_q, e_p).astype(np.float64)
    s_qn = np.einsum("ij,ij->i", e_q[owner], e_n).astype(np.float64)
    s_qp_n = s_qp[owner]

    neg: dict[str, np.ndarray] = {
        "s_qn": s_qn,
        "rho": rho(s_qp_n, s_qn, tau),
        "eta": eta(s_qn),
        "band": bands(s_qp_n, s_qn, tau, cuts),
    }
    # row by row (einsum, not a BLAS matrix-vector product), so a record's b(q) does not depend on
    # which other records are scored with it: chunked and whole audits give the same bytes
    b = np.einsum("ij,j->i", e_q, background) if background is not None else np.full(len(counts), np.nan)
    neg["hardness"] = hardness(s_qp_n, s_qn, b[owner])

    max_n = segment_max(s_qn, counts)
    # log-sum-exp over [s_qp, s_qn..., extra...] / τ per record
    top = np.maximum(s_qp, max_n)
    extra_max = np.full(len(counts), -np.inf)
    if extra_negatives is not None:
        extra_max = np.array([x.max() if len(x) else -np.inf for x in extra_negatives])
        top = np.maximum(top, extra_max)
    exp_pos = np.exp((s_qp - top) / tau)
    exp_neg = np.exp((s_qn - top[owner]) / tau)
    z = exp_pos + segment_sum(exp_neg, counts)
    if extra_negatives is not None:
        z += np.array([np.exp((x - t) / tau).sum() for x, t in zip(extra_negatives, top, strict=True)])
    pi_neg = exp_neg / z[owner]
    diff = e_n - e_p[owner]
    diff_sq = np.einsum("ij,ij->i", diff, diff).astype(np.float64)
    del diff
    neg["pi"] = pi_neg
    neg["energy"] = (pi_neg / tau) ** 2 * diff_sq

    rec: dict[str, np.ndarray] = {
        "s_qp": s_qp,
        "background": b,
        "inversion": (max_n >= s_qp).astype(np.float64),
        "margin": s_qp - max_n,
        "loss": np.log(z) - (s_qp - top) / tau,
        "energy": segment_sum(neg["energy"], counts),
        "rho": segment_sum(neg["rho"], counts) / counts,
        "eta": segment_sum(neg["eta"], counts) / counts,
    }
    h = neg["hardness"]
    h_defined = segment_sum((~np.isnan(h)).astype(np.float64), counts)
    with np.errstate(invalid="ignore", divide="ignore"):
        rec["hardness"] = np.where(h_defined > 0, segment_sum(np.nan_to_num(h), counts) / h_defined, np.nan)
    return neg, rec
