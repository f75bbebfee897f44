"""The audit's plots as PNG bytes: ψ, the profile's means, the margins, the bands, and the suspicion
scored against judgments (:func:`png_bytes` serves the paper's figures too)."""

from __future__ import annotations

import io
import math
from collections.abc import Mapping
from typing import Any

import pandas as pd

from transferdx.auditing.audit import AuditResult
from transferdx.auditing.profiles import MEAN_STATS
from transferdx.diagnostics.semantic import BANDS

KIND_COLOURS = {"genuine": "tab:blue", "control": "tab:orange"}


def plot_fn_evaluation(ev: Mapping[str, Any]) -> bytes:
    """Precision against recall over α, one curve per δ, the combined detector as a point, the base
    rate as a line."""
    plt, fig, axes = _figure(1, width=6.0)
    ax = axes[0]
    fig.set_size_inches(6.0, 4.5)
    grid = pd.DataFrame(ev["grid"])
    for delta, part in grid.groupby(grid["delta"].astype(str), sort=True):
        part = part.sort_values("alpha")
        ax.plot(part["recall"], part["precision"], marker="o", markersize=3, label=f"rule, δ = {delta}")
    oof = ev["combined_out_of_fold"]
    ax.scatter([oof["recall"]], [oof["precision"]], marker="*", s=120, color="black", label="combined (out of fold)")
    ax.axhline(ev["base_rate"], color="grey", linestyle=":", label="base rate")
    ax.set_xlabel("recall (judged relevant negatives suspected)")
    ax.set_ylabel("precision (suspects judged relevant)")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.legend(loc="lower left", fontsize=8, frameon=False)
    return png_bytes(plt, fig)


def _figure(rows: int, width: float = 8.0, panels: int = 1):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, panels, figsize=(width, 0.45 * max(rows, 2) + 1.3), dpi=100, sharey=True, squeeze=False)
    return plt, fig, axes[0]


def png_bytes(plt: Any, fig: Any) -> bytes:
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", metadata={"Software": None})
    plt.close(fig)
    return buffer.getvalue()


def _plotted(result: AuditResult) -> pd.DataFrame:
    frame = result.profile.to_frame().sort_values("source", ascending=False)
    return frame[frame["n_records"] > 0]


def _dots(ax: Any, frame: pd.DataFrame, col: str, prefix: str) -> None:
    for y, (_, row) in enumerate(frame.iterrows()):
        value = row[col]
        if math.isnan(value):
            continue
        ax.errorbar(
            value,
            y,
            # a collapsed CI can sit a rounding error off its point: never a negative bar
            xerr=[[max(0.0, value - row[f"{prefix}_ci_low"])], [max(0.0, row[f"{prefix}_ci_high"] - value)]],
            fmt="o",
            color=KIND_COLOURS.get(row["kind"], "tab:gray"),
            capsize=3,
        )
    ax.set_yticks(range(len(frame)), list(frame["source"]))
    ax.set_ylim(-0.6, len(frame) - 0.4)
    ax.grid(axis="x", alpha=0.3)


def _legend(ax: Any) -> None:
    for kind, colour in KIND_COLOURS.items():
        ax.plot([], [], "o", color=colour, label=kind)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)


def plot_psi(result: AuditResult) -> bytes:
    """Mean ψ per source with its CI, coloured by kind (PNG)."""
    frame = _plotted(result)
    plt, fig, (ax,) = _figure(len(frame))
    _dots(ax, frame, "psi_mean", "psi")
    ax.set_xlabel("mean lexical residuality ψ (95% bootstrap CI)")
    ax.set_xlim(0, 1)
    _legend(ax)
    return png_bytes(plt, fig)


def plot_profile(result: AuditResult) -> bytes:
    """Mean ρ, η and ψ per source with CIs, one panel each (PNG)."""
    frame = _plotted(result)
    plt, fig, axes = _figure(len(frame), width=11, panels=3)
    for ax, (col, prefix, label) in zip(axes, MEAN_STATS[:3], strict=True):
        _dots(ax, frame, col, prefix)
        ax.set_xlabel(f"mean {label} (95% CI)")
    _legend(axes[-1])
    return png_bytes(plt, fig)


def plot_margins(result: AuditResult) -> bytes:
    """Distribution of record margins s(q,p) − max_k s(q,n_k) per source (box plot, PNG)."""
    frame = _plotted(result)
    recs = result.records
    plt, fig, (ax,) = _figure(len(frame))
    data = [recs.loc[recs["source"] == s, "margin"].dropna().to_numpy() for s in frame["source"]]
    ax.boxplot(data, orientation="horizontal", positions=range(len(frame)), widths=0.5, showfliers=True)
    ax.axvline(0.0, color="tab:red", lw=1, ls="--")
    ax.set_yticks(range(len(frame)), list(frame["source"]))
    ax.set_xlabel("record margin s(q,p) − max_k s(q,n_k)  (< 0: inverted)")
    ax.grid(axis="x", alpha=0.3)
    return png_bytes(plt, fig)


def plot_bands(result: AuditResult) -> bytes:
    """Shares of negatives in each InfoNCE band per source (stacked bars, PNG)."""
    frame = _plotted(result)
    plt, fig, (ax,) = _figure(len(frame))
    left = [0.0] * len(frame)
    colours = {"inverted": "tab:red", "hard": "tab:orange", "medium": "tab:olive", "easy": "tab:green"}
    for band in BANDS:
        widths = list(frame[f"band_{band}"])
        ax.barh(range(len(frame)), widths, left=left, color=colours[band], label=band, height=0.6)
        left = [a + b for a, b in zip(left, widths, strict=True)]
    ax.set_yticks(range(len(frame)), list(frame["source"]))
    ax.set_xlim(0, 1)
    ax.set_xlabel("share of negatives by InfoNCE band")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    return png_bytes(plt, fig)
