"""sentence-transformers tables: what ``util.mine_hard_negatives`` writes, and any n-tuple table.

Recognised by their columns. ``mine_hard_negatives`` keeps the names of the dataset it mined, so the
query column (QUERY below) is ``anchor``, ``query`` or ``question`` and the positive column
(POSITIVE) ``positive``, ``answer``, ``document``, ``passage``, ``context`` or ``response``; with
other names, the two columns left besides the negatives, ``scores``, ``score``, ``label``,
``labels`` and ``qid`` are read as the miner reads them, first the query, then the positive
(:func:`~transferdx.inputs.rows.pair_columns`). The cleaned copy keeps the file's own names.

- ``ntuple``: ``QUERY, POSITIVE, negative_1..n``, optionally ``scores`` (``[positive, negative_1,
  ...]``) and ``qid``: ``output_format="n-tuple"`` (and the deprecated ``"n-tuple-scores"``) or any
  n-tuple table. Also a reader by name (:func:`load_ntuple`, ``format="ntuple"``), which reads plain
  tab-separated lines with or without a header as well (the ``data=ntuple`` config).
- ``triplet``: ``QUERY, POSITIVE, negative``, optionally ``scores`` (``[positive, negative]``):
  ``output_format="triplet"``.
- ``labeled_list``: ``QUERY, POSITIVE`` (a list of documents) and ``labels`` (1 = positive,
  0 = negative) or ``scores`` (then the first document is the positive, as ``mine_hard_negatives``
  writes it): ``output_format="labeled-list"``.
- ``labeled_pair``: ``QUERY, POSITIVE`` (one document) and ``label`` (1 / 0), optionally ``score``:
  ``output_format="labeled-pair"``. With ``output_scores=True`` the miner writes ``score`` instead of
  ``label``: read by its order (:data:`SCORED_PAIR_RULE`: the first row of each query's contiguous
  block is its positive), the descriptor's ``scored_pairs`` counting the queries it may have misread.
- By column order: a table no shape names, of 3+ columns of text, is read as an n-tuple the way
  sentence-transformers' trainer reads any dataset (first anchor, second positive, the rest
  negatives; :func:`_by_order`), the mapping said once (:class:`ColumnsByOrderWarning`) and kept in
  the descriptor (``columns_by_order``).

Rows become records as every row format's do (:mod:`transferdx.inputs.rows`): rows of one anchor
grouped into one record; a negative that an earlier row of the anchor already gave (the miner writes
one row per (anchor, positive) pair) is a counted exclusion, one repeated within a row is kept and
counted (``duplicate_negatives_kept``).
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from transferdx.inputs.reading import FieldProblem, RecordBuilder, artifact_name, require_path
from transferdx.inputs.records import (
    ANCHORS,
    LINES_FORM,
    LINES_HEADER_FORM,
    POSITIVES,
    ST_EXTRAS,
    LoadResult,
    Passage,
    Plan,
    Table,
)
from transferdx.inputs.registry import Format, Shape, keep, register
from transferdx.inputs.rows import (
    Row,
    RowReader,
    cell_label,
    cell_list,
    cell_number,
    cell_scores,
    cell_text,
    cell_texts,
    pair_columns,
)
from transferdx.inputs.tables import (
    form_of,
    held,
    is_saved_dataset,
    negative_columns,
    plain,
    read_table,
    storage_form,
)
from transferdx.inputs.textforms import is_gzip, read_tab_lines
from transferdx.inputs.writing import (
    RELABEL_UNWRITTEN,
    CleanedQuery,
    Cleaning,
    Rewritten,
    RowChange,
    fill_slots,
    kept_cells,
    positives_first,
    rows_with_queries,
)

ST = "sentence-transformers util.mine_hard_negatives output or an equivalent table"
# the (query, positive) columns as the shapes' descriptions name them (:func:`pair_columns`)
PAIR = f"{'|'.join(ANCHORS)} (or any name, first), {'|'.join(POSITIVES)} (or any name, second)"


# ---------------------------------------------------------------------------------------------
# n-tuple: anchor, positive, negative_1..n
# ---------------------------------------------------------------------------------------------


def _pair_plan(columns: Sequence[str]) -> Plan | None:
    """``{"anchor": ..., "positive": ...}`` from :func:`pair_columns`, the start of every shape's plan."""
    pair = pair_columns(columns)
    return None if pair is None else {"anchor": pair[0], "positive": pair[1]}


