"""Recognise a file (or an in-memory table) by its shape and read it into records.

``load_path`` takes a file or a folder in JSONL, JSON, CSV, TSV, Parquet, Arrow, a ``datasets``
``save_to_disk`` folder (``Dataset``, or ``DatasetDict`` with ``split``, default ``train``), or a
``.gz`` of the text forms. ``load_table`` takes a ``pandas.DataFrame`` or a ``datasets.Dataset``.
The **shape** comes from the columns, through the ``SHAPES`` registry (register, don't branch; the
first shape whose detector accepts the columns wins):

- ``records``: the package's records (``qid, query, positives, negatives``; docs/design.md §2).
  A plain ``.jsonl`` records file keeps the strict reader :func:`~transferdx.inputs.records.read_records`.
- ``flagembedding``: ``query, pos, neg`` (lists), optionally ``pos_scores, neg_scores``.
- ``ntuple``: ``anchor|query|question, positive, negative_1..n``, optionally ``scores``
  (``[positive, negative_1, ...]``) and ``qid``: sentence-transformers ``mine_hard_negatives``
  ``output_format="n-tuple"`` (and the deprecated ``"n-tuple-scores"``) or any n-tuple table.
- ``triplet``: ``anchor|query|question, positive, negative``, optionally ``scores`` (``[positive,
  negative]``): ``output_format="triplet"``.
- ``labeled_list``: ``anchor|query|question, positive`` (a list of documents) and ``labels``
  (1 = positive, 0 = negative) or ``scores`` (then the first document is the positive, as
  ``mine_hard_negatives`` writes it): ``output_format="labeled-list"``.
- ``labeled_pair``: ``anchor|query|question, positive`` (one document) and ``label`` (1 / 0):
  ``output_format="labeled-pair"``.

Rows sharing an anchor (the same query text) become one record: positives merged (deduplicated, in
order of first appearance), negatives in row order; a negative repeated within a record is a counted
exclusion (unit ``negative``), never silently kept or dropped. ``qid`` = ``q`` + the first 12 hex
digits of sha256(query) unless a ``qid`` column gives it; passage ids are ``text_id(text)``. Scores,
when present, stay on each passage (``Passage.score``) and are summarised in the source's descriptor
(``mining_scores``). Bad values go through the ``on_error`` contract with file, line (row) and field:
row r (0-based) of a CSV/TSV is line r + 2 (the header is line 1), of JSONL the file's line, of other
tables r + 1. CSV/TSV rows are read with Python's ``csv`` module over lines decoded one at a time
(:func:`~transferdx.inputs.records.iter_lines`), so a row's line is its first physical line, a bad
byte is a located problem of its line, and a row whose field count differs from the header's is a
located problem of that row (never a reason to drop the rest of the file).
"""

from __future__ import annotations

import ast
import csv
import gzip
import hashlib
import io
import json
import math
import sys
import tokenize
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from transferdx.artifacts import file_hash
from transferdx.inputs.records import (
    BOM,
    FieldProblem,
    InputError,
    LoadResult,
    Passage,
    RecordBuilder,
    is_gzip,
    iter_jsonl,
    iter_lines,
    negative_columns,
    parse_json,
    parse_json_line,
    read_records,
    read_sidecars,
    read_text,
    record_from_obj,
    surrogate_problem,
    text_id,
    text_value,
)

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
    "clean.json",
}
ANCHORS = ("anchor", "query", "question")


def query_id(query: str) -> str:
    """Stable id of a query that comes without one: ``q`` + the first 12 hex of sha256(text)."""
    return "q" + hashlib.sha256(query.encode("utf-8")).hexdigest()[:12]


# ---------------------------------------------------------------------------------------------
# Tables: rows with their line numbers, from any form
# ---------------------------------------------------------------------------------------------


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


def _plain(value: Any) -> Any:
    """numpy / pandas values → plain Python (arrays → lists, NaN → None)."""
    if isinstance(value, np.ndarray):
        return [_plain(v) for v in value.tolist()]
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
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


