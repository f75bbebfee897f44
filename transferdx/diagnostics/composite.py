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

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np


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
