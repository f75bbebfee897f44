"""sentence-transformers tables: what ``util.mine_hard_negatives`` writes, and any n-tuple table.

Recognised by their columns (the query column is ``anchor``, ``query`` or ``question``):

- ``ntuple``: ``anchor, positive, negative_1..n``, optionally ``scores`` (``[positive, negative_1,
  ...]``) and ``qid``: ``output_format="n-tuple"`` (and the deprecated ``"n-tuple-scores"``) or any
  n-tuple table. Also a reader by name (:func:`load_ntuple`, ``format="ntuple"``), which reads plain
  tab-separated lines with or without a header as well (the ``data=ntuple`` config).
- ``triplet``: ``anchor, positive, negative``, optionally ``scores`` (``[positive, negative]``):
  ``output_format="triplet"``.
- ``labeled_list``: ``anchor, positive`` (a list of documents) and ``labels`` (1 = positive,
  0 = negative) or ``scores`` (then the first document is the positive, as ``mine_hard_negatives``
  writes it): ``output_format="labeled-list"``.
- ``labeled_pair``: ``anchor, positive`` (one document) and ``label`` (1 / 0):
  ``output_format="labeled-pair"``.

Rows become records as every row format's do (:mod:`transferdx.inputs.rows`): rows of one anchor
grouped into one record; a negative that an earlier row of the anchor already gave (the miner writes
one row per (anchor, positive) pair) is a counted exclusion, one repeated within a row is kept and
counted (``duplicate_negatives_kept``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from transferdx.inputs.reading import FieldProblem, RecordBuilder, require_path
from transferdx.inputs.records import LoadResult
from transferdx.inputs.registry import Format, Shape, register
from transferdx.inputs.rows import (
    Row,
    RowReader,
    anchor_column,
    cell_label,
    cell_list,
    cell_scores,
    cell_text,
    cell_texts,
)
from transferdx.inputs.tables import Plan, form_of, is_saved_dataset, negative_columns, read_tab_lines, read_table

ST = "sentence-transformers util.mine_hard_negatives output or an equivalent table"


# ---------------------------------------------------------------------------------------------
# n-tuple: anchor, positive, negative_1..n
# ---------------------------------------------------------------------------------------------


def _ntuple_plan(columns: Sequence[str]) -> Plan:
    return {"anchor": anchor_column(columns) or "query", "scores": "scores" in columns, "qid": "qid" in columns}


def _detect_ntuple(columns: Sequence[str]) -> Plan | None:
    if anchor_column(columns) is None or "positive" not in columns or not negative_columns(columns):
        return None
    return _ntuple_plan(columns)


def _row_ntuple(row: Mapping[str, Any], plan: Plan, text_cells: bool) -> Row:
    """The row's own ``negative_k`` columns, in numeric order (K may vary from row to row)."""
    query = cell_text(row, plan["anchor"])
    positive = cell_text(row, "positive")
    columns = negative_columns(row)
    if not columns:
        raise FieldProblem("negative_1", "missing (no negative_k column)")
    negatives = [cell_text(row, c) for c in columns]
    scores: list[float | None] = [None] * (1 + len(negatives))
    if plan["scores"]:
        scores = list(cell_scores(row, "scores", text_cells, 1 + len(negatives)))
    qid = RecordBuilder.id_field(row, "qid") if plan["qid"] else None
    return Row(query, [(positive, scores[0])], list(zip(negatives, scores[1:], strict=True)), qid)


NTUPLE = RowReader(
    "ntuple",
    _row_ntuple,
    f"{ST} (output_format='n-tuple')",
    "column order negative_1..n, rows grouped by anchor",
    per_row={"ranking_rule": "column order negative_1..n", "reference_positive": "the row's positive"},
)


def load_ntuple(
    path: str | Path,
    source: str = "ntuple",
    on_error: str = "raise",
    header: bool | None = None,
    group_by_query: bool = False,
    method: str | None = None,
    kind: str = "genuine",
    fields: int | None = None,
    **_: Any,
) -> LoadResult:
    """``format="ntuple"``: rows of ``query, positive, negative_1..K``; each row is a record unless
    ``group_by_query`` (then rows sharing a query are one record, as for a recognised table).

    A ``.tsv`` file (or one whose name gives no form) is read as plain tab-separated lines
    (:func:`~transferdx.inputs.tables.read_tab_lines`: ``header`` True / False / None = when the
    first line looks like one; ``fields`` fixes the count), any other form as a table
    (:func:`~transferdx.inputs.tables.read_table`). A row is in a record or excluded (the
    descriptor's ``rows``: read = in_records + excluded); ``method`` names how the negatives were
    made (default ``ntuple``, the mining method "not recorded").
    """
    path = require_path(path)
    builder = RecordBuilder(path, on_error, note_duplicates=True)
    if form_of(path) in (None, "tsv") and not is_saved_dataset(path):
        table = read_tab_lines(path, builder, header, fields)
    else:
        table = read_table(path, builder)
    plan = _ntuple_plan(table.columns)
    return NTUPLE.read(table, builder, source, plan, group_by_query=group_by_query, method=method, kind=kind)