def read_table(path: Path, builder: RecordBuilder, split: str | None = None) -> Table:
    """Read one file or ``save_to_disk`` folder into a :class:`Table`."""
    if is_saved_dataset(path):
        return _dataset_table(_load_from_disk(path, split), str(path), "save_to_disk", _folder_hash(path))
    form = form_of(path)
    digest = file_hash(path)
    if form == "jsonl" or (form == "json" and _first_char(path) != "["):
        table = _read_json_lines(path, builder)  # datasets' to_json writes JSON lines, also to *.json
    elif form == "json":
        try:
            data = parse_json(read_text(path))
        except json.JSONDecodeError as exc:
            raise InputError(path, exc.lineno, "<json>", f"malformed JSON ({exc.msg})") from None
        except ValueError as exc:
            raise InputError(path, None, "<json>", f"malformed JSON ({exc})") from None
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
    return _pick_split(loaded, path, split)


def _pick_split(data: Any, where: str | Path, split: str | None) -> Any:
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


def _dataset_table(data: Any, origin: str, form: str, digest: str | None = None) -> Table:
    rows = [_plain(dict(row)) for row in data.to_list()] if hasattr(data, "to_list") else [dict(r) for r in data]
    return Table(origin, form, list(data.column_names), rows, list(range(1, len(rows) + 1)), sha256=digest)


def frame_table(frame: Any, origin: str = "<DataFrame>") -> Table:
    rows = [{str(k): _plain(v) for k, v in row.items()} for row in frame.to_dict("records")]
    return Table(origin, "DataFrame", [str(c) for c in frame.columns], rows, list(range(1, len(rows) + 1)))


# ---------------------------------------------------------------------------------------------
# Field helpers (CSV cells arrive as text)
# ---------------------------------------------------------------------------------------------


def _text(row: Mapping[str, Any], key: str, where: str | None = None) -> str:
    where = where or key
    if key not in row or row[key] is None:
        raise FieldProblem(where, "missing")
    return _text_value(row[key], where)


def _text_value(value: Any, where: str) -> str:
    if value is None:
        raise FieldProblem(where, "missing")
    return text_value(value, where)


def _number(value: Any, where: str) -> float:
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            raise FieldProblem(where, f"expected a number, got {value!r}") from None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise FieldProblem(where, f"expected a number, got {type(value).__name__}")
    if not math.isfinite(value):
        raise FieldProblem(where, "expected a finite number")
    return float(value)


def _label(value: Any, where: str) -> int:
    number = _number(value, where)
    if number not in (0.0, 1.0):
        raise FieldProblem(where, f"expected 1 (positive) or 0 (negative), got {value!r}")
    return int(number)


def parse_list_cell(text: str) -> list[Any]:
    """A list printed into a CSV cell: JSON (``["a", "b"]``), Python (``['a', 'b']``) or numpy
    (``['a' 'b']``, ``[0.5  0.25]``, the form ``datasets``' ``to_csv`` writes)."""
    s = text.strip()
    if not (s.startswith("[") and s.endswith("]")):
        raise ValueError("not a bracketed list")
    try:
        value = json.loads(s)
        if isinstance(value, list):
            return value
    except json.JSONDecodeError:
        pass
    out: list[Any] = []
    sign = 1.0
    depth = 0
    try:
        for tok in tokenize.generate_tokens(io.StringIO(s).readline):
            kind, string = tok.type, tok.string
            if kind in (tokenize.NL, tokenize.NEWLINE, tokenize.ENDMARKER, tokenize.INDENT, tokenize.DEDENT):
                continue
            if kind == tokenize.OP and string == "[":
                depth += 1
                if depth > 1:
                    raise ValueError("nested lists are not supported")
            elif kind == tokenize.OP and string == "]":
                depth -= 1
            elif kind == tokenize.OP and string == ",":
                continue
            elif kind == tokenize.OP and string in "+-":
                sign = -1.0 if string == "-" else 1.0
            elif kind == tokenize.STRING:
                out.append(ast.literal_eval(string))
            elif kind == tokenize.NUMBER:
                number = ast.literal_eval(string)
                out.append(number if sign > 0 else -number)
                sign = 1.0
            elif kind == tokenize.NAME and string in ("nan", "inf"):
                out.append(sign * float(string))
                sign = 1.0
            else:
                raise ValueError(f"unexpected {string!r}")
    except (tokenize.TokenError, SyntaxError) as exc:
        raise ValueError(str(exc)) from None
    return out


