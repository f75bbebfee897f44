"""Rank agreement between a diagnostic's ordering of sources and their transfer ordering (DESIGN §5).

A block is a (backbone, setting) pair, a setting being a group of sources. For each diagnostic,
with its direction (+1: higher predicts better transfer, −1: lower does), and each block:
complete ordering recovered (yes/no), Pearson r, Spearman ρ and Kendall τ between direction ×
diagnostic and mean nDCG@10 over datasets, and the number of source pairs each side ties.
"Recovered" compares every pair of sources by sign, so no tie is broken by name: a pair the
diagnostic ties counts as recovered only where transfer ties it too. Uncertainty of the transfer
ordering itself: a paired bootstrap over each dataset's queries gives the probability of every
pairwise ordering and of the full ordering; paired t-tests between sources per dataset are
Holm-corrected. :func:`agreement_of_studies`: all of it for the blocks of each study.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import scipy.stats

from transferdx.resampling import bootstrap_stream, paired_draws

if TYPE_CHECKING:
    from transferdx.analysis.study import StudyData


def ordering(values: Mapping[str, float], direction: int = 1) -> tuple[str, ...]:
    """Sources from best to worst by ``direction × value`` (ties broken by name, for display only:
    use :func:`recovers` to compare two orderings, which never breaks a tie)."""
    _check_direction(direction)
    return tuple(sorted(values, key=lambda s: (-direction * values[s], s)))


def _check_direction(direction: int) -> None:
    if direction not in (1, -1):
        raise ValueError(f"direction must be +1 or -1, got {direction}")


def _pair_signs(values: Mapping[str, float], sources: Sequence[str], direction: int = 1) -> np.ndarray:
    """sign(direction × (v_a − v_b)) for every pair a < b of ``sources`` (NaN where a value is NaN)."""
    v = direction * np.array([values[s] for s in sources], dtype=np.float64)
    a, b = np.triu_indices(len(sources), k=1)
    return np.sign(v[a] - v[b])


def tied_pairs(values: Mapping[str, float], sources: Sequence[str] | None = None) -> int:
    """How many pairs of ``sources`` (default: all of ``values``) have exactly equal values."""
    signs = _pair_signs(values, sorted(values) if sources is None else list(sources))
    return int(np.sum(signs == 0))


def recovers(diagnostic: Mapping[str, float], transfer: Mapping[str, float], direction: int = 1) -> bool:
    """Whether ``direction × diagnostic`` orders the sources exactly as ``transfer`` does: for every
    pair a, b, sign(direction·(d_a − d_b)) = sign(t_a − t_b). A pair the diagnostic ties is recovered
    only where transfer ties it too (and a transfer tie only where the diagnostic ties); a NaN value
    recovers nothing. Sources: those with both values."""
    _check_direction(direction)
    sources = sorted(set(diagnostic) & set(transfer))
    d = _pair_signs(diagnostic, sources, direction)
    t = _pair_signs(transfer, sources)
    return bool(np.all(d == t))


@dataclass(frozen=True)
class BlockAgreement:
    """Agreement of one diagnostic with transfer in one block."""

    block: str
    diagnostic: str
    direction: int
    sources: tuple[str, ...]
    recovered: bool
    pearson: float
    spearman: float
    kendall: float
    ties: int = 0  # source pairs the diagnostic ties
    transfer_ties: int = 0  # source pairs transfer ties

    def to_dict(self) -> dict[str, Any]:
        return {
            "block": self.block,
            "diagnostic": self.diagnostic,
            "direction": self.direction,
            "sources": ",".join(self.sources),
            "recovered": self.recovered,
            "pearson": self.pearson,
            "spearman": self.spearman,
            "kendall": self.kendall,
            "ties": self.ties,
            "transfer_ties": self.transfer_ties,
        }


def block_agreement(
    diagnostic: Mapping[str, float],
    transfer: Mapping[str, float],
    *,
    block: str = "",
    name: str = "",
    direction: int = 1,
) -> BlockAgreement:
    """Agreement of ``diagnostic`` (per source) with ``transfer`` (mean nDCG@10 per source).

    ``recovered`` is :func:`recovers` (ties are never broken by name); ``ties`` / ``transfer_ties``
    count the source pairs each side ties."""
    sources = tuple(sorted(set(diagnostic) & set(transfer)))
    if len(sources) < 2:
        raise ValueError(f"a block needs at least two sources with both values, got {sources}")
    x = np.array([direction * diagnostic[s] for s in sources], dtype=np.float64)
    y = np.array([transfer[s] for s in sources], dtype=np.float64)
    recovered = recovers({s: diagnostic[s] for s in sources}, {s: transfer[s] for s in sources}, direction)
    return BlockAgreement(
        block,
        name,
        direction,
        sources,
        bool(recovered),
        float(scipy.stats.pearsonr(x, y)[0]),
        float(scipy.stats.spearmanr(x, y)[0]),
        float(scipy.stats.kendalltau(x, y)[0]),
        tied_pairs(diagnostic, sources),
        tied_pairs(transfer, sources),
    )


def rank_agreement(
    profiles: pd.DataFrame,
    transfer: pd.DataFrame,
    blocks: Mapping[str, Sequence[str]],
    diagnostics: Mapping[str, int],
) -> pd.DataFrame:
    """One row per (block, diagnostic); ``profiles`` and ``transfer`` are indexed by source (one
    backbone at a time) with diagnostic columns and an ``ndcg@10`` column (mean over datasets)."""
    rows = []
    for block, sources in blocks.items():
        t = {s: float(transfer.loc[s, "ndcg@10"]) for s in sources}
        for name, direction in diagnostics.items():
            d = {s: float(profiles.loc[s, name]) for s in sources}
            rows.append(block_agreement(d, t, block=block, name=name, direction=direction).to_dict())
    return pd.DataFrame(rows)


def blocks_recovered(table: pd.DataFrame) -> pd.DataFrame:
    """ "k/n" per diagnostic: blocks whose complete ordering the diagnostic recovers, and (where the
    table has them) the source pairs the diagnostic ties, summed over blocks."""
    grouped = table.groupby("diagnostic", sort=False)
    out = pd.DataFrame({"recovered": grouped["recovered"].sum().astype(int), "blocks": grouped.size()})
    if "ties" in table.columns:
        out["ties"] = grouped["ties"].sum().astype(int)
    return out.assign(label=lambda f: f["recovered"].astype(str) + "/" + f["blocks"].astype(str))


def transfer_ordering_uncertainty(
    per_query: Mapping[str, Mapping[str, np.ndarray]],
    resamples: int = 1000,
    seed: int = 0,
) -> dict[str, Any]:
    """Paired bootstrap of queries within each dataset.

    ``per_query[source][dataset]`` = nDCG@10 per query, aligned across sources (same query order).
    Each resample draws queries with replacement per dataset (the same draw for every source:
    :func:`transferdx.resampling.paired_draws` on the stream ``default_rng(seed)``), averages within
    dataset, then over datasets. Returns the probability of each pairwise ordering (``P(a > b)``)
    and of the observed full ordering.
    """
    sources = sorted(per_query)
    datasets = sorted(set.intersection(*(set(per_query[s]) for s in sources)))
    units = [len(per_query[sources[0]][d]) for d in datasets]
    means = np.zeros((resamples, len(sources)))
    for d, draw in zip(datasets, paired_draws(bootstrap_stream(seed), units, resamples), strict=True):
        scores = np.stack([np.asarray(per_query[s][d], dtype=np.float64) for s in sources])  # S × Q
        means += scores[:, draw.units].mean(axis=2).T / len(datasets)
    observed = {s: float(np.mean([np.mean(per_query[s][d]) for d in datasets])) for s in sources}
    order = ordering(observed)
    rank = [sources.index(s) for s in order]
    full = np.all(np.diff(means[:, rank], axis=1) < 0, axis=1)
    pairwise = {
        f"{a}>{b}": float(np.mean(means[:, sources.index(a)] > means[:, sources.index(b)]))
        for a, b in combinations(order, 2)
    }
    return {
        "observed": observed,
        "ordering": list(order),
        "p_full_ordering": float(full.mean()),
        "pairwise": pairwise,
        "datasets": datasets,
        "resamples": resamples,
    }


def paired_tests(per_query: Mapping[str, Mapping[str, np.ndarray]], alpha: float = 0.05) -> pd.DataFrame:
    """Paired t-tests between every two sources on every dataset, Holm-corrected over all tests."""
    from statsmodels.stats.multitest import multipletests

    sources = sorted(per_query)
    rows = []
    for d in sorted(set.intersection(*(set(per_query[s]) for s in sources))):
        for a, b in combinations(sources, 2):
            x, y = np.asarray(per_query[a][d], float), np.asarray(per_query[b][d], float)
            stat, p = scipy.stats.ttest_rel(x, y) if np.any(x != y) else (0.0, 1.0)
            rows.append(
                {"dataset": d, "a": a, "b": b, "mean_diff": float(np.mean(x - y)), "t": float(stat), "p": float(p)}
            )
    frame = pd.DataFrame(rows)
    if len(frame):
        reject, p_holm, *_ = multipletests(frame["p"], alpha=alpha, method="holm")
        frame["p_holm"], frame["significant"] = p_holm, reject
    return frame


def present_blocks(blocks: Mapping[str, Sequence[str]], sources: Sequence[str]) -> dict[str, list[str]]:
    """Each block's members that are among ``sources`` (block order, member order kept), for the
    blocks left with at least two."""
    kept = {name: [s for s in members if s in sources] for name, members in blocks.items()}
    return {name: members for name, members in kept.items() if len(members) >= 2}


def agreement_of_studies(
    studies: Sequence[StudyData],
    blocks: Mapping[str, Sequence[str]],
    diagnostics: Mapping[str, int],
    resamples: int = 1000,
    seed: int = 0,
    alpha: float = 0.05,
) -> dict[str, Any]:
    """Per (backbone, setting) block of each study (block ``<backbone>/<setting>``, its sources
    present, at least two): :func:`rank_agreement` of every diagnostic the profile has,
    :func:`blocks_recovered` k/n, :func:`transfer_ordering_uncertainty` and :func:`paired_tests`
    (Holm at ``alpha``) of the per-query nDCG@10."""
    tables, uncertainty, tests = [], {}, []
    for study in studies:
        present = present_blocks(blocks, list(study.transfer.index))
        diags = {d: v for d, v in diagnostics.items() if d in study.profile.columns}
        named = {f"{study.backbone}/{b}": m for b, m in present.items()}
        tables.append(rank_agreement(study.profile, study.transfer, named, diags))
        for block, members in named.items():
            pq = {s: study.per_query[s] for s in members if s in study.per_query}
            if len(pq) >= 2:
                uncertainty[block] = transfer_ordering_uncertainty(pq, resamples, seed)
                tests.append(paired_tests(pq, alpha).assign(block=block))
    table = pd.concat(tables, ignore_index=True) if tables else pd.DataFrame()
    return {
        "agreement": table,
        "blocks_recovered": blocks_recovered(table) if len(table) else pd.DataFrame(),
        "uncertainty": uncertainty,
        "paired_tests": pd.concat(tests, ignore_index=True) if tests else pd.DataFrame(),
    }
