"""The texts of a sharded audit's rows: written by each stat task beside its values, read back by the
reduce, so that the reduce needs no record.

A stat task writes its rows' texts deduplicated (:func:`write_row_texts`): ``texts.bin`` (the
shard's distinct texts, first-seen, UTF-8, one after another) and ``texts.npz`` (``offsets``: where
each starts and ends in it; codes into them: per record ``query`` and ``positive`` — positives[0]
—, per negative ``negative``), rows in the shard's audit order, as its values. Plain bytes rather
than a Parquet column: a step decodes the texts it needs straight into Python strings, with no
Arrow buffer beside them (Arrow's allocator keeps what it frees: a Parquet column of a shard's texts
left ~200 MB resident at 2·10⁶ negatives). The reduce maps a row of the merged values (the audit's order) back to
its shard and its row there (:func:`store_texts`: the (source, qid) order the merge uses) and reads
the texts a step needs one shard at a time (:class:`StoreTexts`): a source's for its composite, the
suspects', the negatives' for ``Audit.negatives``. A text read from several shards is one Python
string in what a step returns (as the loaded records share one object per distinct passage)."""

from __future__ import annotations

import io
import mmap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from transferdx.auditing.core import RecordKeys, audit_order, check_row_keys
from transferdx.inputs.records import Record

TEXT_FILES = ("texts.bin", "texts.npz")


@dataclass(frozen=True)
class RowTexts:
    """Some records' texts, each distinct text once: ``distinct`` (first-seen), and codes into it —
    per record its ``query`` and ``positive`` (positives[0]), per negative its ``negative`` text."""

    distinct: list[str]
    query: np.ndarray
    positive: np.ndarray
    negative: np.ndarray


def row_texts(records: Sequence[Record]) -> RowTexts:
    """:class:`RowTexts` of ``records``, in their order (a shard's records in the audit's order)."""
    at: dict[str, int] = {}

    def codes(texts: Sequence[str]) -> np.ndarray:
        return np.fromiter((at.setdefault(t, len(at)) for t in texts), dtype=np.int64, count=len(texts))

    query = codes([r.query for r in records])
    positive = codes([r.positives[0].text for r in records])
    negative = codes([n.text for r in records for n in r.negatives])
    return RowTexts(list(at), query, positive, negative)


def write_row_texts(folder: Path, texts: RowTexts) -> None:
    """``texts`` into ``folder``: :data:`TEXT_FILES` (UTF-8 bytes and NumPy arrays; nothing pickled)."""
    encoded = [t.encode("utf-8") for t in texts.distinct]
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded)), out=offsets[1:])
    (folder / "texts.bin").write_bytes(b"".join(encoded))
    del encoded
    with open(folder / "texts.npz", "wb") as handle:
        np.savez(handle, offsets=offsets, query=texts.query, positive=texts.positive, negative=texts.negative)


def _starts(counts: np.ndarray) -> np.ndarray:
    """Each block's first position when blocks of ``counts`` follow one another."""
    return np.cumsum(counts) - counts


