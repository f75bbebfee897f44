"""The package's own records format (docs/design.md §2): its reader and its writers.

One JSON object per line (``qid``, ``query``, ``positives``, ``negatives``, ``source``, ``kind``;
passages as ``{id, text, method, relation, rank, judgment, score}`` or bare text, which gets the id
``text_id(text)``); ``positives[0]`` is the reference positive. :func:`read_records` reads a file or
every ``*.jsonl`` of a folder (sorted by name) with its sidecars ``descriptors.json`` and
``false_negatives.json`` (:func:`~transferdx.inputs.tables.read_sidecars`), strictly: every problem
is located (file, line, field, JSON path). :func:`write_records` and :func:`write_source_folder`
write the same format back. A negative repeated within a record is kept and counted in the
source's descriptor (``duplicate_negatives_kept``; the audit flags it as a ``duplicate_negative``
suspect). A table in another form (Parquet, CSV, a ``DataFrame``, ...) whose columns include
``qid, query, positives, negatives`` is read row by row as the same records.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from transferdx.artifacts import atomic_write_text, safe_join
from transferdx.inputs.reading import FieldProblem, RecordBuilder, artifact_name, text_value
from transferdx.inputs.records import InputError, LoadResult, Passage, Plan, Record, Table, text_id
from transferdx.inputs.registry import Format, Shape, keep, register
from transferdx.inputs.rows import table_input
from transferdx.inputs.tables import folder_members, read_sidecars, read_unchanged, source_stem, storage_form
from transferdx.inputs.textforms import read_json_lines
from transferdx.inputs.writing import (
    RELABEL_UNWRITTEN,
    Cleaning,
    Rewritten,
    RowChange,
    rows_with_queries,
    write_sidecars,
)


def _passage(obj: Any, where: str, *, default_method: str | None = None) -> Passage:
    if isinstance(obj, str):  # bare text
        return Passage(text_id(obj), text_value(obj, where), default_method)
    if not isinstance(obj, dict):
        raise FieldProblem(where, f"expected an object or a string, got {type(obj).__name__}")
    try:
        text = RecordBuilder.text_field(obj, "text")
        pid = RecordBuilder.id_field(obj, "id") if "id" in obj else text_id(text)
    except FieldProblem as p:
        raise FieldProblem(f"{where}.{p.field}", p.reason) from None
    rank, judgment = obj.get("rank"), obj.get("judgment")
    for key, value in (("rank", rank), ("judgment", judgment)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise FieldProblem(f"{where}.{key}", f"expected an integer or null, got {type(value).__name__}")
    method = obj.get("method", default_method)
    relation = obj.get("relation")
    for key, value in (("method", method), ("relation", relation)):
        if value is not None and not isinstance(value, str):
            raise FieldProblem(f"{where}.{key}", f"expected a string or null, got {type(value).__name__}")
    score = obj.get("score")
    if score is not None:
        if isinstance(score, bool) or not isinstance(score, (int, float)):
            raise FieldProblem(f"{where}.score", f"expected a number or null, got {type(score).__name__}")
        try:
            score = float(score)
        except OverflowError:
            score = math.inf
        if not math.isfinite(score):
            raise FieldProblem(f"{where}.score", "expected a finite number")
    return Passage(pid, text, method, relation, rank, judgment, score)


def _passage_list(obj: Mapping[str, Any], key: str, **kw: Any) -> list[Passage]:
    if key not in obj:
        raise FieldProblem(key, "missing")
    items = obj[key]
    if not isinstance(items, list):
        raise FieldProblem(key, f"expected a list, got {type(items).__name__}")
    return [_passage(item, f"{key}[{i}]", **kw) for i, item in enumerate(items)]


def record_from_obj(
    builder: RecordBuilder, lineno: int, obj: Mapping[str, Any], default_source: str | None = None
) -> Record | None:
    """Validate one records-format object (docs/design.md §2) and hand it to the builder."""
    qid = str(obj.get("qid", ""))
    source = obj.get("source", default_source)
    try:
        qid = builder.id_field(obj, "qid")
        query = builder.text_field(obj, "query")
        if source is None:
            raise FieldProblem("source", "missing (and no default source was given)")
        if not isinstance(source, str) or not source.strip():
            raise FieldProblem("source", "expected a non-empty string")
        kind = obj.get("kind", "genuine")
        positives = _passage_list(obj, "positives")
        negatives = _passage_list(obj, "negatives")
    except FieldProblem as p:
        builder.fail(lineno, p.field, p.reason, source=str(source or ""), qid=qid)
        return None
    return builder.add(lineno, qid=qid, query=query, positives=positives, negatives=negatives, source=source, kind=kind)


def read_records(
    path: str | Path, on_error: str = "raise", source: str | None = None, keep_tables: bool = False
) -> LoadResult:
    """Read a records JSONL file, or every ``*.jsonl`` file in a folder (sorted by name);
    ``keep_tables``: keep each file's rows for the clean verb (:func:`~transferdx.inputs.registry.keep`)."""
    path = Path(path)
    if path.is_dir():
        files = sorted(path.glob("*.jsonl"))
        if not files:
            raise InputError(path, None, "<path>", "folder contains no *.jsonl files")
    elif path.is_file():
        files = [path]
    else:
        raise InputError(path, None, "<path>", "no such file or folder")

    result = LoadResult()
    seen: set[tuple[str, str]] = set()
    for file in files:
        builder = RecordBuilder(file, on_error, seen, note_duplicates=True)

        def add(lineno: int, obj: dict[str, Any], builder: RecordBuilder = builder) -> None:
            record_from_obj(builder, lineno, obj, default_source=source)

        table = read_unchanged(file, functools.partial(read_json_lines, file, builder, add, keep_tables))
        if keep_tables:
            default = source or next((r.source for r in builder.result.records), None) or source_stem(file)
            keep(builder.result, table, default, storage_form(file), file.name, artifact_name(file), file)
        result.extend(builder.result)
        for name in {r.source for r in builder.result.records}:
            result.describe(
                name,
                input={"format": "records", "file": file.name, "sha256": table.sha256},
                mining_method="as recorded in the file (negatives[].method)",
                reference_positive="positives[0] as given",
            )
    if path.is_dir():
        read_sidecars(path, result)
    return result


