"""Fit the false-negative detectors shipped in ``transferdx/diagnostics/fn_combined.json`` (issue 31;
plan and results: ``experiments/results/fn_years/``).

TREC-DL19 (six runs) and TREC-DL21 (three runs), ``labels=single`` (only p0 is a positive; judged-
relevant candidates stay among each run's top-8 negatives), audited with all-MiniLM-L6-v2; a negative
is a false negative when judged >= 2, a true one when judged 0-1, and left out when unjudged.

1. The study (``experiments/fn_years.py``): each year measured with the detector fitted on the other,
   the candidate features kept or not, the EM prior test, the cleaning cuts ->
   ``experiments/results/fn_years/results.json``.
2. The shipped detectors, fitted on both years pooled (``single``: one record's features; ``multi``:
   with the other sources' agreement), Platt-calibrated on out-of-fold logits (5 folds grouped by
   query), with the cleaning cut chosen out of year -> ``fn_combined.json``.
3. The precision of the fixed rules on each year (unjudged = not relevant, as measured since issue 17)
   -> ``experiments/results/fn_years/rule_precision.json`` (the verdict quotes it through
   ``experiments/ship_evidence.py``).

    python experiments/fit_fn_combined.py [DATA_DIR] [--check] [--rules]

``--check`` recomputes and compares with the shipped file and the results files instead of writing
(exit 1 on a difference; numbers compared to 1e-6, the rest exactly; a suspected count may differ by
2 across CPUs, see :func:`rules_match`). ``--rules``: the rule precisions alone.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))

import fn_years

import transferdx as tdx
from transferdx.artifacts import canonical_json
from transferdx.auditing.fn_eval import eval_frame, rule_precision
from transferdx.diagnostics import suspicion
from transferdx.diagnostics.fn_combined import COMBINED_FILE, MULTI, SINGLE, feature_matrix, fit_detector

SHIPPED = Path(tdx.__file__).parent / "diagnostics" / COMBINED_FILE
RESULTS = fn_years.OUT / "results.json"
RULES = fn_years.OUT / "rule_precision.json"
FITTED_ON = "TREC-DL19 (six runs) + TREC-DL21 (three runs), labels=single, top-8, all-MiniLM-L6-v2, judged >= 2"
MEASURED_ON = (
    "TREC-DL19 and TREC-DL21 judged negatives, each year scored by the detector fitted on the other, "
    "prior-adjusted to that year (pooled)"
)


def frames(data_dir: str | Path) -> pd.DataFrame:
    """Both years' per-negative frames with every candidate feature (``fn_years.year_frame``)."""
    return pd.concat([fn_years.year_frame(Path(data_dir), y) for y in fn_years.YEARS], ignore_index=True)


def detectors(frame: pd.DataFrame, study: dict[str, Any]) -> dict[str, Any]:
    """The two shipped detectors fitted on both years pooled, the cleaning cuts and the out-of-year
    summary the verdict quotes."""
    ok, y = fn_years.judged(frame)
    groups = frame["group"].to_numpy()[ok]
    out: dict[str, Any] = {"detectors": {}, "cleaning": {}, "out_of_year": {}}
    for name, names, key in (("single", SINGLE, "base"), ("multi", MULTI, "final")):
        x = feature_matrix(frame[ok], names)
        out["detectors"][name] = fit_detector(x, y[ok], groups, names, FITTED_ON).to_dict()
        out["out_of_year"][name] = [
            {
                "train": d["train"],
                "test": d["test"],
                "cut": d["cut"],
                "test_base_rate": d["test_base_rate"],
                "em_prior": d["em_prior"],
                **{f"{k}": d["adjusted"][k] for k in ("precision", "recall", "f1", "ece")},
                "ece_unadjusted": d["raw"]["ece"],
            }
            for d in study[key]
        ]
    # One default cut for both detectors: the stricter of the two that the plan's rule chose (the lowest of
    # 0.50, 0.55, …, 0.95 with pooled out-of-year precision >= 0.80), so that it holds for either.
    chosen = {name: study["cleaning"][name]["cut"]["cut"] for name in ("single", "multi")}
    cut = max(chosen.values())
    for name in ("single", "multi"):
        row = next(r for r in study["cleaning"][name]["cuts"] if r["cut"] == cut)
        out["cleaning"][name] = {**row, "measured_on": MEASURED_ON}
    out["cleaning"]["chosen_by_rule"] = chosen
    out["provenance"] = {
        "script": "experiments/fit_fn_combined.py",
        "n_judged": int(ok.sum()),
        "n_false_negatives": int(y[ok].sum()),
        "kept_features": study["kept"],
    }
    return out


