"""The composite (ECI_sem-style, our reconstruction; DESIGN §3).

Residual r_ik = the part of e_{n_k} orthogonal to span{e_q, e_p}, unit-normalised; a residual with
‖r‖ < ``zero_tol`` contributes nothing (zero-residual convention). Weight w_ik = ρ^a · η^b · ψ^c.
M = (1/n) Σ_ik w_ik r_ik r_ikᵀ over the n negatives of a source (d × d, accumulated in chunks,
never n × n).

- ``logdet`` form: (1/d) log det(I + M/ε) ≥ 0 — spread of weighted residual directions.
- ``trace`` form: tr(M)/ε ≥ 0 — total weighted residual mass.
Higher = more weighted, diverse off-axis content. A weight that is undefined (ψ NaN) counts as 0.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np
from threadpoolctl import threadpool_limits


@dataclass(frozen=True)
class CompositeSettings:
    eps: float = 1e-2
    exp_rho: float = 1.0
    exp_eta: float = 1.0
    exp_psi: float = 1.0
    zero_tol: float = 1e-6
    chunk: int = 4096

    def __post_init__(self) -> None:
        if not self.eps > 0:
            raise ValueError(f"composite ε must be > 0, got {self.eps}")


def residuals(e_q: np.ndarray, e_p: np.ndarray, e_n: np.ndarray, zero_tol: float = 1e-6) -> np.ndarray:
    """Unit residuals of ``e_n`` rows off span{e_q, e_p} (rows aligned); zero rows where ‖r‖ < tol."""
    e_q = np.asarray(e_q, dtype=np.float64)
    e_p = np.asarray(e_p, dtype=np.float64)
    r = np.asarray(e_n, dtype=np.float64).copy()
    u1 = _unit(e_q, zero_tol)
    v = e_p - np.einsum("ij,ij->i", e_p, u1)[:, None] * u1
    u2 = _unit(v, zero_tol)
    for u in (u1, u2):
        r -= np.einsum("ij,ij->i", r, u)[:, None] * u
    norms = np.linalg.norm(r, axis=1)
    keep = norms >= zero_tol
    out = np.zeros_like(r)
    out[keep] = r[keep] / norms[keep, None]
    return out


def _unit(x: np.ndarray, tol: float) -> np.ndarray:
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return np.divide(x, norms, out=np.zeros_like(x), where=norms >= tol)


def weights(rho: np.ndarray, eta: np.ndarray, psi: np.ndarray, s: CompositeSettings) -> np.ndarray:
    """w = ρ^a η^b ψ^c; NaN (undefined ψ) → 0."""
    w = np.power(rho, s.exp_rho) * np.power(eta, s.exp_eta) * np.power(psi, s.exp_psi)
    return np.nan_to_num(w, nan=0.0)


def weighted_scatter(
    e_q: np.ndarray, e_p: np.ndarray, e_n: np.ndarray, w: np.ndarray, s: CompositeSettings
) -> np.ndarray:
    """M = (1/n) Σ w r rᵀ, accumulated ``s.chunk`` negatives at a time (rows of e_q/e_p aligned to e_n)."""
    n, d = e_n.shape
    m = np.zeros((d, d))
    for start in range(0, n, s.chunk):
        sl = slice(start, start + s.chunk)
        r = residuals(e_q[sl], e_p[sl], e_n[sl], s.zero_tol)
        m += (r * w[sl, None]).T @ r
    return m / max(n, 1)


def logdet_form(m: np.ndarray, eps: float) -> float:
    """(1/d) log det(I + M/ε)."""
    sign, value = np.linalg.slogdet(np.eye(m.shape[0]) + m / eps)
    if sign <= 0:
        raise ValueError("I + M/ε is not positive definite (M must be positive semi-definite)")
    return float(value / m.shape[0])


def trace_form(m: np.ndarray, eps: float) -> float:
    """tr(M)/ε."""
    return float(np.trace(m) / eps)


COMPOSITE_FORMS: dict[str, Callable[[np.ndarray, float], float]] = {"logdet": logdet_form, "trace": trace_form}


def composite(
    e_q: np.ndarray, e_p: np.ndarray, e_n: np.ndarray, w: np.ndarray, s: CompositeSettings = CompositeSettings()
) -> dict[str, float]:
    """Every registered composite form for one source."""
    m = weighted_scatter(e_q, e_p, e_n, w, s)
    return {name: form(m, s.eps) for name, form in COMPOSITE_FORMS.items()}


# ---------------------------------------------------------------------------------------------
# Bootstrap over records
# ---------------------------------------------------------------------------------------------

# float64 elements (256 MiB) that the per-record scatters may hold at once; the resampled scatters
# take 1/16 of it (scatters cached) or 2 × 1/4 (scatters recomputed block by block)
BOOTSTRAP_BLOCK = 2**25


def _record_scatters(
    e_q: np.ndarray,
    e_p: np.ndarray,
    e_n: np.ndarray,
    w: np.ndarray,
    order: np.ndarray,
    starts: np.ndarray,
    records: range,
    s: CompositeSettings,
) -> np.ndarray:
    """S_j = Σ_{k ∈ j} w_jk r_jk r_jkᵀ for the records in ``records`` (len × d²), negatives of record j
    being ``order[starts[j]:starts[j + 1]]``. Records with the same K go through one batched matmul."""
    d = e_n.shape[1]
    lo, hi = records.start, records.stop
    neg = order[starts[lo] : starts[hi]]
    r = residuals(e_q[neg], e_p[neg], e_n[neg], s.zero_tol)
    rw = r * w[neg, None]
    first = starts[lo:hi] - starts[lo]
    ks = np.diff(starts[lo : hi + 1])
    out = np.empty((hi - lo, d, d))
    out[ks == 0] = 0.0
    for k in np.unique(ks[ks > 0]):
        rows = np.flatnonzero(ks == k)
        at = first[rows, None] + np.arange(k)  # (records, k): the negatives of each record
        if len(rows) == len(ks):  # one K for every record: straight into the output
            np.matmul(rw[at].transpose(0, 2, 1), r[at], out=out)
        else:
            out[rows] = np.matmul(rw[at].transpose(0, 2, 1), r[at])
    return out.reshape(hi - lo, d * d)


def _logdet_batch(a: np.ndarray) -> np.ndarray:
    """(1/d) log det A of a stack of symmetric positive definite matrices A = I + M/ε, by Cholesky
    (eigvalsh if a factorisation fails on rounding)."""
    d = a.shape[-1]
    try:
        diag = np.diagonal(np.linalg.cholesky(a), axis1=-2, axis2=-1)
        return 2.0 * np.log(diag).sum(axis=-1) / d
    except np.linalg.LinAlgError:
        return np.log(np.linalg.eigvalsh(a)).sum(axis=-1) / d


def composite_bootstrap(
    e_q: np.ndarray,
    e_p: np.ndarray,
    e_n: np.ndarray,
    w: np.ndarray,
    owner: np.ndarray,
    counts: Iterable[np.ndarray],
    s: CompositeSettings = CompositeSettings(),
    block: int = BOOTSTRAP_BLOCK,
) -> dict[str, np.ndarray]:
    """Every composite form on each bootstrap resample of *records* (one value per resample).

    Rows of ``e_q``/``e_p`` are aligned to ``e_n`` (as in :func:`composite`); ``owner[i]`` is the
    record (0 … n_records − 1) of negative i; ``counts`` yields (B_chunk ×
    n_records) record multiplicities (``auditing.profiles.resample_counts``). A resampled record
    brings all its negatives, with its multiplicity: with S_j = Σ_{k ∈ j} w r rᵀ and K_j negatives,
    M* = Σ_j c_j S_j / Σ_j c_j K_j (d × d, never n × n). The S_j are computed once when they fit in
    ``block`` float64 elements, else again for each block of resamples; resamples go ``block / d²``
    at a time. The logdet and trace forms are batched (logdet by Cholesky of I + M*/ε); other
    registered forms are applied matrix by matrix. Resamples with Σ c_j K_j = 0 give NaN. BLAS runs
    on one thread here: many small factorisations are fastest (and the same bytes) that way.
    """
    with threadpool_limits(1, user_api="blas"):
        return _composite_bootstrap(e_q, e_p, e_n, w, owner, counts, s, block)


def _composite_bootstrap(
    e_q: np.ndarray,
    e_p: np.ndarray,
    e_n: np.ndarray,
    w: np.ndarray,
    owner: np.ndarray,
    counts: Iterable[np.ndarray],
    s: CompositeSettings,
    block: int,
) -> dict[str, np.ndarray]:
    owner = np.asarray(owner, dtype=np.int64)
    d = e_n.shape[1]
    d2 = d * d
    order = np.argsort(owner, kind="stable")
    per_records = max(1, block // d2)  # records per block of scatters S_j
    out: dict[str, list[np.ndarray]] = {name: [] for name in COMPOSITE_FORMS}
    ready = False
    for chunk in counts:
        chunk = np.asarray(chunk, dtype=np.float64)
        if not ready:
            n_rec = chunk.shape[1]
            sizes = np.bincount(owner, minlength=n_rec).astype(np.float64)
            starts = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
            spans = [range(a, min(a + per_records, n_rec)) for a in range(0, n_rec, per_records)]
            cached = _record_scatters(e_q, e_p, e_n, w, order, starts, spans[0], s) if len(spans) == 1 else None
            # cached scatters: small blocks of resamples (cache-friendly); recomputed ones: as many
            # resamples as a block holds, so each recomputation serves many of them
            per_resamples = max(1, (block // 16 if cached is not None else block // 4) // d2)
            buf = np.empty((per_resamples, d2))
            part_buf = np.empty((per_resamples, d2)) if cached is None else buf
            ready = True
        for at in range(0, len(chunk), per_resamples):
            c = chunk[at : at + per_resamples]
            b = len(c)
            total = buf[:b]
            for i, span in enumerate(spans):
                scat = cached if cached is not None else _record_scatters(e_q, e_p, e_n, w, order, starts, span, s)
                if i == 0:
                    np.matmul(c[:, span.start : span.stop], scat, out=total)
                else:
                    np.matmul(c[:, span.start : span.stop], scat, out=part_buf[:b])
                    total += part_buf[:b]
            n_neg = c @ sizes
            ok = n_neg > 0
            total *= np.divide(1.0, n_neg * s.eps, out=np.zeros(b), where=ok)[:, None]  # M*/ε, in place
            scaled = total.reshape(b, d, d)
            values: dict[str, np.ndarray] = {}
            for name, form in COMPOSITE_FORMS.items():
                if form is trace_form:
                    values[name] = np.trace(scaled, axis1=1, axis2=2)
                elif form is not logdet_form:
                    values[name] = np.array([form(x * s.eps, s.eps) for x in scaled])
            logdets = [name for name, form in COMPOSITE_FORMS.items() if form is logdet_form]
            if logdets:
                total[:, :: d + 1] += 1.0  # I + M*/ε, in place (last: it overwrites M*/ε)
                for name in logdets:
                    values[name] = _logdet_batch(scaled)
            for name in COMPOSITE_FORMS:
                values[name][~ok] = np.nan
                out[name].append(values[name])
    return {name: np.concatenate(v) if v else np.zeros(0) for name, v in out.items()}