def _ntuple_plan(columns: Sequence[str], pair: Plan | None = None) -> Plan:
    pair = pair or _pair_plan(columns) or {"anchor": "query", "positive": "positive"}
    return pair | {"scores": "scores" in columns, "qid": "qid" in columns}


def _detect_ntuple(columns: Sequence[str]) -> Plan | None:
    pair = _pair_plan(columns)
    if pair is None or not negative_columns(columns):
        return None
    return _ntuple_plan(columns, pair)


def _row_ntuple(row: Mapping[str, Any], plan: Plan, text_cells: bool) -> Row:
    """The row's own ``negative_k`` columns, in numeric order (K may vary from row to row); a table
    read by column order (:func:`_by_order`) names its negative columns in the plan."""
    query = cell_text(row, plan["anchor"])
    positive = cell_text(row, plan["positive"])
    columns = list(plan["negatives"]) if plan.get("negatives") else negative_columns(row)
    if not columns:
        raise FieldProblem("negative_1", "missing (no negative_k column)")
    negatives = [cell_text(row, c) for c in columns]
    scores: list[float | None] = [None] * (1 + len(negatives))
    if plan["scores"]:
        scores = list(cell_scores(row, "scores", text_cells, 1 + len(negatives)))
    qid = RecordBuilder.id_field(row, "qid") if plan["qid"] else None
    return Row(query, [(positive, scores[0])], list(zip(negatives, scores[1:], strict=True)), qid)


class ColumnsByOrderWarning(UserWarning):
    """A table read by the order of its columns (:func:`_by_order`): says once which column is
    which, as it is read."""


def _not_text(table: Table, column: str) -> str | None:
    """Why ``column`` of ``table`` is no column of passages (None when it is): a cell that is not a
    non-empty string (its line and value), or, in a CSV/TSV (every cell text), every cell a number
    or a printed list, text only by the file's form."""
    cells = []
    for line, row in zip(table.lines, table.rows, strict=True):
        value = plain(row.get(column))
        if not isinstance(value, str) or not value.strip():
            return f"column {column!r} is not text at line {line} ({value!r})"
        cells.append(value.strip())
    if table.cells_are_text and all(_is_number(v) or (v.startswith("[") and v.endswith("]")) for v in cells):
        return f"column {column!r} holds only numbers or lists"
    return None


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _by_order(table: Table) -> Plan | str | None:
    """A table no shape recognises by its column names, read as sentence-transformers' trainer
    reads any dataset: by column order, the first the anchor, the second the positive, the rest
    negatives, whatever their names. Only when it has at least 3 columns, every cell of each a
    non-empty string, and none of its names is one the shapes give a meaning to (``qid``,
    ``score``, ``label``, ...), and not a CSV/TSV whose "names" hold spaces (its first line is a
    row, not a header): otherwise it stays the unrecognised-shape error (nothing ignored), which
    names the column that is not text (the string returned).
    The plan's ``by_order`` states the mapping (``anchor=q, positive=a, negatives=x1, x2``)."""
    columns = [str(c) for c in table.columns]
    if len(columns) < 3 or set(columns) & {*ST_EXTRAS, "negative", "negatives", "neg", "pos", "positives"}:
        return None
    if negative_columns(columns) or not table.rows:
        return None
    if table.cells_are_text and any(" " in c.strip() for c in columns):
        return None  # a CSV/TSV whose first line is prose, not names: a file without a header row
    for column in columns:
        why = _not_text(table, column)
        if why is not None:
            return f"not read by column order (first anchor, second positive, the rest negatives): {why}"
    negatives = columns[2:]
    named = ", ".join(negatives) if len(negatives) <= 4 else f"{negatives[0]}..{negatives[-1]} ({len(negatives)})"
    mapping = f"anchor={columns[0]}, positive={columns[1]}, negatives={named}"
    plan = {"anchor": columns[0], "positive": columns[1], "negatives": negatives, "scores": False, "qid": False}
    return plan | {"by_order": mapping}


