"""Figures that go with the tables (PNG bytes, no timestamps): diagnostic vs transfer per block, the
control ladder's dose-response, and the audit profiles with their CIs."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from transferdx.auditing.plots import KIND_COLOURS, png_bytes
from transferdx.auditing.verdict import LADDER
from transferdx.paper.tables import TableInputs, mean_ndcg, source_label

PROFILE_STATS = (
    ("rho_mean", "rho", "ρ"),
    ("eta_mean", "eta", "η"),
    ("psi_mean", "psi", "ψ"),
    ("inversion_rate", "inversion_rate", "inversion"),
)


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def agreement_scatter(a: TableInputs) -> bytes:
    """One panel per (block, diagnostic): the diagnostic (x) against mean nDCG@10 (y), with Pearson r."""
    plt = _pyplot()
    blocks = []
    for study in a.studies:
        transfer = pd.Series(mean_ndcg(study))
        for setting, members in a.block_sources([s for s in transfer.index if s in study.profile.index]):
            if len(members) >= 2:
                blocks.append((study, setting, members, transfer))
    diags = [d for d in a.diagnostics if any(d in s.profile.columns for s in a.studies)]
    fig, axes = plt.subplots(
        max(len(blocks), 1),
        max(len(diags), 1),
        figsize=(2.6 * max(len(diags), 1), 2.4 * max(len(blocks), 1)),
        dpi=100,
        squeeze=False,
    )
    for i, (study, setting, members, transfer) in enumerate(blocks):
        for j, diag in enumerate(diags):
            ax = axes[i][j]
            x = study.profile.loc[members, diag].astype(float).to_numpy()
            y = transfer.loc[members].to_numpy(float)
            ax.scatter(x, y, color="tab:blue")
            for xi, yi, s in zip(x, y, members, strict=True):
                ax.annotate(source_label(s), (xi, yi), fontsize=7, xytext=(3, 3), textcoords="offset points")
            r = np.corrcoef(x, y)[0, 1] if len(members) > 2 or np.ptp(x) > 0 else math.nan
            ax.set_title(f"{a.label(study.backbone)} / {setting}: r = {r:.2f}", fontsize=8)
            ax.tick_params(labelsize=7)
            if i == len(blocks) - 1:
                ax.set_xlabel(diag, fontsize=8)
            if j == 0:
                ax.set_ylabel("mean nDCG@10", fontsize=8)
    return png_bytes(plt, fig)


def control_ladder(a: TableInputs) -> bytes:
    """Each diagnostic against the share of negative slots replaced by random passages (0 % = the
    ladder's parent source), one line per backbone."""
    plt = _pyplot()
    diags = [d for d in a.diagnostics if any(d in s.profile.columns for s in a.studies)]
    fig, axes = plt.subplots(1, max(len(diags), 1), figsize=(2.8 * max(len(diags), 1), 2.8), dpi=100, squeeze=False)
    for study in a.studies:
        descriptors = study.profile_json.get("descriptors", {})
        parent = descriptors.get(LADDER[0], {}).get("parent_source")
        steps = [(0, parent)] if parent in study.profile.index else []
        steps += [(int(s.rsplit("_", 1)[1]), s) for s in LADDER if s in study.profile.index]
        for j, diag in enumerate(diags):
            if diag in study.profile.columns and steps:
                xs = [x for x, _ in steps]
                ys = [float(study.profile.loc[s, diag]) for _, s in steps]
                axes[0][j].plot(xs, ys, "o-", label=a.label(study.backbone))
    for j, diag in enumerate(diags):
        axes[0][j].set_title(diag, fontsize=8)
        axes[0][j].set_xlabel("% slots random", fontsize=8)
        axes[0][j].tick_params(labelsize=7)
    axes[0][0].legend(fontsize=7, frameon=False)
    return png_bytes(plt, fig)


def profiles(a: TableInputs) -> bytes:
    """Mean ρ, η, ψ and inversion per source with 95% CIs, coloured by kind, one row per backbone."""
    plt = _pyplot()
    n = max(len(s.profile) for s in a.studies)
    fig, axes = plt.subplots(
        len(a.studies),
        len(PROFILE_STATS),
        figsize=(11, (0.3 * n + 1.2) * len(a.studies)),
        dpi=100,
        squeeze=False,
        sharey="row",
    )
    for i, study in enumerate(a.studies):
        frame: pd.DataFrame = study.profile.sort_index(ascending=False)
        for j, (col, prefix, label) in enumerate(PROFILE_STATS):
            ax = axes[i][j]
            if col not in frame.columns:
                continue
            for y, (_, row) in enumerate(frame.iterrows()):
                value = float(row[col])
                if math.isnan(value):
                    continue
                low, high = float(row[f"{prefix}_ci_low"]), float(row[f"{prefix}_ci_high"])
                err = [[max(0.0, value - low)], [max(0.0, high - value)]]  # a collapsed CI: no negative bar
                ax.errorbar(value, y, xerr=err, fmt="o", capsize=2, color=KIND_COLOURS.get(row["kind"], "tab:gray"))
            ax.set_yticks(range(len(frame)), [source_label(s) for s in frame.index], fontsize=7)
            ax.set_title(f"{a.label(study.backbone)}: {label}", fontsize=8)
            ax.tick_params(axis="x", labelsize=7)
            ax.grid(axis="x", alpha=0.3)
    return png_bytes(plt, fig)


def validation_ladder(a: TableInputs) -> bytes | None:
    """(c) of the known-truth validation: nDCG@10 of the trained ladder rungs against the dose (two-level
    interval, each seed as a dot; the genuine sources' range shaded, the frozen backbone dashed),
    next to each diagnostic against the same dose (audit intervals). None without a validation."""
    frames = [(b, f) for b, f in a.validation.items() if len(f["ladder_rungs"]) >= 2]
    if not frames:
        return None
    plt = _pyplot()
    measures = [m for m in frames[0][1]["ladder_trend"]["measure"] if m in frames[0][1]["ladder_rungs"].columns]
    cols = min(5, 1 + len(measures))
    per = math.ceil((1 + len(measures)) / cols)  # grid rows per backbone
    fig, grid = plt.subplots(
        per * len(frames), cols, figsize=(3.0 * cols, 2.8 * per * len(frames)), dpi=100, squeeze=False
    )
    for i, (backbone, f) in enumerate(frames):
        panels = [grid[i * per + k // cols][k % cols] for k in range(per * cols)]
        for unused in panels[1 + len(measures) :]:
            unused.axis("off")
        rungs, trend = f["ladder_rungs"], f["ladder_trend"].set_index("measure")
        dose = rungs["dose"].to_numpy(float)
        ax = panels[0]
        kinds = f["transfer"].groupby("kind")["ndcg10"]
        if "genuine" in kinds.groups:
            low, high = kinds.get_group("genuine").min(), kinds.get_group("genuine").max()
            ax.axhspan(float(low), float(high), color="tab:green", alpha=0.15, label="genuine range")
        if "frozen" in kinds.groups:
            ax.axhline(float(kinds.get_group("frozen").iloc[0]), color="gray", ls="--", lw=1, label="frozen")
        y = rungs["ndcg10"].to_numpy(float)
        err = [np.maximum(0, y - rungs["ci_low"].to_numpy(float)), np.maximum(0, rungs["ci_high"].to_numpy(float) - y)]
        ax.errorbar(dose, y, yerr=err, fmt="o-", capsize=3, color="tab:blue", label="mean over seeds")
        for x, seeds in zip(dose, rungs["seeds"], strict=True):
            vals = [float(v.split(":")[1]) for v in str(seeds).split()]
            ax.plot([x] * len(vals), vals, ".", color="tab:blue", alpha=0.5)
        first = trend.iloc[0]
        ax.set_title(f"{a.label(backbone)}: nDCG@10 (ρ_dose = {first['spearman_dose']:.2f})", fontsize=8)
        ax.set_ylabel("nDCG@10", fontsize=8)
        ax.legend(fontsize=6, frameon=False)
        for j, m in enumerate(measures, start=1):
            ax = panels[j]
            v = rungs[m].to_numpy(float)
            if f"{m}_ci_low" in rungs.columns:
                e = [
                    np.maximum(0, v - rungs[f"{m}_ci_low"].to_numpy(float)),
                    np.maximum(0, rungs[f"{m}_ci_high"].to_numpy(float) - v),
                ]
                ax.errorbar(dose, v, yerr=e, fmt="o-", capsize=3, color="tab:orange")
            else:
                ax.plot(dose, v, "o-", color="tab:orange")
            ax.set_title(f"{m} (ρ_dose = {trend.loc[m, 'spearman_dose']:.2f})", fontsize=8)
        for ax in panels[: 1 + len(measures)]:
            ax.set_xlabel("share of slots random", fontsize=8)
            ax.tick_params(labelsize=7)
    return png_bytes(plt, fig)


FIGURES = {
    "agreement_scatter": agreement_scatter,
    "control_ladder": control_ladder,
    "profiles": profiles,
    "validation_ladder": validation_ladder,
}
