"""The sharded audit: the frozen encoder's work split over map tasks, the statistics over stat tasks.

A collection too big for one machine's encoder time is audited in N shards. Each **map** task
encodes one share of the collection's *distinct texts* into the content-addressed embedding cache
that every task shares: a query or passage (positives[0], negatives, the background sample) goes to
map :func:`shard_of` (the first 8 bytes of its cache key, SHA-256 of the text, mod N), so the shares
are disjoint and together hold every text once — maps running at the same time (a SLURM array)
never encode the same passage twice, however many queries draw it (:func:`text_shares`). A map reads
its share from a work file that ``audit.stage=all`` wrote after loading the input once
(:func:`write_shard_work`, :func:`encode_shard_work`), or, for a task started by hand
(:func:`audit_shard`), from the input loaded as the one-process audit loads it. It then leaves a
marker (``shard-<i>-of-<N>.json``: the digest of its share, counts, encoded texts, seconds, peak
memory) in the plan's folder, ``<cache_dir>/audit-shards/<plan key>/``. Then N **stat tasks**
(:mod:`transferdx.pipeline.stat_tasks`) split the *records* by query and write each shard's per-row
values and texts, and the **reduce** (:func:`reduce_shards`) checks that every map's marker is there
and matches the share it computes from the records it loads, computes the stat tasks still missing,
reads the descriptors, lets the records go (where it owns them) and pools the merged values
(:func:`~transferdx.auditing.core.pooled_values`), every text read from the stat tasks' files: it
encodes nothing, and its artifacts are the one-process audit's bytes, whatever N, because the
shards' rows are the whole collection's bit for bit and the pooled steps are the one-process code (tests: DL19 in
1–4 shards, a sentence-transformers Parquet file through joblib and submitit, the demo as a SLURM
array). A re-submission runs only the shards without a valid marker — after an edit of the input,
only the maps whose share of texts changed (and every stat task: their context is the whole
collection's); a map killed mid-run keeps the cache chunks it flushed, so its rerun encodes only the
rest.

What the maps split is the encoder, the part of a semantic audit that grows with the collection and
needs an accelerator (measured shares: docs/benchmarks.md); the stat tasks split ψ's tokenisation and
the per-negative scores; the reduce holds the values and one source's vectors at a time (the records
only until it has read their digests, keys and descriptors).

:func:`audit_sharded` runs maps, stat tasks and reduce from Python (in this process, or through the
``run_maps`` callable given); ``transferdx-audit audit.shards=N`` does the same from the command
line, maps and stat tasks through the Hydra launcher chosen (``hydra/launcher=joblib|submitit_local|
submitit_slurm``; :func:`hydra_map_runner`)."""

from __future__ import annotations

import dataclasses
import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from transferdx.artifacts import atomic_write_bytes, atomic_write_text, canonical_json, content_hash
from transferdx.auditing.core import (
    COMPOSITE_COLUMNS,
    Pooling,
    background_texts,
    check_keys,
    input_facts,
    merge_values,
    pooled_values,
    source_composite,
)
from transferdx.auditing.result import Audit
from transferdx.embed.cache import EmbeddingCache, text_key
from transferdx.pipeline.auditing import PreparedAudit, audit_prepared, pooling, prepare_audit
from transferdx.pipeline.encoders import EncoderLike
from transferdx.pipeline.partition import shard_of as shard_of  # re-exported: the maps' partition
from transferdx.pipeline.partition import shard_of_key
from transferdx.pipeline.settings import AuditOptions
from transferdx.pipeline.stat_tasks import (
    STATS_WORK_SUFFIX,
    ValueStore,
    compute_stats,
    read_values,
    stats_from_work,
    stats_line,
    stats_work_path,
    value_store,
    write_stats_work,
)
from transferdx.pipeline.store_texts import StoreTexts
from transferdx.presets import default_cache_dir

PLAN_DIR = "audit-shards"
MARKER_VERSION = 2  # 2: maps split by text (1: by query)