def _read_ntuple(table: Table, builder: RecordBuilder, source: str, plan: Plan, **options: Any) -> LoadResult:
    """An n-tuple table: by its column names, or by their order (:func:`_by_order`; the mapping in
    the descriptor's ``columns_by_order`` and said once, as a :class:`ColumnsByOrderWarning`)."""
    if not plan.get("by_order"):
        return NTUPLE.read(table, builder, source, plan, **options)
    mapping = (
        f"{plan['by_order']} (no column name says which is which: read by column order, as "
        "sentence-transformers' trainer reads them)"
    )
    warnings.warn(f"{Path(table.file).name}: {mapping}", ColumnsByOrderWarning, stacklevel=2)
    reader = dataclasses.replace(NTUPLE, ranking_rule="column order " + ", ".join(plan["negatives"]))
    result = reader.read(table, builder, source, plan, **options)
    result.describe(source, columns_by_order=mapping)
    return result


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
    keep_tables: bool = False,
    **_: Any,
) -> LoadResult:
    """``format="ntuple"``: rows of ``query, positive, negative_1..K``; each row is a record unless
    ``group_by_query`` (then rows sharing a query are one record, as for a recognised table).

    A ``.tsv`` file (or one whose name gives no form) is read as plain tab-separated lines
    (:func:`~transferdx.inputs.textforms.read_tab_lines`: ``header`` True / False / None = when the
    first line looks like one; ``fields`` fixes the count), any other form as a table
    (:func:`~transferdx.inputs.tables.read_table`). A row is in a record or excluded (the
    descriptor's ``rows``: read = in_records + excluded); ``method`` names how the negatives were
    made (default ``ntuple``, the mining method "not recorded").
    """
    path = require_path(path)
    builder = RecordBuilder(path, on_error, note_duplicates=True)
    lines = form_of(path) in (None, "tsv") and not is_saved_dataset(path)
    table = read_tab_lines(path, builder, header, fields) if lines else read_table(path, builder)
    table = held(table) if keep_tables else table
    plan = _ntuple_plan(table.columns)
    result = NTUPLE.read(table, builder, source, plan, group_by_query=group_by_query, method=method, kind=kind)
    if keep_tables:
        keep_rows(result, table, path, source, plan, write_slots(negative_columns), group_by_query)
    return result


def keep_rows(
    result: LoadResult,
    table: Table,
    path: Path,
    source: str,
    plan: Plan,
    write: Callable[..., Rewritten],
    group_by_query: bool,
) -> None:
    """Keep a table a reader chosen by name read (tab-separated lines, with or without their header,
    or any table form) for the clean verb; rows read one record each cannot be told apart by
    query, so such a table is not kept (the copy is records JSONL, and the summary says why)."""
    if not group_by_query:
        result.unwritable.append(f"{path.name}: each row read as its own record (group_by_query=false)")
        return
    storage = storage_form(path)
    if table.form == "tsv" and table.cells_are_text and form_of(path) in (None, "tsv"):
        storage = (LINES_HEADER_FORM if table.header else LINES_FORM) + (".gz" if is_gzip(path) else "")
    keep(result, table, source, storage, path.name, artifact_name(path), path, plan=plan, write=write)


# ---------------------------------------------------------------------------------------------
# triplet, labeled-list, labeled-pair
# ---------------------------------------------------------------------------------------------


def _detect_triplet(columns: Sequence[str]) -> Plan | None:
    pair = _pair_plan(columns)
    if pair is None or "negative" not in columns:
        return None
    return pair | {"scores": "scores" in columns, "qid": "qid" in columns}


def _row_triplet(row: Mapping[str, Any], plan: Plan, text_cells: bool) -> Row:
    query = cell_text(row, plan["anchor"])
    positive, negative = cell_text(row, plan["positive"]), cell_text(row, "negative")
    pos_s: float | None = None
    neg_s: float | None = None
    if plan["scores"]:
        pos_s, neg_s = cell_scores(row, "scores", text_cells, 2)
    qid = RecordBuilder.id_field(row, "qid") if plan["qid"] else None
    return Row(query, [(positive, pos_s)], [(negative, neg_s)], qid)


def _detect_labeled_list(columns: Sequence[str]) -> Plan | None:
    plan = _pair_plan(columns)
    if plan is None or negative_columns(columns) or "negative" in columns:
        return None
    if "labels" in columns:
        return plan | {"labels": "labels", "scores": "scores" if "scores" in columns else None}
    if "scores" in columns:
        return plan | {"labels": None, "scores": "scores"}
    return None


