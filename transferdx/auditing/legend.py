"""What each diagnostic means, which way (:data:`DIRECTIONS`, :func:`legend_lines`: report.md and
``transferdx-audit --help``), and the package's own evidence it cites (``evidence.json``, written by
experiments/ship_evidence.py). Light: no numerical library, so ``--help`` prints it in a blink."""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

EVIDENCE = Path(__file__).with_name("evidence.json")  # written by experiments/ship_evidence.py


@functools.cache
def evidence() -> dict[str, Any]:
    """What the package's own validation found, from the committed results (``evidence.json``)."""
    import json

    return dict(json.loads(EVIDENCE.read_text(encoding="utf-8")))


def signed(value: float) -> str:
    return f"{value:+.2f}"


def interval(bounds: Sequence[float] | None) -> str:
    return f" [{bounds[0]:.2f}, {bounds[1]:.2f}]" if bounds else ""


def psi_evidence() -> str:
    """ψ's rank agreement with transfer in the package's own validation, in words, from
    :func:`evidence`: over all trained sources and among the genuine ones."""
    e = evidence()["psi_rank_agreement"]
    return (
        f"the package's own validation ({e['backbone']}, {e['n_sources']} sources trained on {e['trained_on']})"
        f" found ψ's rank agreement with transfer {signed(e['spearman_all'])}{interval(e['interval_all'])}"
        f" over all sources, {e['why']}, and {signed(e['spearman_genuine'])}{interval(e['interval_genuine'])}"
        f" among its {e['n_genuine']} genuine sources"
    )


def row_number(row: Mapping[str, Any], column: str) -> float:
    """A profile row's value as a float: NaN where it is missing or not a number."""
    try:
        return float(row.get(column))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return math.nan


# diagnostic column → (name, what a higher value means, which way is better or more defective)
DIRECTIONS: dict[str, tuple[str, str, str]] = {
    "psi_mean": (
        "ψ",
        "negatives share fewer of the query's (IDF-weighted) words",
        "in the study this package follows a higher mean ψ went with better transfer (the study's finding; "
        + psi_evidence()
        + ", so it is not a validated predictor of which genuine source trains better); above every genuine"
        " source (as random passages are) it means negatives too unrelated",
    ),
    "rho_mean": (
        "ρ",
        "the frozen encoder ranks the positive above the negatives more surely",
        "lower = harder negatives; above every genuine source = too easy",
    ),
    "eta_mean": (
        "η",
        "negatives sit closer to the query in the encoder's space",
        "higher = harder, but above every genuine source = false-negative-shaped",
    ),
    "inversion_rate": (
        "inversion",
        "more records have a negative scoring at least as high as the positive",
        "some inversions are what hard negatives look like; very high = look for false negatives",
    ),
    "fn_suspect_rate": (
        "suspected false negatives",
        "more negatives look like they answer the query (docs/design.md §3.9)",
        "lower is better",
    ),
    "duplicate_positive_rate": ("copies of a positive", "more negatives repeat a positive's text", "0 is right"),
}


def legend_lines(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """What each direction means, for the diagnostics the profile has (the verdict's last section in
    report.md; the command line prints it before the verdict, so that the verdict ends the output)."""
    out = ["", "Which way is which:", ""]
    for column, (symbol, higher, better) in DIRECTIONS.items():
        if any(not math.isnan(row_number(r, column)) for r in rows):
            out.append(f"- {symbol}: higher = {higher}; {better}.")
    out.append("")
    return out