def _split(texts: Sequence[str], shards: int) -> list[tuple[list[str], list[bytes]]]:
    """Each shard's (texts, cache keys) of ``texts``, in their order."""
    parts: list[tuple[list[str], list[bytes]]] = [([], []) for _ in range(shards)]
    for text in texts:
        key = text_key(text)
        mine, keys = parts[shard_of_key(key, shards)]
        mine.append(text)
        keys.append(key)
    return parts


@dataclasses.dataclass(frozen=True)
class TextShare:
    """What one map task encodes: its share of the collection's distinct queries and passages."""

    queries: list[str]
    passages: list[str]
    query_keys: list[bytes]
    passage_keys: list[bytes]

    def digest(self) -> str:
        """sha256 over the cache keys of the share's queries and passages (each list sorted)."""
        return content_hash([sorted(k.hex() for k in self.query_keys), sorted(k.hex() for k in self.passage_keys)])


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
    queries, passages = (_split(texts, shards) for texts in collection_texts(prepared))
    return [TextShare(q, p, q_keys, p_keys) for (q, q_keys), (p, p_keys) in zip(queries, passages, strict=True)]


@dataclasses.dataclass(frozen=True)
class ShardPlan:
    """Where the shards of one audit keep their markers: ``folder`` = ``<cache>/audit-shards/<key>``,
    the key a hash of the audit's recorded settings, the encoder's identity and N."""

    folder: Path
    shards: int
    # (the prepared audit, its text_shares): hashed once per audit, however many steps ask
    _shares: tuple[PreparedAudit, list[TextShare]] | None = dataclasses.field(default=None, compare=False, repr=False)
    _store: tuple[PreparedAudit, ValueStore] | None = dataclasses.field(default=None, compare=False, repr=False)

    def shares(self, prepared: PreparedAudit) -> list[TextShare]:
        """:func:`text_shares` of ``prepared`` in this plan's N, computed once for that prepared audit
        (the digests, the maps and the work files of one ``audit.stage=all`` read the same list)."""
        if self._shares is None or self._shares[0] is not prepared:
            object.__setattr__(self, "_shares", (prepared, text_shares(prepared, self.shards)))
        assert self._shares is not None
        return self._shares[1]

    def store(self, prepared: PreparedAudit) -> ValueStore:
        """Where the stat tasks of ``prepared`` keep their values: beside the maps' markers, for the
        digest of its records (computed once for that prepared audit)."""
        if self._store is None or self._store[0] is not prepared:
            object.__setattr__(self, "_store", (prepared, value_store(prepared, self.folder, self.shards)))
        assert self._store is not None
        return self._store[1]

    def forget(self) -> None:
        """Let go of the text shares computed for a prepared audit (every distinct text of the
        collection, and its cache key), once the digests are taken."""
        object.__setattr__(self, "_shares", None)

    def marker(self, shard: int) -> Path:
        return self.folder / f"shard-{shard:04d}-of-{self.shards:04d}.json"

    def work(self, shard: int) -> Path:
        """The texts map task ``shard`` encodes (:func:`write_shard_work`)."""
        return self.folder / f"shard-{shard:04d}-of-{self.shards:04d}.work.json.gz"

    def stats_work(self, shard: int) -> Path:
        """The records stat task ``shard`` reads (:func:`~transferdx.pipeline.stat_tasks.write_stats_work`)."""
        return stats_work_path(self.folder, shard, self.shards)

    def done(self, shard: int, digest: str) -> dict[str, Any] | None:
        """The marker of ``shard`` when it is there, readable and for the share with ``digest``."""
        try:
            record = json.loads(self.marker(shard).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        ok = isinstance(record, dict) and record.get("digest") == digest and record.get("version") == MARKER_VERSION
        return record if ok else None


def shard_plan(prepared: PreparedAudit, shards: int, cache_dir: str | Path | None = None) -> ShardPlan:
    """The plan of a ``shards``-way audit of ``prepared`` (markers beside the embedding cache)."""
    if shards < 1:
        raise ValueError(f"audit.shards must be ≥ 1, got {shards}")
    if prepared.options.semantic is not None and prepared.options.semantic.in_batch:
        raise ValueError(
            "a sharded audit cannot score the in-batch loss (its batches mix queries of every shard): "
            "set diagnostics.in_batch=false or audit.shards=1"
        )
    root = Path(prepared.encoder.cache_dir) if prepared.encoder is not None else Path(cache_dir or default_cache_dir())
    scorer = prepared.encoder.scorer() if prepared.encoder is not None else None
    key = content_hash(prepared.settings, scorer, shards)[:20]
    return ShardPlan(root / PLAN_DIR / key, shards)


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def shard_work(plan: ShardPlan, shard: int, share: TextShare) -> dict[str, Any]:
    """What map task ``shard`` encodes, as a JSON-able dict: the digest of its share and two requests
    to the cache — its queries and its passages (:func:`text_shares`). The same requests give the
    same vectors wherever they run. A lexical audit's maps encode nothing but still mark their share."""
    return {
        "version": MARKER_VERSION,
        "shard": shard,
        "shards": plan.shards,
        "digest": share.digest(),
        "queries": share.queries,
        "passages": share.passages,
    }


def write_shard_work(prepared: PreparedAudit, plan: ShardPlan, shards: Sequence[int]) -> list[Path]:
    """Write each map task's :func:`shard_work` to ``plan.work(i)`` (gzip JSON, atomically), so that a
    task launched elsewhere reads its own texts instead of loading the whole input."""
    import gzip

    shares, paths = plan.shares(prepared), []
    for shard in shards:
        data = json.dumps(shard_work(plan, shard, shares[shard]), ensure_ascii=False).encode("utf-8")
        paths.append(atomic_write_bytes(plan.work(shard), gzip.compress(data, mtime=0)))
    return paths


def _encode(cache: EmbeddingCache | None, plan: ShardPlan, work: dict[str, Any], started: float) -> dict[str, Any]:
    """Encode ``work``'s two requests (unless the marker says it was done) and write the marker."""
    shard = int(work["shard"])
    if (done := plan.done(shard, work["digest"])) is not None:
        return {**done, "reused": True}
    before = cache.encoded_texts if cache is not None else 0
    if cache is not None:
        for texts, role in ((work["queries"], "query"), (work["passages"], "passage")):
            if texts:
                cache.embed(texts, role)
    record = {
        "version": MARKER_VERSION,
        "shard": shard,
        "shards": plan.shards,
        "digest": work["digest"],
        "queries": len(work["queries"]),
        "passages": len(work["passages"]),
        "encoded_texts": (cache.encoded_texts - before) if cache is not None else 0,
        "seconds": round(time.perf_counter() - started, 3),
        "peak_mb": round(_peak_mb(), 1),
        "host": os.uname().nodename,
    }
    atomic_write_text(plan.marker(shard), canonical_json(record))
    return {**record, "reused": False}


def encode_shard(prepared: PreparedAudit, plan: ShardPlan, shard: int) -> dict[str, Any]:
    """The map of shard ``shard`` from the prepared input: encode its share of the texts into the
    shared cache (nothing when the audit is lexical) and write its marker. A shard whose marker
    matches its share is not run again (returned as it is, with ``"reused": true``)."""
    if not 0 <= shard < plan.shards:
        raise ValueError(f"audit.shard must be in 0 … {plan.shards - 1}, got {shard}")
    started = time.perf_counter()
    return _encode(prepared.encoder, plan, shard_work(plan, shard, plan.shares(prepared)[shard]), started)


def encode_shard_work(path: str | Path, encoder: EmbeddingCache | None) -> dict[str, Any]:
    """The map of one shard from its work file (:func:`write_shard_work`): the texts only, never the
    whole input, so the task's memory is its share's texts and vectors. The marker goes beside it."""
    import gzip

    started = time.perf_counter()
    try:
        work = json.loads(gzip.decompress(Path(path).read_bytes()))
    except (OSError, ValueError) as exc:
        raise ShardsIncomplete(f"{path}: the shard's work file cannot be read ({exc}); rerun audit.stage=all") from None
    return _encode(encoder, ShardPlan(Path(path).parent, int(work["shards"])), work, started)


def run_shard_work(path: str | Path, options: AuditOptions, encoder: EmbeddingCache | None) -> dict[str, Any]:
    """A task that ``audit.stage=all`` launched, from its work file alone: a map's texts
    (:func:`encode_shard_work`) or a stat task's records
    (:func:`~transferdx.pipeline.stat_tasks.stats_from_work`). Returns its marker."""
    if str(path).endswith(STATS_WORK_SUFFIX):
        return stats_from_work(path, options, encoder)
    return encode_shard_work(path, encoder)


def shard_digests(prepared: PreparedAudit, plan: ShardPlan) -> list[str]:
    """:meth:`TextShare.digest` of every map's share, in shard order."""
    return [share.digest() for share in plan.shares(prepared)]


def missing_shards(prepared: PreparedAudit, plan: ShardPlan, digests: Sequence[str] | None = None) -> list[int]:
    """The shards without a marker that matches their share (to run, or to rerun); ``digests``:
    :func:`shard_digests` when the caller has them."""
    digests = shard_digests(prepared, plan) if digests is None else digests
    return [i for i, digest in enumerate(digests) if plan.done(i, digest) is None]


class ShardsIncomplete(ValueError):
    """The reduce found shards without a valid marker (not run, killed, or run on other texts)."""


def reduce_shards(
    prepared: PreparedAudit,
    plan: ShardPlan,
    digests: Sequence[str] | None = None,
    run_stats: StatsRunner | None = None,
    let_go: bool = False,
) -> Audit:
    """The reduce: every map's marker must match its share of the texts (else
    :class:`ShardsIncomplete` naming the missing ones and how to run them); then the stat tasks
    still missing (:mod:`transferdx.pipeline.stat_tasks`; through ``run_stats``, default this
    process), and the audit from their files alone: each source's composite from the values'
    composite columns (its vectors read back one source at a time, for its texts read from the
    shards' files), then every value merged in the audit's order and pooled
    (:func:`~transferdx.auditing.core.pooled_values`), the suspects' texts and the returned audit's
    read from the shards' files too (:mod:`transferdx.pipeline.store_texts`) — the one-process
    audit's bytes. Of the records it reads only the digests, the descriptors and the (source, qid)
    keys the values are checked against, before it pools; ``let_go``: then drop them
    (:meth:`PreparedAudit.let_go`: ``prepared`` is spent), so that the input is not held beside the
    values. ``digests``: :func:`shard_digests` when the caller has them (the texts are hashed once).
    A summary (``reduce.json``: shards, texts the reduce encoded, seconds, peak memory) is written
    beside the markers, not among the artifacts, so that those stay the one-process bytes."""
    missing = missing_shards(prepared, plan, digests)
    if missing:
        shown = ",".join(map(str, missing[:20])) + (",…" if len(missing) > 20 else "")
        raise ShardsIncomplete(
            f"{len(missing)} of {plan.shards} shards have not finished (no valid marker in {plan.folder}): "
            f"{shown}; run them with transferdx-audit -m audit.stage=map audit.shards={plan.shards} "
            f"audit.shard={shown} (same options), or audit.stage=all"
        )
    started = time.perf_counter()
    cache = prepared.encoder
    before = cache.encoded_texts if cache is not None else 0
    store = plan.store(prepared)
    if todo := store.missing():
        (run_stats or run_stats_here)(prepared, plan, todo)
        if still := store.missing():
            raise ShardsIncomplete(
                f"{len(still)} of {plan.shards} stat tasks left no valid values in {plan.folder}: "
                f"{','.join(map(str, still[:20]))}; rerun audit.stage=all or audit.stage=reduce"
            )
    stats_seconds = round(time.perf_counter() - started, 3)
    p = pooling(prepared)
    keys, descriptors = input_facts(prepared.loaded, p)
    if let_go:  # the shares first: they hold every distinct text, which the pools' sweep would keep
        plan.forget()
        prepared.let_go()
    texts = store.texts(keys)  # the stat tasks' records checked against the input's before any value is read
    # the composites first, each source's from its own rows of their columns, so that a source's
    # vectors are never held beside every value, nor beside the other sources' rows; then every
    # value, merged once
    composites = store_composites(store, texts, p)
    values = merge_values(read_values(store))
    check_keys(values, keys)
    result = pooled_values(prepared.loaded, values, p, composites, descriptors, texts.records)
    del values
    audit = Audit(result, prepared.settings, texts.negatives, input_path=prepared.options.label)
    summary = {
        "shards": plan.shards,
        "reduce_encoded_texts": (cache.encoded_texts - before) if cache is not None else 0,
        "reduce_stats_run": todo,
        "reduce_stats_seconds": stats_seconds,
        "reduce_seconds": round(time.perf_counter() - started, 3),
        "reduce_peak_mb": round(_peak_mb(), 1),
        "markers": [json.loads(plan.marker(i).read_text(encoding="utf-8")) for i in range(plan.shards)],
        "value_markers": [json.loads(store.marker(i).read_text(encoding="utf-8")) for i in range(plan.shards)],
    }
    atomic_write_text(plan.folder / "reduce.json", canonical_json(summary))
    return audit


def store_composites(store: ValueStore, texts: StoreTexts, p: Pooling) -> dict[str, dict[str, Any]]:
    """Each source's composite (:func:`~transferdx.auditing.core.source_composite`) from the stat
    tasks' values: the source's rows of :data:`~transferdx.auditing.core.COMPOSITE_COLUMNS` read from
    every shard and merged (:func:`~transferdx.auditing.core.merge_values`: the audit's order restricted
    to one source is that source's order), its texts from ``texts`` (its records' span). The same
    composites as :func:`~transferdx.auditing.core.source_composites` on every value merged, with one
    source's rows held at a time. Empty for a lexical audit or without the encoder."""
    out: dict[str, dict[str, Any]] = {}
    if p.encoder is None:
        return out
    for name, (first, count) in texts.spans.items():
        part = merge_values(store.read(i, COMPOSITE_COLUMNS, source=name) for i in range(store.shards))
        if "s_qn" not in part.negatives:
            return {}
        rows = np.arange(first, first + count, dtype=np.int64)
        out.update(source_composite(texts.source, rows, part.negatives, part.records, p))
        del part
    return out


def shard_line(marker: dict[str, Any]) -> str:
    """One line on a map task: its shard, its share of queries and passages, texts encoded, time (or
    that it was done); on a stat task, :func:`~transferdx.pipeline.stat_tasks.stats_line`."""
    if marker.get("stage") == "stats":
        return stats_line(marker)
    head = f"shard {marker['shard']} of {marker['shards']}: {marker['queries']} queries, {marker['passages']} passages"
    if marker.get("reused"):
        return f"{head}; already done ({marker['encoded_texts']} texts encoded then), nothing to do"
    return f"{head}; {marker['encoded_texts']} texts encoded, {marker['seconds']:.1f}s, peak {marker['peak_mb']:.0f} MB"


MapRunner = Callable[[PreparedAudit, ShardPlan, list[int]], None]
StatsRunner = MapRunner  # the same call: the prepared audit, its plan, the shards to run


def run_stats_here(prepared: PreparedAudit, plan: ShardPlan, shards: list[int]) -> None:
    """Run the stat tasks ``shards`` in this process, in one pass over their records
    (:func:`~transferdx.pipeline.stat_tasks.compute_stats`)."""
    compute_stats(prepared, plan.store(prepared), shards)


def run_maps_here(prepared: PreparedAudit, plan: ShardPlan, shards: list[int]) -> None:
    """Run the map tasks ``shards`` one after another in this process."""
    shares = plan.shares(prepared)
    for shard in shards:
        _encode(prepared.encoder, plan, shard_work(plan, shard, shares[shard]), time.perf_counter())


def audit_shard(
    records: Any,
    options: AuditOptions | None = None,
    *,
    shard: int,
    shards: int,
    encoder: EncoderLike | None = "minilm_l6",
    cache_dir: str | Path | None = None,
    controls: str | Sequence[str] = "auto",
    **overrides: Any,
) -> dict[str, Any]:
    """One map task (e.g. one SLURM array task): prepare as :func:`~transferdx.pipeline.auditing.audit`
    does, encode shard ``shard`` of ``shards``; returns its marker (``"reused": true`` when it was
    already done)."""
    prepared = prepare_audit(records, options, encoder=encoder, cache_dir=cache_dir, controls=controls, **overrides)
    return encode_shard(prepared, shard_plan(prepared, shards, cache_dir), shard)


def audit_sharded(
    records: Any,
    options: AuditOptions | None = None,
    *,
    shards: int,
    encoder: EncoderLike | None = "minilm_l6",
    cache_dir: str | Path | None = None,
    controls: str | Sequence[str] = "auto",
    run_maps: MapRunner = run_maps_here,
    **overrides: Any,
) -> Audit:
    """The audit of :func:`~transferdx.pipeline.auditing.audit` in ``shards`` map tasks, ``shards``
    stat tasks and one reduce: the maps without a valid marker go to ``run_maps`` (default: this
    process, one after another), then :func:`reduce_shards` (the stat tasks missing in this process,
    in one pass). Same arguments and the same result as ``audit``."""
    prepared = prepare_audit(records, options, encoder=encoder, cache_dir=cache_dir, controls=controls, **overrides)
    settings = ShardSettings(shards=shards, run_maps=run_maps, cache_dir=cache_dir, let_go=True)
    return _stage_all(prepared, shard_plan(prepared, shards, cache_dir), settings)


@dataclasses.dataclass(frozen=True)
class ShardSettings:
    """How an audit is split: ``shards`` (1: the one-process audit), ``stage`` (``all``: the maps
    still missing, through ``run_maps``, the stat tasks still missing, through ``run_stats``, then the
    reduce; ``map``: map ``shard`` only; ``stats``: stat task ``shard`` only; ``reduce``: the reduce,
    with any stat task still missing), the cache folder that keeps a lexical audit's markers, and
    ``let_go``: the reduce may drop the prepared audit's records once it has read what it needs of
    them (:meth:`~transferdx.pipeline.auditing.PreparedAudit.let_go`; the caller then holds a spent
    prepared audit) — the command line's and :func:`audit_sharded`'s, which own theirs."""

    shards: int = 1
    stage: str = "all"
    shard: int | None = None
    run_maps: MapRunner = run_maps_here
    cache_dir: str | Path | None = None
    run_stats: StatsRunner = run_stats_here
    let_go: bool = False


def _stage_all(prepared: PreparedAudit, plan: ShardPlan, s: ShardSettings) -> Audit:
    digests = shard_digests(prepared, plan)  # the shares hashed once (plan.shares): maps and reduce reuse them
    if missing := missing_shards(prepared, plan, digests):
        s.run_maps(prepared, plan, missing)
    return reduce_shards(prepared, plan, digests, s.run_stats, s.let_go)


def _stage_stats(prepared: PreparedAudit, plan: ShardPlan, s: ShardSettings) -> dict[str, Any]:
    if s.shard is None:
        raise ValueError(f"audit.stage=stats runs one shard: give audit.shard=0…{plan.shards - 1} (or a list with -m)")
    store, shard = plan.store(prepared), int(s.shard)
    if (done := store.done(shard)) is not None:
        return {**done, "reused": True}
    if missing := missing_shards(prepared, plan):
        raise ShardsIncomplete(f"the statistics read every map's vectors: maps {missing} have not finished")
    return {**compute_stats(prepared, store, [shard])[0], "reused": False}


def _stage_map(prepared: PreparedAudit, plan: ShardPlan, s: ShardSettings) -> dict[str, Any]:
    if s.shard is None:
        raise ValueError(f"audit.stage=map runs one shard: give audit.shard=0…{plan.shards - 1} (or a list with -m)")
    return encode_shard(prepared, plan, int(s.shard))


STAGES: dict[str, Callable[[PreparedAudit, ShardPlan, ShardSettings], Audit | dict[str, Any]]] = {
    "all": _stage_all,
    "map": _stage_map,
    "stats": _stage_stats,
    "reduce": lambda prepared, plan, s: reduce_shards(prepared, plan, run_stats=s.run_stats, let_go=s.let_go),
}


def run_stage(prepared: PreparedAudit, s: ShardSettings) -> Audit | dict[str, Any]:
    """One stage of an audit of ``prepared`` split as ``s`` says: the audit (``all``, ``reduce``) or
    the map's marker (``map``). One shard and ``all`` is the one-process audit, with no markers."""
    if s.stage not in STAGES:
        raise ValueError(f"audit.stage must be one of {sorted(STAGES)}, got {s.stage!r}")
    if s.shards == 1 and s.stage == "all":
        return audit_prepared(prepared)
    return STAGES[s.stage](prepared, shard_plan(prepared, s.shards, s.cache_dir), s)


@dataclasses.dataclass(frozen=True)
class TaskKind:
    """One kind of launched task (``audit.stage=<name>``): how to run missing ones in this process,
    how to write their work files, where a task's work file is, and its sweep folder's name."""

    run_here: MapRunner
    write_work: Callable[[PreparedAudit, ShardPlan, Sequence[int]], list[Path]]
    work: Callable[[ShardPlan, int], Path]
    sweep: str


TASKS: dict[str, TaskKind] = {
    "map": TaskKind(run_maps_here, write_shard_work, ShardPlan.work, "sweep"),
    "stats": TaskKind(
        run_stats_here,
        lambda prepared, plan, shards: write_stats_work(prepared, plan.store(prepared), shards),
        ShardPlan.stats_work,
        "sweep-stats",
    ),
}


def hydra_map_runner(
    task_overrides: Sequence[str], hydra_overrides: Sequence[str], launcher: str, stage: str = "map"
) -> MapRunner:
    """Map tasks (``stage="map"``) or stat tasks (``"stats"``) through a Hydra launcher
    (:data:`TASKS`): ``transferdx-audit -m audit.stage=<stage> audit.shard=<the missing ones>`` with
    the run's own overrides, its ``hydra/launcher`` choice and settings and
    ``audit.work_dir=<plan>``. Each task reads a work file, not the input: a map its texts
    (:func:`write_shard_work`), a stat task its records and the collection's context
    (:func:`~transferdx.pipeline.stat_tasks.write_stats_work`). The basic launcher runs them here,
    in this process. The sweep's folder is ``<plan>/sweep`` (``<plan>/sweep-stats``)."""
    kind = TASKS[stage]
    kept = ("hydra/launcher=", "hydra.launcher.", "hydra.searchpath")
    launcher_args = [o for o in hydra_overrides if o.startswith(kept)]
    dropped = ("audit.stage", "audit.shard", "audit.work_dir", "output_dir")  # each task's own; none writes artifacts
    own = [o for o in task_overrides if o.split("=", 1)[0].lstrip("+~") not in dropped]

    def run(prepared: PreparedAudit, plan: ShardPlan, shards: list[int]) -> None:
        if launcher == "basic":
            kind.run_here(prepared, plan, shards)
            return
        kind.write_work(prepared, plan, shards)
        args = [
            sys.executable,
            "-m",
            "transferdx.cli",
            "-m",
            *own,
            *launcher_args,
            f"audit.stage={stage}",
            f"audit.shard={','.join(map(str, shards))}",
            f"audit.work_dir={plan.folder}",
            f"hydra.sweep.dir={plan.folder / kind.sweep}",
        ]
        done = subprocess.run(args, check=False)
        if done.returncode != 0:
            shown = " ".join(args[3:])
            raise ShardsIncomplete(f"the {stage} sweep ({launcher}) exited with {done.returncode}: {shown}")

    return run