def _row_labeled_list(row: Mapping[str, Any], plan: Plan, text_cells: bool) -> Row:
    query = cell_text(row, plan["anchor"])
    docs = cell_texts(row, plan["positive"], text_cells)
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
    """``QUERY, POSITIVE, label`` (with an optional ``score`` kept on the passages), or ``QUERY,
    POSITIVE, score`` without a label: what ``mine_hard_negatives(output_format="labeled-pair",
    output_scores=True)`` writes (read by the miner's order, :func:`_read_labeled_pair`)."""
    plan = _pair_plan(columns)
    if plan is None:
        return None
    if "label" in columns:
        return plan | _pair_extras(columns)
    if "score" in columns and not {"labels", "scores", "negative"} & set(columns) and not negative_columns(columns):
        return plan | _pair_extras(columns)
    return None


def _pair_extras(columns: Sequence[str]) -> Plan:
    return {"label": "label" if "label" in columns else None, "score": "score" if "score" in columns else None}


def _row_labeled_pair(row: Mapping[str, Any], plan: Plan, text_cells: bool) -> Row:
    query, doc = cell_text(row, plan["anchor"]), cell_text(row, plan["positive"])
    label = cell_label(row.get("label"), "label")
    score = cell_number(row.get("score"), "score") if plan.get("score") else None
    return Row(query, [(doc, score)] if label == 1 else [], [(doc, score)] if label == 0 else [])


# the rule a scored labeled-pair file (no label) is read by, as its descriptor states it
SCORED_PAIR_RULE = (
    "no label column: each query's rows are read as mine_hard_negatives(output_format='labeled-pair', "
    "output_scores=True) writes them, contiguous, its positives first, then its negatives by descending score; "
    "the number of positives is not written, so the first row of each query's block is its positive and the "
    "rest its negatives"
)
SCORED_PAIR_CHECK = (
    "queries whose rows after the first are not in non-increasing score order: the miner writes negatives "
    "sorted, so such a query likely has a second positive read as a negative (one scored at or above its "
    "first negative does not show)"
)


class _Blocks:
    """The row function of a scored labeled-pair table: rows come in table order, so the first row
    of each query's block is its positive; a query met again after another query's rows is a
    located problem. Counts the queries whose rows after the first are not in non-increasing score
    order (:data:`SCORED_PAIR_CHECK`)."""

    def __init__(self, lines: Sequence[int]) -> None:
        self.lines = lines  # the table's lines: the rows are read in this order, once each
        self.current: str | None = None
        self.first_line: dict[str, int] = {}
        self.last: dict[str, float] = {}  # query → the score of its last negative row read
        self.unsorted: set[str] = set()
        self.n = 0  # rows read so far

    def __call__(self, row: Mapping[str, Any], plan: Plan, text_cells: bool) -> Row:
        line = self.lines[self.n]
        self.n += 1
        query = cell_text(row, plan["anchor"])
        if query != self.current and query in self.first_line:
            raise FieldProblem(
                plan["anchor"],
                f"this query's rows are not contiguous (its block began at line {self.first_line[query]}, other "
                "queries' rows came between): a labeled-pair file with scores and no label is read by its "
                "order (the first row of each query's block is its positive), so its rows must be grouped",
            )
        first = query != self.current
        if first:  # the block starts here even if the rest of the row is bad: its next row is no positive
            self.current, self.first_line[query] = query, line
        doc, score = cell_text(row, plan["positive"]), cell_number(row.get("score"), "score")
        if first:
            return Row(query, [(doc, score)], [])
        if query in self.last and score > self.last[query]:
            self.unsorted.add(query)
        self.last[query] = score
        return Row(query, [], [(doc, score)])


