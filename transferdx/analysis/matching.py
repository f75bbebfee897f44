"""ψ-matched samples (docs/design.md §5): does a semantic statistic still order the sources the way transfer
does once the sources are balanced on lexical residuality?

Record-level ψ is binned into equal-width bins over the pooled range (several resolutions). In each
repetition, every bin draws the same number of records from every source — the smallest count any
source has there — without replacement, seeded; statistics are recomputed on the matched records.
Balance is the largest pairwise standardized mean difference of ψ between sources,
SMD = |m_a − m_b| / sqrt((s_a² + s_b²)/2), before and after matching. :func:`match_on_psi` does it
for one frame of records; :func:`matching_of_studies` for every block of each study.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import combinations
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from transferdx.analysis.agreement import ordering, present_blocks

if TYPE_CHECKING:
    from transferdx.analysis.study import StudyData


def psi_bins(psi: np.ndarray, n_bins: int) -> np.ndarray:
    """Equal-width bin index (0 … n_bins − 1) of each ψ over the pooled [min, max] range."""
    if n_bins < 1:
        raise ValueError(f"n_bins must be ≥ 1, got {n_bins}")
    lo, hi = float(np.min(psi)), float(np.max(psi))
    if hi == lo:
        return np.zeros(len(psi), dtype=np.int64)
    return np.minimum(((psi - lo) / (hi - lo) * n_bins).astype(np.int64), n_bins - 1)


def max_smd(frame: pd.DataFrame, column: str = "psi") -> float:
    """Largest pairwise standardized mean difference of ``column`` between sources."""
    groups = {s: g[column].to_numpy(float) for s, g in frame.groupby("source")}
    worst = 0.0
    for a, b in combinations(sorted(groups), 2):
        pooled = np.sqrt((groups[a].var(ddof=1) + groups[b].var(ddof=1)) / 2)
        diff = abs(groups[a].mean() - groups[b].mean())
        worst = max(worst, diff / pooled if pooled > 0 else (0.0 if diff == 0 else np.inf))
    return float(worst)


def matched_sample(frame: pd.DataFrame, n_bins: int, rng: np.random.Generator) -> pd.DataFrame:
    """One matched draw: per ψ bin, the minimum count over sources from every source."""
    frame = frame.dropna(subset=["psi"]).reset_index(drop=True)
    bins = psi_bins(frame["psi"].to_numpy(float), n_bins)
    sources = sorted(frame["source"].unique())
    keep: list[int] = []
    for b in np.unique(bins):
        members = {s: np.flatnonzero((bins == b) & (frame["source"].to_numpy() == s)) for s in sources}
        n = min(len(m) for m in members.values())
        for s in sources:
            if n:
                keep.extend(rng.choice(members[s], size=n, replace=False).tolist())
    return frame.iloc[sorted(keep)]


def match_on_psi(
    frame: pd.DataFrame,
    statistics: Mapping[str, int],
    transfer_order: Sequence[str],
    resolutions: Sequence[int] = (5, 10, 20),
    repetitions: int = 100,
    seed: int = 0,
) -> dict[str, Any]:
    """Per statistic (with its direction) and resolution: the share of repetitions whose matched
    means reproduce ``transfer_order``, matched means with 95% intervals over repetitions, and ψ
    balance before/after. ``frame`` has one row per record: ``source``, ``psi`` and the statistics."""
    rows, balance = [], []
    before = max_smd(frame.dropna(subset=["psi"]))
    for res in resolutions:
        rng = np.random.default_rng([seed, res])
        hits = {name: 0 for name in statistics}
        means: dict[str, list[dict[str, float]]] = {name: [] for name in statistics}
        smds = []
        for _ in range(repetitions):
            sample = matched_sample(frame, res, rng)
            smds.append(max_smd(sample))
            grouped = sample.groupby("source")
            for name, direction in statistics.items():
                m = grouped[name].mean().to_dict()
                means[name].append(m)
                hits[name] += ordering(m, direction) == tuple(transfer_order)
        balance.append(
            {
                "resolution": res,
                "smd_before": before,
                "smd_after_mean": float(np.mean(smds)),
                "smd_after_max": float(np.max(smds)),
            }
        )
        for name in statistics:
            table = pd.DataFrame(means[name])
            for source in table.columns:
                lo, hi = np.quantile(table[source], [0.025, 0.975])
                rows.append(
                    {
                        "statistic": name,
                        "resolution": res,
                        "source": source,
                        "matched_mean": float(table[source].mean()),
                        "ci_low": float(lo),
                        "ci_high": float(hi),
                        "share_reproducing": hits[name] / repetitions,
                    }
                )
    return {"matched": pd.DataFrame(rows), "balance": pd.DataFrame(balance)}


def matching_of_studies(
    studies: Sequence[StudyData],
    blocks: Mapping[str, Sequence[str]],
    statistics: Mapping[str, int],
    resolutions: Sequence[int],
    repetitions: int,
    seed: int = 0,
) -> dict[str, pd.DataFrame]:
    """:func:`match_on_psi` per (backbone, setting) block of each study (its sources present, at
    least two) against that block's transfer ordering; rows tagged ``backbone``, ``block`` and
    ``transfer_order`` (sources joined by ``>``)."""
    matched, balance = [], []
    for study in studies:
        for block, members in present_blocks(blocks, list(study.transfer.index)).items():
            frame = study.records[study.records["source"].isin(members)]
            stats = {s: d for s, d in statistics.items() if s in frame.columns}
            order = ordering(study.transfer.loc[members, "ndcg@10"].to_dict())
            out = match_on_psi(frame, stats, order, resolutions, repetitions, seed)
            tag = {"backbone": study.backbone, "block": block, "transfer_order": ">".join(order)}
            matched.append(out["matched"].assign(**tag))
            balance.append(out["balance"].assign(**tag))
    return {
        "matched": pd.concat(matched, ignore_index=True) if matched else pd.DataFrame(),
        "balance": pd.concat(balance, ignore_index=True) if balance else pd.DataFrame(),
    }
