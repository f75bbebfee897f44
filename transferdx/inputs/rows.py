"""Rows → records: how the row-shaped formats (sentence-transformers tables, FlagEmbedding,
n-tuple tables) turn a :class:`~transferdx.inputs.records.Table` into records.

A format gives a :class:`RowReader`: a function that reads one row into a :class:`Row` (its query,
positives and negatives as ``(text, score)``, a ``qid`` when the table has one, and the passages'
ids when the table names them) and the words its descriptor uses. :meth:`RowReader.read` then
applies the rules every row format shares; an id table read through its lookup tables
(:mod:`~transferdx.inputs.idlists`) goes the same way:

- With ``group_by_query`` (always, for a file recognised by its columns) rows sharing a query text
  become one record: positives merged (deduplicated, in order of first appearance), negatives in
  row order. Without it each row is a record of its own, and a query on two rows is a duplicate
  query (the builder's located problem).
- **Duplicates, one policy for every row format.** A negative repeated *within one row* is kept:
  the trainer given that row would see it twice, so the audit sees it too (the
  ``duplicate_negative`` suspicion) and the descriptor counts it (``duplicate_negatives_kept``).
  A negative that an *earlier row of the same query* already gave is a counted exclusion (unit
  ``negative``, "duplicate negative (also row N)"): it repeats only because the file lists one row
  per (query, positive) pair, as ``mine_hard_negatives`` does for a query with several positives,
  and no training example holds it twice. A *filled* row — its own negatives, then the same again
  in order to fill its slots (``a b c a b``, as ``transferdx-clean`` fills an n-tuple row that lost
  negatives; :func:`~transferdx.inputs.writing.filled_width`) — gives each once, the filled cells
  counted in the descriptor (``filled_slots``), not kept as ``duplicate_negative`` suspects.
- ``qid`` = ``q`` + the first 12 hex digits of sha256(query) unless a ``qid`` column gives it
  (:func:`~transferdx.inputs.records.query_id`); passage ids are ``text_id(text)`` unless the row
  names them (``Row.ids``; a passage is still known by its text, so a negative an earlier row gave
  under another id is the same negative, and one whose text is a positive's goes as the builder
  rules: a located error, counted under ``skip``); a negative's
  ``rank`` is its position among the record's negatives (1-based, before any slice), its
  ``method`` the format's name unless the reader is given one. Scores, when present, stay on each
  passage (``Passage.score``) and are summarised in the descriptor (``mining_scores``).
- **A query with a positive and no negative** (rows grouped by query: a labeled-pair or labeled-list
  file whose miner found no negative for it) is a counted exclusion under either error policy
  (reason :data:`~transferdx.inputs.records.NO_NEGATIVE`), every row of it listed; a query without
  a positive, or a row that cannot be read, stays a located error under ``on_error=raise``.
- Every row is accounted for in the descriptor's ``rows``: read = in_records + excluded.
"""

from __future__ import annotations

import ast
import io
import json
import math
import tokenize
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from transferdx.inputs.reading import EMPTY_RECORD, FieldProblem, RecordBuilder, slice_text, text_value
from transferdx.inputs.records import (
    ANCHORS,
    FILLED_SLOTS,
    MERGED_NEGATIVE,
    NO_NEGATIVE,
    POSITIVES,
    ST_EXTRAS,
    LoadResult,
    Passage,
    Plan,
    Record,
    Table,
    query_id,
    text_id,
)
from transferdx.inputs.tables import negative_columns, plain
from transferdx.inputs.texts import intern_text
from transferdx.inputs.writing import filled_width

# ---------------------------------------------------------------------------------------------
# Cells (CSV cells arrive as text)
# ---------------------------------------------------------------------------------------------


def anchor_column(columns: Sequence[str]) -> str | None:
    """The query column: the first of ``anchor``, ``query``, ``question`` present."""
    return next((c for c in ANCHORS if c in columns), None)


def pair_columns(columns: Sequence[str]) -> tuple[str, str] | None:
    """The (query, positive) columns of a sentence-transformers table, whose miner keeps the names
    of the dataset it was given. By name: the first of :data:`ANCHORS` and of :data:`POSITIVES`
    present. Else as ``mine_hard_negatives`` picks them when not told (the first column the anchor,
    the second the positive): the columns left once the negatives (``negative``,
    ``negative_1..n``) and :data:`ST_EXTRAS` are set aside, when exactly two are left. None when
    neither rule gives two columns."""
    anchor = anchor_column(columns)
    positive = next((c for c in POSITIVES if c in columns and c != anchor), None)
    if anchor is not None and positive is not None:
        return anchor, positive
    rest = [c for c in columns if c != "negative" and not negative_columns([c]) and c not in ST_EXTRAS]
    if len(rest) != 2:
        return None
    if anchor is not None:
        return anchor, rest[1 - rest.index(anchor)]
    if positive is not None:
        return rest[1 - rest.index(positive)], positive
    return rest[0], rest[1]


