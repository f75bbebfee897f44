"""The composite (ECI_sem-style, our reconstruction; DESIGN §3).

Residual r_ik = the part of e_{n_k} orthogonal to span{e_q, e_p}, unit-normalised; a residual with
‖r‖ < ``zero_tol`` contributes nothing (zero-residual convention). Weight w_ik = ρ^a · η^b · ψ^c.
M = (1/n) Σ_ik w_ik r_ik r_ikᵀ over the n negatives of a source (d × d, accumulated in chunks,
never n × n). The embeddings may be :class:`~transferdx.diagnostics.rows.IndexedRows` (gathers of
the distinct texts' vectors): every kernel here takes them a block of rows at a time, so a source's
per-negative embeddings are never built whole.

- ``logdet`` form: (1/d) log det(I + M/ε) ≥ 0 — spread of weighted residual directions.
- ``trace`` form: tr(M)/ε ≥ 0 — total weighted residual mass.
Higher = more weighted, diverse off-axis content. A weight that is undefined (ψ NaN) counts as 0.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
from threadpoolctl import threadpool_limits

from transferdx.diagnostics.rows import Rows
from transferdx.resampling import percentile_ci


@dataclass(frozen=True)
class CompositeSettings:
    eps: float = 1e-2
    exp_rho: float = 1.0
    exp_eta: float = 1.0
    exp_psi: float = 1.0
    zero_tol: float = 1e-6
    chunk: int = 4096
    # bootstrap resamples of the composite's CI: None = the audit's; 0 = no CI (the value alone; at
    # MS MARCO scale the bootstrap costs resamples × records × d² flops)
    resamples: int | None = None
    # with resamples None: a source with more negatives than this gets the value alone (its CI would
    # take about resamples × negatives × 3.3e-6 s on 2 cores: 3 min at 50,000 and 1,000 resamples,
    # 55 min at 10⁶; benchmarks/bench_composite.py); None = no limit. An explicit resamples applies
    # whatever the size.
    max_negatives: int | None = 50_000

    def __post_init__(self) -> None:
        if not self.eps > 0:
            raise ValueError(f"composite ε must be > 0, got {self.eps}")
        if self.resamples is not None and self.resamples < 0:
            raise ValueError(f"composite resamples must be ≥ 0 (0: no CI), got {self.resamples}")
        if self.max_negatives is not None and self.max_negatives < 1:
            raise ValueError(f"composite max_negatives must be ≥ 1 or null (no limit), got {self.max_negatives}")


def ci_resamples(n_negatives: int, resamples: int, s: CompositeSettings) -> int:
    """The resamples of one source's composite CI: ``s.resamples`` when it is set; else the audit's
    ``resamples``, or 0 (the value alone) when the source has more than ``s.max_negatives``
    negatives. Range: 0 … max(resamples, s.resamples)."""
    if s.resamples is not None:
        return s.resamples
    return 0 if s.max_negatives is not None and n_negatives > s.max_negatives else resamples


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


def weighted_scatter(e_q: Rows, e_p: Rows, e_n: Rows, w: np.ndarray, s: CompositeSettings) -> np.ndarray:
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
    e_q: Rows, e_p: Rows, e_n: Rows, w: np.ndarray, s: CompositeSettings = CompositeSettings()
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
    e_q: Rows,
    e_p: Rows,
    e_n: Rows,
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
    e_q: Rows,
    e_p: Rows,
    e_n: Rows,
    w: np.ndarray,
    owner: np.ndarray,
    counts: Iterable[np.ndarray],
    s: CompositeSettings = CompositeSettings(),
    block: int = BOOTSTRAP_BLOCK,
    route: str = "auto",
    workers: int | None = None,
) -> dict[str, np.ndarray]:
    """Every composite form on each bootstrap resample of *records* (one value per resample).

    Rows of ``e_q``/``e_p`` are aligned to ``e_n`` (as in :func:`composite`); ``owner[i]`` is the
    record (0 … n_records − 1) of negative i; ``counts`` yields (B_chunk × n_records) record
    multiplicities (:func:`transferdx.resampling.resample_counts`). A resampled record brings all its
    negatives, with its multiplicity c_j: M* = Rᵀ D R with D_i = c_{j(i)} w_i / N*, N* = Σ_j c_j K_j
    (resamples with N* = 0 give NaN). Two exact routes to the forms (``route``):

    - ``primal`` (d × d): M* = Σ_j c_j S_j / N* with the record scatters S_j = Σ_{k ∈ j} w r rᵀ
      (computed once when they fit in ``block`` float64 elements, else again per block of
      resamples); log det(I_d + M*/ε) by a batched Cholesky.
    - ``dual`` (m × m, m = negatives drawn with D_i > 0): Sylvester's identity
      det(I_d + Rᵀ D R / ε) = det(I_m + D^½ G D^½ / ε) on the Gram matrix G = R Rᵀ of the drawn
      residuals (computed once per source); tr(M*/ε) = Σ_i D_i ‖r_i‖² / ε.

    ``auto`` takes the dual route for a resample with m < d when G fits in ``block`` (DL19: about 220
    of 384), else the primal one; values agree to rounding (tests: ≤ 1e-9). Resamples go to
    ``workers`` threads (default: up to 2 or the CPU count); BLAS runs on one thread in each, so
    every matrix is factorised the same way whatever the number of workers (same bytes).
    """
    if route not in ROUTES:
        raise ValueError(f"composite bootstrap route must be one of {sorted(ROUTES)}, got {route!r}")
    with threadpool_limits(1, user_api="blas"):
        return _composite_bootstrap(e_q, e_p, e_n, w, owner, counts, s, block, route, _workers(workers))


@dataclass(frozen=True)
class CompositeEstimate:
    """One composite form of one source: its value over all the source's negatives and the
    percentile bootstrap CI over records (NaN bounds where every resample is NaN)."""

    value: float
    ci_low: float
    ci_high: float


def composite_with_ci(
    e_q: Rows,
    e_p: Rows,
    e_n: Rows,
    w: np.ndarray,
    owner: np.ndarray,
    counts: Iterable[np.ndarray],
    confidence: float = 0.95,
    s: CompositeSettings = CompositeSettings(),
) -> dict[str, CompositeEstimate]:
    """Every composite form of one source (:func:`composite`; ranges as the forms') with its
    percentile bootstrap CI over records: :func:`composite_bootstrap` on the record multiplicities
    ``counts`` (the source's own stream, so the same resamples as its other statistics), then the
    (α/2, 1 − α/2) percentiles of the resampled values, α = 1 − confidence, NaN resamples left out.
    Arguments as :func:`composite_bootstrap`'s."""
    values = composite(e_q, e_p, e_n, w, s)
    boot = composite_bootstrap(e_q, e_p, e_n, w, owner, counts, s)
    out: dict[str, CompositeEstimate] = {}
    for form, value in values.items():
        if not len(boot[form]):  # no resamples (``resamples: 0``): the value without a CI
            out[form] = CompositeEstimate(value, float("nan"), float("nan"))
            continue
        low, high = percentile_ci(boot[form][:, None], confidence)
        out[form] = CompositeEstimate(value, float(low[0]), float(high[0]))
    return out


ROUTES = ("auto", "primal", "dual")
# resamples per batched factorisation on the dual route (resamples of similar m go together)
DUAL_GROUP = 16


def _workers(workers: int | None) -> int:
    if workers is not None:
        if workers < 1:
            raise ValueError(f"workers must be ≥ 1, got {workers}")
        return workers
    return max(1, min(2, os.cpu_count() or 1))


@dataclass
class _Source:
    """One source's negatives grouped by record (negatives of record j: ``starts[j]:starts[j+1]``);
    the residuals of all of them (n × d float64) only when the dual route asks (it runs only when
    their n × n Gram matrix fits the block, so they are small then)."""

    e: tuple[Rows, Rows, Rows]  # the caller's (e_q, e_p, e_n)
    zero_tol: float
    w: np.ndarray  # (n,) weights, in record order
    order: np.ndarray  # record-order position → row of the caller's arrays
    starts: np.ndarray  # (n_records + 1,)
    sizes: np.ndarray  # (n_records,) K_j as float64
    rec_of: np.ndarray  # (n,) record of each row of r
    _r: np.ndarray | None = None

    @property
    def r(self) -> np.ndarray:
        """(n, d) unit residuals (zero rows where ‖r‖ < tol), in record order."""
        if self._r is None:
            e_q, e_p, e_n = self.e
            self._r = residuals(e_q[self.order], e_p[self.order], e_n[self.order], self.zero_tol)
        return self._r

    @property
    def norm2(self) -> np.ndarray:
        """(n,) ‖r_i‖² (1 or 0)."""
        return np.einsum("ij,ij->i", self.r, self.r)


def _composite_bootstrap(
    e_q: Rows,
    e_p: Rows,
    e_n: Rows,
    w: np.ndarray,
    owner: np.ndarray,
    counts: Iterable[np.ndarray],
    s: CompositeSettings,
    block: int,
    route: str,
    workers: int,
) -> dict[str, np.ndarray]:
    owner = np.asarray(owner, dtype=np.int64)
    d = e_n.shape[1]
    order = np.argsort(owner, kind="stable")
    out: dict[str, list[np.ndarray]] = {name: [] for name in COMPOSITE_FORMS}
    src: _Source | None = None
    primal: _Primal | None = None
    gram: np.ndarray | None = None
    dual_ok = set(COMPOSITE_FORMS.values()) <= {logdet_form, trace_form}
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for chunk in counts:
            chunk = np.asarray(chunk, dtype=np.float64)
            if src is None:
                n_rec = chunk.shape[1]
                sizes = np.bincount(owner, minlength=n_rec).astype(np.float64)
                starts = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
                src = _Source(
                    e=(e_q, e_p, e_n),
                    zero_tol=s.zero_tol,
                    w=np.asarray(w, dtype=np.float64)[order],
                    order=order,
                    starts=starts,
                    sizes=sizes,
                    rec_of=owner[order],
                )
            values = {name: np.full(len(chunk), np.nan) for name in COMPOSITE_FORMS}
            n_neg = chunk @ src.sizes
            ok = n_neg > 0
            fits = len(src.order) ** 2 <= block
            live = m = np.zeros(0)
            if route == "dual" or (route == "auto" and dual_ok and fits):
                live = (chunk[:, src.rec_of] * src.w) > 0  # (B, n): rows with D_i > 0
                m = live.sum(axis=1)
                use_dual = ok & ((m < d) | (route == "dual"))
            else:  # (B × n) work only where the dual route may run
                use_dual = np.zeros(len(chunk), dtype=bool)
            rows_dual = np.flatnonzero(use_dual)
            rows_primal = np.flatnonzero(ok & ~use_dual)
            if len(rows_dual):
                if gram is None:
                    gram = src.r @ src.r.T
                _dual_values(src, gram, chunk, n_neg, live, m, rows_dual, values, s, d, pool)
            if len(rows_primal):
                if primal is None:
                    primal = _Primal(e_q, e_p, e_n, w, src, s, block)
                primal.values(chunk[rows_primal], n_neg[rows_primal], rows_primal, values, pool)
            for name in COMPOSITE_FORMS:
                out[name].append(values[name])
    return {name: np.concatenate(v) if v else np.zeros(0) for name, v in out.items()}


def _dual_values(
    src: _Source,
    gram: np.ndarray,
    chunk: np.ndarray,
    n_neg: np.ndarray,
    live: np.ndarray,
    m: np.ndarray,
    rows: np.ndarray,
    values: dict[str, np.ndarray],
    s: CompositeSettings,
    d: int,
    pool: ThreadPoolExecutor,
) -> None:
    """The forms of resamples ``rows`` by Sylvester's identity (see :func:`composite_bootstrap`)."""
    dd = chunk[rows][:, src.rec_of] * src.w / (n_neg[rows, None] * s.eps)  # D/ε per row of r
    for name, form in COMPOSITE_FORMS.items():
        if form is trace_form:
            values[name][rows] = dd @ src.norm2
    if not any(form is logdet_form for form in COMPOSITE_FORMS.values()):
        return
    by_size = rows[np.argsort(m[rows], kind="stable")]  # similar m factorised together
    at = {int(r): i for i, r in enumerate(rows)}

    def group(members: np.ndarray) -> np.ndarray:
        size = int(m[members].max())
        a = np.zeros((len(members), size, size))
        for g, b in enumerate(members):
            idx = np.flatnonzero(live[b])
            root = np.sqrt(dd[at[int(b)], idx])
            a[g, : len(idx), : len(idx)] = gram[np.ix_(idx, idx)] * root[:, None] * root[None, :]
        a[:, np.arange(size), np.arange(size)] += 1.0  # I_m + D^½ G D^½ / ε; padding stays I
        return _logdet_batch(a) * size / d  # (1/d) log det: _logdet_batch divides by the size

    groups = [by_size[i : i + DUAL_GROUP] for i in range(0, len(by_size), DUAL_GROUP)]
    for members, logdet in zip(groups, pool.map(group, groups), strict=True):
        for name, form in COMPOSITE_FORMS.items():
            if form is logdet_form:
                values[name][members] = logdet


class _Primal:
    """The d × d route: M* = Σ_j c_j S_j / N* from the record scatters S_j."""

    def __init__(
        self,
        e_q: Rows,
        e_p: Rows,
        e_n: Rows,
        w: np.ndarray,
        src: _Source,
        s: CompositeSettings,
        block: int,
    ) -> None:
        self.args = (e_q, e_p, e_n, np.asarray(w, dtype=np.float64), src.order, src.starts)
        self.src, self.s = src, s
        d = e_n.shape[1]
        self.d = d
        d2 = d * d
        n_rec = len(src.sizes)
        per_records = max(1, block // d2)  # records per block of scatters S_j
        self.spans = [range(a, min(a + per_records, n_rec)) for a in range(0, n_rec, per_records)]
        self.cached = _record_scatters(*self.args, self.spans[0], s) if len(self.spans) == 1 else None
        # cached scatters: small blocks of resamples (cache-friendly); recomputed ones: as many
        # resamples as a block holds, so each recomputation serves many of them
        self.per_resamples = max(1, (block // 16 if self.cached is not None else block // 4) // d2)

    def values(
        self,
        c_all: np.ndarray,
        n_neg_all: np.ndarray,
        rows: np.ndarray,
        values: dict[str, np.ndarray],
        pool: ThreadPoolExecutor,
    ) -> None:
        d, s = self.d, self.s
        for at in range(0, len(c_all), self.per_resamples):
            c = c_all[at : at + self.per_resamples]
            n_neg = n_neg_all[at : at + self.per_resamples]
            b = len(c)
            total = np.zeros((b, d * d))
            for span in self.spans:
                scat = self.cached if self.cached is not None else _record_scatters(*self.args, span, s)
                total += c[:, span.start : span.stop] @ scat
            total *= (1.0 / (n_neg * s.eps))[:, None]  # M*/ε, in place
            scaled = total.reshape(b, d, d)
            here = rows[at : at + b]
            for name, form in COMPOSITE_FORMS.items():
                if form is trace_form:
                    values[name][here] = np.trace(scaled, axis1=1, axis2=2)
                elif form is not logdet_form:
                    values[name][here] = np.array([form(x * s.eps, s.eps) for x in scaled])
            if any(form is logdet_form for form in COMPOSITE_FORMS.values()):
                total[:, :: d + 1] += 1.0  # I + M*/ε, in place (last: it overwrites M*/ε)
                parts = [scaled[i : i + DUAL_GROUP] for i in range(0, b, DUAL_GROUP)]
                logdet = np.concatenate(list(pool.map(_logdet_batch, parts)))
                for name, form in COMPOSITE_FORMS.items():
                    if form is logdet_form:
                        values[name][here] = logdet
