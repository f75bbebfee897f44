"""Tables: an input in any saved form as rows (:class:`~transferdx.inputs.records.Table`), each with
the line (or row) number errors cite; the forms a table is stored in; a folder's members and sidecars.

:func:`read_table` takes a file or a ``datasets`` ``save_to_disk`` folder in JSONL, JSON, CSV, TSV,
Parquet, Arrow (a ``Dataset``, or a ``DatasetDict`` with ``split``, default ``train``), or a ``.gz``
of the text forms (read by :mod:`transferdx.inputs.textforms`, the one module that reads text);
:func:`frame_table` and :func:`dataset_table` take a ``pandas.DataFrame`` or a ``datasets.Dataset``
in memory. The rows are Python values; which records they make is the business of the format whose
detector accepts the columns (:mod:`transferdx.inputs.registry`). Lines: row r (0-based) of a
CSV/TSV is line r + 2 (the header is line 1), of JSONL the file's line, of other tables r + 1.
:func:`read_sidecars` reads a folder's ``descriptors.json`` and ``false_negatives.json``."""

from __future__ import annotations

import dataclasses
import hashlib
import math
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import islice
from pathlib import Path
from typing import Any, overload

import numpy as np

from transferdx.artifacts import file_hash
from transferdx.inputs.reading import FieldProblem, RecordBuilder
from transferdx.inputs.records import InputError, LoadResult, Table, file_stat
from transferdx.inputs.textforms import is_gzip, loads_json, read_json_document, read_text_table

TEXT_FORMS = {".jsonl": "jsonl", ".json": "json", ".csv": "csv", ".tsv": "tsv"}
BINARY_FORMS = {".parquet": "parquet", ".arrow": "arrow"}
# files transferdx itself writes beside sources (transferdx-build, transferdx-clean): never a source
SIDECAR_FILES = {
    "descriptors.json",
    "false_negatives.json",
    "exclusions.csv",
    "removed.csv",
    "emptied.csv",
    "review.csv",
    "rows.csv",
    "clean.json",
}


def form_of(path: Path) -> str | None:
    """``jsonl`` / ``json`` / ``csv`` / ``tsv`` (also ``.gz``), ``parquet``, ``arrow``, or None."""
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes and suffixes[-1] == ".gz":
        return TEXT_FORMS.get(suffixes[-2]) if len(suffixes) >= 2 else None
    if not suffixes:
        return None
    return TEXT_FORMS.get(suffixes[-1]) or BINARY_FORMS.get(suffixes[-1])


def source_stem(path: Path) -> str:
    """``mined.parquet`` → ``mined``; ``x.jsonl.gz`` → ``x``; a folder → its name."""
    name = path.name
    if name.lower().endswith(".gz"):
        name = name[:-3]
    return Path(name).stem if Path(name).suffix else name


def is_saved_dataset(path: Path) -> bool:
    """A ``datasets`` ``save_to_disk`` folder (a Dataset or a DatasetDict)."""
    return path.is_dir() and (
        (path / "dataset_dict.json").is_file()
        or ((path / "state.json").is_file() and (path / "dataset_info.json").is_file())
    )


def folder_members(folder: Path) -> list[Path]:
    """The files (and ``save_to_disk`` folders) of ``folder`` that can be read as tables, by name;
    the files transferdx writes beside sources (:data:`SIDECAR_FILES`, ``*.meta.json``) are not."""
    out = []
    for path in sorted(folder.iterdir()):
        if path.name in SIDECAR_FILES or path.name.endswith(".meta.json"):
            continue
        if (path.is_file() and form_of(path) is not None) or is_saved_dataset(path):
            out.append(path)
    return out


def recognised_suffixes() -> list[str]:
    text = sorted(TEXT_FORMS)
    return text + [f"{s}.gz" for s in text] + sorted(BINARY_FORMS) + ["a datasets save_to_disk folder"]


_NEGATIVE_COLUMN = re.compile(r"^negative_(\d+)$")


def negative_columns(names: Iterable[str]) -> list[str]:
    """The ``negative_1..n`` columns (n-tuple tables) among ``names``, in numeric order."""
    return sorted((c for c in names if _NEGATIVE_COLUMN.match(c)), key=lambda c: int(c.split("_")[1]))


def plain(value: Any) -> Any:
    """numpy / pandas values → plain Python (arrays → lists, NaN → None)."""
    if isinstance(value, np.ndarray):
        return [plain(v) for v in value.tolist()]
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def read_table(path: Path, builder: RecordBuilder, split: str | None = None, fallback: str | None = None) -> Table:
    """Read one file or ``save_to_disk`` folder into a :class:`Table`; a file whose name gives no form
    is read as ``fallback`` (e.g. ``jsonl``) when one is given."""
    if is_saved_dataset(path):
        return dataset_table(load_from_disk(path, split), str(path), "save_to_disk", _folder_hash(path))
    form = form_of(path) or fallback
    return read_unchanged(path, lambda: _read_form(path, form, builder))


