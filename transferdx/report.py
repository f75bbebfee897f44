"""Writing an audit to disk: profile CSV/JSON, per-record and per-negative tables, exclusions,
``report.md`` and the ψ plot. All files are written atomically inside the given output folder."""

from __future__ import annotations

import io
import math
from collections.abc import Mapping
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

import pandas as pd

from .artifacts import atomic_write_bytes, atomic_write_text, canonical_json, safe_join, write_meta
from .audit import AuditResult
from .records import Exclusion

EXCLUSION_COLUMNS = [f.name for f in fields(Exclusion)]
FILES = {
    "profile_csv": "profile.csv",
    "profile_json": "profile.json",
    "records": "records.csv",
    "negatives": "negatives.csv",
    "exclusions": "exclusions.csv",
    "report": "report.md",
    "plot": "psi.png",
}


def _json_safe(value: Any) -> Any:
    """NaN/inf → None so that profile.json is strict JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        return _json_safe(value.item())
    return value


def _csv(frame: pd.DataFrame) -> str:
    buffer = io.StringIO()
    frame.to_csv(buffer, index=False, lineterminator="\n")
    return buffer.getvalue()


def exclusions_frame(exclusions: tuple[Exclusion, ...]) -> pd.DataFrame:
    return pd.DataFrame([asdict(e) for e in exclusions], columns=EXCLUSION_COLUMNS)


def _markdown_table(frame: pd.DataFrame, floatfmt: str = ".4f") -> str:
    cols = list(frame.columns)
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for _, row in frame.iterrows():
        cells = []
        for c in cols:
            v = row[c]
            if isinstance(v, float):
                cells.append("—" if math.isnan(v) else format(v, floatfmt))
            else:
                cells.append(str(v))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def render_report(result: AuditResult, settings: Mapping[str, Any]) -> str:
    """report.md: settings, the profile table, exclusions by source and reason, the ψ plot."""
    frame = result.profile.to_frame()
    shown = [
        "source",
        "kind",
        "n_records",
        "n_negatives",
        "psi_mean",
        "psi_ci_low",
        "psi_ci_high",
        "coverage_mean",
        "n_psi_undefined",
        "n_excluded_records",
    ]
    parts = [
        "# transferdx audit",
        "",
        "## Settings",
        "",
        *(f"- **{k}**: `{v}`" for k, v in settings.items()),
        "",
        "## Audit profile",
        "",
        "ψ (lexical residuality) = IDF-weighted share of query tokens a negative does not contain; range"
        " [0, 1], higher = less lexical overlap with the query. Record ψ = mean over its negatives;"
        " source ψ = mean over records with a defined ψ, with a percentile bootstrap CI over records.",
        "",
        _markdown_table(frame[[c for c in shown if c in frame.columns]]),
        "",
        "![ψ per source with bootstrap CI](psi.png)",
        "",
        "## Exclusions",
        "",
    ]
    excl = exclusions_frame(result.exclusions)
    if len(excl):
        counts = (
            excl.assign(source=excl["source"].replace("", "(all sources)"))
            .groupby(["source", "unit", "reason"], sort=True)
            .size()
            .reset_index(name="count")
        )
        parts += [f"{len(excl)} items excluded; every one is listed in `exclusions.csv`.", "", _markdown_table(counts)]
    else:
        parts.append("No input item was excluded.")
    return "\n".join(parts) + "\n"


def plot_psi(result: AuditResult) -> bytes:
    """Horizontal dot-and-whisker plot of per-source mean ψ with its CI, coloured by kind (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    frame = result.profile.to_frame().sort_values("source", ascending=False)
    frame = frame[frame["n_records"] > 0]
    fig, ax = plt.subplots(figsize=(8, 0.45 * max(len(frame), 2) + 1.2), dpi=100)
    colours = {"genuine": "tab:blue", "control": "tab:orange"}
    for y, (_, row) in enumerate(frame.iterrows()):
        colour = colours.get(row["kind"], "tab:gray")
        ax.errorbar(
            row["psi_mean"],
            y,
            xerr=[[row["psi_mean"] - row["psi_ci_low"]], [row["psi_ci_high"] - row["psi_mean"]]],
            fmt="o",
            color=colour,
            capsize=3,
        )
    ax.set_yticks(range(len(frame)), list(frame["source"]))
    ax.set_xlabel("mean lexical residuality ψ (95% bootstrap CI)")
    ax.set_xlim(0, 1)
    ax.grid(axis="x", alpha=0.3)
    for kind, colour in colours.items():
        ax.plot([], [], "o", color=colour, label=kind)
    ax.set_ylim(-0.6, len(frame) - 0.4)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", metadata={"Software": None})
    plt.close(fig)
    return buffer.getvalue()


def write_audit(result: AuditResult, out_dir: str | Path, settings: Mapping[str, Any]) -> dict[str, Path]:
    """Write every audit artifact into ``out_dir``; returns name → path."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {key: safe_join(out, name) for key, name in FILES.items()}
    profile = result.profile.to_frame()
    atomic_write_text(paths["profile_csv"], _csv(profile))
    atomic_write_text(paths["profile_json"], canonical_json(_json_safe(result.profile.to_dict())))
    atomic_write_text(paths["records"], _csv(result.records))
    atomic_write_text(paths["negatives"], _csv(result.negatives))
    atomic_write_text(paths["exclusions"], _csv(exclusions_frame(result.exclusions)))
    atomic_write_text(paths["report"], render_report(result, settings))
    atomic_write_bytes(paths["plot"], plot_psi(result))
    config = _json_safe(dict(settings))
    write_meta(paths["profile_json"], config, rows=len(profile))
    write_meta(paths["records"], config, rows=len(result.records))
    write_meta(paths["negatives"], config, rows=len(result.negatives))
    return paths