def _list(row: Mapping[str, Any], key: str, cells_are_text: bool) -> list[Any]:
    if key not in row or row[key] is None:
        raise FieldProblem(key, "missing")
    value = _plain(row[key])
    if isinstance(value, str) and cells_are_text:
        try:
            return parse_list_cell(value)
        except ValueError as exc:
            raise FieldProblem(key, f"cannot read the list in this cell ({exc})") from None
    if not isinstance(value, list):
        raise FieldProblem(key, f"expected a list, got {type(value).__name__}")
    return value


def _texts(row: Mapping[str, Any], key: str, cells_are_text: bool) -> list[str]:
    return [_text_value(v, f"{key}[{i}]") for i, v in enumerate(_list(row, key, cells_are_text))]


def _scores(row: Mapping[str, Any], key: str, cells_are_text: bool, n: int) -> list[float]:
    values = _list(row, key, cells_are_text)
    if len(values) != n:
        raise FieldProblem(key, f"expected {n} scores, got {len(values)}")
    return [_number(v, f"{key}[{i}]") for i, v in enumerate(values)]


# ---------------------------------------------------------------------------------------------
# Shapes
# ---------------------------------------------------------------------------------------------


@dataclass
class Row:
    """One table row, normalised: its anchor, positives and negatives as (text, score)."""

    query: str
    positives: list[tuple[str, float | None]]
    negatives: list[tuple[str, float | None]]
    qid: str | None = None


Plan = dict[str, Any]


@dataclass(frozen=True)
class Shape:
    """A recognisable table shape: its detector (columns → plan, or None) and its row reader."""

    name: str
    requires: str  # the required columns, in words (listed in the unrecognised-shape error)
    detect: Callable[[Sequence[str]], Plan | None]
    row: Callable[[Mapping[str, Any], Plan, bool], Row] | None = None  # None: records, read as such
    mining_method: str = "not recorded"
    ranking_rule: str = "row order"
    reference_positive: str = "the first positive of the query's first row"


SHAPES: dict[str, Shape] = {}


def register_shape(shape: Shape) -> Shape:
    SHAPES[shape.name] = shape
    return shape


def detect_shape(columns: Sequence[str]) -> tuple[Shape, Plan] | None:
    for shape in SHAPES.values():
        plan = shape.detect(columns)
        if plan is not None:
            return shape, plan
    return None


def _anchor(columns: Sequence[str]) -> str | None:
    return next((c for c in ANCHORS if c in columns), None)


def _detect_records(columns: Sequence[str]) -> Plan | None:
    return {} if {"qid", "query", "positives", "negatives"} <= set(columns) else None


def _detect_flag(columns: Sequence[str]) -> Plan | None:
    if not {"query", "pos", "neg"} <= set(columns):
        return None
    return {"scores": {"pos_scores", "neg_scores"} <= set(columns), "qid": "qid" in columns}


def _row_flag(row: Mapping[str, Any], plan: Plan, text_cells: bool) -> Row:
    query = _text(row, "query")
    pos, neg = _texts(row, "pos", text_cells), _texts(row, "neg", text_cells)
    pos_s: list[float | None] = [None] * len(pos)
    neg_s: list[float | None] = [None] * len(neg)
    if plan["scores"]:
        pos_s = list(_scores(row, "pos_scores", text_cells, len(pos)))
        neg_s = list(_scores(row, "neg_scores", text_cells, len(neg)))
    qid = RecordBuilder.id_field(row, "qid") if plan["qid"] else None
    return Row(query, list(zip(pos, pos_s, strict=True)), list(zip(neg, neg_s, strict=True)), qid)


