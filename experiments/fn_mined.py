"""Issue 54's measurements on the files of ``experiments/mined_files.py`` (plan:
``experiments/results/fn_mined/PLAN.md``): per file and per regime × year, the judged share of false
negatives, what the audit's share estimate said of it, the detector's calibration and ranking, and the
default clean's precision and recall — as the audit now reports them (``fn_probability`` at the
detectors' training share, never moved by the share estimate) and as it did before (moved to
min(π̂, π_t): ``old``); the cleaning cuts on own-encoder margin files. Then P6: the detector refitted
on one year's mined files, measured on the other year's.

Writes ``experiments/results/fn_mined/results.json`` and ``RESULTS_tables.md``::

    .venv/bin/python experiments/fn_mined.py [--frames PATH] [--check]

``--check`` recomputes and compares with results.json (numbers to 1e-6: a logistic fit's last digits
move with the CPU's float path).
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fit_fn_combined import same
from mined_files import FRAMES, YEARS

from transferdx.artifacts import canonical_json
from transferdx.auditing.fn_eval import expected_calibration_error
from transferdx.diagnostics.fn_combined import SINGLE, feature_matrix, fit_detector, load_combined
from transferdx.diagnostics.prior import adjust

RESULTS = Path(__file__).resolve().parent / "results" / "fn_mined"
CUT = 0.80


def _flag(frame: pd.DataFrame, col: str) -> np.ndarray:
    return frame[col].fillna(False).to_numpy(dtype=bool) if col in frame else np.zeros(len(frame), bool)


def old_probability(frame: pd.DataFrame) -> np.ndarray:
    """fn_probability as the audit gave it before issue 54: moved to min(π̂, π_t) whatever π̂ was."""
    pi_t = load_combined().prior
    est = frame["fn_prior"].to_numpy(dtype=np.float64)
    boundary = frame["fn_prior_boundary"].to_numpy(dtype=np.float64)
    raw = np.where(np.isnan(est), boundary, est)
    out = np.empty(len(frame))
    for value in np.unique(raw[~np.isnan(raw)]):
        m = raw == value
        out[m] = adjust(frame["p_calibrated"].to_numpy(dtype=np.float64)[m], pi_t, min(float(value), pi_t))
    return out


def auc(p: np.ndarray, y: np.ndarray) -> float | None:
    from sklearn.metrics import roc_auc_score

    return float(roc_auc_score(y, p)) if 0 < y.sum() < len(y) else None


def removal_stats(removed: np.ndarray, y: np.ndarray) -> dict[str, Any]:
    n_fn = int(y.sum())
    tp = int((removed & (y == 1)).sum())
    return {
        "removed": int(removed.sum()),
        "precision": tp / int(removed.sum()) if removed.any() else None,
        "recall": tp / n_fn if n_fn else None,
    }


def summary(frame: pd.DataFrame) -> dict[str, Any]:
    """One group of negatives (a file, or a regime × year): judged only."""
    f = frame[frame["y"].notna()]
    y = f["y"].to_numpy(dtype=np.float64)
    p_cal = f["p_calibrated"].to_numpy(dtype=np.float64)
    p_now = p_cal  # what the audit reports since issue 54
    p_old = f["p_old"].to_numpy(dtype=np.float64)
    copies = _flag(f, "fn_near_duplicate_positive") | _flag(f, "fn_duplicate_positive")
    return {
        "negatives": len(frame),
        "judged": len(f),
        "base_rate": float(y.mean()) if len(y) else None,
        "mean_p_now": float(p_now.mean()) if len(y) else None,
        "ece_now": expected_calibration_error(p_now, y) if len(y) else None,
        "ece_old": expected_calibration_error(p_old, y) if len(y) else None,
        "auc": auc(p_cal, y),
        "clean_now": removal_stats((p_now >= CUT) | copies, y),
        "clean_old": removal_stats((p_old >= CUT) | copies, y),
        "near_copies": removal_stats(copies, y),
    }


def file_rows(frame: pd.DataFrame) -> list[dict[str, Any]]:
    out = []
    for (year, miner, setting), f in frame.groupby(["year", "miner", "setting"], sort=True):
        first = f.iloc[0]
        est, boundary = float(first["fn_prior"]), float(first["fn_prior_boundary"])
        s = summary(f)
        base = s["base_rate"]
        low, high = float(first["fn_prior_ci_low"]), float(first["fn_prior_ci_high"])
        out.append(
            {
                "year": year,
                "miner": miner,
                "setting": setting,
                "regime": first["regime"],
                "records": int(f["qid"].nunique()) if "qid" in f else None,
                "fn_prior": None if math.isnan(est) else est,
                "fn_prior_ci": None if math.isnan(low) else [low, high],
                "fn_prior_boundary": None if math.isnan(boundary) else boundary,
                "identified": not math.isnan(est),
                "covers": None if math.isnan(est) or base is None else bool(low <= base <= high),
                **s,
            }
        )
    return out


def regime_rows(frame: pd.DataFrame) -> list[dict[str, Any]]:
    return [
        {"year": year, "regime": regime, "files": int(f[["miner", "setting"]].drop_duplicates().shape[0]), **summary(f)}
        for (year, regime), f in frame.groupby(["year", "regime"], sort=True)
    ]


def refit(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """P6: a detector fitted (the shipped recipe, :func:`fit_detector`, :data:`SINGLE` features) on
    one year's mined files, measured on the other year's, beside the shipped detector's calibrated
    probability on the same negatives."""
    f = frame[frame["y"].notna()].copy()
    f["position"] = f["neg_index"].astype(np.float64)
    out = []
    for train, test in (("dl19", "dl21"), ("dl21", "dl19")):
        a, b = f[f["year"] == train], f[f["year"] == test]
        det = fit_detector(
            feature_matrix(a, SINGLE),
            a["y"].to_numpy(dtype=np.int64),
            a["group"].to_numpy(),
            SINGLE,
            f"mined {train}",
        )
        p_new = det.probability(feature_matrix(b, SINGLE))
        for regime, part in [("all", b), *b.groupby("regime", sort=True)]:
            m = b.index.isin(part.index)
            y = b["y"].to_numpy(dtype=np.float64)[m]
            copies = (_flag(b, "fn_near_duplicate_positive") | _flag(b, "fn_duplicate_positive"))[m]
            shipped = b["p_calibrated"].to_numpy(dtype=np.float64)[m]
            out.append(
                {
                    "train": train,
                    "test": test,
                    "regime": regime,
                    "judged": int(m.sum()),
                    "refit": {
                        "auc": auc(p_new[m], y),
                        "ece": expected_calibration_error(p_new[m], y),
                        "clean": removal_stats((p_new[m] >= CUT) | copies, y),
                        "f1_at_cut": _f1((p_new[m] >= CUT), y),
                    },
                    "shipped": {
                        "auc": auc(shipped, y),
                        "ece": expected_calibration_error(shipped, y),
                        "clean": removal_stats((shipped >= CUT) | copies, y),
                        "f1_at_cut": _f1((shipped >= CUT), y),
                    },
                }
            )
    return out


VIEWS: dict[str, tuple[str, ...]] = {
    "base": (),
    "static": ("static_gap", "static_pn"),
    "bm25": ("bm25_rel",),
    "static+bm25": ("static_gap", "static_pn", "bm25_rel"),
}


def _views_x(frame: pd.DataFrame, extra: tuple[str, ...]) -> np.ndarray:
    base = feature_matrix(frame, SINGLE)
    return np.column_stack([base, *(frame[c].to_numpy(dtype=np.float64) for c in extra)]) if extra else base


def _f1_draws(pred: np.ndarray, y: np.ndarray, inv: np.ndarray, draws: np.ndarray) -> np.ndarray:
    """F1 of ``pred`` on each bootstrap draw of the groups (rows of ``draws``: group indices)."""
    n = int(inv.max()) + 1
    tp = np.bincount(inv, weights=(pred & (y == 1)).astype(np.float64), minlength=n)
    den = np.bincount(inv, weights=pred.astype(np.float64), minlength=n) + np.bincount(inv, weights=y, minlength=n)
    t, d = tp[draws].sum(axis=1), den[draws].sum(axis=1)
    return np.asarray(np.where(d > 0, 2 * t / np.where(d > 0, d, 1.0), 0.0))


def second_views(frame: pd.DataFrame, resamples: int = 1000, seed: int = 0) -> list[dict[str, Any]]:
    """P7–P8: the shipped recipe fitted on one year's mined files with the base features and with each
    second view added (:data:`VIEWS`), measured on the other year's: AUC, ECE, F1 at the training
    year's F1-best cut, and the F1 difference from the base features with a paired 95% percentile
    bootstrap over the test year's queries."""
    f = frame[frame["y"].notna()].copy()
    f["position"] = f["neg_index"].astype(np.float64)
    out = []
    for train, test in (("dl19", "dl21"), ("dl21", "dl19")):
        a, b = f[f["year"] == train], f[f["year"] == test]
        y = b["y"].to_numpy(dtype=np.float64)
        inv = np.unique(b["group"].to_numpy(), return_inverse=True)[1].reshape(-1)
        draws = np.random.default_rng(seed).integers(0, int(inv.max()) + 1, size=(resamples, int(inv.max()) + 1))
        base_draws = None
        for name, extra in VIEWS.items():
            det = fit_detector(
                _views_x(a, extra), a["y"].to_numpy(dtype=np.int64), a["group"].to_numpy(), (*SINGLE, *extra)
            )
            p = det.probability(_views_x(b, extra))
            pred = p >= det.threshold
            f1_draws = _f1_draws(pred, y, inv, draws)
            row = {
                "train": train,
                "test": test,
                "view": name,
                "cut": det.threshold,
                "auc": auc(p, y),
                "ece": expected_calibration_error(p, y),
                "f1": _f1(pred, y),
            }
            if base_draws is None:
                base_draws, base_f1 = f1_draws, row["f1"]
            else:
                diff = f1_draws - base_draws
                row["delta_f1"] = row["f1"] - base_f1
                row["delta_f1_ci"] = [float(np.percentile(diff, 2.5)), float(np.percentile(diff, 97.5))]
            out.append(row)
    return out