def _read_labeled_pair(table: Table, builder: RecordBuilder, source: str, plan: Plan, **options: Any) -> LoadResult:
    """A labeled-pair table: by its ``label`` column, or without one (scores only) by the miner's
    order (:data:`SCORED_PAIR_RULE`; the descriptor's ``scored_pairs`` states the rule and counts
    the queries it may have misread)."""
    if plan.get("label"):
        return LABELED_PAIR.read(table, builder, source, plan, **options)
    blocks = _Blocks(table.lines)
    reader = dataclasses.replace(
        LABELED_PAIR,
        row=blocks,
        ranking_rule="row order (the miner's: descending score), rows grouped by anchor",
        reference_positive="the first row of the query's block (no label: the miner writes positives first)",
    )
    result = reader.read(table, builder, source, plan, **options)
    queries = len(blocks.first_line)
    result.describe(
        source,
        scored_pairs={
            "rule": SCORED_PAIR_RULE,
            "queries": queries,
            "queries_not_descending": len(blocks.unsorted),
            "queries_not_descending_means": SCORED_PAIR_CHECK,
        },
    )
    return result


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


# ---------------------------------------------------------------------------------------------
# Writers: the cleaned copy in the table's own shape (design §3.9, cleaning)
# ---------------------------------------------------------------------------------------------


def _by_text(query: CleanedQuery) -> dict[str, Passage]:
    return {p.text: p for p in (*query.borrowed, *query.record.negatives)}


def _row_scores(row: Mapping[str, Any], plan: Plan, text_cells: bool, texts: Sequence[str]) -> dict[str, float]:
    """The row's own score of each negative text (``scores`` = [positive, negatives...])."""
    if not plan.get("scores"):
        return {}
    values = cell_list(row, "scores", text_cells)
    return {t: float(v) for t, v in zip(texts, values[1:], strict=False)}


def _slot_scores(positive: float | None, slots: Sequence[Passage], own: Mapping[str, float]) -> list[Any]:
    return [positive, *[own.get(p.text, p.score) for p in slots]]


def _slot_row(
    row: Mapping[str, Any],
    cols: Sequence[str],
    slots: Sequence[Passage],
    plan: Plan,
    positive: float | None,
    own: Mapping[str, float],
) -> dict[str, Any]:
    """``row`` with its first ``len(slots)`` negative columns holding ``slots`` (the rest are left
    out by the writer) and, with scores, ``[positive, slot scores...]``."""
    new = dict(row) | {c: p.text for c, p in zip(cols, slots, strict=False)}
    if plan.get("scores"):
        new["scores"] = _slot_scores(positive, slots, own)
    return new