def _detect_ntuple(columns: Sequence[str]) -> Plan | None:
    anchor, negs = _anchor(columns), negative_columns(columns)
    if anchor is None or "positive" not in columns or not negs:
        return None
    return {"anchor": anchor, "negatives": negs, "scores": "scores" in columns, "qid": "qid" in columns}


def _row_ntuple(row: Mapping[str, Any], plan: Plan, text_cells: bool) -> Row:
    query = _text(row, plan["anchor"])
    positive = _text(row, "positive")
    negatives = [_text(row, c) for c in plan["negatives"]]
    scores: list[float | None] = [None] * (1 + len(negatives))
    if plan["scores"]:
        scores = list(_scores(row, "scores", text_cells, 1 + len(negatives)))
    qid = RecordBuilder.id_field(row, "qid") if plan["qid"] else None
    return Row(query, [(positive, scores[0])], list(zip(negatives, scores[1:], strict=True)), qid)


def _detect_triplet(columns: Sequence[str]) -> Plan | None:
    anchor = _anchor(columns)
    if anchor is None or not {"positive", "negative"} <= set(columns):
        return None
    return {"anchor": anchor, "scores": "scores" in columns, "qid": "qid" in columns}


def _row_triplet(row: Mapping[str, Any], plan: Plan, text_cells: bool) -> Row:
    query, positive, negative = _text(row, plan["anchor"]), _text(row, "positive"), _text(row, "negative")
    pos_s: float | None = None
    neg_s: float | None = None
    if plan["scores"]:
        pos_s, neg_s = _scores(row, "scores", text_cells, 2)
    qid = RecordBuilder.id_field(row, "qid") if plan["qid"] else None
    return Row(query, [(positive, pos_s)], [(negative, neg_s)], qid)


def _detect_labeled_list(columns: Sequence[str]) -> Plan | None:
    anchor = _anchor(columns)
    if anchor is None or "positive" not in columns or negative_columns(columns) or "negative" in columns:
        return None
    if "labels" in columns:
        return {"anchor": anchor, "labels": "labels", "scores": "scores" if "scores" in columns else None}
    if "scores" in columns:
        return {"anchor": anchor, "labels": None, "scores": "scores"}
    return None


def _row_labeled_list(row: Mapping[str, Any], plan: Plan, text_cells: bool) -> Row:
    query = _text(row, plan["anchor"])
    docs = _texts(row, "positive", text_cells)
    scores: list[float | None] = [None] * len(docs)
    if plan["scores"]:
        scores = list(_scores(row, plan["scores"], text_cells, len(docs)))
    if plan["labels"]:
        raw = _list(row, plan["labels"], text_cells)
        if len(raw) != len(docs):
            raise FieldProblem(plan["labels"], f"expected {len(docs)} labels (one per document), got {len(raw)}")
        labels = [_label(v, f"{plan['labels']}[{i}]") for i, v in enumerate(raw)]
    else:  # mine_hard_negatives(output_format="labeled-list", output_scores=True): positive first
        labels = [1] + [0] * (len(docs) - 1)
    items = list(zip(docs, scores, strict=True))
    return Row(
        query,
        [d for d, lab in zip(items, labels, strict=True) if lab == 1],
        [d for d, lab in zip(items, labels, strict=True) if lab == 0],
    )


def _detect_labeled_pair(columns: Sequence[str]) -> Plan | None:
    anchor = _anchor(columns)
    if anchor is None or "positive" not in columns or "label" not in columns:
        return None
    return {"anchor": anchor}


def _row_labeled_pair(row: Mapping[str, Any], plan: Plan, text_cells: bool) -> Row:
    query, doc = _text(row, plan["anchor"]), _text(row, "positive")
    label = _label(row.get("label"), "label")
    return Row(query, [(doc, None)] if label == 1 else [], [(doc, None)] if label == 0 else [])