def _read(
    path: str | Path, on_error: str = "raise", source: str | None = None, keep_tables: bool = False, **_: Any
) -> LoadResult:
    """``format="records"``: :func:`read_records` (other options, e.g. a config's ``seed``, unused)."""
    return read_records(path, on_error, source, keep_tables)


# ---------------------------------------------------------------------------------------------
# Writers
# ---------------------------------------------------------------------------------------------


SOURCE_NAME = re.compile(r"^[\w.+-]+$")


def write_source_folder(loaded: LoadResult, folder: str | Path) -> list[Path]:
    """One ``<source>.jsonl`` per source plus ``descriptors.json`` and ``false_negatives.json``
    sidecars, all inside ``folder``; ``read_records(folder)`` reads them back."""

    folder = Path(folder)
    written = []
    for source in loaded.sources:
        if not SOURCE_NAME.match(source):
            raise ValueError(f"source name {source!r} cannot be a file name (letters, digits, . + - _ only)")
        path = safe_join(folder, f"{source}.jsonl")
        write_records([r for r in loaded.records if r.source == source], path)
        written.append(path)
    write_sidecars(loaded, folder)
    return written


def write_records(records: Iterable[Record], path: str | Path) -> None:
    """Write records as JSONL (one object per line, keys in a fixed order)."""

    lines = [json.dumps(r.to_dict(), ensure_ascii=False) for r in records]
    atomic_write_text(path, "".join(line + "\n" for line in lines))


# ---------------------------------------------------------------------------------------------
# Recognition: records JSONL read whole, records-shaped tables row by row
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


def _is_records_jsonl(path: Path) -> bool:
    return path.is_file() and path.suffix.lower() == ".jsonl" and _looks_like_records_jsonl(path)


