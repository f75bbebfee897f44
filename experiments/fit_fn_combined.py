"""Fit the ``combined`` false-negative detector shipped in ``transferdx/diagnostics/fn_combined.json``.

TREC-DL19 in the single-label situation (``labels=single``: only p0 is a positive; judged-relevant
candidates stay among each run's top-8 negatives), audited with all-MiniLM-L6-v2; a negative is a
real false negative when judged >= 2. Prints the out-of-fold scores (5 folds grouped by query) next
to the positive-aware rule's best cell, then writes the fit on all negatives. Also prints the Platt
calibration of ``fn_probability`` (``calibration``: a, b and the calibration error, out of fold) and
each rule's precision (``precision``), the numbers kept as constants in
``transferdx/diagnostics/suspicion.py`` (PLATT_A, PLATT_B, DL19_PRECISION, DL19_BASE_RATE).

    python experiments/fit_fn_combined.py [DATA_DIR] [--check]

``--check`` refits and compares with the shipped file and the constants instead of writing it (exit 1
on a difference).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np

import transferdx as tdx
from transferdx.artifacts import canonical_json
from transferdx.auditing.fn_eval import calibration, eval_frame, fn_evaluation, labels, probability_measurement
from transferdx.diagnostics import suspicion
from transferdx.diagnostics.fn_combined import COMBINED_FILE, features, fit_combined
from transferdx.diagnostics.suspicion import SuspicionSettings
from transferdx.inputs.trec_dl import load_trec_dl

SHIPPED = Path(tdx.__file__).parent / "diagnostics" / COMBINED_FILE
FITTED_ON = "TREC-DL19 labels=single, top-8 of six runs, all-MiniLM-L6-v2, judged >= 2"


def dl19_frame(data_dir: str | Path, cache_dir: str | Path | None = None):
    """The evaluation frame of DL19 (single-label) under MiniLM, and the relevant grade."""
    loaded = load_trec_dl(Path(data_dir) / "msmarco-dl19", labels="single")
    grade = loaded.relevant_grade
    loaded.relevant_grade = None  # the frame only: the audit's own evaluation needs this fit
    result = tdx.audit(loaded, encoder="minilm_l6", controls="none", cache_dir=cache_dir, resamples=1).result
    return eval_frame(result.negatives, result.records), grade


def fit(data_dir: str | Path, cache_dir: str | Path | None = None) -> dict:
    frame, grade = dl19_frame(data_dir, cache_dir)
    defaults = SuspicionSettings()
    ev = fn_evaluation(frame, grade, alpha=defaults.alpha, delta=defaults.delta, shipped=False)
    y = labels(frame["judgment"], grade)
    out = fit_combined(features(frame), y, FITTED_ON).to_dict()
    oof, best = ev["combined_out_of_fold"], ev["best"]
    out["provenance"] = {
        "script": "experiments/fit_fn_combined.py",
        "n_negatives": ev["n_negatives"],
        "n_false_negatives": ev["n_false_negatives"],
        "base_rate": ev["base_rate"],
        "out_of_fold": {k: oof[k] for k in ("precision", "recall", "f1", "f1_ci_low", "f1_ci_high")},
        "best_rule": {k: best[k] for k in ("alpha", "delta", "f1")},
    }
    return out


def calibrate(data_dir: str | Path, cache_dir: str | Path | None = None) -> dict:
    """Platt (a, b) of fn_probability and each rule's precision on DL19 (the suspicion constants)."""
    frame, grade = dl19_frame(data_dir, cache_dir)
    cal = calibration(frame, grade)
    defaults = SuspicionSettings()
    measured = probability_measurement(
        frame,
        grade,
        alpha=defaults.alpha,
        delta=defaults.delta,
        threshold=suspicion.MIN_PROBABILITY,
        a=cal["a"],
        b=cal["b"],
    )
    precision = {
        name: None
        if row["n_suspected"] == 0
        else (row["n_suspected"], row["precision"], row["precision_ci_low"], row["precision_ci_high"])
        for name, row in measured.items()
        if isinstance(row, dict)
    }
    return {"calibration": cal, "base_rate": measured["base_rate"], "precision": precision}


def constants_match(measured: dict, tol: float = 2e-3) -> bool:
    """The constants in suspicion.py equal ``measured`` (rounded to 3–4 decimals as written there)."""
    cal = measured["calibration"]
    if abs(cal["a"] - suspicion.PLATT_A) > tol or abs(cal["b"] - suspicion.PLATT_B) > tol:
        return False
    if abs(measured["base_rate"] - suspicion.DL19_BASE_RATE) > tol:
        return False
    for name, kept in suspicion.DL19_PRECISION.items():
        got = measured["precision"][name]
        if (kept is None) != (got is None):
            return False
        if kept is not None and (kept[0] != got[0] or not np.allclose(kept[1:], got[1:], atol=tol)):
            return False
    return True


def main(argv: list[str]) -> int:
    args = [a for a in argv if not a.startswith("--")]
    data_dir = args[0] if args else os.environ.get("TRANSFERDX_DATA_DIR", "../shared/data")
    fitted = fit(data_dir)
    print(json.dumps(fitted["provenance"], indent=2))
    measured = calibrate(data_dir)
    print(json.dumps(measured, indent=2))
    text = canonical_json(fitted)
    if "--check" in argv:
        shipped = json.loads(SHIPPED.read_text("utf-8"))
        same = all(np.allclose(shipped[k], fitted[k], atol=1e-6) for k in ("mean", "scale", "coef", "intercept"))
        print("shipped coefficients reproduce" if same else "shipped coefficients DIFFER from the refit")
        kept = constants_match(measured)
        print("calibration constants reproduce" if kept else "calibration constants DIFFER from suspicion.py")
        return 0 if same and kept else 1
    SHIPPED.write_text(text, encoding="utf-8")
    print(f"wrote {SHIPPED}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
