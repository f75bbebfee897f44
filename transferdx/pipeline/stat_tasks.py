"""The sharded audit's statistics: its records split by query, each shard's per-row values kept on
disk, the reduce pooling them.

After the maps have filled the embedding cache (:mod:`transferdx.pipeline.sharding`), each **stat
task** takes a shard of the *records* — every record of the qids with ``shard_of(qid, N) == i``, of
every source and kind — and computes their per-negative and per-record values
(:func:`~transferdx.auditing.core.shard_values`) under the whole collection's context (ψ's IDF
tables, η's background sample, the positives' owners: :func:`~transferdx.auditing.core.audit_context`).
It writes them beside the maps' markers, in ``values-<i>-of-<N>/`` (``negatives.parquet``,
``records.parquet``, ``arrays.npz``, and its rows' texts, ``texts.bin`` and ``texts.npz``:
:mod:`~transferdx.pipeline.store_texts`; no pickle), and then ``values-<i>-of-<N>.json``: the digest of the
collection they were computed on (every record, so a changed input reruns every stat task: the
context depends on all of it) and the SHA-256 of each file. The **reduce** reads each shard's files,
checks them against their marker (a file changed or cut short makes its shard missing again: it is
recomputed, not trusted), puts them back in the audit's order
(:func:`~transferdx.auditing.core.merge_values`) and pools each source
(:func:`~transferdx.auditing.core.pooled_values`: π̂ and the flags, the composite from each source's
vectors read from the cache one source at a time, the profile, the suspects with their texts) — the
one-process audit's bytes.

Stat tasks run in this process take the missing shards' records together, in one pass (one read of
the cache, one tokenisation: the one-process audit's cost), and write each shard's rows. For stat
tasks launched elsewhere, ``audit.stage=all`` first writes the context once
(``context-<digest>.json.gz`` and ``.npz``: :func:`write_context`) and each task's records
(``values-<i>-of-<N>.work.jsonl.gz``: :func:`write_stats_work`); a task started with
``audit.work_dir`` reads those two files only (:func:`stats_from_work`) — never the input, never the
other shards' records. A stat task started by hand without it (``audit.stage=stats audit.shard=i``)
loads the input and computes the context itself, then its shard only."""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import io
import json
import os
import resource
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from transferdx.artifacts import (
    atomic_file,
    atomic_folder,
    atomic_write_bytes,
    atomic_write_text,
    canonical_json,
    file_hash,
)
from transferdx.auditing.core import (
    AuditContext,
    RecordKeys,
    SemanticSettings,
    ShardValues,
    audit_context,
    shard_values,
)
from transferdx.diagnostics.lexical import IdfTables
from transferdx.embed.cache import EmbeddingCache
from transferdx.inputs.records import Passage, Record
from transferdx.pipeline.auditing import PreparedAudit
from transferdx.pipeline.encoders import make_tokenizer
from transferdx.pipeline.partition import shard_of
from transferdx.pipeline.settings import AuditOptions
from transferdx.pipeline.store_texts import TEXT_FILES, StoreTexts, row_texts, store_texts, write_row_texts

VALUES_VERSION = 3  # 3: the rows' texts (2: without; 1: without the text reasons among the arrays)
VALUE_FILES = ("negatives.parquet", "records.parquet", "arrays.npz", *TEXT_FILES)
TEXT_PREFIX = "text_"  # arrays.npz: text_<reason>, each text reason's hits per negative


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


STATS_WORK_SUFFIX = ".work.jsonl.gz"