def cut_scan(frame: pd.DataFrame, regime: str = "own-margin") -> list[dict[str, Any]]:
    """Per year, the default clean's removals (``fn_probability`` ≥ cut, copies, near-copies) on the
    regime's files at each cut: can any cut reach precision ≥ 0.75 at recall ≥ 0.25?"""
    out = []
    for year, f in frame[(frame["regime"] == regime) & frame["y"].notna()].groupby("year", sort=True):
        y = f["y"].to_numpy(dtype=np.float64)
        p = f["p_calibrated"].to_numpy(dtype=np.float64)
        copies = _flag(f, "fn_near_duplicate_positive") | _flag(f, "fn_duplicate_positive")
        for cut in np.round(np.arange(0.5, 0.96, 0.05), 2):
            out.append({"year": year, "regime": regime, "cut": float(cut), **removal_stats((p >= cut) | copies, y)})
    return out


def _f1(pred: np.ndarray, y: np.ndarray) -> float:
    tp = float((pred & (y == 1)).sum())
    return 2 * tp / (pred.sum() + y.sum()) if pred.sum() + y.sum() else 0.0


def _fmt(v: Any, d: int = 2) -> str:
    return "–" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.{d}f}"


def _share(r: dict[str, Any]) -> str:
    if not r["identified"]:
        return f"not identified (on {r['fn_prior_boundary']:.0f})"
    if not r["fn_prior_ci"]:
        return "–"
    low, high = r["fn_prior_ci"]
    return f"{r['fn_prior']:.2f} [{low:.2f}, {high:.2f}]" + ("" if r["covers"] else " ✗")


