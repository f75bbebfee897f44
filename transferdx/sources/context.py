"""What source builders share: the query set, K and slice, the seed, the encoder, memoised
rankings; and which positives a miner must exclude."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from transferdx.inputs.reading import parse_slice
from transferdx.inputs.records import Passage, QuerySet

KNOWN = ("all", "p0")


@dataclass
class BuildContext:
    """What source builders share: the query set, the encoder (for dense/neighbour), K and slice,
    the seed, and memoised rankings."""

    query_set: QuerySet
    k: int = 8
    slice_spec: str | Sequence[str] | None = None
    seed: int = 0
    encoder: Any = None
    bm25: Mapping[str, Any] = field(default_factory=dict)
    rankings: dict[str, dict[str, list[str]]] = field(default_factory=dict)

    @property
    def window(self) -> slice:
        return parse_slice(self.slice_spec, self.k)

    def depth(self) -> int:
        """How deep to rank so that the slice survives removing every known positive."""
        stop = self.window.stop if self.window.stop is not None else len(self.query_set.pool)
        max_pos = max((len(v) for v in self.query_set.positives.values()), default=0)
        return min(len(self.query_set.pool), stop + max_pos)


def known_positives(query_set: QuerySet, qid: str, known: str) -> set[str]:
    """The positive ids a miner must exclude: every known positive (``all``) or only p0 (``p0``)."""
    if known not in KNOWN:
        raise ValueError(f"known must be one of {KNOWN}, got {known!r}")
    positives = query_set.positives[qid]
    return set(positives) if known == "all" else {positives[0]}


def positive_passages(query_set: QuerySet, qid: str, known: str = "all") -> list[Passage]:
    """The record's positives: all known ones, or only p0 in the single-label variant."""
    grades = (query_set.judgments or {}).get(qid, {})
    ids = query_set.positives[qid] if known == "all" else query_set.positives[qid][:1]
    return [Passage(p, query_set.pool[p], judgment=grades.get(p)) for p in ids]


def judged(query_set: QuerySet, qid: str, pid: str) -> int | None:
    return (query_set.judgments or {}).get(qid, {}).get(pid)