def rule_constants(data_dir: str | Path, year: str = "dl19") -> dict[str, Any]:
    """Each fixed rule's precision on one TREC-DL year (unjudged = not relevant)."""
    loaded = fn_years.load_year(Path(data_dir), year)
    grade = loaded.relevant_grade
    loaded.relevant_grade = None
    result = tdx.audit(loaded, encoder="minilm_l6", controls="none", resamples=1).result
    defaults = suspicion.SuspicionSettings()
    frame = eval_frame(result.negatives, result.records)
    measured = rule_precision(frame, grade, alpha=defaults.alpha, delta=defaults.delta)
    n_queries = int(frame["qid"].nunique())
    return measured | {
        "n_negatives": len(frame),
        "n_queries": n_queries,
        "alpha": defaults.alpha,
        "delta": defaults.delta,
    }


def rule_precisions(data_dir: str | Path) -> dict[str, Any]:
    """:func:`rule_constants` of both years: ``RULES`` (what the verdict quotes, through
    ``experiments/ship_evidence.py``)."""
    measured = {year: rule_constants(data_dir, year) for year in fn_years.YEARS}
    return {"script": "experiments/fit_fn_combined.py", "encoder": "all-MiniLM-L6-v2", "labels": "single, top-8"} | {
        year: {rule: _no_nan(value) for rule, value in m.items()} for year, m in measured.items()
    }


def _no_nan(value: Any) -> Any:
    """NaN (a rule that suspected nothing has no precision) as None: the file stays standard JSON."""
    if isinstance(value, dict):
        return {k: _no_nan(v) for k, v in value.items()}
    return None if isinstance(value, float) and np.isnan(value) else value


def rules_match(measured: dict[str, Any], kept: dict[str, Any], tol: float = 2e-3) -> bool:
    """Two rule-precision records agree: base rates and precisions within ``tol``, a suspected count
    within 2 (a negative on a threshold is decided by the CPU's float path)."""
    for year in fn_years.YEARS:
        a, b = measured[year], kept[year]
        if abs(a["base_rate"] - b["base_rate"]) > tol:
            return False
        for name in (
            "positive_aware",
            "near_duplicate_positive",
            "duplicate_positive",
            "duplicate_negative",
            "default_rule",
        ):
            x, y = a[name], b[name]
            if abs(x["n_suspected"] - y["n_suspected"]) > 2:
                return False
            for key in ("precision", "ci_low", "ci_high"):
                if (x[key] is None) != (y[key] is None) or (x[key] is not None and abs(x[key] - y[key]) > tol):
                    return False
    return True


def same(a: Any, b: Any, atol: float = 1e-6) -> bool:
    """Equal structures, numbers within ``atol`` (NaN equals NaN)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k], atol) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(same(x, y, atol) for x, y in zip(a, b, strict=True))
    if isinstance(a, bool) or isinstance(b, bool) or not isinstance(a, int | float) or not isinstance(b, int | float):
        return a == b
    return bool(np.isclose(a, b, atol=atol, rtol=0, equal_nan=True))


def main(argv: list[str]) -> int:
    args = [a for a in argv if not a.startswith("--")]
    data_dir = args[0] if args else os.environ.get("TRANSFERDX_DATA_DIR", "../shared/data")
    measured = json.loads(canonical_json(rule_precisions(data_dir)))
    if "--rules" in argv:
        if "--check" in argv:
            ok = rules_match(measured, json.loads(RULES.read_text("utf-8")))
            print("rule precisions reproduce" if ok else "rule precisions DIFFER from rule_precision.json")
            return 0 if ok else 1
        RULES.write_text(canonical_json(measured), encoding="utf-8")
        print(f"wrote {RULES}")
        return 0
    frame = frames(data_dir)
    study = fn_years.run(frame)
    fitted = detectors(frame, study)
    print(json.dumps({"kept": study["kept"], "cleaning": fitted["cleaning"]}, indent=2))
    if "--check" in argv:
        ok_study = same(json.loads(canonical_json(study)), json.loads(RESULTS.read_text("utf-8")))
        ok_fit = same(json.loads(canonical_json(fitted)), json.loads(SHIPPED.read_text("utf-8")))
        ok_rules = rules_match(measured, json.loads(RULES.read_text("utf-8")))
        print("study results reproduce" if ok_study else "study results DIFFER from results.json")
        print("shipped detectors reproduce" if ok_fit else "shipped detectors DIFFER from the refit")
        print("rule precisions reproduce" if ok_rules else "rule precisions DIFFER from rule_precision.json")
        return 0 if ok_study and ok_fit and ok_rules else 1
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(canonical_json(study), encoding="utf-8")
    SHIPPED.write_text(canonical_json(fitted), encoding="utf-8")
    RULES.write_text(canonical_json(measured), encoding="utf-8")
    print(f"wrote {RESULTS}, {SHIPPED} and {RULES}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