def _removals(r: dict[str, Any]) -> str:
    """A row's default clean now and before: "removed, precision, recall | removed, precision, recall"."""
    return " | ".join(
        f"{c['removed']}, {_fmt(c['precision'])}, {_fmt(c['recall'])}" for c in (r["clean_now"], r["clean_old"])
    )


def tables(result: dict[str, Any]) -> str:
    lines = [
        "| year | miner | setting | regime | negatives (judged) | judged FN share | EM estimate | ECE now / before"
        " | AUC | default clean now: removed, precision, recall | before |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result["files"]:
        lines.append(
            f"| {r['year']} | {r['miner']} | {r['setting']} | {r['regime']} | {r['negatives']} ({r['judged']})"
            f" | {_fmt(r['base_rate'])} | {_share(r)} | {_fmt(r['ece_now'])} / {_fmt(r['ece_old'])} | {_fmt(r['auc'])}"
            f" | {_removals(r)} |"
        )
    lines += [
        "",
        "| year | regime | files | judged | judged FN share | mean fn_probability | ECE now / before | AUC"
        " | default clean now: removed, precision, recall | before |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result["regimes"]:
        lines.append(
            f"| {r['year']} | {r['regime']} | {r['files']} | {r['judged']} | {_fmt(r['base_rate'])}"
            f" | {_fmt(r['mean_p_now'])} | {_fmt(r['ece_now'])} / {_fmt(r['ece_old'])} | {_fmt(r['auc'])}"
            f" | {_removals(r)} |"
        )
    lines += [
        "",
        "| fitted → measured | regime | judged | refit: AUC, ECE, F1 at 0.80, clean precision / recall"
        " | shipped: AUC, ECE, F1 at 0.80, clean precision / recall |",
        "|---|---|---|---|---|",
    ]
    for r in result["refit"]:
        a, b = r["refit"], r["shipped"]
        lines.append(
            f"| {r['train']} → {r['test']} | {r['regime']} | {r['judged']}"
            f" | {_fmt(a['auc'])}, {_fmt(a['ece'])}, {_fmt(a['f1_at_cut'])},"
            f" {_fmt(a['clean']['precision'])} / {_fmt(a['clean']['recall'])}"
            f" | {_fmt(b['auc'])}, {_fmt(b['ece'])}, {_fmt(b['f1_at_cut'])},"
            f" {_fmt(b['clean']['precision'])} / {_fmt(b['clean']['recall'])} |"
        )
    lines += [
        "",
        "| fitted → measured | features | cut | AUC | ECE | F1 | ΔF1 vs base [95% CI] |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in result["views"]:
        delta = (
            f"{r['delta_f1']:+.3f} [{r['delta_f1_ci'][0]:+.3f}, {r['delta_f1_ci'][1]:+.3f}]" if "delta_f1" in r else "–"
        )
        lines.append(
            f"| {r['train']} → {r['test']} | {r['view']} | {r['cut']:.2f} | {_fmt(r['auc'])} | {_fmt(r['ece'])}"
            f" | {r['f1']:.3f} | {delta} |"
        )
    lines += ["", "| year | regime | cut | removed | precision | recall |", "|---|---|---|---|---|---|"]
    for r in result["cuts"]:
        lines.append(
            f"| {r['year']} | {r['regime']} | {r['cut']:.2f} | {r['removed']} | {_fmt(r['precision'])}"
            f" | {_fmt(r['recall'])} |"
        )
    return "\n".join(lines) + "\n"


def _range(values: list[float]) -> list[float]:
    return [round(min(values), 2), round(max(values), 2)]


def mined_share(result: dict[str, Any]) -> dict[str, Any]:
    """What the verdict quotes of these files (``evidence.json`` → ``mined_share``): over the regime ×
    year cells, the judged share of false negatives, ``fn_probability``'s ECE, the default clean's
    precision and recall; how often the EM estimate fell on a boundary or covered the judged share
    (per file); in how many cells moving the probabilities to it made ECE worse or better."""
    cells = result["regimes"]
    files = result["files"]
    estimated = [r for r in files if r["identified"] and r["fn_prior_ci"]]
    own_margin = [c for c in cells if c["regime"] == "own-margin"]
    return {
        "n_files": len(files),
        "n_cells": len(cells),
        "share": _range([c["base_rate"] for c in cells]),
        "ece": _range([c["ece_now"] for c in cells]),
        "clean_precision": _range(
            [c["clean_now"]["precision"] for c in cells if c["clean_now"]["precision"] is not None]
        ),
        "clean_recall": _range([c["clean_now"]["recall"] for c in cells]),
        "own_margin": {
            "share": _range([c["base_rate"] for c in own_margin]),
            "ece": _range([c["ece_now"] for c in own_margin]),
            "clean_precision": _range([c["clean_now"]["precision"] for c in own_margin]),
            "clean_recall": _range([c["clean_now"]["recall"] for c in own_margin]),
        },
        "em_boundary": sum(not r["identified"] for r in files),
        "em_estimated": len(estimated),
        "em_covered": sum(bool(r["covers"]) for r in estimated),
        "moving_worse": sum(c["ece_old"] > c["ece_now"] + 1e-9 for c in cells),
        "moving_better": sum(c["ece_old"] < c["ece_now"] - 1e-9 for c in cells),
        "miners": "all-MiniLM-L6-v2 (the audit's encoder), a static MiniLM-token model and BM25",
        "how": "mine_hard_negatives: top-k, windows, max_score, margins",
        "where": "TREC-DL19 and DL21",
    }


def run(frames: Path = FRAMES) -> dict[str, Any]:
    frame = pd.read_parquet(frames)
    frame["p_old"] = old_probability(frame)
    result: dict[str, Any] = {
        "machine": f"{platform.processor() or platform.machine()}, Python {platform.python_version()}",
        "years": list(YEARS),
        "cut": CUT,
        "files": file_rows(frame),
        "regimes": regime_rows(frame),
        "refit": refit(frame),
        "cuts": cut_scan(frame),
        "views": second_views(frame),
    }
    result["mined_share"] = mined_share(result)
    return result


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", default=str(FRAMES), help="mined_files.py measure's per-negative frame")
    ap.add_argument("--check", action="store_true", help="recompute and compare with results.json")
    args = ap.parse_args(argv)
    result = json.loads(canonical_json(json.loads(json.dumps(run(Path(args.frames)), default=float))))
    if args.check:
        ok = same(result, json.loads((RESULTS / "results.json").read_text("utf-8")))
        print("results reproduce" if ok else "results DIFFER from results.json")
        return 0 if ok else 1
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "results.json").write_text(canonical_json(result), "utf-8")
    (RESULTS / "RESULTS_tables.md").write_text(tables(result), "utf-8")
    print(tables(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
