"""Tevatron training rows: ``query_id, query, positive_passages, negative_passages[, subset]``, each
passages cell a list of ``{docid, title, text}`` objects. ``Tevatron/msmarco-passage`` and the other
Tevatron training sets are in this shape, and so are the RLHN relabelled BGE collections
(``rlhn/...``), which add a ``subset`` column naming the dataset each row comes from.

One reader for both ways in: a table recognised by its columns (``query, positive_passages,
negative_passages``; ``query_id`` and ``subset`` optional; any form) and :func:`load_tevatron`
(``format="tevatron"``: JSON lines whatever the file's name, or any table form).

- **Passage text** is joined the way Tevatron's trainer joins it before encoding:
  ``format_passage(text, title, prefix)`` = ``f"{prefix}{title.strip()} {text.strip()}".strip()``
  (texttron/tevatron, ``src/tevatron/retriever/dataset.py``, at commit 9ea4937), without a prefix
  (a prefix belongs to the encoder, not to the data). A passage without ``title`` (or a null one)
  joins as its stripped ``text``, as later Tevatron versions do (``title + " " + text if "title" in
  passage else text``). ``text`` is required; a missing or non-string ``text``, ``title`` or
  ``docid`` is a located problem named ``negative_passages[i].text`` (or ``.title``, ``.docid``).
- **Identity**: a passage's id is its ``docid``; the query's id its ``query_id`` (without that
  column, ``q`` + 12 hex digits of the query's sha256, as for other row formats).
- **Sources**: each distinct ``subset`` value is a source of its own (an RLHN file is audited per
  subset; RLHN found that dropping some subsets helped), whatever ``source=`` says; without a
  ``subset`` column the table is the source it is given (a file: named after the file).
- **Rows**: each row is one record (Tevatron trains on a row as one group: its positives and its
  negatives). ``positive_passages[0]`` is the reference positive; a positive repeated within the
  row is read once. Negatives keep the order of ``negative_passages`` (``rank`` = position in it),
  ``method`` ``tevatron``; a negative repeated within the row is kept and counted
  (``duplicate_negatives_kept``). A row whose ``negative_passages`` is empty (every negative
  relabelled away) is a counted exclusion under either error policy (reason
  :data:`~transferdx.inputs.records.NO_NEGATIVE`); a second row of the same ``query_id`` in one
  source is the builder's duplicate query (an error under ``raise``, a counted exclusion under
  ``skip``).

The writer (:func:`write_tevatron`) writes the cleaned copy in the same shape, every other column
(``subset`` included) as it was.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from transferdx.inputs.reading import (
    EMPTY_RECORD,
    FieldProblem,
    RecordBuilder,
    artifact_name,
    require_path,
    text_value,
)
from transferdx.inputs.records import NO_NEGATIVE, InputError, LoadResult, Passage, Plan, Table, query_id
from transferdx.inputs.registry import Format, Shape, keep, register
from transferdx.inputs.rows import cell_text, table_input
from transferdx.inputs.tables import held, plain, read_table, source_stem, storage_form
from transferdx.inputs.writing import RELABEL_UNWRITTEN, Cleaning, Rewritten, RowChange, rows_with_queries

SHAPE = "tevatron"
QUERY, POSITIVES, NEGATIVES, QID, SUBSET = "query", "positive_passages", "negative_passages", "query_id", "subset"
DESCRIPTION = "query_id, query, positive_passages, negative_passages (lists of {docid, title, text}) [, subset]"


def format_passage(text: str, title: str = "") -> str:
    """A passage as Tevatron's trainer encodes it (no prefix): ``f"{title.strip()} {text.strip()}"``
    stripped (texttron/tevatron ``src/tevatron/retriever/dataset.py``, ``format_passage``)."""
    return f"{title.strip()} {text.strip()}".strip()


def _detect(columns: Sequence[str]) -> Plan | None:
    """Tevatron rows by their columns: ``query``, ``positive_passages`` and ``negative_passages``
    (no other family's table has the two passage columns); ``query_id`` and ``subset`` when present."""
    if not {QUERY, POSITIVES, NEGATIVES} <= set(columns):
        return None
    return {"qid": QID in columns, "subset": SUBSET in columns}


def _near_miss(columns: Sequence[str]) -> str | None:
    """A table with a Tevatron passages column but not all the columns read: which are missing."""
    if not {POSITIVES, NEGATIVES} & set(columns) or _detect(columns) is not None:
        return None
    missing = ", ".join(c for c in (QUERY, POSITIVES, NEGATIVES) if c not in columns)
    return f"Tevatron rows need {missing} as well (Tevatron rows: {DESCRIPTION})"


# ---------------------------------------------------------------------------------------------
# Cells
# ---------------------------------------------------------------------------------------------


def passage_items(row: Mapping[str, Any], key: str, cells_are_text: bool) -> list[Any]:
    """The items of a passages cell (a list; in a CSV/TSV cell, its JSON or Python print)."""
    if key not in row or row[key] is None:
        raise FieldProblem(key, "missing")
    value = plain(row[key])
    if isinstance(value, str) and cells_are_text:
        try:
            value = json.loads(value)
        except ValueError:
            try:
                value = ast.literal_eval(value.strip())
            except (ValueError, SyntaxError, MemoryError, RecursionError):
                raise FieldProblem(key, "cannot read the list of passages in this cell") from None
    if not isinstance(value, list):
        raise FieldProblem(key, f"expected a list of {{docid, title, text}} objects, got {type(value).__name__}")
    return value


def passage_of(item: Any, where: str) -> Passage:
    """One ``{docid, title, text}`` object as a passage: id ``docid``, text :func:`format_passage`."""
    if not isinstance(item, Mapping):
        raise FieldProblem(where, f"expected a {{docid, title, text}} object, got {type(item).__name__}")
    try:
        docid = RecordBuilder.id_field(item, "docid")
    except FieldProblem as p:
        raise FieldProblem(f"{where}.{p.field}", p.reason) from None
    text, title = item.get("text"), item.get("title")
    if "text" not in item or text is None:
        raise FieldProblem(f"{where}.text", "missing")
    if not isinstance(text, str):
        raise FieldProblem(f"{where}.text", f"expected a string, got {type(text).__name__}")
    if title is not None and not isinstance(title, str):
        raise FieldProblem(f"{where}.title", f"expected a string or null, got {type(title).__name__}")
    return Passage(docid, text_value(format_passage(text, title or ""), f"{where}.text"))


def _passages(row: Mapping[str, Any], key: str, cells_are_text: bool) -> list[Passage]:
    return [passage_of(item, f"{key}[{i}]") for i, item in enumerate(passage_items(row, key, cells_are_text))]


def _subset(row: Mapping[str, Any]) -> str:
    """The row's ``subset``: a non-empty string (it names a source)."""
    if row.get(SUBSET) is None:
        raise FieldProblem(SUBSET, "missing")
    value = row[SUBSET]
    if not isinstance(value, str) or not value.strip():
        raise FieldProblem(SUBSET, f"expected a non-empty string, got {value!r}")
    return text_value(value, SUBSET)


def _source_of(row: Mapping[str, Any], plan: Plan, default: str) -> str:
    """The source a row's record belongs to (the writer's lookup; a bad cell gives ``default``)."""
    value = row.get(SUBSET) if plan["subset"] else None
    return value if isinstance(value, str) and value.strip() else default


def _qid_of(row: Mapping[str, Any], plan: Plan) -> str:
    """The qid a row's record has (the writer's lookup; the reader validated it)."""
    return str(plain(row.get(QID))) if plan["qid"] else query_id(str(row.get(QUERY)))


# ---------------------------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------------------------


def read_tevatron(table: Table, builder: RecordBuilder, source: str | None, plan: Plan) -> LoadResult:
    """``table``'s rows (through ``builder``) as records: one per row, in the source its ``subset``
    names (else ``source``); each source described, its ``rows`` accounted for (read = in_records +
    excluded). Without a ``subset`` column a line that could not be read is one of ``source``'s
    rows, excluded; with one, rows whose source cannot be told (a bad ``subset`` cell, a line that
    could not be read) are in the exclusion log and counted on every source as ``rows_without_subset``."""
    default = source or SHAPE
    counts: dict[str, dict[str, int]] = {}
    unattributed = table.n_unreadable if plan["subset"] else 0
    if table.n_unreadable and not plan["subset"]:
        counts[default] = {"read": table.n_unreadable, "excluded": table.n_unreadable}
    n_before = len(builder.result.records)
    for line, row in zip(table.lines, table.rows, strict=True):
        name, qid = default, ""
        try:
            name = _subset(row) if plan["subset"] else default
            qid = RecordBuilder.id_field(row, QID) if plan["qid"] else ""
            query = cell_text(row, QUERY)
            positives = list(dict.fromkeys(_passages(row, POSITIVES, table.cells_are_text)))
            negatives = _passages(row, NEGATIVES, table.cells_are_text)
        except FieldProblem as p:
            if p.field == SUBSET:
                unattributed += 1
            else:
                counts.setdefault(name, {"read": 0, "excluded": 0})["read"] += 1
                counts[name]["excluded"] += 1
            builder.fail(line, p.field, p.reason, source=name if p.field != SUBSET else "", qid=qid)
            continue
        count = counts.setdefault(name, {"read": 0, "excluded": 0})
        count["read"] += 1
        ranked = [Passage(n.id, n.text, SHAPE, rank=r) for r, n in enumerate(negatives, 1)]
        record = builder.add(
            line,
            qid=qid or query_id(query),
            query=query,
            positives=positives,
            negatives=ranked,
            source=name,
            empty_reason=NO_NEGATIVE if positives and not negatives else EMPTY_RECORD,
            empty_is_error=not (positives and not negatives),
        )
        count["excluded"] += record is None
    kept = builder.result.records[n_before:]
    for name, count in counts.items():
        n_records = sum(1 for r in kept if r.source == name)
        rows = {"read": count["read"], "in_records": count["read"] - count["excluded"], "excluded": count["excluded"]}
        rows["records"] = n_records
        fields: dict[str, Any] = {
            "input": table_input(table, SHAPE),
            "shape": SHAPE,
            "columns": list(table.columns),
            "mining_method": "not recorded (Tevatron table)",
            "ranking_rule": "order of negative_passages",
            "reference_positive": "positive_passages[0]",
            "passage_text": 'Tevatron format_passage: f"{title.strip()} {text.strip()}".strip()',
            "rows": rows,
        }
        if plan["subset"]:
            fields["subset"] = name
        if unattributed:
            fields["rows_without_subset"] = unattributed
        builder.result.describe(name, **fields)
    return builder.result


def load_tevatron(
    path: str | Path,
    source: str | None = None,
    on_error: str = "raise",
    split: str | None = None,
    keep_tables: bool = False,
    **_: Any,
) -> LoadResult:
    """``format="tevatron"``: Tevatron rows from a file (JSON lines whatever its name, or any table
    form); one source per ``subset`` value, else ``source`` (default: named after the file)."""
    path = require_path(path)
    builder = RecordBuilder(path, on_error, note_duplicates=True)
    table = read_table(path, builder, split, fallback="jsonl")
    table = held(table) if keep_tables else table
    plan = _detect(table.columns)
    if plan is None:
        raise InputError(path, None, "<columns>", f"not Tevatron rows: columns {table.columns}; expected {DESCRIPTION}")
    name = source or source_stem(path)
    result = read_tevatron(table, builder, name, plan)
    if keep_tables:
        keep(result, table, name, storage_form(path), path.name, artifact_name(path), path, split, plan, write_tevatron)
    return result


# ---------------------------------------------------------------------------------------------
# Writing: the cleaned copy in the same shape
# ---------------------------------------------------------------------------------------------


def _items_kept(items: Sequence[Any], passages: Sequence[Passage], kept: Sequence[Passage]) -> list[bool]:
    """Which of a row's negative items stay: an item stays while the cleaned record still holds its
    passage (``docid`` and text; a passage repeated within the row at most as often as it is held)."""
    allowed: dict[tuple[str, str], int] = {}
    for n in kept:
        allowed[(n.id, n.text)] = allowed.get((n.id, n.text), 0) + 1
    out = []
    for p in passages:
        key = (p.id, p.text)
        out.append(allowed.get(key, 0) > 0)
        allowed[key] = allowed.get(key, 0) - 1
    return out


def write_tevatron(table: Table, plan: Plan, cleaning: Cleaning, source: str | None) -> Rewritten:
    """Each row keeps, in ``negative_passages``, the objects (all their keys, as they were) of the
    negatives its cleaned record still holds (``trimmed`` when some went; ``clean.keep`` keeps the
    first accepted ones, ``kept``); a relabeled negative's object moves to the end of
    ``positive_passages`` (``relabeled``). Tevatron's trainer samples a row's negatives from that
    list, so a row needs one: a row left with none takes, with ``clean.fill=borrow``, the next
    query's kept negatives (``borrowed``, their objects as the lender's row held them); otherwise
    it is left out (``unwritable``; ``dropped`` under ``clean.fill=none``), and its relabeled
    passages are listed (:data:`~transferdx.inputs.writing.RELABEL_UNWRITTEN`), not in the copy.
    Other columns (``query_id``, ``subset``, any extra) are kept as they were."""
    text_cells, default = table.cells_are_text, source or SHAPE
    out: list[dict[str, Any]] = []
    changes: list[RowChange] = []
    lender_items: dict[tuple[str, str], Any] | None = None
    shaped, skipped = rows_with_queries(
        table, cleaning, lambda r: cleaning.by_qid.get((_source_of(r, plan, default), _qid_of(r, plan)))
    )
    for line, row, query in shaped:
        rec = query.record
        items = passage_items(row, NEGATIVES, text_cells)
        passages = _passages(row, NEGATIVES, text_cells)
        stays = _items_kept(items, passages, rec.negatives)
        n_lost = stays.count(False)
        moved = {(p.id, p.text) for p in query.added}
        if n_lost == 0 and not moved and (cleaning.keep is None or len(items) <= cleaning.keep):
            out.append(dict(row))
            continue
        kept = [item for item, stay in zip(items, stays, strict=True) if stay][: cleaning.keep]
        change = "relabeled" if moved else ("trimmed" if n_lost else "kept")
        if not kept:
            if not query.borrowed:  # Tevatron samples from negative_passages: a row needs one
                changes.append(RowChange(line, rec.qid, "dropped" if cleaning.fill == "none" else "unwritable", n_lost))
                lend = " (clean.fill=borrow lends the next query's)" if cleaning.fill != "borrow" else ""
                why = "not in the copy: a Tevatron row needs a negative and none is left" + lend
                changes += [
                    RowChange(None, rec.qid, RELABEL_UNWRITTEN, 0, f"relabeled positive {p.id} {why}")
                    for p in query.added
                ]
                continue
            if lender_items is None:
                lender_items = _negative_items(table, shaped)
            kept = [
                lender_items.get((p.id, p.text), {"docid": p.id, "title": "", "text": p.text})
                for p in query.borrowed[: cleaning.keep]
            ]
            change = "borrowed"
        new = dict(row) | {NEGATIVES: kept}
        if moved:
            relabeled = [item for item, p in zip(items, passages, strict=True) if (p.id, p.text) in moved]
            new[POSITIVES] = [*passage_items(row, POSITIVES, text_cells), *relabeled]
        out.append(new)
        changes.append(RowChange(line, rec.qid, change, n_lost))
    return Rewritten(list(table.columns), out, changes, skipped)


def _negative_items(table: Table, shaped: Sequence[tuple[int, Mapping[str, Any], Any]]) -> dict[tuple[str, str], Any]:
    """Every negative object of the rows written, by (docid, text): what a borrowed negative is
    written as (the object its lender's row holds)."""
    found: dict[tuple[str, str], Any] = {}
    for _line, row, _query in shaped:
        items = passage_items(row, NEGATIVES, table.cells_are_text)
        for item, p in zip(items, _passages(row, NEGATIVES, table.cells_are_text), strict=True):
            found.setdefault((p.id, p.text), item)
    return found


register(
    Format(
        SHAPE,
        read=load_tevatron,
        write=write_tevatron,
        shape=Shape(DESCRIPTION, _detect, read_tevatron, near_miss=_near_miss),
    )
)
