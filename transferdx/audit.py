"""The audit pipeline, pure: records → per-negative → per-record → per-source profile."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from .diagnostics.lexical import negative_residuality
from .profiles import AuditProfile, profile_sources, record_diagnostics
from .records import Exclusion, LoadResult
from .text import Tokenizer


@dataclass(frozen=True)
class AuditResult:
    """Everything an audit computed: per-negative and per-record frames, the profile, exclusions."""

    negatives: pd.DataFrame
    records: pd.DataFrame
    profile: AuditProfile
    exclusions: tuple[Exclusion, ...]

    def summary(self) -> str:
        return self.profile.summary()


def audit(
    loaded: LoadResult,
    tokenizer: Tokenizer,
    *,
    idf_corpus: str = "pooled",
    external_texts: Sequence[str] | None = None,
    seed: int = 0,
    resamples: int = 1000,
    confidence: float = 0.95,
    settings: Mapping[str, Any] | None = None,
) -> AuditResult:
    """Lexical audit of every source in ``loaded`` (sources with only exclusions still get a row)."""
    records = sorted(loaded.records, key=lambda r: (r.source, r.qid))
    negatives = negative_residuality(records, tokenizer, idf_corpus, external_texts)
    negatives["coverage"] = 1.0 - negatives["psi"]
    meta = [(n.method, n.relation, n.rank, n.judgment) for r in records for n in r.negatives]
    for i, column in enumerate(("method", "relation", "rank", "judgment")):
        negatives[column] = pd.array([m[i] for m in meta], dtype="Int64" if i >= 2 else object)
    per_record = record_diagnostics(records, negatives)
    profile = profile_sources(
        per_record,
        loaded.exclusions,
        seed=seed,
        resamples=resamples,
        confidence=confidence,
        settings=settings,
        sources=loaded.sources,
    )
    return AuditResult(negatives, per_record, profile, tuple(loaded.exclusions))
