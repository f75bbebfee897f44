"""Write ``transferdx/auditing/evidence.json``: what the package's own validation found, as the verdict
quotes it, read from the committed results (never typed into a string).

Today one entry: ψ̄'s rank agreement with transfer in the static validation
(``experiments/results/validation/static/validation_audit.csv``, the row ``ψ̄``: Spearman over all
trained sources and over the genuine ones, each with its interval from both uncertainties), with the
run's provenance. ``tests/test_bottom_line.py`` checks that the shipped file equals what this script
computes from the committed results, and that the verdict says those numbers.

    python experiments/ship_evidence.py [--check]
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "experiments" / "results" / "validation" / "static"
SHIPPED = ROOT / "transferdx" / "auditing" / "evidence.json"


def interval(text: str) -> list[float] | None:
    """``"[0.064, 0.673]"`` → [0.064, 0.673]; None for "—" or an empty cell."""
    found = re.fullmatch(r"\[\s*(-?[\d.]+),\s*(-?[\d.]+)\]", text.strip())
    return [float(found.group(1)), float(found.group(2))] if found else None


def evidence(results: Path = RESULTS) -> dict[str, Any]:
    """The evidence record from the committed validation results."""
    with open(results / "validation_audit.csv", encoding="utf-8", newline="") as handle:
        rows = {row["Diagnostic"]: row for row in csv.DictReader(handle)}
    with open(results / "profile.csv", encoding="utf-8", newline="") as handle:
        kinds = [row["kind"] for row in csv.DictReader(handle)]
    provenance = json.loads((results / "provenance.json").read_text(encoding="utf-8"))
    psi = rows["ψ̄"]
    return {
        "psi_rank_agreement": {
            "run": "the package's static validation (experiments/results/validation/static)",
            "backbone": psi["Backbone"],
            "trained_on": "SciFact",
            "n_sources": len(kinds),
            "n_genuine": kinds.count("genuine"),
            "spearman_all": round(float(psi["Spearman (all)"]), 3),
            "interval_all": interval(psi["CI both (all)"]),
            "spearman_genuine": round(float(psi["Spearman (genuine)"]), 3),
            "interval_genuine": interval(psi["CI both (genuine)"]),
            "why": "carried by the two sources whose negatives carry the answer (perturb, neighbor_positive)",
            "study_run_commit": provenance["study_run_commit"],
        }
    }


def text(record: dict[str, Any]) -> str:
    return json.dumps(record, indent=2, ensure_ascii=False, sort_keys=True) + "\n"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the shipped file differs")
    args = parser.parse_args(argv)
    wanted = text(evidence())
    if args.check:
        return 0 if SHIPPED.read_text(encoding="utf-8") == wanted else 1
    SHIPPED.write_text(wanted, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
