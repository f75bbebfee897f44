"""The verdict: what an audit says about each source, in plain words (the top of report.md and the
end of ``transferdx-audit``'s output). Pure: profile rows in, Markdown lines out."""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from typing import Any

# diagnostic column → (name, what a higher value means, which way is better or more defective)
DIRECTIONS: dict[str, tuple[str, str, str]] = {
    "psi_mean": (
        "ψ",
        "negatives share fewer of the query's (IDF-weighted) words",
        "among genuine sources a higher mean ψ tracked better transfer in the study this package "
        "follows; above every genuine source (as random passages are) it means negatives too unrelated",
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
        "some inversions are what hard negatives look like; below every genuine source = too easy, "
        "very high = look for false negatives",
    ),
    "fn_suspect_rate": (
        "suspected false negatives",
        "more negatives look like they answer the query (docs/design.md §3.9)",
        "lower is better",
    ),
    "duplicate_positive_rate": ("copies of a positive", "more negatives repeat a positive's text", "0 is right"),
}
LADDER = ("random_mix_25", "random_mix_50", "random_mix_75", "random_mix_100")
FIXED = {"rho_mean": 0.870, "eta_mean": 0.443, "psi_mean": 0.529, "inversion_rate": 0.083}  # the study's


def _num(row: Mapping[str, Any], column: str) -> float:
    value = row.get(column)
    try:
        out = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return math.nan
    return out


def _ci(row: Mapping[str, Any], column: str) -> str:
    prefix = column.removesuffix("_mean")
    low, high = _num(row, f"{prefix}_ci_low"), _num(row, f"{prefix}_ci_high")
    value = _num(row, column)
    if math.isnan(low) or math.isnan(high):
        return f"{value:.3f}"
    return f"{value:.3f} [{low:.3f}, {high:.3f}]"


def nearest_control(
    row: Mapping[str, Any], rows: Sequence[Mapping[str, Any]], columns: Sequence[str]
) -> tuple[str, float] | None:
    """The control whose (ρ, η, ψ) is nearest to ``row``'s, in units of each column's spread over all
    sources (Euclidean); None when there is no control or no column."""
    cols = [c for c in columns if not math.isnan(_num(row, c))]
    controls = [r for r in rows if r.get("kind") == "control"]
    if not cols or not controls:
        return None
    spread = {}
    for c in cols:
        values = [_num(r, c) for r in rows if not math.isnan(_num(r, c))]
        mean = sum(values) / len(values)
        spread[c] = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values)) or 1.0
    best = min(
        controls,
        key=lambda r: (sum(((_num(r, c) - _num(row, c)) / spread[c]) ** 2 for c in cols), str(r.get("source"))),
    )
    distance = math.sqrt(sum(((_num(best, c) - _num(row, c)) / spread[c]) ** 2 for c in cols))
    return str(best["source"]), distance


def _fixed_flags(row: Mapping[str, Any]) -> list[str]:
    out = []
    for column, threshold in FIXED.items():
        value = _num(row, column)
        if math.isnan(value):
            continue
        low = column == "inversion_rate"
        if (value < threshold) if low else (value > threshold):
            out.append(f"{DIRECTIONS[column][0]} {value:.3f} {'<' if low else '>'} {threshold}")
    return out