def _claims(path: Path) -> bool:
    """A records JSONL file, or a folder whose every recognised file is one: read by
    :func:`read_records` (the strict reader, with the folder's sidecars)."""
    if path.is_dir():
        members = folder_members(path)
        return bool(members) and all(_is_records_jsonl(m) for m in members)
    return _is_records_jsonl(path)


def _detect(columns: Sequence[str]) -> Plan | None:
    return {} if {"qid", "query", "positives", "negatives"} <= set(columns) else None


def _read_table(table: Table, builder: RecordBuilder, source: str | None, plan: Plan) -> LoadResult:
    """Each row is a record (a ``source`` column wins over the default); a file's sources are
    described (a table in memory is not)."""
    n_before = len(builder.result.records)
    for line, row in zip(table.lines, table.rows, strict=True):
        record_from_obj(builder, line, row, default_source=source)
    if table.file.startswith("<"):
        return builder.result
    for name in {r.source for r in builder.result.records[n_before:]}:
        builder.result.describe(
            name,
            input=table_input(table, "records"),
            mining_method="as recorded in the file (negatives[].method)",
            reference_positive="positives[0] as given",
        )
    return builder.result


def _items(original: Any, passages: Sequence[Passage], text_cells: bool) -> Any:
    """Passages as the input gave them: bare texts when its list held texts, else objects (a list
    printed into a CSV cell is written as JSON)."""
    items = original
    if text_cells and isinstance(original, str):
        from transferdx.inputs.rows import parse_list_cell

        try:
            items = parse_list_cell(original)
        except ValueError:
            items = []
    bare = bool(items) and all(isinstance(i, str) for i in items)
    return [p.text if bare else p.to_dict() for p in passages]


def _write(table: Table, plan: Plan, cleaning: Cleaning, source: str | None) -> Rewritten:
    """Each row is its cleaned record (positives, relabeled ones after p0; the negatives kept, or,
    for a record left with none, the next record's marked ``borrowed_negative``); other columns as
    they were."""
    out: list[dict[str, Any]] = []
    changes: list[RowChange] = []
    shaped, skipped = rows_with_queries(
        table, cleaning, lambda r: cleaning.by_qid.get((str(r.get("source", source)), str(r.get("qid"))))
    )
    for line, row, query in shaped:
        rec = query.record
        originals = row.get("negatives")
        n_in = len(originals) if isinstance(originals, list) else len(_items(originals, rec.negatives, True))
        n_lost = max(0, n_in - len(rec.negatives))
        if n_lost == 0 and not query.added and (cleaning.keep is None or n_in <= cleaning.keep):
            out.append(dict(row))
            continue
        if not query.fill:  # a record needs a negative: its relabeled positives go with it, listed
            changes.append(RowChange(line, rec.qid, "dropped" if cleaning.fill == "none" else "unwritable", n_lost))
            lend = " (clean.fill=borrow lends the next query's)" if cleaning.fill != "borrow" else ""
            why = "not in the copy: a record needs a negative and none is left" + lend
            changes += [
                RowChange(None, rec.qid, RELABEL_UNWRITTEN, 0, f"relabeled positive {p.id} {why}") for p in query.added
            ]
            continue
        text_cells = table.cells_are_text
        new = dict(row) | {
            "positives": _items(row.get("positives"), rec.positives, text_cells),
            "negatives": _items(originals, query.fill[: cleaning.keep], text_cells),
        }
        out.append(new)
        change = "borrowed" if not rec.negatives else ("relabeled" if query.added else "trimmed")
        changes.append(RowChange(line, rec.qid, change, n_lost))
    return Rewritten(list(table.columns), out, changes, skipped)


def _corpus(path: str) -> list[str]:
    """The unique passage texts (positives and negatives) of a records file or folder, sorted."""
    return sorted({p.text for r in read_records(path).records for p in (*r.positives, *r.negatives)})


register(
    Format(
        "records",
        read=_read,
        shape=Shape("qid, query, positives, negatives (lists of {id, text})", _detect, _read_table, True),
        claims=_claims,
        write=_write,
        corpus=_corpus,
    )
)