def write_slots(columns_of: Callable[[Mapping[str, Any]], list[str]]) -> Callable[..., Rewritten]:
    """The writer of a fixed-slot shape (triplet: ``negative``; n-tuple: ``negative_1..n``).

    Each row keeps its negatives the cleaned record still holds (:func:`kept_cells`), the first
    ``clean.keep`` of them when that is set (the table then has that many negative columns: a file
    mined with more negatives than it needs takes its next accepted candidates). A row left with
    fewer than its slots is completed by :func:`fill_slots` — by default it is not (``dropped``,
    listed); ``clean.fill=repeat|borrow`` refills or repeats. A row that lost all its negatives is
    left out (``dropped``) when another row of its (anchor, positive) pair keeps one. A negative
    relabeled as a positive gets a row of its own after the row it was in, with that row's
    negatives (``added``)."""

    def write(table: Table, plan: Plan, cleaning: Cleaning, source: str | None) -> Rewritten:
        anchor, pos, text_cells = plan["anchor"], plan["positive"], table.cells_are_text
        rows: list[tuple[int, Mapping[str, Any], CleanedQuery, list[str], list[bool]]] = []
        pairs_kept: set[tuple[str, str]] = set()
        shaped, skipped = rows_with_queries(
            table, cleaning, lambda r: cleaning.by_query.get((str(source), str(r.get(anchor))))
        )
        for line, row, query in shaped:
            cols = list(plan["negatives"]) if plan.get("negatives") else columns_of(row)
            keep = kept_cells([str(row[c]) for c in cols], query.record.negatives)
            rows.append((line, row, query, cols, keep))
            if any(keep):
                pairs_kept.add((str(row[anchor]), str(row[pos])))
        placed: list[tuple[str, str, dict[str, Any]]] = []  # (qid, role, row): see positives_first
        changes: list[RowChange] = []
        added: set[tuple[str, str]] = set()
        unused: set[str] = set()  # negative columns past clean.keep: not written
        for line, row, query, cols, keep in rows:
            texts = [str(row[c]) for c in cols]
            qid, pair, n_lost = query.record.qid, (str(row[anchor]), str(row[pos])), keep.count(False)
            own = _row_scores(row, plan, text_cells, texts)
            positive = cell_list(row, "scores", text_cells)[0] if plan.get("scores") else None
            k = cleaning.slots(len(cols))
            unused.update(cols[k:])
            lookup = _by_text(query)
            kept = [lookup[t] for t, c in zip(texts, keep, strict=True) if c]
            if n_lost == 0 and k == len(cols):
                placed.append((qid, "original", dict(row)))
            elif not any(keep) and pair in pairs_kept:
                changes.append(RowChange(line, qid, "dropped", n_lost, "its (anchor, positive) pair keeps other rows"))
            else:
                slots, change = fill_slots(kept, k, query, cleaning.fill)
                if change or n_lost:
                    why = f"{len(kept)} negatives left, the row needs {k} (clean.fill=repeat keeps it)"
                    changes.append(
                        RowChange(line, qid, change or "trimmed", n_lost, why if change == "dropped" else "")
                    )
                if change not in ("unwritable", "dropped"):
                    pairs_kept.add(pair)
                    placed.append((qid, "original", _slot_row(row, cols, slots, plan, positive, own)))
            # each relabeled passage of the row: a row of its own (the row's kept negatives, then the
            # query's next ones), even when the row it was in is dropped; after the query's first row
            for moved in query.added:
                if moved.text in texts and (qid, moved.text) not in added:
                    added.add((qid, moved.text))
                    slots, change = fill_slots([p for p in kept if p.text != moved.text], k, query, cleaning.fill)
                    if change in ("unwritable", "dropped"):
                        why = _unheld(moved, k, query, cleaning.fill)
                        changes.append(RowChange(None, qid, RELABEL_UNWRITTEN, 0, why))
                        continue
                    positive_score = own.get(moved.text, moved.score)
                    new = _slot_row({**row, pos: moved.text}, cols, slots, plan, positive_score, own)
                    placed.append((qid, "relabeled", new))
                    changes.append(
                        RowChange(None, qid, "added", 0, f"relabeled positive {moved.id} ({change or 'kept'})")
                    )
        out = positives_first(placed)
        if not unused:
            return Rewritten(list(table.columns), out, changes, skipped)
        columns = [c for c in table.columns if c not in unused]
        return Rewritten(columns, [{c: r[c] for c in columns if c in r} for r in out], changes, skipped)

    return write


def _unheld(moved: Passage, k: int, query: CleanedQuery, fill: str) -> str:
    """Why a fixed-slot table (triplet, n-tuple) cannot hold relabeled ``moved`` as a positive: a
    row needs ``k`` negatives, and the table has no pair form (every row has the same columns)."""
    have = len(query.record.negatives)
    if fill == "none":
        return (
            f"relabeled positive {moved.id} not in the copy: its row needs {k} negatives, the query keeps {have} "
            "(clean.fill=repeat writes it)"
        )
    return (
        f"relabeled positive {moved.id} not in the copy: its row needs {k} negatives and nothing is left to "
        "fill it from" + (" (clean.fill=borrow lends the next query's)" if fill == "repeat" else "")
    )