ST = "sentence-transformers util.mine_hard_negatives output or an equivalent table"
register_shape(Shape("records", "qid, query, positives, negatives (lists of {id, text})", _detect_records, None))
register_shape(
    Shape(
        "flagembedding",
        "query, pos, neg (lists of texts) [, pos_scores, neg_scores]",
        _detect_flag,
        _row_flag,
        "not recorded (FlagEmbedding table)",
        "order of the neg list",
        "pos[0] of the query's first row",
    )
)
register_shape(
    Shape(
        "ntuple",
        "anchor|query|question, positive, negative_1..negative_n [, scores] [, qid]",
        _detect_ntuple,
        _row_ntuple,
        f"{ST} (output_format='n-tuple')",
        "column order negative_1..n, rows grouped by anchor",
    )
)
register_shape(
    Shape(
        "triplet",
        "anchor|query|question, positive, negative [, scores]",
        _detect_triplet,
        _row_triplet,
        f"{ST} (output_format='triplet')",
        "row order, rows grouped by anchor",
    )
)
register_shape(
    Shape(
        "labeled_list",
        "anchor|query|question, positive (list of documents), labels (1/0) or scores (positive first)",
        _detect_labeled_list,
        _row_labeled_list,
        f"{ST} (output_format='labeled-list')",
        "list order, rows grouped by anchor",
        "the first document labelled 1 (with scores only: the first document)",
    )
)
register_shape(
    Shape(
        "labeled_pair",
        "anchor|query|question, positive (one document), label (1/0)",
        _detect_labeled_pair,
        _row_labeled_pair,
        f"{ST} (output_format='labeled-pair')",
        "row order, rows grouped by anchor",
        "the first document labelled 1",
    )
)


def shapes_help() -> str:
    return "; ".join(f"{s.name} ({s.requires})" for s in SHAPES.values())


def recognised_suffixes() -> list[str]:
    text = sorted(TEXT_FORMS)
    return text + [f"{s}.gz" for s in text] + sorted(BINARY_FORMS) + ["a datasets save_to_disk folder"]


# ---------------------------------------------------------------------------------------------
# Grouping rows into records
# ---------------------------------------------------------------------------------------------


@dataclass
class _Group:
    line: int
    qid: str
    query: str
    positives: dict[str, float | None] = field(default_factory=dict)
    negatives: list[tuple[str, float | None, int]] = field(default_factory=list)
    neg_line: dict[str, int] = field(default_factory=dict)
    lines: list[int] = field(default_factory=list)