# ---------------------------------------------------------------------------------------------
# triplet, labeled-list, labeled-pair
# ---------------------------------------------------------------------------------------------


def _detect_triplet(columns: Sequence[str]) -> Plan | None:
    anchor = anchor_column(columns)
    if anchor is None or not {"positive", "negative"} <= set(columns):
        return None
    return {"anchor": anchor, "scores": "scores" in columns, "qid": "qid" in columns}


def _row_triplet(row: Mapping[str, Any], plan: Plan, text_cells: bool) -> Row:
    query = cell_text(row, plan["anchor"])
    positive, negative = cell_text(row, "positive"), cell_text(row, "negative")
    pos_s: float | None = None
    neg_s: float | None = None
    if plan["scores"]:
        pos_s, neg_s = cell_scores(row, "scores", text_cells, 2)
    qid = RecordBuilder.id_field(row, "qid") if plan["qid"] else None
    return Row(query, [(positive, pos_s)], [(negative, neg_s)], qid)


def _detect_labeled_list(columns: Sequence[str]) -> Plan | None:
    anchor = anchor_column(columns)
    if anchor is None or "positive" not in columns or negative_columns(columns) or "negative" in columns:
        return None
    if "labels" in columns:
        return {"anchor": anchor, "labels": "labels", "scores": "scores" if "scores" in columns else None}
    if "scores" in columns:
        return {"anchor": anchor, "labels": None, "scores": "scores"}
    return None


def _row_labeled_list(row: Mapping[str, Any], plan: Plan, text_cells: bool) -> Row:
    query = cell_text(row, plan["anchor"])
    docs = cell_texts(row, "positive", text_cells)
    scores: list[float | None] = [None] * len(docs)
    if plan["scores"]:
        scores = list(cell_scores(row, plan["scores"], text_cells, len(docs)))
    if plan["labels"]:
        raw = cell_list(row, plan["labels"], text_cells)
        if len(raw) != len(docs):
            raise FieldProblem(plan["labels"], f"expected {len(docs)} labels (one per document), got {len(raw)}")
        labels = [cell_label(v, f"{plan['labels']}[{i}]") for i, v in enumerate(raw)]
    else:  # mine_hard_negatives(output_format="labeled-list", output_scores=True): positive first
        labels = [1] + [0] * (len(docs) - 1)
    items = list(zip(docs, scores, strict=True))
    return Row(
        query,
        [d for d, lab in zip(items, labels, strict=True) if lab == 1],
        [d for d, lab in zip(items, labels, strict=True) if lab == 0],
    )


def _detect_labeled_pair(columns: Sequence[str]) -> Plan | None:
    anchor = anchor_column(columns)
    if anchor is None or "positive" not in columns or "label" not in columns:
        return None
    return {"anchor": anchor}


def _row_labeled_pair(row: Mapping[str, Any], plan: Plan, text_cells: bool) -> Row:
    query, doc = cell_text(row, plan["anchor"]), cell_text(row, "positive")
    label = cell_label(row.get("label"), "label")
    return Row(query, [(doc, None)] if label == 1 else [], [(doc, None)] if label == 0 else [])


TRIPLET = RowReader("triplet", _row_triplet, f"{ST} (output_format='triplet')", "row order, rows grouped by anchor")
LABELED_LIST = RowReader(
    "labeled_list",
    _row_labeled_list,
    f"{ST} (output_format='labeled-list')",
    "list order, rows grouped by anchor",
    "the first document labelled 1 (with scores only: the first document)",
)
LABELED_PAIR = RowReader(
    "labeled_pair",
    _row_labeled_pair,
    f"{ST} (output_format='labeled-pair')",
    "row order, rows grouped by anchor",
    "the first document labelled 1",
)

register(
    Format(
        "ntuple",
        read=load_ntuple,
        shape=Shape(
            "anchor|query|question, positive, negative_1..negative_n [, scores] [, qid]", _detect_ntuple, NTUPLE.read
        ),
    )
)
register(
    Format(
        "triplet", shape=Shape("anchor|query|question, positive, negative [, scores]", _detect_triplet, TRIPLET.read)
    )
)
register(
    Format(
        "labeled_list",
        shape=Shape(
            "anchor|query|question, positive (list of documents), labels (1/0) or scores (positive first)",
            _detect_labeled_list,
            LABELED_LIST.read,
        ),
    )
)
register(
    Format(
        "labeled_pair",
        shape=Shape(
            "anchor|query|question, positive (one document), label (1/0)", _detect_labeled_pair, LABELED_PAIR.read
        ),
    )
)