def _write_labeled_list(table: Table, plan: Plan, cleaning: Cleaning, source: str | None) -> Rewritten:
    """``anchor, positive`` (a list of documents) with ``labels`` and/or ``scores``: each document
    labelled 0 stays while the cleaned record holds it; a relabeled one gets label 1 (with
    ``labels``; moved after the row's last labelled-1 document when it came before it) or, with
    scores only (positive first), a row of its own with the row's kept negatives (``added``); a
    removed one leaves the lists (``trimmed``). A relabeled document never becomes the query's first
    positive (:func:`~transferdx.inputs.writing.positives_first`). A row may keep no negative (the
    shape allows it)."""
    anchor, pos, text_cells = plan["anchor"], plan["positive"], table.cells_are_text
    placed: list[tuple[str, str, dict[str, Any]]] = []  # (qid, role, row): see positives_first
    changes: list[RowChange] = []
    shaped, skipped = rows_with_queries(
        table, cleaning, lambda r: cleaning.by_query.get((str(source), str(r.get(anchor))))
    )
    for line, row, query in shaped:
        parsed = _row_labeled_list(row, plan, text_cells)
        docs = cell_texts(row, pos, text_cells)
        scores = list(cell_list(row, plan["scores"], text_cells)) if plan["scores"] else None
        labels = list(cell_list(row, plan["labels"], text_cells)) if plan["labels"] else None
        negative = {t for t, _ in parsed.negatives}
        moved = {p.text for p in query.added}
        keep = iter(kept_cells([d for d in docs if d in negative], query.record.negatives))
        stays = [True if d not in negative else next(keep) for d in docs]
        relabel = [d in negative and d in moved and labels is not None for d in docs]
        n_lost = sum(1 for s, r in zip(stays, relabel, strict=True) if not s and not r)
        stays = _first_negatives(stays, [d in negative for d in docs], cleaning.keep)
        qid = query.record.qid
        role = "original" if any(d not in negative for d in docs) else ("relabeled" if any(relabel) else "other")
        if n_lost == 0 and not any(relabel) and not (moved & negative) and stays.count(True) == len(docs):
            placed.append((qid, role, dict(row)))
            continue
        take = [s or r for s, r in zip(stays, relabel, strict=True)]
        order = _after_positives([i for i, k in enumerate(take) if k], [d not in negative for d in docs], relabel)
        new = dict(row) | {pos: _cells([docs[i] for i in order], row, pos)}
        if labels is not None:
            one = [1 if r else lab for lab, r in zip(labels, relabel, strict=True)]
            new[plan["labels"]] = _cells([one[i] for i in order], row, plan["labels"])
        if scores is not None:
            new[plan["scores"]] = _cells([scores[i] for i in order], row, plan["scores"])
        placed.append((qid, role, new))
        change = "relabeled" if any(relabel) else "trimmed"
        changes.append(RowChange(line, qid, change, n_lost + sum(relabel)))
        if labels is None:  # scores only: a relabeled document becomes the first of a row of its own
            for d, s in zip(docs, scores or [], strict=False):
                if d in negative and d in moved:
                    rest = [(t, v) for t, v, k in zip(docs, scores or [], take, strict=True) if k and t in negative]
                    new = dict(row) | {pos: _cells([d] + [t for t, _ in rest], row, pos)}
                    new[plan["scores"]] = _cells([s] + [v for _, v in rest], row, plan["scores"])
                    placed.append((qid, "relabeled", new))
                    changes.append(RowChange(None, qid, "added", 0, f"relabeled positive {d[:40]!r}"))
    return Rewritten(list(table.columns), positives_first(placed), changes, skipped)


def _after_positives(kept: list[int], original: Sequence[bool], relabeled: Sequence[bool]) -> list[int]:
    """``kept`` (a row's document indices, in order) with each relabeled document that comes before
    the row's last original positive moved after it: the row's positives keep their order, p0 first."""
    last = max((i for i in kept if original[i]), default=-1)
    early = [i for i in kept if relabeled[i] and i < last]
    if not early:
        return kept
    rest = [i for i in kept if i not in early]
    at = rest.index(last) + 1
    return rest[:at] + early + rest[at:]


def _first_negatives(stays: list[bool], is_negative: Sequence[bool], keep: int | None) -> list[bool]:
    """``stays`` with only the first ``keep`` staying negatives still staying (None: all)."""
    if keep is None:
        return stays
    out, n = [], 0
    for stay, negative in zip(stays, is_negative, strict=True):
        n += stay and negative
        out.append(stay and (not negative or n <= keep))
    return out


def _cells(values: list[Any], row: Mapping[str, Any], column: str) -> Any:
    """A list cell as the row held it: a list, or (a list printed in a CSV cell) its JSON."""
    import json

    return json.dumps(values, ensure_ascii=False) if isinstance(row.get(column), str) else values


