"""Tables: an input in any saved form as rows, each with the line (or row) number errors cite.

:func:`read_table` takes a file or a ``datasets`` ``save_to_disk`` folder in JSONL, JSON, CSV, TSV,
Parquet, Arrow (a ``Dataset``, or a ``DatasetDict`` with ``split``, default ``train``), or a ``.gz``
of the text forms; :func:`frame_table` and :func:`dataset_table` take a ``pandas.DataFrame`` or a
``datasets.Dataset`` in memory; :func:`read_tab_lines` takes plain tab-separated lines (MS MARCO
style: no quoting, a header optional, the field count fixed by the format). The rows are Python
values; which records they make is the business of the format whose detector accepts the columns
(:mod:`transferdx.inputs.registry`).

Lines: row r (0-based) of a CSV/TSV is line r + 2 (the header is line 1), of JSONL the file's line,
of other tables r + 1. CSV/TSV rows are read with Python's ``csv`` module over lines decoded one at
a time (:func:`~transferdx.inputs.reading.iter_lines`), so a row's line is its first physical line, a
bad byte is a located problem of its line, and a row whose field count differs from the header's is
a located problem of that row (never a reason to drop the rest of the file). A row that cannot be
read at all is counted in :attr:`Table.n_unreadable` (a counted exclusion under ``skip``).
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
import json
import math
import re
import sys
import zlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from transferdx.artifacts import file_hash
from transferdx.inputs.reading import (
    BOM,
    RecordBuilder,
    is_gzip,
    iter_jsonl,
    iter_lines,
    parse_json_line,
    read_json_document,
    surrogate_problem,
)
from transferdx.inputs.records import InputError

csv.field_size_limit(sys.maxsize)

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
ANCHORS = ("anchor", "query", "question")  # the query column's names, in the order they are tried
# what a format's detector read off a table's columns (which column is the anchor, are there scores)
Plan = dict[str, Any]


@dataclass
class Table:
    """Rows of one input (Python values), each with the line (or row) number errors cite."""

    file: str
    form: str
    columns: list[str]
    rows: Sequence[Mapping[str, Any]]
    lines: list[int]
    cells_are_text: bool = False  # CSV/TSV: list cells arrive as their printed form
    sha256: str | None = None
    n_unreadable: int = 0  # rows that could not be parsed at all (counted exclusions under skip)


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


def _columns_of(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    seen: dict[str, None] = {}
    for row in rows:
        for key in row:
            seen.setdefault(str(key), None)
    return list(seen)


def _read_json_lines(path: Path, builder: RecordBuilder) -> Table:
    rows, lines, bad = [], [], 0
    for lineno, text in iter_jsonl(path, builder):
        obj = parse_json_line(builder, lineno, text)
        if obj is None:
            bad += 1
            continue
        rows.append(obj)
        lines.append(lineno)
    bad += builder.unreadable
    return Table(str(path), "jsonl", _columns_of(rows), rows, lines, n_unreadable=bad)


def _read_delimited(path: Path, form: str, builder: RecordBuilder) -> Table:
    """A CSV/TSV with a header row, read row by row: each row keeps its first physical line; a
    row that cannot be read, or whose field count differs from the header's, is a located problem
    (a counted exclusion under ``skip``)."""
    consumed: list[int] = []  # physical line of each line handed to the csv reader

    def physical() -> Iterator[str]:
        for lineno, text in iter_lines(path, builder):
            consumed.append(lineno)
            yield text + "\n"

    reader = csv.reader(physical(), delimiter="," if form == "csv" else "\t")
    header: list[str] | None = None
    rows: list[dict[str, Any]] = []
    lines: list[int] = []
    bad = 0
    while True:
        start = len(consumed)
        try:
            row = next(reader)
        except StopIteration:
            break
        except csv.Error as exc:
            line = consumed[start] if start < len(consumed) else (consumed[-1] if consumed else 1)
            builder.fail(line, "<line>", f"cannot read this {form.upper()} row ({exc})")
            bad += 1
            continue
        line = consumed[start]
        if not row or all(not c.strip() for c in row):
            continue
        if header is None:
            if builder.unreadable:  # skip: an unreadable line stood where the header is
                raise InputError(path, line, "<columns>", "the header row cannot be read (see the lines before)")
            header = _unique_columns(row)
            continue
        if len(row) != len(header):
            builder.fail(line, "<line>", f"expected {len(header)} fields (the header's), got {len(row)}")
            bad += 1
            continue
        rows.append(dict(zip(header, row, strict=True)))
        lines.append(line)
    if header is None:
        raise InputError(path, None, "<table>", f"cannot read {form.upper()}: no header row")
    bad += builder.unreadable
    return Table(str(path), form, header, rows, lines, True, n_unreadable=bad)


def _unique_columns(names: list[str]) -> list[str]:
    """Header names made unique as pandas does (``a``, ``a.1``, ...)."""
    seen: dict[str, int] = {}
    out = []
    for name in names:
        if name in seen:
            seen[name] += 1
            name = f"{name}.{seen[name]}"
        seen.setdefault(name, 0)
        out.append(name)
    return out


def _first_char(path: Path) -> str:
    """The first non-blank character (sniffing only: undecodable bytes read as U+FFFD)."""
    try:
        with gzip.open(path, "rb") if is_gzip(path) else open(path, "rb") as handle:
            head = handle.read(4096)
    except (EOFError, OSError, zlib.error):
        return ""
    if head.startswith(BOM):
        head = head[len(BOM) :]
    stripped = head.decode("utf-8", errors="replace").lstrip()
    return stripped[0] if stripped else ""


def read_table(path: Path, builder: RecordBuilder, split: str | None = None, fallback: str | None = None) -> Table:
    """Read one file or ``save_to_disk`` folder into a :class:`Table`; a file whose name gives no form
    is read as ``fallback`` (e.g. ``jsonl``) when one is given."""
    if is_saved_dataset(path):
        return dataset_table(_load_from_disk(path, split), str(path), "save_to_disk", _folder_hash(path))
    form = form_of(path) or fallback
    digest = file_hash(path)
    if form == "jsonl" or (form == "json" and _first_char(path) != "["):
        table = _read_json_lines(path, builder)  # datasets' to_json writes JSON lines, also to *.json
    elif form == "json":
        data = read_json_document(path)
        if not isinstance(data, list):
            raise InputError(path, None, "<root>", f"expected a list of objects, got {type(data).__name__}")
        rows, lines, bad = [], [], 0
        for i, row in enumerate(data):  # row i is "line" i + 1
            problem = surrogate_problem(row)
            if not isinstance(row, dict):
                builder.fail(i + 1, "<row>", f"expected a JSON object, got {type(row).__name__}")
            elif problem is not None:
                builder.fail(i + 1, problem.field, problem.reason)
            else:
                rows.append(row)
                lines.append(i + 1)
                continue
            bad += 1
        table = Table(str(path), "json", _columns_of(rows), rows, lines, n_unreadable=bad)
    elif form in ("csv", "tsv"):
        table = _read_delimited(path, form, builder)
    elif form == "parquet":
        import pyarrow.parquet as pq

        try:
            rows = pq.read_table(path).to_pylist()
            columns = pq.read_schema(path).names
        except Exception as exc:  # pyarrow raises several types for a bad file
            raise InputError(path, None, "<table>", f"cannot read Parquet: {exc}") from None
        table = Table(str(path), form, list(columns), rows, list(range(1, len(rows) + 1)))
    elif form == "arrow":
        arrow = _read_arrow(path)
        table = Table(str(path), form, list(arrow.column_names), arrow.to_pylist(), list(range(1, arrow.num_rows + 1)))
    else:
        raise InputError(path, None, "<path>", f"not a recognised file type ({', '.join(recognised_suffixes())})")
    table.sha256 = digest
    return table


def _read_arrow(path: Path) -> Any:
    import pyarrow as pa

    errors = []
    for opener in (pa.ipc.open_stream, pa.ipc.open_file):  # datasets writes the stream format
        try:
            with pa.memory_map(str(path)) as source:
                return opener(source).read_all()
        except Exception as exc:  # try the other Arrow layout
            errors.append(str(exc))
    raise InputError(path, None, "<table>", f"cannot read Arrow: {errors[-1]}")


def _load_from_disk(path: Path, split: str | None) -> Any:
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
    rows = [plain(dict(row)) for row in data.to_list()] if hasattr(data, "to_list") else [dict(r) for r in data]
    return Table(origin, form, list(data.column_names), rows, list(range(1, len(rows) + 1)), sha256=digest)


def frame_table(frame: Any, origin: str = "<DataFrame>") -> Table:
    rows = [{str(k): plain(v) for k, v in row.items()} for row in frame.to_dict("records")]
    return Table(origin, "DataFrame", [str(c) for c in frame.columns], rows, list(range(1, len(rows) + 1)))


def iter_tab_lines(
    path: Path, builder: RecordBuilder, header: bool | None = None, fields: int | None = None
) -> Iterator[tuple[int, dict[str, str] | None]]:
    """Plain tab-separated lines (no quoting: MS MARCO style) as (line, ``{query, positive,
    negative_1..}``, or the header's names) in file order; (line, None) for a line that failed
    (already logged under ``skip``).

    ``header``: True (the first line names the columns), False (it is data) or None (it names the
    columns when it looks like a header: ``query|anchor|question, positive, ...`` or ``qid, ...``).
    The number of tab-separated fields comes from the format, never from the data's first row:
    ``fields`` when the format fixes it (MS MARCO triples: 3), else the header's columns, else each
    row on its own (``query, positive, negative_1..n``, n ≥ 1, so rows may differ in n). A row with
    another count is a located problem of that row."""
    columns: list[str] | None = None
    first = True
    for lineno, line in iter_lines(path, builder):
        if not line.strip():
            continue
        row = line.split("\t")
        if first:
            first = False
            if header and builder.unreadable:  # skip: the header line itself was unreadable
                raise InputError(path, lineno, "<columns>", "the header row cannot be read (see the line before)")
            looks_like_header = (row[0] in ANCHORS and row[1:2] == ["positive"]) or row[0] == "qid"
            if header or (header is None and looks_like_header):
                columns = row
                continue
        if columns is not None:
            names, what = columns, "the header's columns"
        elif fields is not None:
            names = ["query", "positive"] + [f"negative_{i}" for i in range(1, fields - 1)]
            what = ", ".join(("query", "positive", "negative") if fields == 3 else names)
        else:
            names = ["query", "positive"] + [f"negative_{i}" for i in range(1, len(row) - 1)]
            what = "query, positive, negative_1.."
            if len(row) < 3:
                builder.fail(lineno, "<line>", f"expected at least 3 tab-separated fields ({what}), got {len(row)}")
                yield lineno, None
                continue
        if len(row) != len(names):
            builder.fail(lineno, "<line>", f"expected {len(names)} tab-separated fields ({what}), got {len(row)}")
            yield lineno, None
            continue
        yield lineno, dict(zip(names, row, strict=True))


def read_tab_lines(path: Path, builder: RecordBuilder, header: bool | None = None, fields: int | None = None) -> Table:
    """:func:`iter_tab_lines` as a :class:`Table` (form ``tsv``, cells are text); its columns are
    those of the widest row (the header's, when there is one)."""
    rows: list[dict[str, str]] = []
    lines: list[int] = []
    bad = 0
    for lineno, row in iter_tab_lines(path, builder, header, fields):
        if row is None:
            bad += 1
            continue
        rows.append(row)
        lines.append(lineno)
    bad += builder.unreadable
    columns = max((list(r) for r in rows), key=len, default=["query", "positive", "negative_1"])
    return Table(str(path), "tsv", columns, rows, lines, True, file_hash(path), bad)


# ---------------------------------------------------------------------------------------------
# Writing rows back in a table's own form (the cleaned copy)
# ---------------------------------------------------------------------------------------------


def storage_form(path: Path) -> str | None:
    """How a table is stored: ``save_to_disk``, or :func:`form_of` with ``.gz`` for a gzipped text form."""
    if is_saved_dataset(path):
        return "save_to_disk"
    form = form_of(path)
    return f"{form}.gz" if form in TEXT_FORMS.values() and is_gzip(path) else form


def _cell(value: Any) -> str:
    """A CSV/TSV cell: text as it is, a list or an object as JSON (what the readers parse back)."""
    if value is None:
        return ""
    if isinstance(value, list | dict):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


def _text_bytes(columns: Sequence[str], rows: Sequence[Mapping[str, Any]], form: str) -> bytes:
    if form == "jsonl":
        return "".join(json.dumps(dict(r), ensure_ascii=False) + "\n" for r in rows).encode("utf-8")
    if form == "json":
        return (json.dumps([dict(r) for r in rows], ensure_ascii=False) + "\n").encode("utf-8")
    buffer = io.StringIO()
    writer = csv.writer(buffer, delimiter="," if form == "csv" else "\t", lineterminator="\n")
    writer.writerow(columns)
    writer.writerows([[_cell(r.get(c)) for c in columns] for r in rows])
    return buffer.getvalue().encode("utf-8")


def _arrow(columns: Sequence[str], rows: Sequence[Mapping[str, Any]], like: Path | None) -> Any:
    """The rows as an Arrow table with the input's schema when it has one (types and order kept)."""
    import pyarrow as pa

    schema = None
    if like is not None and form_of(like) == "parquet":
        import pyarrow.parquet as pq

        schema = pq.read_schema(like)
    elif like is not None and form_of(like) == "arrow":
        schema = _read_arrow(like).schema
    data = [{c: r.get(c) for c in columns} for r in rows]
    if schema is not None:
        try:
            return pa.Table.from_pylist(data, schema=schema)
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            pass  # a value of another type than the input's (a score where none was): infer
    return pa.Table.from_pylist(data).select(list(columns))


def rows_dataset(
    columns: Sequence[str],
    rows: Sequence[Mapping[str, Any]],
    form: str | None,
    like: Path | None = None,
    split: str | None = None,
) -> Any:
    """The rows as a ``datasets.Dataset`` with the columns (and, where the input has them, the
    features) a user gets loading the written file: a CSV/TSV as ``load_dataset("csv")`` reads it
    (through pandas), a ``save_to_disk`` folder with its features, any other form with its schema."""
    import datasets

    if form is not None and form.split(".")[0] in ("csv", "tsv"):
        import pandas as pd

        sep = "," if form.startswith("csv") else "\t"
        frame = pd.read_csv(io.BytesIO(_text_bytes(columns, rows, form.split(".")[0])), sep=sep)
        return datasets.Dataset.from_pandas(frame, preserve_index=False)
    if form == "save_to_disk" and like is not None:
        features = _load_from_disk(like, split).features
        data = {c: [r.get(c) for r in rows] for c in columns}
        return datasets.Dataset.from_dict(data, features=features)
    if form in ("parquet", "arrow"):
        return datasets.Dataset(_arrow(columns, rows, like))
    return datasets.Dataset.from_dict({c: [r.get(c) for r in rows] for c in columns})


def write_rows(
    columns: Sequence[str],
    rows: Sequence[Mapping[str, Any]],
    dest: Path,
    form: str,
    like: Path | None = None,
    split: str | None = None,
) -> Path:
    """Write rows at ``dest`` in ``form`` (:func:`storage_form`: ``jsonl``, ``json``, ``csv``,
    ``tsv`` and their ``.gz``, ``parquet``, ``arrow``, ``save_to_disk``), columns in order; ``like``:
    the input, whose schema / features (and, for a ``DatasetDict``, other splits) are kept. Text
    forms are byte-stable (gzip without a timestamp)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    base = form.removesuffix(".gz")
    if base in TEXT_FORMS.values():
        data = _text_bytes(columns, rows, base)
        if form.endswith(".gz"):
            data = gzip.compress(data, mtime=0)
        tmp = dest.with_name(dest.name + ".tmp")
        tmp.write_bytes(data)
        tmp.replace(dest)
    elif form == "parquet":
        import pyarrow.parquet as pq

        pq.write_table(_arrow(columns, rows, like), dest)
    elif form == "arrow":
        import pyarrow as pa

        table = _arrow(columns, rows, like)
        with pa.OSFile(str(dest), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
    elif form == "save_to_disk":
        import datasets

        data = rows_dataset(columns, rows, form, like, split)
        original = datasets.load_from_disk(str(like)) if like is not None else None
        if isinstance(original, datasets.DatasetDict):
            splits = dict(original)
            splits[split or "train"] = data
            data = datasets.DatasetDict(splits)
        data.save_to_disk(str(dest))
    else:
        raise ValueError(f"cannot write a table as {form!r}")
    return dest