def read_shaped(table: Table, builder: RecordBuilder, source: str) -> LoadResult:
    """Recognise ``table``'s shape and read it (through ``builder``) into ``source``'s records."""
    found = detect_shape(table.columns)
    if found is None:
        hint = ""
        if table.form in ("csv", "tsv"):
            hint = " (a file without a header row: give format='ntuple' or 'msmarco_triples')"
        raise InputError(
            table.file,
            None,
            "<columns>",
            f"unrecognised shape: columns {table.columns}; recognised shapes: {shapes_help()}{hint}",
        )
    shape, plan = found
    n_before = len(builder.result.records)
    if shape.row is None:  # records: each row is a record; a `source` column wins over the default
        for line, row in zip(table.lines, table.rows, strict=True):
            record_from_obj(builder, line, row, default_source=source)
        names = {r.source for r in builder.result.records[n_before:]}
        for name in names:
            builder.result.describe(
                name,
                input=_input(table, "records"),
                mining_method="as recorded in the file (negatives[].method)",
                reference_positive="positives[0] as given",
            )
        return builder.result
    row_reader = shape.row
    groups: dict[str, _Group] = {}
    excluded_rows = table.n_unreadable
    for line, raw in zip(table.lines, table.rows, strict=True):
        try:
            item = row_reader(raw, plan, table.cells_are_text)
        except FieldProblem as p:
            builder.fail(line, p.field, p.reason, source=source)
            excluded_rows += 1
            continue
        group = groups.get(item.query)
        if group is None:
            group = groups[item.query] = _Group(line, item.qid or query_id(item.query), item.query)
        group.lines.append(line)
        for text, score in item.positives:
            if text not in group.positives or group.positives[text] is None:
                group.positives[text] = score
        for text, score in item.negatives:
            if text in group.neg_line:
                builder.exclude(
                    line,
                    "negative",
                    f"duplicate negative (also row {group.neg_line[text]})",
                    source=source,
                    qid=group.qid,
                    unit="negative",
                    item=text_id(text),
                )
                continue
            group.neg_line[text] = line
            group.negatives.append((text, score, line))
    method = shape.name
    rows_in_records = 0
    for group in groups.values():
        record = builder.add(
            group.line,
            qid=group.qid,
            query=group.query,
            positives=[Passage(text_id(t), t, score=s) for t, s in group.positives.items()],
            negatives=[
                Passage(text_id(t), t, method, rank=r, score=s) for r, (t, s, _l) in enumerate(group.negatives, 1)
            ],
            source=source,
        )
        if record is None:
            excluded_rows += len(group.lines)
            # the record is excluded (logged at its first row): so is every other row of it
            reason = builder.result.exclusions[-1].reason
            for line in group.lines[1:]:
                builder.exclude(
                    line,
                    "<row>",
                    f"row of the record excluded at line {group.line} ({reason})",
                    source=source,
                    qid=group.qid,
                    unit="line",
                )
        else:
            rows_in_records += len(group.lines)
    n_rows = len(table.rows) + table.n_unreadable
    kept = builder.result.records[n_before:]
    fields: dict[str, Any] = {
        "input": _input(table, shape.name),
        "shape": shape.name,
        "columns": list(table.columns),
        "mining_method": shape.mining_method,
        "ranking_rule": shape.ranking_rule,
        "reference_positive": shape.reference_positive,
        "rows": {"read": n_rows, "in_records": rows_in_records, "excluded": excluded_rows, "records": len(kept)},
    }
    summary = mining_scores(kept)
    if summary is not None:
        fields["mining_scores"] = summary
    builder.result.describe(source, **fields)
    return builder.result


def _input(table: Table, shape: str) -> dict[str, Any]:
    out: dict[str, Any] = {"format": f"{shape} ({table.form})", "file": Path(table.file).name}
    if table.sha256:
        out["sha256"] = table.sha256
    return out


def mining_scores(records: Sequence[Any]) -> dict[str, Any] | None:
    """Summary of the miner's scores: negatives' min / max / mean, the positives' range, and a
    plain-words guess at whether a margin or a maximum score was applied."""
    neg = [n.score for r in records for n in r.negatives if n.score is not None]
    if not neg:
        return None
    out: dict[str, Any] = {
        "negatives": {"n": len(neg), "min": min(neg), "max": max(neg), "mean": float(np.mean(neg))},
    }
    pos = [p.score for r in records for p in r.positives if p.score is not None]
    if not pos:
        out["margin_or_threshold_applied"] = "cannot tell: the input has no positive scores"
        return out
    out["positives"] = {"n": len(pos), "min": min(pos), "max": max(pos), "mean": float(np.mean(pos))}
    gaps = []
    for r in records:
        ps = [p.score for p in r.positives if p.score is not None]
        ns = [n.score for n in r.negatives if n.score is not None]
        if ps and ns:
            gaps.append(min(ps) - max(ns))
    if max(neg) < min(pos):
        guess = (
            f"likely: every negative scores at most {max(neg):.4f}, below the lowest positive score "
            f"{min(pos):.4f} (a max_score or a margin)"
        )
    elif gaps and min(gaps) > 0:
        guess = (
            f"likely: in every record all negatives score below the record's positives (smallest gap "
            f"{min(gaps):.4f}; an absolute or relative margin)"
        )
    else:
        above = sum(g <= 0 for g in gaps)
        guess = f"no: in {above} of {len(gaps)} records a negative scores at or above a positive"
    out["margin_or_threshold_applied"] = guess
    return out


