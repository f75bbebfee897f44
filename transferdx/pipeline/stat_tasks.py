"""The sharded audit's statistics: its records split by query, each shard's per-row values kept on
disk, the reduce pooling them.

After the maps have filled the embedding cache (:mod:`transferdx.pipeline.sharding`), each **stat
task** takes a shard of the *records* — every record of the qids with ``shard_of(qid, N) == i``, of
every source and kind — and computes their per-negative and per-record values
(:func:`~transferdx.auditing.core.shard_values`) under the whole collection's context (ψ's IDF
tables, η's background sample, the positives' owners: :func:`~transferdx.auditing.core.audit_context`).
It writes them beside the maps' markers, in ``values-<i>-of-<N>/`` (``negatives.parquet``,
``records.parquet``, ``arrays.npz``: no pickle), and then ``values-<i>-of-<N>.json``: the digest of the
collection they were computed on (every record, so a changed input reruns every stat task: the
context depends on all of it) and the SHA-256 of each file. The **reduce** reads each shard's files,
checks them against their marker (a file changed or cut short makes its shard missing again: it is
recomputed, not trusted), puts them back in the audit's order
(:func:`~transferdx.auditing.core.merge_values`) and pools each source
(:func:`~transferdx.auditing.core.audit_values`: π̂ and the flags, the composite from each source's
vectors read from the cache one source at a time, the profile, the suspects) — the one-process
audit's bytes.

Stat tasks run in this process take the missing shards' records together, in one pass (one read of
the cache, one tokenisation: the one-process audit's cost), and write each shard's rows; a stat task
launched on its own (``audit.stage=stats audit.shard=i``) loads the input and computes the context
itself, then its shard only."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
import resource
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from transferdx.artifacts import atomic_folder, atomic_write_text, canonical_json, file_hash
from transferdx.auditing.core import AuditContext, SemanticSettings, ShardValues, audit_context, shard_values
from transferdx.inputs.records import Record
from transferdx.pipeline.auditing import PreparedAudit
from transferdx.pipeline.encoders import make_tokenizer

VALUES_VERSION = 1
VALUE_FILES = ("negatives.parquet", "records.parquet", "arrays.npz")


def query_shard(qid: str, shards: int) -> int:
    """The stat task of a query id: the first 8 bytes of SHA-256(qid as UTF-8), big-endian, mod
    ``shards`` (:func:`~transferdx.pipeline.sharding.shard_of` of the qid)."""
    from transferdx.pipeline.sharding import shard_of

    return shard_of(qid, shards)


def collection_digest(records: Sequence[Record]) -> str:
    """SHA-256 over every record as the statistics read it (source, kind, qid, query, each
    positive's and negative's id, text and metadata), in the audit's order (source, qid) — the order
    the values are computed in, whatever the file's: the stat tasks' values depend on all of them
    through the context."""
    digest = hashlib.sha256()
    for r in sorted(records, key=lambda r: (r.source, r.qid)):
        passages = [(p.id, p.text, p.method, p.relation, p.rank, p.judgment, p.score) for p in r.negatives]
        row = (r.source, r.kind, r.qid, r.query, [(p.id, p.text) for p in r.positives], passages)
        digest.update(json.dumps(row, ensure_ascii=False).encode("utf-8"))
        digest.update(b"\n")
    return digest.hexdigest()


@dataclasses.dataclass(frozen=True)
class ValueStore:
    """Where the stat tasks of one sharded audit keep their values: ``folder`` (the maps' plan
    folder), ``shards`` and the digest of the collection they are computed on."""

    folder: Path
    shards: int
    digest: str

    def values(self, shard: int) -> Path:
        return self.folder / f"values-{shard:04d}-of-{self.shards:04d}"

    def marker(self, shard: int) -> Path:
        return self.folder / f"values-{shard:04d}-of-{self.shards:04d}.json"

    def done(self, shard: int) -> dict[str, Any] | None:
        """The marker of ``shard`` when it is readable, for this collection, and every file it names
        still has the SHA-256 it recorded (else None: the shard is to compute again)."""
        try:
            record = json.loads(self.marker(shard).read_text(encoding="utf-8"))
            if not isinstance(record, dict) or record.get("version") != VALUES_VERSION:
                return None
            if record.get("digest") != self.digest:
                return None
            files = record.get("files") or {}
            if sorted(files) != sorted(VALUE_FILES):
                return None
            if any(file_hash(self.values(shard) / name) != files[name] for name in VALUE_FILES):
                return None
        except (OSError, ValueError):
            return None
        return record

    def missing(self) -> list[int]:
        """The stat tasks without a valid marker and files."""
        return [i for i in range(self.shards) if self.done(i) is None]

    def write(self, shard: int, values: ShardValues, started: float) -> dict[str, Any]:
        """Write ``values`` (shard ``shard``'s rows) into their folder (published whole, atomically),
        then the marker with each file's SHA-256."""
        with atomic_folder(self.values(shard)) as out:
            values.negatives.to_parquet(out / "negatives.parquet", index=False)
            values.records.to_parquet(out / "records.parquet", index=False)
            with open(out / "arrays.npz", "wb") as handle:
                if values.probability is None:
                    np.savez(handle, other_positive=values.other_positive)
                else:
                    np.savez(handle, other_positive=values.other_positive, probability=values.probability)
        record = {
            "version": VALUES_VERSION,
            "stage": "stats",
            "shard": shard,
            "shards": self.shards,
            "digest": self.digest,
            "records": len(values.records),
            "negatives": len(values.negatives),
            "files": {name: file_hash(self.values(shard) / name) for name in VALUE_FILES},
            "seconds": round(time.perf_counter() - started, 3),
            "peak_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
            "host": os.uname().nodename,
        }
        atomic_write_text(self.marker(shard), canonical_json(record))
        return record

    def read(self, shard: int) -> ShardValues:
        """Shard ``shard``'s values as :meth:`write` wrote them (no pickle: Parquet and plain arrays)."""
        folder = self.values(shard)
        with np.load(io.BytesIO((folder / "arrays.npz").read_bytes()), allow_pickle=False) as arrays:
            probability = arrays["probability"] if "probability" in arrays.files else None
            other = arrays["other_positive"]
        return ShardValues(
            pd.read_parquet(folder / "negatives.parquet"),
            pd.read_parquet(folder / "records.parquet"),
            probability,
            other,
        )


def value_store(prepared: PreparedAudit, folder: Path, shards: int) -> ValueStore:
    """The :class:`ValueStore` of ``prepared``'s records in ``shards`` query shards under ``folder``."""
    return ValueStore(Path(folder), shards, collection_digest(prepared.loaded.records))


def prepared_context(prepared: PreparedAudit) -> AuditContext:
    """The whole collection's :func:`~transferdx.auditing.core.audit_context` under ``prepared``'s
    options (tokenizer, IDF corpus, background sample)."""
    options = prepared.options
    return audit_context(
        prepared.loaded.records,
        make_tokenizer(options.tokenizer, **options.tokenizer_options),
        idf_corpus=options.idf,
        external_texts=options.idf_texts,
        semantic=options.semantic if prepared.encoder is not None else None,
        seed=options.seed,
    )


def _values_of(prepared: PreparedAudit, records: Sequence[Record], context: AuditContext) -> ShardValues:
    options = prepared.options
    return shard_values(
        records,
        make_tokenizer(options.tokenizer, **options.tokenizer_options),
        context,
        encoder=prepared.encoder,
        semantic=options.semantic or SemanticSettings(),
        seed=options.seed,
        kinds=dict(options.kinds),
    )


def _rows_of(values: ShardValues, shards: int, shard: int) -> ShardValues:
    """The rows of ``values`` whose qid is in stat task ``shard``."""
    shard_of_qid: dict[str, int] = {}

    def mask(frame: pd.DataFrame) -> np.ndarray:
        qids = frame["qid"].to_numpy(str)
        for q in set(qids.tolist()) - shard_of_qid.keys():
            shard_of_qid[q] = query_shard(q, shards)
        return np.fromiter((shard_of_qid[q] == shard for q in qids.tolist()), dtype=bool, count=len(qids))

    neg = mask(values.negatives)
    return ShardValues(
        values.negatives[neg].reset_index(drop=True),
        values.records[mask(values.records)].reset_index(drop=True),
        values.probability[neg] if values.probability is not None else None,
        values.other_positive[neg],
    )


def compute_stats(prepared: PreparedAudit, store: ValueStore, shards: Sequence[int]) -> list[dict[str, Any]]:
    """The stat tasks ``shards`` in this process: their records' values in one pass under the whole
    collection's context, each shard's rows written to ``store`` (its marker last). Shards whose
    marker is valid are left as they are."""
    todo = [i for i in shards if store.done(i) is None]
    if not todo:
        return []
    for i in todo:
        if not 0 <= i < store.shards:
            raise ValueError(f"audit.shard must be in 0 … {store.shards - 1}, got {i}")
    started, wanted = time.perf_counter(), set(todo)
    records = [r for r in prepared.loaded.records if query_shard(r.qid, store.shards) in wanted]
    values = _values_of(prepared, records, prepared_context(prepared))
    del records
    return [store.write(i, _rows_of(values, store.shards, i), started) for i in todo]


def read_values(store: ValueStore) -> list[ShardValues]:
    """Every stat task's values, in shard order (each verified against its marker by the caller)."""
    return [store.read(i) for i in range(store.shards)]


def stats_line(marker: dict[str, Any]) -> str:
    """One line on a stat task: its shard, records and negatives, time and peak memory."""
    head = f"statistics {marker['shard']} of {marker['shards']}: {marker['records']} records"
    return f"{head}, {marker['negatives']} negatives; {marker['seconds']:.1f}s, peak {marker['peak_mb']:.0f} MB"
