"""Per-record diagnostics and the per-source audit profile with percentile bootstrap CIs."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from .records import Exclusion, Record

# The profile's column contract: later versions add columns, never rename these.
PROFILE_COLUMNS = [
    "source",
    "kind",
    "n_records",
    "n_negatives",
    "psi_mean",
    "psi_ci_low",
    "psi_ci_high",
    "coverage_mean",
    "n_psi_undefined",
]


def bootstrap_mean_ci(
    values: np.ndarray,
    rng: np.random.Generator,
    resamples: int = 1000,
    confidence: float = 0.95,
    chunk: int = 200,
) -> tuple[float, float]:
    """Percentile bootstrap CI of the mean over ``values`` (NaNs removed beforehand by the caller).

    Resamples records with replacement ``resamples`` times; returns the (α/2, 1 − α/2) quantiles of
    the resampled means. Draws are made in chunks of ``chunk`` resamples to bound memory.
    """
    values = np.asarray(values, dtype=np.float64)
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence}")
    if resamples < 1:
        raise ValueError(f"resamples must be ≥ 1, got {resamples}")
    n = len(values)
    if n == 0:
        return (float("nan"), float("nan"))
    means = np.empty(resamples)
    for start in range(0, resamples, chunk):
        stop = min(start + chunk, resamples)
        idx = rng.integers(0, n, size=(stop - start, n))
        means[start:stop] = values[idx].mean(axis=1)
    alpha = 1 - confidence
    low, high = np.quantile(means, [alpha / 2, 1 - alpha / 2])
    return float(low), float(high)


def _name_key(name: str) -> int:
    """A stable 32-bit integer for a source name, so each source's bootstrap stream is its own."""
    return int.from_bytes(hashlib.sha256(name.encode("utf-8")).digest()[:4], "little")


def record_diagnostics(records: Sequence[Record], negatives: pd.DataFrame) -> pd.DataFrame:
    """One row per record: ``source, kind, qid, n_negatives, psi, coverage``.

    ``negatives`` is the per-negative frame (``source, qid, neg_index, psi``); the record value is the
    mean over its negatives with a defined ψ (all or none are defined: ψ is undefined only when the
    query has no token).
    """
    grouped = negatives.groupby(["source", "qid"], sort=False)["psi"].mean()
    rows = []
    for rec in records:
        psi = float(grouped.get((rec.source, rec.qid), np.nan))
        rows.append(
            {
                "source": rec.source,
                "kind": rec.kind,
                "qid": rec.qid,
                "n_negatives": len(rec.negatives),
                "psi": psi,
                "coverage": 1.0 - psi,
            }
        )
    return pd.DataFrame(rows, columns=["source", "kind", "qid", "n_negatives", "psi", "coverage"])


@dataclass(frozen=True)
class AuditProfile:
    """The audit profile: one row per source (``rows``) plus exclusion counts per source."""

    rows: tuple[Mapping[str, Any], ...]
    exclusions: Mapping[str, int] = field(default_factory=dict)
    settings: Mapping[str, Any] = field(default_factory=dict)

    def to_frame(self) -> pd.DataFrame:
        frame = pd.DataFrame(list(self.rows))
        extra = [c for c in frame.columns if c not in PROFILE_COLUMNS]
        return frame[PROFILE_COLUMNS + extra] if len(frame) else pd.DataFrame(columns=PROFILE_COLUMNS)

    def to_dict(self) -> dict[str, Any]:
        return {
            "settings": dict(self.settings),
            "sources": [dict(r) for r in self.rows],
            "exclusions": dict(self.exclusions),
        }

    def summary(self) -> str:
        frame = self.to_frame()
        cols = [
            "source",
            "kind",
            "n_records",
            "n_negatives",
            "psi_mean",
            "psi_ci_low",
            "psi_ci_high",
            "n_psi_undefined",
        ]
        return frame[cols].to_string(index=False, float_format=lambda v: f"{v:.4f}")


def profile_sources(
    per_record: pd.DataFrame,
    exclusions: Sequence[Exclusion] = (),
    *,
    seed: int = 0,
    resamples: int = 1000,
    confidence: float = 0.95,
    settings: Mapping[str, Any] | None = None,
    sources: Sequence[str] | None = None,
) -> AuditProfile:
    """Aggregate per-record values into one profile row per source (sorted by source name).

    ``psi_mean`` = mean of record ψ over records with a defined ψ; ``coverage_mean`` = 1 − psi_mean;
    the CI is a percentile bootstrap over those records, seeded per source from ``seed``.
    A source whose every record was excluded still gets a row (n_records = 0, NaN statistics).
    """
    names = sorted(set(per_record["source"]) | set(sources or ()))
    excl_counts: dict[str, int] = {}
    for ex in exclusions:
        if ex.unit == "record":
            excl_counts[ex.source] = excl_counts.get(ex.source, 0) + 1
    rows = []
    for name in names:
        sub = per_record[per_record["source"] == name]
        psi = sub["psi"].to_numpy(dtype=np.float64)
        defined = psi[~np.isnan(psi)]
        rng = np.random.default_rng([seed, _name_key(name)])
        low, high = bootstrap_mean_ci(defined, rng, resamples, confidence)
        mean = float(defined.mean()) if len(defined) else float("nan")
        kinds = sorted(set(sub["kind"]))
        rows.append(
            {
                "source": name,
                "kind": kinds[0] if len(kinds) == 1 else ("mixed" if kinds else "genuine"),
                "n_records": len(sub),
                "n_negatives": int(sub["n_negatives"].sum()),
                "psi_mean": mean,
                "psi_ci_low": low,
                "psi_ci_high": high,
                "coverage_mean": 1.0 - mean,
                "n_psi_undefined": int(np.isnan(psi).sum()),
                "n_excluded_records": excl_counts.get(name, 0),
            }
        )
    return AuditProfile(tuple(rows), {k: excl_counts[k] for k in sorted(excl_counts)}, dict(settings or {}))