def cell_text(row: Mapping[str, Any], key: str, where: str | None = None) -> str:
    """A non-empty string cell (``FieldProblem(where or key, …)`` when missing, null, empty, not a
    string, or not valid Unicode)."""
    where = where or key
    if key not in row or row[key] is None:
        raise FieldProblem(where, "missing")
    return cell_value(row[key], where)


def cell_value(value: Any, where: str) -> str:
    """:func:`cell_text` of a value already taken from its row (``where`` names it)."""
    if value is None:
        raise FieldProblem(where, "missing")
    return text_value(value, where)


def cell_number(value: Any, where: str) -> float:
    """A finite number (from a number, or from its text in a CSV cell), as a float."""
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


def cell_label(value: Any, where: str) -> int:
    """A relevance label: 1 (positive) or 0 (negative)."""
    number = cell_number(value, where)
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


def cell_list(row: Mapping[str, Any], key: str, cells_are_text: bool) -> list[Any]:
    """A list cell; printed into a CSV/TSV cell (``cells_are_text``) it is parsed back
    (:func:`parse_list_cell`)."""
    if key not in row or row[key] is None:
        raise FieldProblem(key, "missing")
    value = plain(row[key])
    if isinstance(value, str) and cells_are_text:
        try:
            return parse_list_cell(value)
        except ValueError as exc:
            raise FieldProblem(key, f"cannot read the list in this cell ({exc})") from None
    if not isinstance(value, list):
        raise FieldProblem(key, f"expected a list, got {type(value).__name__}")
    return value


def cell_texts(row: Mapping[str, Any], key: str, cells_are_text: bool) -> list[str]:
    """A list of non-empty strings; a bad item is located as ``key[i]``."""
    return [cell_value(v, f"{key}[{i}]") for i, v in enumerate(cell_list(row, key, cells_are_text))]


def cell_scores(row: Mapping[str, Any], key: str, cells_are_text: bool, n: int) -> list[float]:
    """Exactly ``n`` finite scores; a bad item is located as ``key[i]``."""
    values = cell_list(row, key, cells_are_text)
    if len(values) != n:
        raise FieldProblem(key, f"expected {n} scores, got {len(values)}")
    return [cell_number(v, f"{key}[{i}]") for i, v in enumerate(values)]


# ---------------------------------------------------------------------------------------------
# Rows into records
# ---------------------------------------------------------------------------------------------


@dataclass
class Row:
    """One table row, normalised: its anchor, positives and negatives as (text, score); ``ids``, for
    a table that names its passages (an id table), each text's id (else ``text_id(text)``)."""

    query: str
    positives: list[tuple[str, float | None]]
    negatives: list[tuple[str, float | None]]
    qid: str | None = None
    ids: dict[str, str] | None = None


@dataclass
class _Group:
    line: int
    qid: str
    query: str
    positives: dict[str, float | None] = field(default_factory=dict)
    negatives: list[tuple[str, float | None]] = field(default_factory=list)
    neg_line: dict[str, int] = field(default_factory=dict)  # negative text → the row that first gave it
    lines: list[int] = field(default_factory=list)
    ids: dict[str, str] = field(default_factory=dict)  # text → the id its first row named it by

    def id(self, text: str) -> str:
        return self.ids.get(text) or text_id(text)