def verdict_lines(
    rows: Sequence[Mapping[str, Any]], catch: Mapping[str, Any], settings: Mapping[str, Any] | None = None
) -> list[str]:
    """The verdict section: per genuine source its flags, suspected false negatives, where it sits
    against the controls, the study's fixed thresholds as a second opinion; the controls caught; the
    genuine sources ordered by mean ψ with whether neighbouring CIs overlap; what each direction means."""
    genuine = [r for r in rows if r.get("kind") == "genuine"]
    semantic = any(not math.isnan(_num(r, "rho_mean")) for r in rows)
    columns = [c for c in ("rho_mean", "eta_mean", "psi_mean") if semantic or c == "psi_mean"]
    out = ["## Verdict", ""]
    for row in genuine:
        name, n = row["source"], int(_num(row, "n_records")) if not math.isnan(_num(row, "n_records")) else 0
        flags = str(row.get("flags") or "")
        head = f"**{name}** ({n} records): " + (
            f"flagged — {row.get('flag_reasons')}." if flags else "not flagged by the genuine envelope."
        )
        out.append(f"- {head}")
        if len(genuine) == 1:
            out.append(
                "  With one genuine source the envelope is that source itself, so it cannot flag it: read the"
                " findings below and the controls built from its own passages."
            )
        fn = _num(row, "fn_suspect_rate")
        if not math.isnan(fn):
            dup = _num(row, "duplicate_positive_rate")
            extra = f"; {dup:.1%} copy a positive" if not math.isnan(dup) and dup > 0 else ""
            out.append(
                f"  Suspected false negatives: {_ci(row, 'fn_suspect_rate')} of its negatives{extra}"
                " (suspects.csv lists them with their text)."
            )
        inv = _num(row, "inversion_rate")
        if not math.isnan(inv):
            out.append(
                f"  Inversions: in {inv:.1%} of records a negative scores at least as high as the positive"
                f" ({_ci(row, 'inversion_rate')})."
            )
        near = nearest_control(row, rows, columns)
        parent = ((settings or {}).get("self_controls") or {}).get("parent")
        if parent == name:  # controls made from this source: how large a defect would show
            flagged = [r["source"] for r in rows if r.get("source") in LADDER and r.get("flags")]
            smallest = min(flagged, key=LADDER.index).rsplit("_", 1)[1] if flagged else None
            out.append(
                "  The controls are made from this source, so they show what the diagnostics can see: "
                + (
                    f"replacing {smallest}% of its negatives by random passages is already flagged."
                    if smallest
                    else "no rung of the random-mix ladder is flagged (the diagnostics are blind to that defect here)."
                )
            )
        elif near is not None:
            dose = f" — the random-mix dose it matches is {near[0].rsplit('_', 1)[1]}%" if near[0] in LADDER else ""
            symbols = ", ".join(DIRECTIONS[c][0] for c in columns)
            out.append(
                f"  Against the controls it sits nearest to `{near[0]}` in ({symbols})"
                f" (distance {near[1]:.2f}, in units of each statistic's spread over all sources){dose}."
            )
        fixed = _fixed_flags(row) if semantic else []
        if fixed:
            out.append(
                "  By the study's fixed thresholds (another encoder: a second opinion only) it would be flagged"
                f" for {', '.join(fixed)}."
            )
    n_controls = int(catch.get("n_controls") or 0)
    if n_controls:
        missed = catch.get("controls_not_flagged") or []
        out.append(
            f"- Controls (known defects) flagged: {catch.get('n_controls_flagged', 0)} of {n_controls}"
            + (f"; not caught: {', '.join(map(str, missed))}." if missed else ".")
        )
    built = (settings or {}).get("self_controls")
    if built:
        out.append(
            f"- The controls were built from `{built['parent']}`'s own records and passages"
            + (
                "; not built: " + "; ".join(f"{k} ({v})" for k, v in sorted(built["skipped"].items())) + "."
                if built.get("skipped")
                else "."
            )
        )
    if len(genuine) >= 2:
        ranked = sorted(genuine, key=lambda r: (-_num(r, "psi_mean"), str(r["source"])))
        parts = [f"{ranked[0]['source']} {_num(ranked[0], 'psi_mean'):.3f}"]
        for a, b in itertools.pairwise(ranked):
            overlap = _num(a, "psi_ci_low") <= _num(b, "psi_ci_high")
            parts.append(f"{'≈' if overlap else '>'} {b['source']} {_num(b, 'psi_mean'):.3f}")
        legend = " (≈: the CIs overlap, so that order is not established)" if any("≈" in x for x in parts) else ""
        out.append(
            "- Genuine sources by mean ψ (the study's headline predictor of transfer): " + " ".join(parts) + legend
        )
    out += ["", "Which way is which:", ""]
    for column, (symbol, higher, better) in DIRECTIONS.items():
        if any(not math.isnan(_num(r, column)) for r in rows):
            out.append(f"- {symbol}: higher = {higher}; {better}.")
    out.append("")
    return out
