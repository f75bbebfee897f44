"""The false-negative detector behind ``fn_probability`` (design §3.9): a logistic regression over
what the encoder, the lexical side and the file's other sources know about a negative
(:data:`FEATURES`), Platt-calibrated, fitted on deep judgments of two TREC-DL years and measured on
each year with the model of the other (``experiments/fit_fn_combined.py``, results in
``experiments/results/fn_years/``). Shipped as ``fn_combined.json``: two detectors, ``multi`` (with
the other sources' agreement, for a query that two or more genuine sources of the file hold) and
``single`` (one record's view, for everything else), the cleaning cut and the out-of-year numbers the
verdict quotes."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from functools import cache
from importlib import resources
from typing import Any

import numpy as np
import pandas as pd

COMBINED_FILE = "fn_combined.json"


def _gap(f: pd.DataFrame) -> np.ndarray:
    return np.asarray(f["s_qn"], dtype=np.float64) - np.asarray(f["s_qp"], dtype=np.float64)


def _column(name: str) -> Callable[[pd.DataFrame], np.ndarray]:
    return lambda f: np.asarray(f[name], dtype=np.float64)


# Register, don't branch: feature → how it is read from a per-negative frame.
FEATURES: Mapping[str, Callable[[pd.DataFrame], np.ndarray]] = {
    # s(q,n) − s(q,p) ∈ [−2, 2]
    "gap": _gap,
    # s(q,n), s(p0,n) ∈ [−1, 1]
    "s_qn": _column("s_qn"),
    "s_pn": _column("s_pn"),
    # coverage 1 − ψ ∈ [0, 1] (0 where ψ is undefined)
    "coverage": lambda f: np.nan_to_num(np.asarray(f["coverage"], dtype=np.float64), nan=0.0),
    # log(1 + 0-based position of the negative in its record) ∈ [0, ∞)
    "log_position": lambda f: np.log1p(np.asarray(f["position"], dtype=np.float64)),
    # share of the genuine sources holding the query whose negatives contain the passage ∈ (0, 1]
    "agree_share": _column("agree_share"),
    # log(1 + its best 0-based position among them) ∈ [0, ∞)
    "agree_best": _column("agree_best"),
}
SINGLE = ("gap", "s_qn", "s_pn", "coverage", "log_position")
MULTI = (*SINGLE, "agree_share", "agree_best")


def feature_matrix(frame: pd.DataFrame, names: tuple[str, ...] = SINGLE) -> np.ndarray:
    """The (n × len(names)) matrix of :data:`FEATURES` ``names`` for each row of ``frame``."""
    if not len(frame):
        return np.zeros((0, len(names)))
    return np.column_stack([FEATURES[n](frame) for n in names])


def features(frame: pd.DataFrame) -> np.ndarray:
    """The one-record features (:data:`SINGLE`) of ``frame``."""
    return feature_matrix(frame, SINGLE)


def sigmoid(z: np.ndarray) -> np.ndarray:
    return np.asarray(1.0 / (1.0 + np.exp(-np.asarray(z, dtype=np.float64))))


@dataclass(frozen=True)
class CombinedDetector:
    """z = b + Σ_j w_j (x_j − μ_j)/σ_j over ``features``; the calibrated probability σ(a·z + c) with
    Platt's (a, c) = ``platt``, at the training prior ``prior`` (the share of false negatives it was
    fitted on); suspected when the probability ≥ ``threshold`` (the F1-maximising cut on its own
    out-of-fold probabilities)."""

    mean: tuple[float, ...]
    scale: tuple[float, ...]
    coef: tuple[float, ...]
    intercept: float
    threshold: float
    features: tuple[str, ...] = SINGLE
    fitted_on: str = ""
    platt: tuple[float, float] = (1.0, 0.0)
    prior: float = 0.5

    def logit(self, x: np.ndarray) -> np.ndarray:
        """z ∈ (−∞, ∞)."""
        z = (np.asarray(x, dtype=np.float64) - np.asarray(self.mean)) / np.asarray(self.scale)
        return np.asarray(z @ np.asarray(self.coef) + self.intercept)

    def probability(self, x: np.ndarray) -> np.ndarray:
        """σ(a·z + c) ∈ (0, 1), calibrated at the training prior."""
        return sigmoid(self.platt[0] * self.logit(x) + self.platt[1])

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


def fit_logistic(
    x: np.ndarray, y: np.ndarray, names: tuple[str, ...] = SINGLE, fitted_on: str = ""
) -> CombinedDetector:
    """Standardise, fit an L2 logistic regression (C = 1, lbfgs); no calibration (platt = (1, 0)),
    the cut that maximises F1 on (x, y)."""
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
        names,
        fitted_on,
        prior=float(np.mean(y)),
    )
    return CombinedDetector(**{**det.to_dict(), "threshold": best_threshold(det.probability(x), y)})


def fit_combined(x: np.ndarray, y: np.ndarray, fitted_on: str = "") -> CombinedDetector:
    """:func:`fit_logistic` over the one-record features (:data:`SINGLE`)."""
    return fit_logistic(x, y, SINGLE, fitted_on)


def platt(z: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Platt scaling: (a, c) maximising the likelihood of y under p = σ(a·z + c) (an unpenalised
    one-feature logistic regression, lbfgs)."""
    from sklearn.linear_model import LogisticRegression

    model = LogisticRegression(C=1e6, max_iter=1000).fit(np.asarray(z, dtype=np.float64)[:, None], y)
    return float(model.coef_[0, 0]), float(model.intercept_[0])