def read_unchanged(path: Path, read: Callable[[], Table]) -> Table:
    """``read()``, the table of the file ``path``, with the file's sha256 and its (size, mtime, inode)
    when read; an :class:`InputError` when the file changed while it was being read (replaced or
    rewritten: the rows may mix two versions)."""
    before = file_stat(path)
    digest = file_hash(path)
    table = read()
    if file_stat(path) != before:
        raise InputError(path, None, "<path>", "the file changed while it was being read; rerun once it is written")
    table.sha256, table.stat = digest, before
    return table


# rows a columnar table turns into Python values at a time (ColumnarRows)
ROW_BATCH = 4096


Batches = Callable[[], Iterator[list[dict[str, Any]]]]


class ColumnarRows(Sequence[dict[str, Any]]):
    """The rows of a columnar table (Parquet, Arrow, a ``datasets.Dataset``, a ``DataFrame``) as
    Python dicts, made a batch at a time while they are iterated and then let go: a mined file of
    millions of rows is never a list of dicts (a 10⁶-row triplet Parquet file held ~2 GB so).
    ``batches()`` yields the batches in order, each call from the start (the clean verb does not
    read a file twice: it holds the rows it read, :func:`held`). Indexing reads up to the row."""

    def __init__(self, n: int, batches: Batches):
        self._n, self._batches = n, batches

    def __len__(self) -> int:
        return self._n

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for rows in self._batches():
            yield from rows

    @overload
    def __getitem__(self, index: int) -> dict[str, Any]: ...
    @overload
    def __getitem__(self, index: slice) -> list[dict[str, Any]]: ...
    def __getitem__(self, index: int | slice) -> dict[str, Any] | list[dict[str, Any]]:
        if isinstance(index, slice):
            return list(self)[index]
        i = index + self._n if index < 0 else index
        if not 0 <= i < self._n:
            raise IndexError(index)
        return next(islice(self, i, None))


def by_position(n: int, batch: Callable[[int, int], list[dict[str, Any]]]) -> Batches:
    """:class:`ColumnarRows`' batches from ``batch(start, stop)`` (rows ``start … stop − 1``), for a
    table that slices cheaply: :data:`ROW_BATCH` rows at a time."""

    def batches() -> Iterator[list[dict[str, Any]]]:
        for start in range(0, n, ROW_BATCH):
            yield batch(start, min(start + ROW_BATCH, n))

    return batches


def held(table: Table) -> Table:
    """``table`` with its rows read now and kept (a list): what the clean verb writes its copy from,
    so that the copy is made from the rows the audit read even if the file is re-saved meanwhile."""
    return dataclasses.replace(table, rows=list(table.rows)) if isinstance(table.rows, ColumnarRows) else table


def _parquet_rows(path: Path) -> tuple[list[str], ColumnarRows]:
    """A Parquet file's columns and rows, each batch read from the file as it is needed (an
    :class:`InputError` naming the file if it cannot be, or if it changed since it was opened)."""
    import pyarrow.parquet as pq

    def fail(exc: Exception) -> InputError:
        return InputError(path, None, "<table>", f"cannot read Parquet: {exc}")

    try:
        with pq.ParquetFile(path) as meta:
            columns, n = list(meta.schema_arrow.names), int(meta.metadata.num_rows)
    except Exception as exc:  # pyarrow raises several types for a bad file
        raise fail(exc) from None
    opened = file_stat(path)

    def unchanged() -> None:
        if file_stat(path) != opened:
            raise InputError(path, None, "<path>", "the file changed while it was being read; rerun once it is written")

    def batches() -> Iterator[list[dict[str, Any]]]:
        unchanged()
        try:
            with pq.ParquetFile(path) as handle:
                for part in handle.iter_batches(batch_size=ROW_BATCH):
                    yield part.to_pylist()
        except Exception as exc:
            raise fail(exc) from None
        unchanged()  # rewritten in place while it was read: the rows may mix two versions

    return columns, ColumnarRows(n, batches)


def _read_form(path: Path, form: str | None, builder: RecordBuilder) -> Table:
    if form is not None and form in TEXT_FORMS.values():
        return read_text_table(path, form, builder)
    if form == "parquet":
        columns, rows = _parquet_rows(path)
        return Table(str(path), form, columns, rows, range(1, len(rows) + 1))
    if form == "arrow":
        arrow = read_arrow(path)
        rows = ColumnarRows(arrow.num_rows, by_position(arrow.num_rows, lambda a, b: arrow.slice(a, b - a).to_pylist()))
        return Table(str(path), form, list(arrow.column_names), rows, range(1, arrow.num_rows + 1))
    raise InputError(path, None, "<path>", f"not a recognised file type ({', '.join(recognised_suffixes())})")


