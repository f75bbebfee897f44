"""How well the false-negative suspicion (design §3.9) finds real false negatives, where deep
judgments say which negatives answer the query (a TREC-DL layout loaded with ``labels=single``).

Pure functions over one frame with a row per negative (:data:`EVAL_COLUMNS`):

- label: judged ≥ the relevant grade (a real false negative); unjudged counts as not relevant,
  the TREC convention.
- the rule at (α, δ): ``positive_aware`` s(q,n) ≥ α·s(q,p) (s(q,n) ≥ s(q,p) where s(q,p) ≤ 0), or
  ``near_duplicate_positive`` cos(p0, n) ≥ δ (δ = None: off), or a text reason
  (``duplicate_positive``/``duplicate_negative``, which do not depend on α, δ).
- precision = TP/(TP+FP), recall = TP/(TP+FN), F1 = 2TP/(2TP+FP+FN), each in [0, 1] (NaN when the
  denominator is 0), with percentile bootstrap CIs over queries (a resampled query brings all its
  negatives, from every source).
- the ``combined`` detector (:mod:`transferdx.diagnostics.fn_combined`) (what the encoder-free side
  knows next to the scores), refitted here with cross-validation grouped by query; its out-of-fold
  precision, recall and F1 are reported next to the rule's best cell, and the shipped coefficients
  are applied as they are.
- :func:`rule_precision`: each fixed rule's precision on the same frame (the constants the verdict
  quotes for the rules). How the shipped ``fn_probability`` does on a year it never saw is measured
  by ``experiments/fit_fn_combined.py`` (two TREC-DL years, leave one out).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from transferdx.diagnostics.fn_combined import features, fit_combined, load_combined
from transferdx.resampling import bootstrap_stream, percentile_ci, resample_counts

ALPHAS = (0.80, 0.825, 0.85, 0.875, 0.90, 0.925, 0.95, 0.975, 1.00)
DELTAS: tuple[float | None, ...] = (0.85, 0.90, 0.95, None)
EVAL_COLUMNS = ("source", "qid", "s_qp", "s_qn", "s_pn", "text_hit", "coverage", "position", "judgment")


def labels(judgment: pd.Series | np.ndarray, relevant_grade: int) -> np.ndarray:
    """Judged ≥ ``relevant_grade``; unjudged (NA) is not relevant."""
    values = pd.to_numeric(pd.Series(judgment), errors="coerce").to_numpy(dtype=np.float64)
    return np.nan_to_num(values, nan=-np.inf) >= relevant_grade


def rule(frame: pd.DataFrame, alpha: float, delta: float | None) -> np.ndarray:
    """The §3.9 suspicion at (α, δ): positive-aware, near-duplicate (unless δ is None) or a text reason."""
    s_qp = frame["s_qp"].to_numpy(dtype=np.float64)
    s_qn = frame["s_qn"].to_numpy(dtype=np.float64)
    hit = s_qn >= np.where(s_qp > 0, alpha * s_qp, s_qp)
    if delta is not None:
        hit |= frame["s_pn"].to_numpy(dtype=np.float64) >= delta
    return hit | frame["text_hit"].to_numpy(dtype=bool)


def scores(tp: np.ndarray, fp: np.ndarray, fn: np.ndarray) -> dict[str, np.ndarray]:
    """Precision, recall and F1 from counts (arrays of any shape; NaN where undefined)."""
    tp, fp, fn = (np.asarray(x, dtype=np.float64) for x in (tp, fp, fn))
    with np.errstate(invalid="ignore", divide="ignore"):
        return {
            "precision": np.where(tp + fp > 0, tp / (tp + fp), np.nan),
            "recall": np.where(tp + fn > 0, tp / (tp + fn), np.nan),
            "f1": np.where(2 * tp + fp + fn > 0, 2 * tp / (2 * tp + fp + fn), np.nan),
        }


def _per_query(pred: np.ndarray, label: np.ndarray, group: np.ndarray, n_groups: int) -> np.ndarray:
    """(n_groups × 3) TP, FP, FN per query."""
    return np.stack(
        [
            np.bincount(group, weights=pred & label, minlength=n_groups),
            np.bincount(group, weights=pred & ~label, minlength=n_groups),
            np.bincount(group, weights=~pred & label, minlength=n_groups),
        ],
        axis=1,
    )


def evaluate_predictions(
    predictions: Sequence[np.ndarray],
    label: np.ndarray,
    qids: Sequence[str],
    *,
    seed: int = 0,
    resamples: int = 1000,
    confidence: float = 0.95,
) -> list[dict[str, Any]]:
    """Per prediction vector: TP, FP, FN, precision, recall, F1 and their percentile bootstrap CIs
    over queries (the same resamples for every vector)."""
    names, group = np.unique(np.asarray(qids, dtype=object).astype(str), return_inverse=True)
    counts = np.stack([_per_query(np.asarray(p, bool), label, group, len(names)) for p in predictions])  # C×Q×3
    total = counts.sum(axis=1)
    point = scores(total[:, 0], total[:, 1], total[:, 2])
    rng = bootstrap_stream(seed, 0xF7)
    boot: dict[str, list[np.ndarray]] = {k: [] for k in point}
    for weights in resample_counts(len(names), rng, resamples):  # B×Q
        sums = np.einsum("bq,cqk->bck", weights, counts)
        for key, value in scores(sums[..., 0], sums[..., 1], sums[..., 2]).items():
            boot[key].append(value)
    out: list[dict[str, Any]] = [{"tp": int(t[0]), "fp": int(t[1]), "fn": int(t[2])} for t in total.astype(np.int64)]
    for key, chunks in boot.items():
        low, high = percentile_ci(np.concatenate(chunks), confidence)
        for c, row in enumerate(out):
            row[key] = float(point[key][c])
            row[f"{key}_ci_low"] = float(low[c])
            row[f"{key}_ci_high"] = float(high[c])
    return out


def out_of_fold(x: np.ndarray, y: np.ndarray, qids: Sequence[str], folds: int = 5) -> np.ndarray:
    """Predictions of :func:`fit_combined` for each negative from a model fitted without its query
    (``GroupKFold`` by query, threshold chosen on the training folds only)."""
    from sklearn.model_selection import GroupKFold

    pred = np.zeros(len(y), dtype=bool)
    groups = np.asarray(qids, dtype=object).astype(str)
    n_folds = min(folds, len(np.unique(groups)))
    for train, test in GroupKFold(n_splits=n_folds).split(x, y, groups):
        pred[test] = fit_combined(x[train], y[train]).predict(x[test])
    return pred


def expected_calibration_error(p: np.ndarray, y: np.ndarray, bins: int = 10) -> float:
    """Σ_b (n_b/n)·|mean p − mean y| over ``bins`` equal-count bins of p, in [0, 1]; 0 = calibrated."""
    p, y = np.asarray(p, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if not len(p):
        return float("nan")
    order = np.argsort(p, kind="stable")
    return float(sum(len(c) / len(p) * abs(p[c].mean() - y[c].mean()) for c in np.array_split(order, bins) if len(c)))


def rule_precision(
    frame: pd.DataFrame,
    relevant_grade: int,
    *,
    alpha: float,
    delta: float,
    seed: int = 0,
    resamples: int = 1000,
    confidence: float = 0.95,
) -> dict[str, Any]:
    """Precision (negatives suspected, precision and its query-bootstrap CI) of each fixed suspicion
    rule on ``frame`` and of the default union at (α, δ); ``base_rate`` is the share judged relevant
    (the precision of suspecting everything). Unjudged = not relevant."""
    frame = frame.reset_index(drop=True)
    y = labels(frame["judgment"], relevant_grade)
    qids = frame["qid"].astype(str).tolist()
    none = np.zeros(len(frame), dtype=bool)
    plain = frame.assign(s_pn=-np.inf, text_hit=False)
    predictions = {
        "positive_aware": rule(plain, alpha, None),
        "near_duplicate_positive": frame["s_pn"].to_numpy(dtype=np.float64) >= delta,
        "duplicate_positive": frame.get("duplicate_positive", pd.Series(none)).to_numpy(dtype=bool),
        "duplicate_negative": frame.get("duplicate_negative", pd.Series(none)).to_numpy(dtype=bool),
        "default_rule": rule(frame, alpha, delta),
    }
    rows = evaluate_predictions(
        list(predictions.values()), y, qids, seed=seed, resamples=resamples, confidence=confidence
    )
    out: dict[str, Any] = {
        name: {
            "n_suspected": int(pred.sum()),
            "precision": row["precision"],
            "ci_low": row["precision_ci_low"],
            "ci_high": row["precision_ci_high"],
        }
        for (name, pred), row in zip(predictions.items(), rows, strict=True)
    }
    out["base_rate"] = float(y.mean()) if len(y) else float("nan")
    return out


def fn_evaluation(
    frame: pd.DataFrame,
    relevant_grade: int,
    *,
    alpha: float,
    delta: float,
    alphas: Sequence[float] = ALPHAS,
    deltas: Sequence[float | None] = DELTAS,
    folds: int = 5,
    seed: int = 0,
    resamples: int = 1000,
    confidence: float = 0.95,
    shipped: bool = True,
) -> dict[str, Any]:
    """The whole measurement on one frame (:data:`EVAL_COLUMNS`): base rate, the (α, δ) grid, its
    best-F1 cell, the audit's own (α, δ), per source at the audit's (α, δ), the combined detector out
    of fold (fitted here) and, with ``shipped``, the package's detector applied as is."""
    frame = frame.reset_index(drop=True)
    y = labels(frame["judgment"], relevant_grade)
    qids = frame["qid"].astype(str).tolist()
    cells = [(a, d) for d in deltas for a in alphas]
    if (alpha, delta) not in cells:
        cells.append((alpha, delta))
    x = features(frame)
    detectors = [out_of_fold(x, y, qids, folds)]
    package = load_combined() if shipped else None
    if package is not None:
        detectors.append(package.predict(x))
    kw: dict[str, Any] = {"seed": seed, "resamples": resamples, "confidence": confidence}
    rows = evaluate_predictions([rule(frame, a, d) for a, d in cells] + detectors, y, qids, **kw)
    grid = [{"alpha": a, "delta": "off" if d is None else d, **r} for (a, d), r in zip(cells, rows, strict=False)]
    on_grid = grid[: len(alphas) * len(deltas)]
    best = max(on_grid, key=lambda r: (np.nan_to_num(r["f1"], nan=-1.0), -r["alpha"]))
    chosen = next(r for r in grid if r["alpha"] == alpha and r["delta"] == delta)
    by_source = {}
    for name in sorted(frame["source"].unique()):
        part = frame.index[frame["source"] == name]
        sub = frame.loc[part]
        (r,) = evaluate_predictions([rule(sub, alpha, delta)], y[part], [qids[i] for i in part], **kw)
        by_source[str(name)] = {"n": len(part), "base_rate": float(y[part].mean()) if len(part) else float("nan"), **r}
    oof = rows[len(cells)]
    beats = bool(np.nan_to_num(oof["f1"], nan=-1.0) > best["f1"])
    out = {
        "relevant_grade": relevant_grade,
        "unjudged": "not relevant",
        "n_negatives": len(frame),
        "n_queries": len(set(qids)),
        "n_false_negatives": int(y.sum()),
        "base_rate": float(y.mean()) if len(y) else float("nan"),
        # F1 of suspecting every negative, 2b/(1 + b): the floor any rule's F1 is read against
        "suspect_all_f1": float(2 * y.mean() / (1 + y.mean())) if len(y) else float("nan"),
        "grid": on_grid,
        "best": best,
        "audit_setting": chosen,
        "by_source": by_source,
        "combined_out_of_fold": {"folds": folds, "grouped_by": "query", **oof},
        "combined_beats_best_rule": beats,
    }
    if package is not None:
        out["combined_shipped"] = {"fitted_on": package.fitted_on, **rows[-1]}
    return out