def stats_work_path(folder: Path, shard: int, shards: int) -> Path:
    """``<folder>/values-<i>-of-<N>.work.jsonl.gz``: stat task ``shard``'s records."""
    return Path(folder) / f"values-{shard:04d}-of-{shards:04d}{STATS_WORK_SUFFIX}"


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

    def work(self, shard: int) -> Path:
        """The records stat task ``shard`` reads when it was launched (:func:`write_stats_work`)."""
        return stats_work_path(self.folder, shard, self.shards)

    def context(self) -> Path:
        """The collection's context, for launched stat tasks (:func:`write_context`; ``.npz`` beside)."""
        return self.folder / f"context-{self.digest[:20]}.json.gz"

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

    def write(self, shard: int, values: ShardValues, records: Sequence[Record], started: float) -> dict[str, Any]:
        """Write ``values`` (shard ``shard``'s rows) and their ``records``' texts
        (:func:`~transferdx.pipeline.store_texts.write_row_texts`; ``records`` in the values' order)
        into their folder (published whole, atomically), then the marker with each file's SHA-256."""
        if len(records) != len(values.records):
            raise ValueError(f"stat task {shard}: {len(records)} records for {len(values.records)} rows of values")
        with atomic_folder(self.values(shard)) as out:
            write_row_texts(out, row_texts(records))
            values.negatives.to_parquet(out / "negatives.parquet", index=False)
            values.records.to_parquet(out / "records.parquet", index=False)
            arrays: dict[str, Any] = {"other_positive": values.other_positive}
            arrays |= {f"{TEXT_PREFIX}{name}": hit for name, hit in values.text_hits.items()}
            if values.probability is not None:
                arrays["probability"] = values.probability
            with open(out / "arrays.npz", "wb") as handle:
                np.savez(handle, **arrays)
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

    def texts(self, keys: RecordKeys | None = None) -> StoreTexts:
        """The rows' texts of every stat task (the reduce's, in the merged values' order); ``keys``:
        checked against the stat tasks' records first (:func:`~transferdx.pipeline.store_texts.store_texts`)."""
        return store_texts([self.values(i) for i in range(self.shards)], keys)

    def read(
        self, shard: int, columns: Mapping[str, Sequence[str]] | None = None, source: str | None = None
    ) -> ShardValues:
        """Shard ``shard``'s values as :meth:`write` wrote them (no pickle: Parquet and plain arrays);
        ``columns``: only these columns of ``"negatives"`` and ``"records"``, those the files have
        (e.g. :data:`~transferdx.auditing.core.COMPOSITE_COLUMNS`), in the files' order; ``source``:
        only that source's rows (the others read and let go, one shard at a time)."""
        folder = self.values(shard)
        with np.load(io.BytesIO((folder / "arrays.npz").read_bytes()), allow_pickle=False) as arrays:
            probability = arrays["probability"] if "probability" in arrays.files else None
            other = arrays["other_positive"]
            hits = {k[len(TEXT_PREFIX) :]: arrays[k] for k in arrays.files if k.startswith(TEXT_PREFIX)}
        frames = []
        for table in ("negatives", "records"):
            path = folder / f"{table}.parquet"
            wanted = None
            if columns is not None:
                chosen = set(columns[table])
                wanted = [c for c in pq.read_schema(path).names if c in chosen]
            frames.append(pd.read_parquet(path, columns=wanted))
        values = ShardValues(frames[0], frames[1], probability, other, hits)
        return values if source is None else _of_source(values, source)


def _of_source(values: ShardValues, source: str) -> ShardValues:
    """The rows of ``values`` whose ``source`` is ``source`` (per negative and per record), renumbered."""
    return _masked(
        values,
        (values.negatives["source"] == source).to_numpy(bool),
        (values.records["source"] == source).to_numpy(bool),
    )


