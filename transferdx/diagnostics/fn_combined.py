"""The ``combined`` false-negative detector (design §3.9): a logistic regression over what the
encoder and the lexical side know about a negative (:data:`FEATURES`), fitted on deep judgments
(TREC-DL19, ``experiments/fit_fn_combined.py``) and shipped as ``fn_combined.json``; the audit uses
it in place of ``positive_aware`` with ``diagnostics.suspicion.rule=combined``."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from importlib import resources
from typing import Any

import numpy as np
import pandas as pd

FEATURES = ("gap", "s_qn", "s_pn", "coverage", "log_position")
COMBINED_FILE = "fn_combined.json"


def features(frame: pd.DataFrame) -> np.ndarray:
    """:data:`FEATURES` per negative: gap = s(q,n) − s(q,p) ∈ [−2, 2], s(q,n), s(p0,n) ∈ [−1, 1],
    coverage = 1 − ψ ∈ [0, 1] (0 where ψ is undefined), log_position = log(1 + position of the
    negative in its record, 0-based)."""
    s_qp = frame["s_qp"].to_numpy(dtype=np.float64)
    s_qn = frame["s_qn"].to_numpy(dtype=np.float64)
    coverage = np.nan_to_num(frame["coverage"].to_numpy(dtype=np.float64), nan=0.0)
    position = frame["position"].to_numpy(dtype=np.float64)
    return np.column_stack([s_qn - s_qp, s_qn, frame["s_pn"].to_numpy(dtype=np.float64), coverage, np.log1p(position)])


@dataclass(frozen=True)
class CombinedDetector:
    """p(false negative) = σ(b + Σ_j w_j (x_j − μ_j)/σ_j) over :data:`FEATURES`; suspected when
    p ≥ ``threshold`` (chosen to maximise F1 on the data it was fitted on)."""

    mean: tuple[float, ...]
    scale: tuple[float, ...]
    coef: tuple[float, ...]
    intercept: float
    threshold: float
    features: tuple[str, ...] = FEATURES
    fitted_on: str = ""

    def probability(self, x: np.ndarray) -> np.ndarray:
        z = (np.asarray(x, dtype=np.float64) - np.asarray(self.mean)) / np.asarray(self.scale)
        return np.asarray(1.0 / (1.0 + np.exp(-(z @ np.asarray(self.coef) + self.intercept))))

    def predict(self, x: np.ndarray) -> np.ndarray:
        return np.asarray(self.probability(x) >= self.threshold, dtype=bool)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def best_threshold(p: np.ndarray, y: np.ndarray) -> float:
    """The probability cut that maximises F1 on (p, y): predict p ≥ cut (ties → the higher cut)."""
    order = np.argsort(-p, kind="stable")
    p_sorted, y_sorted = p[order], y[order]
    tp = np.cumsum(y_sorted)
    k = np.arange(1, len(p) + 1)
    f1 = 2 * tp / (k + y.sum())
    last_of_value = np.r_[p_sorted[1:] != p_sorted[:-1], True]  # a cut can only fall between distinct p
    f1 = np.where(last_of_value, f1, -1.0)
    return float(p_sorted[int(np.argmax(f1))])


def fit_combined(x: np.ndarray, y: np.ndarray, fitted_on: str = "") -> CombinedDetector:
    """Standardise, fit an L2 logistic regression (C = 1, lbfgs), pick the F1-maximising cut."""
    from sklearn.linear_model import LogisticRegression

    mean = x.mean(axis=0)
    scale = np.where(x.std(axis=0) > 0, x.std(axis=0), 1.0)
    model = LogisticRegression(C=1.0, max_iter=1000).fit((x - mean) / scale, y)
    det = CombinedDetector(
        tuple(float(v) for v in mean),
        tuple(float(v) for v in scale),
        tuple(float(v) for v in model.coef_[0]),
        float(model.intercept_[0]),
        0.5,
        FEATURES,
        fitted_on,
    )
    return CombinedDetector(**{**det.to_dict(), "threshold": best_threshold(det.probability(x), y)})


def load_combined() -> CombinedDetector:
    """The detector the package ships (``transferdx/diagnostics/fn_combined.json``)."""
    raw = json.loads(resources.files("transferdx.diagnostics").joinpath(COMBINED_FILE).read_text("utf-8"))
    return CombinedDetector(
        mean=tuple(float(v) for v in raw["mean"]),
        scale=tuple(float(v) for v in raw["scale"]),
        coef=tuple(float(v) for v in raw["coef"]),
        intercept=float(raw["intercept"]),
        threshold=float(raw["threshold"]),
        features=tuple(str(v) for v in raw["features"]),
        fitted_on=str(raw.get("fitted_on", "")),
    )
