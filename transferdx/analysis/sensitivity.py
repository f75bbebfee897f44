"""Sensitivity of the diagnostics' source orderings (docs/design.md §5): tokenizer, IDF corpus, sample
fraction, temperature, in-family vs out-of-family encoder.

The runs are ordinary audits (``transferdx-audit -m …`` sweeps over existing config groups); each
carries its settings. A run is compared with the *base* run (the one whose settings equal
``base``): the factors it changes, and per block of sources and diagnostic the Kendall τ between
its source values and the base run's (1: same ordering, −1: reversed), and whether the complete
ordering is the same.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import scipy.stats

from transferdx.analysis.agreement import ordering

# Audit settings that a sensitivity sweep varies, with the value a run that omits one has.
FACTORS: dict[str, Any] = {
    "tokenizer": None,
    "idf_corpus": None,
    "sample_fraction": 1.0,
    "tau": None,
    "backbone": None,
    "in_batch": None,
    "composite_eps": None,
}


@dataclass(frozen=True)
class AuditRun:
    """One audit: its settings, its profile (indexed by source) and where it came from."""

    settings: Mapping[str, Any]
    profile: pd.DataFrame
    folder: str = ""

    def factor(self, name: str) -> Any:
        """The run's value of ``name``; an external IDF corpus is ``external`` plus its collection."""
        value = self.settings.get(name, FACTORS.get(name))
        if name == "idf_corpus" and value == "external" and "idf_external" in self.settings:
            return f"external ({self.settings['idf_external']})"
        return value


def changed(run: AuditRun, base: AuditRun) -> dict[str, Any]:
    """The factors whose value differs between ``run`` and ``base``."""
    return {f: run.factor(f) for f in FACTORS if run.factor(f) != base.factor(f)}


def find_base(runs: Sequence[AuditRun], base: Mapping[str, Any]) -> AuditRun:
    """The one-at-a-time reference: the run whose settings equal ``base`` on every key given and,
    on every other factor, take the value most runs share (a sweep varies one factor away from it)."""
    hits = [r for r in runs if all(r.factor(k) == v for k, v in base.items())]
    for factor in (f for f in FACTORS if f not in base):
        counts = Counter(str(r.factor(factor)) for r in runs)
        present = {str(r.factor(factor)) for r in hits}
        if len(present) > 1:
            top = max(counts[v] for v in present)
            modal = [v for v in present if counts[v] == top]
            if len(modal) == 1:
                hits = [r for r in hits if str(r.factor(factor)) == modal[0]]
    distinct = {tuple(str(r.factor(f)) for f in FACTORS) for r in hits}
    if len(distinct) != 1:
        seen = sorted({tuple(str(r.factor(k)) for k in base) for r in runs})
        raise ValueError(
            f"{len(distinct)} distinct runs match the sensitivity base {dict(base)} (need exactly one; name "
            f"more factors in sensitivity_base); runs have {list(base)} = {seen}"
        )
    return hits[0]


def kendall(a: Mapping[str, float], b: Mapping[str, float]) -> float:
    """Kendall τ-b between two value maps over their shared sources; ∈ [−1, 1] (nan if constant)."""
    shared = sorted(set(a) & set(b))
    x, y = [a[s] for s in shared], [b[s] for s in shared]
    if len(shared) < 2 or len(set(x)) < 2 or len(set(y)) < 2:
        return float("nan")
    return float(scipy.stats.kendalltau(x, y)[0])


def sensitivity(
    runs: Sequence[AuditRun],
    base: Mapping[str, Any],
    blocks: Mapping[str, Sequence[str]],
    diagnostics: Mapping[str, int],
    in_family: str | None = None,
) -> pd.DataFrame:
    """One row per (run, block, diagnostic): the factors the run changes from the base run
    (``factor``/``value``; ``base`` for the base run itself, ``a+b`` when several change), the
    ordering, the base ordering, Kendall τ between the two runs' values, and ``same_ordering``.
    ``family`` says whether the run's encoder is ``in_family`` (the backbone that is trained)."""
    reference = find_base(runs, base)
    seen: set[tuple[Any, ...]] = set()
    rows = []
    for run in runs:
        key = tuple(str(run.factor(f)) for f in FACTORS)
        if key in seen:  # the same audit reached through two sweeps
            continue
        seen.add(key)
        diff = changed(run, reference)
        factor = "+".join(diff) if diff else "base"
        value = ",".join(str(v) for v in diff.values()) if diff else ""
        family = "" if in_family is None else ("in" if run.factor("backbone") == in_family else "out")
        for block, members in blocks.items():
            present = [s for s in members if s in run.profile.index and s in reference.profile.index]
            if len(present) < 2:
                continue
            for name, direction in diagnostics.items():
                if name not in run.profile.columns or name not in reference.profile.columns:
                    continue
                mine = {s: float(run.profile.loc[s, name]) for s in present}
                theirs = {s: float(reference.profile.loc[s, name]) for s in present}
                if any(np.isnan(v) for v in (*mine.values(), *theirs.values())):
                    continue
                rows.append(
                    {
                        "factor": factor,
                        "value": value,
                        "family": family,
                        "block": block,
                        "diagnostic": name,
                        "ordering": ">".join(ordering(mine, direction)),
                        "base_ordering": ">".join(ordering(theirs, direction)),
                        "kendall_tau": kendall(mine, theirs),
                        "same_ordering": ordering(mine, direction) == ordering(theirs, direction),
                        "run": run.folder,
                    }
                )
    frame = pd.DataFrame(rows)
    if not len(frame):
        return frame
    order = frame.assign(_base=frame["factor"] != "base").sort_values(["_base", "factor", "value"], kind="stable")
    return order.drop(columns="_base").reset_index(drop=True)


def value_range(runs: Sequence[AuditRun], base: AuditRun, factor: str, source: str, column: str) -> tuple[float, float]:
    """(min, max) of ``column`` for ``source`` over the base run and the runs changing only
    ``factor`` (one factor at a time)."""
    values = [
        float(r.profile.loc[source, column])
        for r in runs
        if source in r.profile.index and (r is base or set(changed(r, base)) == {factor})
    ]
    return (min(values), max(values)) if values else (float("nan"), float("nan"))