# ---------------------------------------------------------------------------------------------
# Entry points
# ---------------------------------------------------------------------------------------------


def _looks_like_records_jsonl(path: Path) -> bool:
    """A plain ``.jsonl`` whose first parseable object has ``positives``/``negatives`` (or none
    parses at all): read by the strict records reader, exactly as before."""
    with open(path, "rb") as handle:
        for raw in handle:
            text = raw.decode("utf-8", errors="replace").strip().lstrip("\ufeff")
            if not text:
                continue
            try:
                obj = json.loads(text)
            except (ValueError, RecursionError):
                continue
            return not isinstance(obj, dict) or "positives" in obj or "negatives" in obj
    return True


def _is_plain_jsonl(path: Path) -> bool:
    return path.is_file() and path.suffix.lower() == ".jsonl"


def load_file(
    path: Path,
    on_error: str = "raise",
    source: str | None = None,
    split: str | None = None,
    seen: set[tuple[str, str]] | None = None,
) -> LoadResult:
    """One file (or ``save_to_disk`` folder) in any recognised form and shape."""
    if _is_plain_jsonl(path) and _looks_like_records_jsonl(path):
        return read_records(path, on_error, source)
    builder = RecordBuilder(path, on_error, seen, note_duplicates=True)
    table = read_table(path, builder, split)
    return read_shaped(table, builder, source or source_stem(path))


def _folder_members(folder: Path) -> list[Path]:
    out = []
    for path in sorted(folder.iterdir()):
        if path.name in SIDECAR_FILES or path.name.endswith(".meta.json"):
            continue
        if (path.is_file() and form_of(path) is not None) or is_saved_dataset(path):
            out.append(path)
    return out


def load_path(
    path: str | Path, on_error: str = "raise", source: str | None = None, split: str | None = None
) -> LoadResult:
    """A file or folder in any recognised form and shape (see the module docstring); a folder gives
    one source per recognised file (a ``save_to_disk`` folder is one source named after it)."""
    path = Path(path)
    if not path.exists():
        raise InputError(path, None, "<path>", "no such file or folder")
    if path.is_file() or is_saved_dataset(path):
        return load_file(path, on_error, source, split)
    members = _folder_members(path)
    if not members:
        raise InputError(
            path,
            None,
            "<path>",
            f"folder contains no *.jsonl files nor any other recognised file ({', '.join(recognised_suffixes())})",
        )
    if all(_is_plain_jsonl(m) and _looks_like_records_jsonl(m) for m in members):
        return read_records(path, on_error, source)  # the records folder, read as before
    result = LoadResult()
    seen: set[tuple[str, str]] = set()
    for member in members:
        result.extend(load_file(member, on_error, source, split, seen))
    read_sidecars(path, result)
    return result


def load_table(data: Any, on_error: str = "raise", source: str | None = None, split: str | None = None) -> LoadResult:
    """A ``pandas.DataFrame`` or a ``datasets.Dataset`` / ``DatasetDict`` in any recognised shape.
    Records-shaped rows take ``source`` as their default source; other shapes name the source
    ``source`` (default ``dataframe`` / ``dataset``)."""
    if hasattr(data, "to_dict") and hasattr(data, "columns"):  # pandas.DataFrame
        origin, table = "<DataFrame>", frame_table(data)
        default = "dataframe"
    else:
        data = _pick_split(data, "<DatasetDict>", split)
        origin, table = "<Dataset>", _dataset_table(data, "<Dataset>", "Dataset")
        default = "dataset"
    builder = RecordBuilder(origin, on_error, note_duplicates=True)
    found = detect_shape(table.columns)
    if found is not None and found[0].name == "records":
        for line, row in zip(table.lines, table.rows, strict=True):
            record_from_obj(builder, line, row, default_source=source)
        return builder.result
    return read_shaped(table, builder, source or default)


def iter_shapes() -> Iterator[Shape]:
    return iter(SHAPES.values())