class StoreTexts:
    """The texts of a sharded audit's rows, read from its stat tasks' folders. Rows are the merged
    values' (the audit's order): ``rec_shard``/``rec_local`` place each record in its shard,
    ``starts[shard]`` gives each of a shard's records its first negative there, ``counts`` each
    record's negatives."""

    def __init__(
        self,
        folders: Sequence[Path],
        rec_shard: np.ndarray,
        rec_local: np.ndarray,
        starts: Sequence[np.ndarray],
        counts: np.ndarray,
        spans: Mapping[str, tuple[int, int]] | None = None,
    ) -> None:
        self.folders = [Path(f) for f in folders]
        self.rec_shard, self.rec_local, self.starts, self.counts = rec_shard, rec_local, list(starts), counts
        self.neg_start = _starts(counts)
        self.spans = dict(spans or {})

    def records(self, at: np.ndarray, neg_index: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:data:`~transferdx.auditing.core.SuspectTexts`: for each record row ``at`` its query and
        positives[0], and the text of its negative ``neg_index``."""
        return self._texts(np.asarray(at, dtype=np.int64), np.asarray(neg_index, dtype=np.int64))

    def source(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:data:`~transferdx.auditing.core.SourceTexts`: per record row in ``rows`` its query and
        positives[0], then every negative of those records, in order."""
        rows = np.asarray(rows, dtype=np.int64)
        counts = self.counts[rows]
        owner = np.repeat(rows, counts)
        k = np.arange(len(owner), dtype=np.int64) - np.repeat(_starts(counts), counts)
        return self._texts(rows, k, owner)

    def negatives(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For each negative row (the merged values' per-negative order) its query and its text."""
        rows = np.asarray(rows, dtype=np.int64)
        owner = np.searchsorted(self.neg_start, rows, side="right") - 1
        query, _, text = self._texts(owner, rows - self.neg_start[owner])
        return query, text

    def _texts(
        self, at: np.ndarray, neg_index: np.ndarray, neg_owner: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Queries and positives[0] of records ``at``; texts of negatives ``neg_index`` of records
        ``neg_owner`` (default ``at``), one shard at a time; each distinct text one string object."""
        owner = at if neg_owner is None else neg_owner
        query, positive = np.empty(len(at), dtype=object), np.empty(len(at), dtype=object)
        negative = np.empty(len(owner), dtype=object)
        pool: dict[str, str] = {}
        rec_shard, neg_shard = self.rec_shard[at], self.rec_shard[owner]
        for shard in np.unique(np.concatenate([rec_shard, neg_shard])).tolist():
            mine, theirs = np.flatnonzero(rec_shard == shard), np.flatnonzero(neg_shard == shard)
            local = self.rec_local[at[mine]]
            neg_rows = self.starts[shard][self.rec_local[owner[theirs]]] + neg_index[theirs]
            folder = self.folders[shard]
            with np.load(io.BytesIO((folder / "texts.npz").read_bytes()), allow_pickle=False) as codes:
                q, p, n = codes["query"][local], codes["positive"][local], codes["negative"][neg_rows]
                offsets = codes["offsets"]
            used = np.unique(np.concatenate([q, p, n]))
            strings = np.empty(len(used), dtype=object)
            strings[:] = _decoded(folder / "texts.bin", offsets[used].tolist(), offsets[used + 1].tolist(), pool)
            query[mine] = strings[np.searchsorted(used, q)]
            positive[mine] = strings[np.searchsorted(used, p)]
            negative[theirs] = strings[np.searchsorted(used, n)]
        return query, positive, negative


def _decoded(path: Path, starts: list[int], ends: list[int], pool: dict[str, str]) -> list[str]:
    """The texts at ``starts``/``ends`` of the UTF-8 file ``path``, each the one object ``pool``
    holds for it (added when new). The file is mapped, not read: a step that needs a few texts (a
    chunk of the suspects written) touches only their pages, not a copy of the shard's texts."""
    if not starts:
        return []
    if path.stat().st_size == 0:  # every text empty (a map needs a non-empty file)
        return [pool.setdefault("", "") for _ in starts]
    out = []
    with open(path, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        for a, b in zip(starts, ends, strict=True):
            text = mapped[a:b].decode("utf-8")
            out.append(pool.setdefault(text, text))
    return out


def store_texts(folders: Sequence[Path], keys: RecordKeys | None = None) -> StoreTexts:
    """The :class:`StoreTexts` of the stat tasks' values in ``folders`` (in shard order): each
    shard's records (source, qid, n_negatives) put in the audit's order as
    :func:`~transferdx.auditing.core.merge_values` puts them. ``keys``: ValueError unless those are
    the records ``keys`` names (:func:`~transferdx.auditing.core.check_row_keys`), checked on the
    records alone, before any value or vector is read."""
    frames, starts = [], []
    for shard, folder in enumerate(folders):
        frame = pd.read_parquet(Path(folder) / "records.parquet", columns=["source", "qid", "n_negatives"])
        counts = frame["n_negatives"].to_numpy(dtype=np.int64)
        starts.append(_starts(counts))
        frames.append(
            pd.DataFrame(
                {
                    "source": frame["source"].astype(str),
                    "qid": frame["qid"].astype(str),
                    "n": counts,
                    "shard": np.full(len(frame), shard, dtype=np.int64),
                    "local": np.arange(len(frame), dtype=np.int64),
                }
            )
        )
    whole = pd.concat(frames, ignore_index=True)
    frames.clear()
    whole = whole.take(audit_order(whole)).reset_index(drop=True)
    if keys is not None:
        check_row_keys(whole, int(whole["n"].sum()), keys)
    names, first, sizes = np.unique(whole["source"].to_numpy(dtype=object), return_index=True, return_counts=True)
    spans = {str(n): (int(a), int(k)) for n, a, k in zip(names, first, sizes, strict=True)}
    return StoreTexts(
        folders, whole["shard"].to_numpy(), whole["local"].to_numpy(), starts, whole["n"].to_numpy(), spans
    )