def eval_frame(negatives: pd.DataFrame, records: pd.DataFrame) -> pd.DataFrame:
    """The :data:`EVAL_COLUMNS` frame from an audit's per-negative table (with the §3.9 columns) and
    its per-record table (s(q,p), and ``n_negatives`` to map each negative to its record)."""
    owner = np.repeat(np.arange(len(records)), records["n_negatives"].to_numpy())
    dup_pos = negatives["fn_duplicate_positive"].fillna(False).to_numpy(bool)
    dup_neg = negatives["fn_duplicate_negative"].fillna(False).to_numpy(bool)
    return pd.DataFrame(
        {
            "source": negatives["source"].to_numpy(),
            "qid": negatives["qid"].astype(str).to_numpy(),
            "s_qp": records["s_qp"].to_numpy(dtype=np.float64)[owner],
            "s_qn": negatives["s_qn"].to_numpy(dtype=np.float64),
            "s_pn": negatives["s_pn"].to_numpy(dtype=np.float64),
            "text_hit": dup_pos | dup_neg,
            "coverage": negatives["coverage"].to_numpy(dtype=np.float64),
            "position": negatives["neg_index"].to_numpy(dtype=np.float64),
            "judgment": negatives["judgment"].to_numpy(),
            "duplicate_positive": dup_pos,
            "duplicate_negative": dup_neg,
        }
    )
