"""The sharded audit's one task store: which texts each map task encodes, and where it leaves its
work file and marker.

Each distinct query and passage the audit encodes (:func:`collection_texts`) belongs to map
:func:`shard_of` (the first 8 bytes of its cache key, SHA-256 of the text, mod N), so the maps'
shares are disjoint and together hold every text once (:func:`text_shares`). A plan
(:class:`ShardPlan`) names every file of one audit in one folder,
``<cache_dir>/audit-shards/<key>/``: ``shard-<i>-of-<N>.work.json.gz`` (a map's texts, for a task
launched elsewhere) and ``shard-<i>-of-<N>.json`` (its marker: the digest of its share, counts,
seconds, peak memory)."""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from transferdx.artifacts import content_hash
from transferdx.auditing.values import background_texts
from transferdx.embed.cache import text_key
from transferdx.presets import default_cache_dir

if TYPE_CHECKING:
    from transferdx.pipeline.auditing import PreparedAudit

PLAN_DIR = "audit-shards"
MARKER_VERSION = 2  # 2: maps split by text (1: by query)


def shard_of(key: str, shards: int) -> int:
    """The shard (0 … shards − 1) of the text ``key``: the first 8 bytes of its cache key
    (:func:`~transferdx.embed.cache.text_key`, SHA-256 of its UTF-8), big-endian, modulo ``shards``.
    Stable across runs, machines and Python versions."""
    if shards < 1:
        raise ValueError(f"shards must be ≥ 1, got {shards}")
    return _shard_of_key(text_key(str(key)), shards)


def _shard_of_key(key: bytes, shards: int) -> int:
    return int.from_bytes(key[:8], "big") % shards


@dataclasses.dataclass(frozen=True)
class TextShare:
    """What one map task encodes: its share of the collection's distinct queries and passages."""

    queries: list[str]
    passages: list[str]

    @functools.cached_property
    def digest(self) -> str:
        """sha256 over the cache keys of the share's queries and passages (each list sorted), taken
        once per share however many steps ask (the missing shards, a map's work, the reduce's check):
        a share is not changed once :func:`text_shares` has built it."""
        return content_hash(
            [sorted(text_key(t).hex() for t in self.queries), sorted(text_key(t).hex() for t in self.passages)]
        )


def collection_texts(prepared: PreparedAudit) -> tuple[list[str], list[str]]:
    """The distinct texts the audit of ``prepared`` encodes, in first-seen order: its queries, and its
    passages — every record's positives[0], then the negatives, then the background sample (drawn
    from the whole pool; none when the audit is lexical)."""
    records = prepared.loaded.records
    queries = list(dict.fromkeys(r.query for r in records))
    passages = dict.fromkeys(r.positives[0].text for r in records)
    passages.update(dict.fromkeys(n.text for r in records for n in r.negatives))
    if (semantic := prepared.options.semantic) is not None:
        passages.update(dict.fromkeys(background_texts(records, semantic.background_size, prepared.options.seed)))
    return queries, list(passages)


def text_shares(prepared: PreparedAudit, shards: int) -> list[TextShare]:
    """Every map's share: each distinct query and passage (:func:`collection_texts`) goes to map
    ``shard_of(text, shards)``, so the maps' shares are disjoint and together hold every text once,
    whatever runs at the same time (a text used by many queries is encoded by one map)."""
    shares = [TextShare([], []) for _ in range(shards)]
    queries, passages = collection_texts(prepared)
    for text in queries:
        shares[shard_of(text, shards)].queries.append(text)
    for text in passages:
        shares[shard_of(text, shards)].passages.append(text)
    return shares


@dataclasses.dataclass(frozen=True)
class ShardPlan:
    """Where the map tasks of one audit keep their files: ``folder`` = ``<cache>/audit-shards/<key>``,
    the key a hash of the audit's recorded settings, the encoder's identity and N."""

    folder: Path
    shards: int

    def _name(self, shard: int) -> str:
        if not 0 <= shard < self.shards:
            raise ValueError(f"audit.shard must be in 0 … {self.shards - 1}, got {shard}")
        return f"shard-{shard:04d}-of-{self.shards:04d}"

    def marker(self, shard: int) -> Path:
        """What map ``shard`` left when it finished (:meth:`done` reads it)."""
        return self.folder / f"{self._name(shard)}.json"

    def work(self, shard: int) -> Path:
        """The texts map ``shard`` encodes, for a task launched elsewhere."""
        return self.folder / f"{self._name(shard)}.work.json.gz"

    def done(self, shard: int, digest: str) -> dict[str, Any] | None:
        """The marker of ``shard`` when it is there, readable and for the share with ``digest``."""
        try:
            record = json.loads(self.marker(shard).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        ok = isinstance(record, dict) and record.get("digest") == digest and record.get("version") == MARKER_VERSION
        return record if ok else None

    def missing(self, digests: Sequence[str]) -> list[int]:
        """The shards without a marker that matches their share's digest (to run, or to rerun)."""
        return [i for i, digest in enumerate(digests) if self.done(i, digest) is None]


def shard_plan(prepared: PreparedAudit, shards: int, cache_dir: str | Path | None = None) -> ShardPlan:
    """The plan of a ``shards``-way audit of ``prepared`` (markers beside the embedding cache)."""
    if shards < 1:
        raise ValueError(f"audit.shards must be ≥ 1, got {shards}")
    root = Path(prepared.encoder.cache_dir) if prepared.encoder is not None else Path(cache_dir or default_cache_dir())
    scorer = prepared.encoder.scorer() if prepared.encoder is not None else None
    key = content_hash(prepared.settings, scorer, shards)[:20]
    return ShardPlan(root / PLAN_DIR / key, shards)