def read_arrow(path: Path) -> Any:
    import pyarrow as pa

    errors = []
    for opener in (pa.ipc.open_stream, pa.ipc.open_file):  # datasets writes the stream format
        try:
            with pa.memory_map(str(path)) as source:
                return opener(source).read_all()
        except Exception as exc:  # try the other Arrow layout
            errors.append(str(exc))
    raise InputError(path, None, "<table>", f"cannot read Arrow: {errors[-1]}")


def load_from_disk(path: Path, split: str | None) -> Any:
    import datasets

    loaded = datasets.load_from_disk(str(path))
    return pick_split(loaded, path, split)


def pick_split(data: Any, where: str | Path, split: str | None) -> Any:
    """A ``DatasetDict`` → its ``split`` (default ``train``); a ``Dataset`` as is."""
    if hasattr(data, "column_names") and not isinstance(data.column_names, dict):
        return data  # a single Dataset has no splits to choose from
    splits = sorted(data.keys())
    wanted = split or "train"
    if wanted not in data:
        raise InputError(where, None, "split", f"DatasetDict has no split {wanted!r}; give split= one of {splits}")
    return data[wanted]


def _folder_hash(path: Path) -> str:
    digest = hashlib.sha256()
    for file in sorted(p for p in path.rglob("*") if p.is_file()):
        digest.update(file.relative_to(path).as_posix().encode("utf-8"))
        digest.update(file_hash(file).encode("ascii"))
    return digest.hexdigest()


def dataset_table(data: Any, origin: str, form: str, digest: str | None = None) -> Table:
    """A ``datasets.Dataset`` (or any sequence of mappings with ``column_names``) as a table, its rows
    made a batch at a time (:class:`ColumnarRows`)."""
    if hasattr(data, "to_list") and hasattr(data, "select"):
        rows: Sequence[dict[str, Any]] = ColumnarRows(
            len(data), by_position(len(data), lambda a, b: [plain(dict(r)) for r in data.select(range(a, b)).to_list()])
        )
    else:
        rows = [dict(r) for r in data]
    return Table(origin, form, list(data.column_names), rows, range(1, len(rows) + 1), sha256=digest)


def frame_table(frame: Any, origin: str = "<DataFrame>") -> Table:
    """A ``pandas.DataFrame`` as a table, its rows made a batch at a time (:class:`ColumnarRows`)."""

    def batch(a: int, b: int) -> list[dict[str, Any]]:
        return [{str(k): plain(v) for k, v in row.items()} for row in frame.iloc[a:b].to_dict("records")]

    return Table(
        origin,
        "DataFrame",
        [str(c) for c in frame.columns],
        ColumnarRows(len(frame), by_position(len(frame), batch)),
        range(1, len(frame) + 1),
    )


def storage_form(path: Path) -> str | None:
    """How a table is stored: ``save_to_disk``, or :func:`form_of` with ``.gz`` for a gzipped text form."""
    if is_saved_dataset(path):
        return "save_to_disk"
    form = form_of(path)
    return f"{form}.gz" if form in TEXT_FORMS.values() and is_gzip(path) else form


# ---------------------------------------------------------------------------------------------
# A folder's sidecars (descriptors.json, false_negatives.json)
# ---------------------------------------------------------------------------------------------

SIDECARS = {"descriptors": "descriptors.json", "false_negatives": "false_negatives.json"}


def _sidecar_json(path: Path) -> Any:
    try:
        return read_json_document(path, loads_json)
    except FieldProblem as p:
        raise InputError(path, None, p.field, p.reason) from None


def read_sidecars(folder: Path, result: LoadResult) -> None:
    """Descriptors and false-negative counts written next to the records (plain JSON, validated)."""
    path = folder / SIDECARS["descriptors"]
    if path.is_file():
        data = _sidecar_json(path)
        if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
            raise InputError(path, None, "<root>", "expected an object {source: {descriptor}}")
        for source, desc in data.items():
            result.describe(source, **desc)
    path = folder / SIDECARS["false_negatives"]
    if path.is_file():
        data = _sidecar_json(path)
        if not isinstance(data, dict):
            raise InputError(path, None, "<root>", "expected an object {source: [[qid, n_relevant, n]]}")
        for source, rows in data.items():
            ok = isinstance(rows, list) and all(
                isinstance(r, list) and len(r) == 3 and isinstance(r[1], int) and isinstance(r[2], int) for r in rows
            )
            if not ok:
                raise InputError(path, None, source, "expected a list of [qid, n_relevant, n_negatives]")
            result.false_negatives[source] = [(str(q), a, b) for q, a, b in rows]