def out_of_fold_logits(
    x: np.ndarray, y: np.ndarray, groups: np.ndarray, names: tuple[str, ...] = SINGLE, folds: int = 5
) -> np.ndarray:
    """Each row's logit from a :func:`fit_logistic` model fitted without its group (``GroupKFold``)."""
    from sklearn.model_selection import GroupKFold

    z = np.zeros(len(y), dtype=np.float64)
    n_folds = min(folds, len(np.unique(groups)))
    for train, test in GroupKFold(n_splits=n_folds).split(x, y, groups):
        z[test] = fit_logistic(x[train], y[train], names).logit(x[test])
    return z


def fit_detector(
    x: np.ndarray, y: np.ndarray, groups: np.ndarray, names: tuple[str, ...], fitted_on: str = "", folds: int = 5
) -> CombinedDetector:
    """The shipped recipe: :func:`fit_logistic` on every row; Platt (a, c) on out-of-fold logits
    (folds grouped by query); the cut that maximises F1 on the out-of-fold calibrated probabilities;
    prior = mean(y)."""
    z = out_of_fold_logits(x, y, groups, names, folds)
    a, c = platt(z, y)
    model = fit_logistic(x, y, names, fitted_on)
    cut = best_threshold(sigmoid(a * z + c), y)
    return CombinedDetector(**{**model.to_dict(), "platt": (a, c), "threshold": cut})


def _detector(raw: Mapping[str, Any]) -> CombinedDetector:
    return CombinedDetector(
        mean=tuple(float(v) for v in raw["mean"]),
        scale=tuple(float(v) for v in raw["scale"]),
        coef=tuple(float(v) for v in raw["coef"]),
        intercept=float(raw["intercept"]),
        threshold=float(raw["threshold"]),
        features=tuple(str(v) for v in raw["features"]),
        fitted_on=str(raw.get("fitted_on", "")),
        platt=(float(raw["platt"][0]), float(raw["platt"][1])),
        prior=float(raw["prior"]),
    )


@cache
def shipped() -> dict[str, Any]:
    """``fn_combined.json`` as written by ``experiments/fit_fn_combined.py``."""
    text = resources.files("transferdx.diagnostics").joinpath(COMBINED_FILE).read_text("utf-8")
    return dict(json.loads(text))


def load_combined(name: str = "single") -> CombinedDetector:
    """A detector the package ships: ``single`` (one record's features) or ``multi`` (with the other
    sources' agreement)."""
    return _detector(shipped()["detectors"][name])


def cleaning_cut(name: str = "single") -> Mapping[str, Any]:
    """The default cleaning's cut on the prior-adjusted ``fn_probability`` (``cut``, one for both
    detectors) with detector ``name``'s pooled out-of-year precision there (``precision``,
    ``precision_ci_low``, ``precision_ci_high``), ``recall``, ``n`` and where it was measured
    (``measured_on``)."""
    return dict(shipped()["cleaning"][name])


def agreement(
    record_qid: np.ndarray, record_source: np.ndarray, record_genuine: np.ndarray, owner: np.ndarray, keys: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per negative (of record ``owner[k]``, passage identity ``keys[k]``): ``agree_share`` = the share
    of the genuine sources holding its query whose negatives contain the passage ∈ (0, 1], and
    ``agree_best`` = log(1 + the best 0-based position among them). NaN for a negative of a control,
    or of a query that fewer than two genuine sources hold (the ``single`` detector scores those)."""
    n = len(owner)
    share, best = np.full(n, np.nan), np.full(n, np.nan)
    if not n:
        return share, best
    rec = pd.DataFrame({"qid": record_qid, "source": record_source, "genuine": record_genuine})
    holders = rec[rec["genuine"]].groupby("qid")["source"].nunique()
    neg = pd.DataFrame(
        {"qid": np.asarray(record_qid)[owner], "key": keys, "genuine": np.asarray(record_genuine)[owner]}
    )
    neg["source"] = np.asarray(record_source)[owner]
    neg["position"] = np.arange(n) - np.searchsorted(owner, owner)  # 0-based within the record (owner sorted)
    neg["holders"] = neg["qid"].map(holders).fillna(0).to_numpy()
    use = neg["genuine"].to_numpy(bool) & (neg["holders"].to_numpy() >= 2)
    if not use.any():
        return share, best
    sub = neg[use]
    first = sub.groupby(["qid", "key", "source"], sort=False)["position"].min().reset_index()
    stats = first.groupby(["qid", "key"], sort=False).agg(n=("source", "size"), best=("position", "min"))
    joined = sub[["qid", "key"]].join(stats, on=["qid", "key"])
    share[use] = joined["n"].to_numpy(dtype=np.float64) / sub["holders"].to_numpy(dtype=np.float64)
    best[use] = np.log1p(joined["best"].to_numpy(dtype=np.float64))
    return share, best