def _masked(values: ShardValues, neg: np.ndarray, rec: np.ndarray) -> ShardValues:
    """The rows of ``values`` where ``neg`` (per negative: the frame and every per-negative array)
    and ``rec`` (per record) hold, renumbered."""
    return ShardValues(
        values.negatives[neg].reset_index(drop=True),
        values.records[rec].reset_index(drop=True),
        None if values.probability is None else values.probability[neg],
        values.other_positive[neg],
        {name: hit[neg] for name, hit in values.text_hits.items()},
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


def _values_of(
    options: AuditOptions, encoder: EmbeddingCache | None, records: Sequence[Record], context: AuditContext
) -> ShardValues:
    """:func:`~transferdx.auditing.core.shard_values` of ``records`` under ``options`` (the encoder
    only when the audit is semantic)."""
    return shard_values(
        records,
        make_tokenizer(options.tokenizer, **options.tokenizer_options),
        context,
        encoder=encoder if options.semantic is not None else None,
        semantic=options.semantic or SemanticSettings(),
        seed=options.seed,
        kinds=dict(options.kinds),
    )


def _query_parts(records: Sequence[Record], shards: int, wanted: Sequence[int]) -> dict[int, list[Record]]:
    """The records of each stat task in ``wanted`` (every record whose qid is in it), in their order."""
    parts: dict[int, list[Record]] = {i: [] for i in wanted}
    for r in records:
        if (i := shard_of(r.qid, shards)) in parts:
            parts[i].append(r)
    return parts


def _rows_of(values: ShardValues, shards: int, shard: int) -> ShardValues:
    """The rows of ``values`` whose qid is in stat task ``shard`` (:func:`shard_of` of each distinct
    qid as the records hold it: no fixed-width str copy, which would drop a trailing NUL)."""

    def mask(frame: pd.DataFrame) -> np.ndarray:
        codes, qids = pd.factorize(frame["qid"])
        mine = np.fromiter((shard_of(str(q), shards) == shard for q in qids), dtype=bool, count=len(qids))
        return mine[codes]

    return _masked(values, mask(values.negatives), mask(values.records))


def compute_stats(
    prepared: PreparedAudit, store: ValueStore, shards: Sequence[int], context: AuditContext | None = None
) -> list[dict[str, Any]]:
    """The stat tasks ``shards`` in this process: their records' values in one pass under the whole
    collection's context (``context``: :func:`prepared_context`, when the caller has it), each
    shard's rows written to ``store`` (its marker last). Shards whose marker is valid are left as
    they are."""
    todo = [i for i in shards if store.done(i) is None]
    if not todo:
        return []
    for i in todo:
        if not 0 <= i < store.shards:
            raise ValueError(f"audit.shard must be in 0 … {store.shards - 1}, got {i}")
    started = time.perf_counter()
    parts = _query_parts(prepared.loaded.records, store.shards, todo)
    records = [r for part in parts.values() for r in part]
    values = _values_of(prepared.options, prepared.encoder, records, context or prepared_context(prepared))
    del records
    return [store.write(i, _rows_of(values, store.shards, i), _in_audit_order(parts[i]), started) for i in todo]


def _in_audit_order(records: Sequence[Record]) -> list[Record]:
    """``records`` in the order their values have: (source, qid), stable."""
    return sorted(records, key=lambda r: (r.source, r.qid))


def _passage_row(p: Passage) -> list[Any]:
    return [p.id, p.text, p.method, p.relation, p.rank, p.judgment, p.score]


def _passage(row: list[Any]) -> Passage:
    return Passage(*row)


def write_stats_work(prepared: PreparedAudit, store: ValueStore, shards: Sequence[int]) -> list[Path]:
    """For each stat task in ``shards``, its records (every record of its qids), one JSON line each
    with every field the statistics read, after a header line (version, shard, N, the collection's
    digest); gzip, written atomically. The context goes beside them once (:func:`write_context`)."""
    if not context_written(store):  # the context is the costly part: built once per collection
        write_context(store, prepared_context(prepared))
    parts = _query_parts(prepared.loaded.records, store.shards, shards)
    paths = []
    for i in shards:
        head = {"version": VALUES_VERSION, "shard": i, "shards": store.shards, "digest": store.digest}
        with atomic_file(store.work(i)) as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as out:
            out.write((json.dumps(head) + "\n").encode("utf-8"))
            for r in parts[i]:
                row = [r.qid, r.query, r.source, r.kind, [_passage_row(p) for p in r.positives]]
                row.append([_passage_row(n) for n in r.negatives])
                out.write((json.dumps(row, ensure_ascii=False) + "\n").encode("utf-8"))
        paths.append(store.work(i))
    return paths


def context_written(store: ValueStore) -> bool:
    """Whether ``store``'s context files are there and read back whole, for its collection."""
    try:
        read_context(store.context(), store.digest)
    except (OSError, ValueError, KeyError, EOFError):
        return False
    return True


def write_context(store: ValueStore, context: AuditContext) -> Path:
    """The collection's :class:`~transferdx.auditing.core.AuditContext` as data: ψ's vocabulary (in
    its order), the IDF corpora's names and N, the background sample and the positives' owners in
    ``context-<digest>.json.gz``; each corpus's document frequencies in ``.npz`` beside (NumPy arrays,
    read without pickle), both written atomically."""
    path, arrays = store.context(), store.context().with_suffix("").with_suffix(".npz")
    names = list(context.idf.corpora)
    buffer = io.BytesIO()
    np.savez(buffer, *[context.idf.corpora[name][0] for name in names])  # arr_0, arr_1, … in the names' order
    atomic_write_bytes(arrays, buffer.getvalue())
    owners = {key: (sorted(held) if isinstance(held, set) else held) for key, held in context.positives.items()}
    data = {
        "version": VALUES_VERSION,
        "digest": store.digest,
        "vocab": list(context.idf.vocab),
        "corpora": [[name, int(context.idf.corpora[name][1])] for name in names],
        "background": list(context.background),
        "positives": owners,
    }
    atomic_write_bytes(path, gzip.compress(json.dumps(data, ensure_ascii=False).encode("utf-8"), mtime=0))
    return path


def read_context(path: str | Path, digest: str | None = None) -> AuditContext:
    """:func:`write_context`'s files back as the :class:`~transferdx.auditing.core.AuditContext`;
    ValueError when they are another collection's (``digest``) or cannot be read whole."""
    path = Path(path)
    try:
        data = json.loads(gzip.decompress(path.read_bytes()))
    except (EOFError, gzip.BadGzipFile) as exc:
        raise ValueError(f"{path}: cut short or not gzip ({exc})") from None
    if digest is not None and data.get("digest") != digest:
        raise ValueError(f"{path}: the context of another collection")
    with np.load(io.BytesIO(path.with_suffix("").with_suffix(".npz").read_bytes()), allow_pickle=False) as arrays:
        corpora = {name: (arrays[f"arr_{k}"], int(n)) for k, (name, n) in enumerate(data["corpora"])}
    vocab = {token: i for i, token in enumerate(data["vocab"])}
    owners = {key: (set(held) if isinstance(held, list) else held) for key, held in data["positives"].items()}
    return AuditContext(IdfTables(vocab, corpora), tuple(data["background"]), owners)


def stats_from_work(path: str | Path, options: AuditOptions, encoder: EmbeddingCache | None) -> dict[str, Any]:
    """One launched stat task: its records from its work file (:func:`write_stats_work`), the
    context from the collection's files, its values into the store beside them. Never loads the
    input. Returns its marker (``"reused": true`` when it was already done)."""
    started, path = time.perf_counter(), Path(path)
    try:
        with gzip.open(path, "rt", encoding="utf-8") as lines:
            head = json.loads(next(lines))
            records = [
                Record(row[0], row[1], tuple(map(_passage, row[4])), tuple(map(_passage, row[5])), row[2], row[3])
                for row in map(json.loads, lines)
            ]
    except (OSError, ValueError, StopIteration, IndexError, TypeError) as exc:
        raise ValueError(f"{path}: the stat task's work file cannot be read ({exc}); rerun audit.stage=all") from None
    store = ValueStore(path.parent, int(head["shards"]), str(head["digest"]))
    shard = int(head["shard"])
    if (done := store.done(shard)) is not None:
        return {**done, "reused": True}
    values = _values_of(options, encoder, records, read_context(store.context(), store.digest))
    return {**store.write(shard, values, _in_audit_order(records), started), "reused": False}


def read_values(store: ValueStore, columns: Mapping[str, Sequence[str]] | None = None) -> Iterator[ShardValues]:
    """Every stat task's values, in shard order, one at a time (each verified against its marker by
    the caller); ``columns``: only those (:meth:`ValueStore.read`)."""
    return (store.read(i, columns) for i in range(store.shards))


def stats_line(marker: dict[str, Any]) -> str:
    """One line on a stat task: its shard, records and negatives, time and peak memory."""
    head = f"statistics {marker['shard']} of {marker['shards']}: {marker['records']} records"
    return f"{head}, {marker['negatives']} negatives; {marker['seconds']:.1f}s, peak {marker['peak_mb']:.0f} MB"