def _write_scored_pair(table: Table, plan: Plan, cleaning: Cleaning, source: str | None) -> Rewritten:
    """``anchor, positive, score`` (no label, read by :data:`SCORED_PAIR_RULE`): each query's first
    row (its positive) stays, with its score; a later row (a negative) stays while the cleaned record
    holds its document, else is left out (``dropped``), so each kept row keeps its own score and the
    block its order. A relabeled negative cannot be a positive here (a re-read takes only a block's
    first row as one): its row is left out and the passage listed
    (:data:`~transferdx.inputs.writing.RELABEL_UNWRITTEN`). A query left without negatives keeps its
    positive row (a re-read counts it under ``no negative``, as the miner's own such rows)."""
    out: list[dict[str, Any]] = []
    changes: list[RowChange] = []
    anchor = plan["anchor"]
    shaped, skipped = rows_with_queries(
        table, cleaning, lambda r: cleaning.by_query.get((str(source), str(r.get(anchor))))
    )
    started: set[str] = set()
    for line, row, query in shaped:
        doc, qid = str(row[plan["positive"]]), query.record.qid
        if qid not in started:  # the block's first row: its positive
            started.add(qid)
            out.append(dict(row))
        elif kept_cells([doc], query.record.negatives)[0]:
            out.append(dict(row))
        elif doc in {p.text for p in query.added}:
            moved = next(p for p in query.added if p.text == doc)
            why = (
                f"relabeled positive {moved.id} not in the copy: a labeled-pair file with scores and no label holds "
                "one positive per query (the first row of its block)"
            )
            changes.append(RowChange(line, qid, "dropped", 1, "its negative was relabeled"))
            changes.append(RowChange(None, qid, RELABEL_UNWRITTEN, 0, why))
        else:
            changes.append(RowChange(line, qid, "dropped", 1, "its negative was removed"))
    return Rewritten(list(table.columns), out, changes, skipped)


def _write_labeled_pair(table: Table, plan: Plan, cleaning: Cleaning, source: str | None) -> Rewritten:
    """``anchor, positive, label``: a label-0 row stays while the cleaned record holds its document,
    becomes label 1 when it was relabeled (``relabeled``; after the query's first label-1 row, so
    that it never becomes the query's first positive), else is left out (``dropped``); a query left
    without negatives keeps its label-1 rows (anchor-positive pairs: the shape allows it). Without
    a label (scores only): :func:`_write_scored_pair`."""
    if not plan.get("label", "label"):
        return _write_scored_pair(table, plan, cleaning, source)
    placed: list[tuple[str, str, dict[str, Any]]] = []  # (qid, role, row): see positives_first
    changes: list[RowChange] = []
    shaped, skipped = rows_with_queries(
        table, cleaning, lambda r: cleaning.by_query.get((str(source), str(r.get(plan["anchor"]))))
    )
    for line, row, query in shaped:
        label, doc, qid = row.get("label"), str(row[plan["positive"]]), query.record.qid
        if cell_label(label, "label") == 1:
            placed.append((qid, "original", dict(row)))
        elif kept_cells([doc], query.record.negatives)[0]:
            placed.append((qid, "other", dict(row)))
        elif doc in {p.text for p in query.added}:
            kind: Any = type(label)
            one = ("1.0" if "." in label else "1") if isinstance(label, str) else kind(1)
            placed.append((qid, "relabeled", dict(row) | {"label": one}))
            changes.append(RowChange(line, qid, "relabeled", 1))
        else:
            changes.append(RowChange(line, qid, "dropped", 1, "its negative was removed"))
    return Rewritten(list(table.columns), positives_first(placed), changes, skipped)


register(
    Format(
        "ntuple",
        read=load_ntuple,
        write=write_slots(negative_columns),
        shape=Shape(
            f"{PAIR}, negative_1..negative_n [, scores] [, qid]; or any 3+ text columns, by order",
            _detect_ntuple,
            _read_ntuple,
            by_cells=_by_order,
        ),
    )
)
register(
    Format(
        "triplet",
        shape=Shape(f"{PAIR}, negative [, scores]", _detect_triplet, TRIPLET.read),
        write=write_slots(lambda row: ["negative"]),
    )
)
register(
    Format(
        "labeled_list",
        shape=Shape(
            f"{PAIR} (list of documents), labels (1/0) or scores (positive first)",
            _detect_labeled_list,
            LABELED_LIST.read,
        ),
        write=_write_labeled_list,
    )
)
register(
    Format(
        "labeled_pair",
        shape=Shape(
            f"{PAIR} (one document), label (1/0) or score (no label: each query's first row is its positive)",
            _detect_labeled_pair,
            _read_labeled_pair,
        ),
        write=_write_labeled_pair,
    )
)
