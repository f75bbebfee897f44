"""Copy a validation study's results into the repository (small files: Markdown, CSV, one PNG).

    python experiments/export_validation.py STUDY_DIR RESULTS_DIR [--command "make validation-study"]

From ``STUDY_DIR`` (``transferdx-study +experiment=validation`` output) it takes the validation
tables (``tables/validation_*.md|csv``), the analysis frames (``tables/validation/<backbone>/*.csv``),
the ladder figure, every (source, seed) run's metrics (``runs.csv``, no model paths) and the audit
profile's diagnostics and flags (``profile.csv``), and writes ``README.md`` (the tables) and
``provenance.json``: the command, the last commit that changed the code and configs that made the
results (``transferdx/``, ``conf/``, this script, the study script), whether they had uncommitted
changes, and package versions. Nothing in it depends on the time or the machine's paths, so a re-run
from cache rewrites the same bytes.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
from pathlib import Path

import pandas as pd

from transferdx.artifacts import atomic_write_text, canonical_json, csv_text, versions

TABLES = (
    "validation_transfer",
    "validation_datasets",
    "validation_pairs",
    "validation_flags",
    "validation_audit",
    "validation_ladder",
)
CODE = (
    "transferdx",
    "conf",
    "experiments/validation_study.sh",
    "experiments/validation_static.sh",
    "experiments/convergence.py",
    "experiments/export_validation.py",
    "pyproject.toml",
)
PROFILE = (
    "source",
    "kind",
    "n_records",
    "n_negatives",
    "psi_mean",
    "rho_mean",
    "eta_mean",
    "inversion_rate",
    "margin_mean",
    "loss_mean",
    "composite_logdet",
    "composite_trace",
    "fn_suspect_rate",
    "duplicate_positive_rate",
    "near_duplicate_positive_rate",
    "band_inverted",
    "band_easy",
    "flags",
    "absolute_flags",
)


def git(*args: str) -> str:
    out = subprocess.run(["git", *args], capture_output=True, text=True, check=False)
    return out.stdout.strip()


def export(study: Path, results: Path, command: str, run_commit: str = "") -> None:
    tables = study / "tables"
    results.mkdir(parents=True, exist_ok=True)
    parts = []
    for name in TABLES:
        for ext in ("md", "csv"):
            source = tables / f"{name}.{ext}"
            if not source.is_file():
                raise FileNotFoundError(f"{source} is missing: did the study train controls (+experiment=validation)?")
            shutil.copyfile(source, results / source.name)
        parts.append((tables / f"{name}.md").read_text(encoding="utf-8"))
    shutil.copyfile(tables / "figures/validation_ladder.png", results / "validation_ladder.png")
    for frame in sorted((tables / "validation").rglob("*.csv")):
        target = results / "analysis" / frame.relative_to(tables / "validation")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(frame, target)
    if (study / "convergence.csv").is_file():
        shutil.copyfile(study / "convergence.csv", results / "convergence.csv")
    runs = pd.read_csv(study / "study.csv").drop(columns=["model_dir"], errors="ignore")
    atomic_write_text(results / "runs.csv", csv_text(runs))
    profile = pd.read_csv(study / "audit/profile.csv")
    atomic_write_text(results / "profile.csv", csv_text(profile[[c for c in PROFILE if c in profile.columns]]))
    commit = git("log", "-1", "--format=%H", "--", *CODE)
    dirty = bool(git("status", "--porcelain", "--", *CODE))
    provenance = {"command": command, "code_commit": commit, "code_uncommitted_changes": dirty, "versions": versions()}
    if run_commit:  # the study ran (audit, training, evaluation) from an earlier commit; the tables from this one
        provenance["study_run_commit"] = run_commit
    atomic_write_text(results / "provenance.json", canonical_json(provenance))
    header = (
        "# Known-truth validation: results\n\n"
        f"Made by `{command}` from code commit `{commit}`"
        + (" (with uncommitted changes)" if dirty else "")
        + (f"; the study itself (audit, training, evaluation) ran from `{run_commit}`" if run_commit else "")
        + ". Tables as the study's tables step wrote them; `analysis/` holds the frames behind them, "
        "`runs.csv` every (source, seed) evaluation, `profile.csv` the audit's diagnostics and flags. "
        "`convergence.csv` (when present) each source's seed-0 nDCG@10 at the last two checkpoints. "
        "What they do and do not show: `../README.md` (predictions scored against `../PLAN.md`).\n\n"
        "![random-mix ladder](validation_ladder.png)\n\n"
    )
    atomic_write_text(results / "README.md", header + "\n".join(parts))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("study", type=Path)
    parser.add_argument("results", type=Path)
    parser.add_argument("--command", default="make validation-study")
    parser.add_argument("--run-commit", default="", help="the commit the study itself ran from, when older")
    args = parser.parse_args()
    export(args.study, args.results, args.command, args.run_commit)
    print(json.dumps({"results": str(args.results)}))


if __name__ == "__main__":
    main()