@dataclass(frozen=True)
class RowReader:
    """How one row format's rows become records: ``row`` reads a row (``plan`` from the format's
    detector; ``cells_are_text`` for CSV/TSV, where a list arrives printed), the rest are the
    words of its descriptor (``per_row``: those that differ when rows are not grouped by query)."""

    shape: str  # the format's name: the descriptor's ``shape``, the negatives' default method
    row: Callable[[Mapping[str, Any], Plan, bool], Row]
    mining_method: str = "not recorded"
    ranking_rule: str = "row order"
    reference_positive: str = "the first positive of the query's first row"
    per_row: Mapping[str, str] = field(default_factory=dict)

    def read(
        self,
        table: Table,
        builder: RecordBuilder,
        source: str,
        plan: Plan,
        *,
        group_by_query: bool = True,
        window: slice | None = None,
        method: str | None = None,
        kind: str = "genuine",
    ) -> LoadResult:
        """``table``'s rows (through ``builder``) as ``source``'s records: grouped by query unless
        ``group_by_query`` is False; ``window`` slices each record's negatives (ranks are kept);
        ``method`` names how the negatives were made (default: the format's name)."""
        n_before = len(builder.result.records)
        groups, excluded_rows = self._groups(table, builder, source, plan, group_by_query)
        made_by = method or self.shape
        rows_in_records = 0
        for group in groups:
            negatives = [
                Passage(group.id(t), t, made_by, rank=r, score=s) for r, (t, s) in enumerate(group.negatives, 1)
            ]
            # a query the file gives a positive and no negative (a miner found none for it) is a
            # counted exclusion under either policy; one without a positive stays an input error
            none_given = group_by_query and bool(group.positives) and not group.negatives
            record = builder.add(
                group.line,
                qid=group.qid,
                query=group.query,
                positives=[Passage(group.id(t), t, score=s) for t, s in group.positives.items()],
                negatives=negatives if window is None else negatives[window],
                source=source,
                kind=kind,
                empty_reason=NO_NEGATIVE if none_given else EMPTY_RECORD,
                empty_is_error=not none_given,
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
        kept = builder.result.records[n_before:]
        rows = {"read": len(table.rows) + table.n_unreadable, "in_records": rows_in_records}
        rows |= {"excluded": excluded_rows, "records": len(kept)}
        builder.result.describe(source, **self._descriptor(table, kept, rows, group_by_query, window, method))
        return builder.result

    def _groups(
        self, table: Table, builder: RecordBuilder, source: str, plan: Plan, group_by_query: bool
    ) -> tuple[list[_Group], int]:
        """The records to be, one per query (or per row), and how many rows failed to be read."""
        groups: dict[str | int, _Group] = {}
        excluded_rows = table.n_unreadable
        for line, raw in zip(table.lines, table.rows, strict=True):
            try:
                item = self.row(raw, plan, table.cells_are_text)
            except FieldProblem as p:
                builder.fail(line, p.field, p.reason, source=source)
                excluded_rows += 1
                continue
            key: str | int = item.query if group_by_query else line
            group = groups.get(key)
            if group is None:
                query = intern_text(item.query)
                group = groups[key] = _Group(line, item.qid or query_id(query), query)
            group.lines.append(line)
            for text, pid in (item.ids or {}).items():
                group.ids.setdefault(text, pid)
            # texts interned as they are read: a row's cells are new strings, and a passage that many
            # rows repeat (a triplet file's positive, a negative of many queries) is then held once
            for text, score in item.positives:
                if text not in group.positives or group.positives[text] is None:
                    group.positives[intern_text(text)] = score
            width = filled_width([text for text, _ in item.negatives])
            builder.result.note(source, FILLED_SLOTS, len(item.negatives) - width)
            for text, score in item.negatives[:width]:  # a filled row's own negatives, each once
                text = intern_text(text)
                first = group.neg_line.setdefault(text, line)
                if first != line:  # an earlier row of this query gave it: the file's layout repeats it
                    builder.exclude(
                        line,
                        "negative",
                        f"{MERGED_NEGATIVE} {first})",
                        source=source,
                        qid=group.qid,
                        unit="negative",
                        item=(item.ids or {}).get(text) or text_id(text),
                    )
                    continue
                group.negatives.append((text, score))
        return list(groups.values()), excluded_rows

    def _descriptor(
        self,
        table: Table,
        kept: Sequence[Record],
        rows: dict[str, int],
        group_by_query: bool,
        window: slice | None,
        method: str | None,
    ) -> dict[str, Any]:
        words = {"ranking_rule": self.ranking_rule, "reference_positive": self.reference_positive}
        if not group_by_query:
            words.update(self.per_row)
        fields: dict[str, Any] = {
            "input": table_input(table, self.shape),
            "shape": self.shape,
            "columns": list(table.columns),
            "mining_method": method or self.mining_method,
            **words,
            "rows": rows,
        }
        if window is not None:
            fields["slice"] = slice_text(window)
        summary = mining_scores(kept)
        if summary is not None:
            fields["mining_scores"] = summary
        return fields


def table_input(table: Table, shape: str) -> dict[str, Any]:
    """The ``input`` entry of a descriptor: ``<shape> (<form>)``, the file's name and sha256."""
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
