"""Columnar inputs read a batch at a time (:class:`~transferdx.inputs.tables.ColumnarRows`): a
Parquet or Arrow file, a ``datasets.Dataset`` or a ``DataFrame`` gives the rows (and records) it
gave as one list of dicts, whatever the batch and row-group sizes, without ever holding them all;
a file that changes while it is read is an error naming it."""

from __future__ import annotations

import gc
import os
import tracemalloc

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import transferdx as tdx
from transferdx.inputs import tables
from transferdx.inputs.records import InputError
from transferdx.inputs.tables import ColumnarRows, by_position, frame_table


def triplets(n_queries: int, k: int, passages: list[str]) -> pd.DataFrame:
    """A ``mine_hard_negatives`` triplet table: one row per (query, positive, negative)."""
    rng = np.random.default_rng(0)
    rows = []
    for q in range(n_queries):
        picks = rng.choice(len(passages), size=k + 1, replace=False)
        rows += [(f"query {q}", passages[picks[0]], passages[j]) for j in picks[1:]]
    return pd.DataFrame(rows, columns=["query", "positive", "negative"])


def records_of(loaded) -> list:
    return [(r.qid, r.query, r.positives, r.negatives) for r in loaded.records]


def test_columnar_rows_is_a_sequence_of_its_batches():
    data = [{"i": i, "t": f"row {i}"} for i in range(11)]
    calls = []

    def batch(a: int, b: int) -> list[dict]:
        calls.append((a, b))
        return [dict(r) for r in data[a:b]]

    rows = ColumnarRows(len(data), by_position(len(data), batch))
    assert len(rows) == 11 and list(rows) == data and list(rows) == data  # each iteration starts over
    assert rows[0] == data[0] and rows[-1] == data[-1] and rows[3:6] == data[3:6] and rows[::4] == data[::4]
    with pytest.raises(IndexError):
        rows[11]
    assert max(b - a for a, b in calls) <= tables.ROW_BATCH


@pytest.mark.parametrize(("row_group", "batch"), [(None, 4096), (5, 3), (7, 7), (1000, 4)])
def test_parquet_read_in_batches_gives_the_records_of_the_whole_file(tmp_path, monkeypatch, row_group, batch):
    """Batches that straddle row groups, and both smaller and larger than them: the same records,
    exclusions and descriptors as the DataFrame the file was written from (read whole), and
    indexing reads the right row group."""
    passages = [f"passage {i} about topic {i % 7}" for i in range(30)]
    frame = triplets(9, 4, passages)
    frame.loc[5, "negative"] = None  # a bad cell: its exclusion cites the same row either way
    path = tmp_path / "mined.parquet"
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), path, row_group_size=row_group)
    monkeypatch.setattr(tables, "ROW_BATCH", batch)
    from_file = tdx.load(path, on_error="skip")
    whole = tdx.load(frame, on_error="skip")
    assert records_of(from_file) == records_of(whole) and len(from_file.records) == 9
    assert [(e.line, e.field, e.reason) for e in from_file.exclusions] == [
        (e.line, e.field, e.reason) for e in whole.exclusions
    ]
    columns, rows = tables._parquet_rows(path)
    assert columns == ["query", "positive", "negative"] and len(rows) == len(frame)
    assert [rows[i]["negative"] for i in (0, 6, 17, len(frame) - 1)] == list(frame["negative"].iloc[[0, 6, 17, -1]])


def test_arrow_dataset_and_frame_read_in_batches(tmp_path, monkeypatch):
    datasets = pytest.importorskip("datasets")
    frame = triplets(7, 3, [f"text {i}" for i in range(20)])
    monkeypatch.setattr(tables, "ROW_BATCH", 4)
    want = records_of(tdx.load(frame))
    ds = datasets.Dataset.from_pandas(frame, preserve_index=False)
    ds.save_to_disk(str(tmp_path / "saved"))
    arrow = next((tmp_path / "saved").glob("*.arrow"))
    for data in (ds, tmp_path / "saved", arrow):
        assert records_of(tdx.load(data)) == want, data
    reordered = ds.shuffle(seed=0).select(range(3, 21))  # an indices mapping over the table
    assert records_of(tdx.load(reordered)) == records_of(tdx.load(pd.DataFrame(reordered.to_list())))
    table = frame_table(frame)
    assert list(table.rows) == frame.to_dict("records") and list(table.lines) == list(range(1, len(frame) + 1))


def test_a_parquet_file_rewritten_while_it_is_read_is_an_error(tmp_path):
    frame = triplets(3, 2, [f"text {i}" for i in range(10)])
    path = tmp_path / "mined.parquet"
    frame.to_parquet(path, index=False)
    _, rows = tables._parquet_rows(path)
    assert len(list(rows)) == len(frame)
    frame.iloc[:2].to_parquet(path, index=False)
    os.utime(path, ns=(0, 10**18))  # a new mtime even on a coarse clock
    with pytest.raises(InputError, match="changed while it was being read") as caught:
        list(rows)
    assert "mined.parquet" in str(caught.value)


def test_a_triplet_parquet_file_is_not_held_as_python_rows(tmp_path, monkeypatch):
    """16,000 triplet rows over 40 passages of ~2 kB: loading holds one copy per distinct text,
    not a dict per row with its own copies (old reader: every row as Python values, ~64 MB of
    text, then every negative's text until the records were made)."""
    rng = np.random.default_rng(1)
    passages = [f"passage {i} " + " ".join(f"w{j}" for j in rng.integers(0, 500, 400)) for i in range(40)]
    frame = triplets(2000, 8, passages)
    path = tmp_path / "mined.parquet"
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), path, row_group_size=1000)
    copies = int(frame["positive"].str.len().sum() + frame["negative"].str.len().sum())
    del frame
    monkeypatch.setattr(tables, "ROW_BATCH", 256)
    gc.collect()
    tracemalloc.start()
    try:
        loaded = tdx.load(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(loaded.records) == 2000 and sum(len(r.negatives) for r in loaded.records) == 16_000
    assert peak < copies / 4, (peak, copies)


def test_the_clean_verb_keeps_the_rows_it_read(tmp_path):
    """With ``keep_tables`` (the clean verb) a Parquet file's rows are read once and kept, so the
    copy is written from what the audit read even if the file is re-saved meanwhile."""
    frame = triplets(4, 3, [f"text {i}" for i in range(12)])
    path = tmp_path / "mined.parquet"
    frame.to_parquet(path, index=False)
    loaded = tdx.load(path, keep_tables=True)
    kept = loaded.tables[0].table.rows
    assert isinstance(kept, list) and kept == frame.to_dict("records")
    frame.iloc[:2].to_parquet(path, index=False)
    assert loaded.tables[0].table.rows == kept and len(kept) == 12
