"""Id lists with lookup tables: a table of query and passage ids (with or without the miner's
scores) beside a ``corpus`` table (passage id → text) and a ``queries`` table (query id → text).

``idlist`` (:func:`load_id_lists`, ``format="idlist"``, or any path given with ``corpus=``) reads one
id table in any form :func:`~transferdx.inputs.tables.read_table` reads (Parquet, JSONL, CSV, TSV,
Arrow, ``save_to_disk``, ``.gz``), one row per (query, positive) or per query:

- the query id: ``query_id`` (else ``qid``; else ``query``, as the sentence-transformers ``*-ids``
  subsets name an id column);
- the positive(s): one id (``pos_id``, ``positive_id``, ``positive``) or a list (``pos_ids``,
  ``positive_ids``, ``pos``); the negatives: a list (``neg_ids``, ``negative_ids``, ``neg``) or one
  id a row (``neg_id``, ``negative_id``, ``negative``: triplet rows);
- or, as the ``hard-negatives`` package writes its ``scores`` config, ``document_ids`` (the positive
  first, then the negatives) with ``scores`` aligned to it;
- or, in a ``.tsv`` / ``.tsv.gz`` without a header, ``query_id<TAB>pos_id<TAB>neg_id`` lines
  (mMARCO's ``triples.train.ids.small.tsv``, unicamp-dl/mmarco on the Hub, whose per-language
  collections and queries are ``id<TAB>text`` TSVs), written back as the same lines;
- scores, optional: ``pos_score`` / ``pos_scores`` (a number, or a list aligned with the positives),
  ``neg_scores`` (a list aligned with ``neg_ids``) or ``neg_score`` (one negative a row). A column
  of none of these roles (``score`` of sentence-transformers' ``bert-ensemble-margin-mse``, a
  teacher's *margin*, not a passage's score) is not read: the descriptor lists it
  (``columns_not_read``) and the cleaned copy keeps it as it is.

The layouts this follows, as their publishers write them: sentence-transformers/msmarco on the Hub
(``bert-ensemble-margin-mse``: ``query_id, positive_id, negative_id, score``; ``corpus``:
``passage_id, passage``; ``queries``: ``query_id, query``); sentence-transformers/msmarco-corpus
(``passage``: ``pid, text``, earlier ``id, text``; ``query``: ``qid, text``) for the
``msmarco-<model>`` datasets' ``triplet-ids`` subset (``query, positive, negative`` as int64 ids);
the ``hard-negatives`` package (github.com/teraflop-ai/hard-negatives, ``mine_negatives.py`` and
``save_dataset.py``: configs ``documents`` = ``document_id, document``, ``queries`` = ``query_id,
query`` and ``scores`` = ``query_id, document_ids, scores``, one row per positive, the positive
first in ``document_ids``). The scored mMARCO hard negatives found on the Hub
(hotchpotch/mmarco-hard-negatives-reranker-filtered: ``query, pos_text, negs_text, pos_score,
negs_score``) hold texts, not ids: they are no id table.

Rows become records through :class:`~transferdx.inputs.rows.RowReader`, as in every row format
(:mod:`~transferdx.inputs.rows` states the rules): this module's row function (:func:`id_reader`)
resolves a row's ids through the lookups into a :class:`~transferdx.inputs.rows.Row` (the query's
text, the passages' texts and scores, the query id, and each text's passage id in ``Row.ids``), and
``RowReader.read`` groups, merges, counts and describes. So rows sharing a query *text* are one
record, its qid the first row's query id (a second query id of the same text joins it, and the
writer cleans that id's rows with it); positives merged in order of first appearance (``p0`` the
first row's first), negatives in row order; a passage is known by its text (design §3.8), so a
negative an earlier row of the query gave (under any id) is a counted exclusion (unit ``negative``,
"duplicate negative (also row N)"), one repeated within a row kept (``duplicate_negatives_kept``)
unless the row is a filled one (``filled_slots``), and a negative whose text is a positive's is the
builder's located error (counted under ``skip``). A query id missing from the queries table or a
passage id missing from the corpus fails the row (as :func:`~transferdx.inputs.msmarco.
load_st_hard_negatives` does: a located :class:`~transferdx.inputs.records.InputError` under
``raise``, the row a counted exclusion under ``skip``). Scores stay on the passages
(``Passage.score``), summarised in the descriptor (``mining_scores``); every row is accounted for
in the descriptor's ``rows``; the descriptor adds the lookups (``lookups``) and the columns not read.

Lookup tables (:func:`lookup_texts`, the one way a lookup is read): a headerless ``id<TAB>text``
TSV (MS MARCO's ``collection.tsv`` / ``queries.tsv``, :func:`~transferdx.inputs.textforms.
read_id_text_tsv`), any other table in any form ``read_table`` reads with an id column and a text
column (corpus: ``passage_id``, ``document_id``, ``doc_id``, ``pid``, ``corpus_id``, ``_id``,
``id`` and ``passage``, ``document``, ``text``, ``contents``, with an optional ``title`` joined the
BEIR way, :func:`~transferdx.inputs.beir.beir_passage_text`; queries: ``query_id``, ``qid``,
``_id``, ``id`` and ``query``, ``text``, ``question``), or a ``pandas.DataFrame`` /
``datasets.Dataset`` already in memory. A bad lookup row is a located error under either policy.

The writer (:func:`write_id_lists`) gives the id table back in its own shape and form: a removed
negative leaves its list (``neg_ids`` or ``document_ids``) and its score the aligned score list; a
triplet row whose negative is removed is dropped; a relabeled id joins a positives list (``pos_ids``)
where the table has one, else is listed as ``relabel_unwritten``. The lookups are not copied: the
copy names the same ids, so it is read back with the same ``corpus=`` and ``queries=``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from transferdx.artifacts import file_hash
from transferdx.inputs.beir import beir_passage_text
from transferdx.inputs.hub import is_hub_spec, load_hub
from transferdx.inputs.reading import (
    FieldProblem,
    RecordBuilder,
    artifact_name,
    check_unicode,
    parse_slice,
    require_path,
)
from transferdx.inputs.records import LINES_FORM, InputError, LoadResult, Passage, Plan, Table
from transferdx.inputs.registry import Format, keep, register
from transferdx.inputs.rows import Row, RowReader, cell_list, cell_number
from transferdx.inputs.tables import (
    dataset_table,
    form_of,
    frame_table,
    held,
    read_table,
    source_stem,
    storage_form,
)
from transferdx.inputs.textforms import is_gzip, iter_lines, iter_tab_lines, read_id_text_tsv
from transferdx.inputs.writing import RELABEL_UNWRITTEN, Cleaning, Rewritten, RowChange

FORMAT = "idlist"

# the id table's columns by role, each tried in order (the module docstring says whose layout each is)
QUERY_ID_COLUMNS = ("query_id", "qid", "query")
POSITIVE_ID_COLUMNS = ("pos_id", "positive_id", "positive")  # one id a row
POSITIVE_LIST_COLUMNS = ("pos_ids", "positive_ids", "pos")  # a list of ids
NEGATIVE_LIST_COLUMNS = ("neg_ids", "negative_ids", "neg")
NEGATIVE_ID_COLUMNS = ("neg_id", "negative_id", "negative")
ID_TRIPLE_COLUMNS = ("query_id", "pos_id", "neg_id")  # the columns of headerless id triple lines
DOCUMENTS_COLUMN, DOCUMENT_SCORES_COLUMN = "document_ids", "scores"  # hard-negatives' scores config
POSITIVE_SCORE_COLUMNS = ("pos_score", "positive_score", "pos_scores", "positive_scores")
NEGATIVE_SCORES_COLUMNS = ("neg_scores", "negative_scores")  # aligned with a negatives list
NEGATIVE_SCORE_COLUMNS = ("neg_score", "negative_score")  # the one negative of a row

# the lookup tables' columns, each tried in order
LOOKUP_COLUMNS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {  # what → (id columns, text columns)
    "passage": (
        ("passage_id", "document_id", "doc_id", "pid", "corpus_id", "_id", "id"),
        ("passage", "document", "text", "contents"),
    ),
    "query": (("query_id", "qid", "_id", "id"), ("query", "text", "question")),
}
TITLE_COLUMN = "title"
FOLDED = "folded_qids"  # in the kept plan: query id → the qid of the record its rows joined (id_reader)


def _first(names: Sequence[str], columns: Sequence[str]) -> str | None:
    return next((c for c in names if c in columns), None)


# ---------------------------------------------------------------------------------------------
# Lookup tables
# ---------------------------------------------------------------------------------------------


def _first_fields(path: Path) -> list[str]:
    """The tab-separated fields of a text file's first non-blank line (none for an empty file)."""
    for _, line in iter_lines(path):
        if line.strip():
            return [f.strip() for f in line.split("\t")]
    return []


def _has_header(path: Path, what: str) -> bool:
    """Whether a TSV's first non-blank line names an id column and a text column of ``what``."""
    ids, texts = LOOKUP_COLUMNS[what]
    fields = _first_fields(path)
    return _first(ids, fields) is not None and _first(texts, fields) is not None


def lookup_texts(spec: Any, what: str) -> tuple[dict[str, str], str, str | None]:
    """A lookup table ``spec`` (a path, a Hub dataset ``hf:OWNER/NAME[:CONFIG][@SPLIT]`` loaded by
    :func:`~transferdx.inputs.hub.load_hub`, or a ``pandas.DataFrame`` / ``datasets.Dataset`` in
    memory) as (id → text, the name it goes by, its sha256 when a file); ``what``: ``passage`` (the
    corpus) or ``query``. The one way this module reads a lookup (see the module docstring). A bad row is a located
    :class:`InputError` under either error policy: a record cannot be built from a broken reference."""
    if what not in LOOKUP_COLUMNS:
        raise ValueError(f"what must be one of {sorted(LOOKUP_COLUMNS)}, got {what!r}")
    if hasattr(spec, "columns") and hasattr(spec, "iloc"):  # pandas.DataFrame
        table = frame_table(spec, f"<{what}s DataFrame>")
        return _table_texts(table, what), table.file, None
    if is_hub_spec(spec):  # a Hub config: hf:OWNER/NAME[:CONFIG][@SPLIT]
        spec, origin = load_hub(spec), spec
    else:
        origin = f"<{what}s Dataset>"
    if hasattr(spec, "column_names") and hasattr(spec, "select"):  # datasets.Dataset
        table = dataset_table(spec, origin, "Dataset")
        return _table_texts(table, what), table.file, None
    path = require_path(spec, f"{what} lookup table")
    if form_of(path) == "tsv" and path.is_file() and not _has_header(path, what):
        texts = read_id_text_tsv(path, what="text" if what == "passage" else "query")
        return texts, path.name, file_hash(path)
    table = read_table(path, RecordBuilder(path, "raise"))
    return _table_texts(table, what), path.name, table.sha256


def _table_texts(table: Table, what: str) -> dict[str, str]:
    ids, texts = LOOKUP_COLUMNS[what]
    id_col, text_col = _first(ids, table.columns), _first(texts, table.columns)
    if id_col is None or text_col is None:
        lacking = f"no id column ({', '.join(ids)})" if id_col is None else f"no text column ({', '.join(texts)})"
        raise InputError(table.file, None, "<columns>", f"{what} lookup table: {lacking}; found {table.columns}")
    title = TITLE_COLUMN if what == "passage" and TITLE_COLUMN in table.columns else None
    out: dict[str, str] = {}
    first: dict[str, int] = {}
    for line, row in zip(table.lines, table.rows, strict=True):
        try:
            key = id_value(row.get(id_col), id_col)
            text = row.get(text_col)
            if not isinstance(text, str):
                raise FieldProblem(text_col, f"expected a string, got {type(text).__name__}")
            check_unicode(text, text_col)
            if title is not None and row.get(title) is not None:
                if not isinstance(row[title], str):
                    raise FieldProblem(title, f"expected a string, got {type(row[title]).__name__}")
                check_unicode(row[title], title)
                text = beir_passage_text({"title": row[title], "text": text})
            if not text.strip():
                raise FieldProblem(text_col, "empty string")
        except FieldProblem as p:
            raise InputError(table.file, line, p.field, p.reason) from None
        if key in out:
            raise InputError(table.file, line, id_col, f"duplicate id {key!r} (also line {first[key]})")
        out[key], first[key] = text, line
    return out


def id_value(value: Any, where: str) -> str:
    """An id cell (a string or an integer) as text, or ``FieldProblem(where, …)``."""
    if value is None:
        raise FieldProblem(where, "missing")
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise FieldProblem(where, f"expected a string or integer id, got {type(value).__name__}")
    text = str(value).strip()
    if not text:
        raise FieldProblem(where, "empty id")
    check_unicode(text, where)
    return text


# ---------------------------------------------------------------------------------------------
# The id table: its columns and rows
# ---------------------------------------------------------------------------------------------


def id_plan(columns: Sequence[str]) -> Plan | None:
    """Which column plays which role (see the module docstring), or None when ``columns`` lack a
    query id, a positive or the negatives."""
    qid = _first(QUERY_ID_COLUMNS, columns)
    if qid is None:
        return None
    if DOCUMENTS_COLUMN in columns:
        scores = DOCUMENT_SCORES_COLUMN if DOCUMENT_SCORES_COLUMN in columns else None
        return {"qid": qid, "documents": DOCUMENTS_COLUMN, "document_scores": scores}
    pos_list = _first(POSITIVE_LIST_COLUMNS, columns)
    pos = pos_list or _first(POSITIVE_ID_COLUMNS, columns)
    neg_list = _first(NEGATIVE_LIST_COLUMNS, columns)
    neg = neg_list or _first(NEGATIVE_ID_COLUMNS, columns)
    if pos is None or neg is None or pos == qid or neg == qid:
        return None
    neg_scores = _first(NEGATIVE_SCORES_COLUMNS if neg_list else NEGATIVE_SCORE_COLUMNS, columns)
    return {
        "qid": qid,
        "pos": pos,
        "pos_list": pos_list is not None,
        "neg": neg,
        "neg_list": neg_list is not None,
        "pos_score": _first(POSITIVE_SCORE_COLUMNS, columns),
        "neg_score": neg_scores,
    }


def _used(plan: Plan) -> set[str]:
    keys = ("qid", "pos", "neg", "pos_score", "neg_score", "documents", "document_scores")
    return {str(plan[k]) for k in keys if plan.get(k)}


def _ids(row: Mapping[str, Any], key: str, cells_are_text: bool) -> list[str]:
    return [id_value(v, f"{key}[{i}]") for i, v in enumerate(cell_list(row, key, cells_are_text))]


def _scores(row: Mapping[str, Any], key: str | None, cells_are_text: bool, n: int) -> list[float | None]:
    """``n`` scores from the list ``key`` (exactly ``n``), or ``n`` Nones without one (no column, or
    a null cell: the row has no scores)."""
    if key is None or row.get(key) is None:
        return [None] * n
    value = row[key]
    if n == 1 and not isinstance(value, list) and not (cells_are_text and str(value).strip().startswith("[")):
        return [cell_number(value, key)]
    values = cell_list(row, key, cells_are_text)
    if len(values) != n:
        raise FieldProblem(key, f"expected {n} scores (one per id), got {len(values)}")
    return [cell_number(v, f"{key}[{i}]") for i, v in enumerate(values)]


def _read_ids(path: Path, builder: RecordBuilder, split: str | None) -> tuple[Table, str | None]:
    """The id table and how it is stored: a ``.tsv`` / ``.tsv.gz`` whose first line names no query
    id column is ``query_id<TAB>pos_id<TAB>neg_id`` lines without a header (mMARCO's
    ``triples.train.ids.small.tsv``, MS MARCO's ``qidpidtriples``), written back as such lines;
    anything else through :func:`~transferdx.inputs.tables.read_table`."""
    if form_of(path) == "tsv" and path.is_file() and _first(QUERY_ID_COLUMNS, _first_fields(path)) is None:
        rows: list[dict[str, Any]] = []
        lines: list[int] = []
        bad = 0
        for line, cells in iter_tab_lines(path, builder, header=False, fields=len(ID_TRIPLE_COLUMNS)):
            if cells is None:
                bad += 1
                continue
            rows.append(dict(zip(ID_TRIPLE_COLUMNS, cells.values(), strict=True)))
            lines.append(line)
        table = Table(str(path), "tsv", list(ID_TRIPLE_COLUMNS), rows, lines, True, file_hash(path), bad, False)
        table.n_unreadable += builder.unreadable
        return table, LINES_FORM + (".gz" if is_gzip(path) else "")
    return read_table(path, builder, split), storage_form(path)


@dataclass
class IdRow:
    """One id row: its query id, positives and negatives as (id, score)."""

    qid: str
    positives: list[tuple[str, float | None]]
    negatives: list[tuple[str, float | None]]


def read_id_row(row: Mapping[str, Any], plan: Plan, cells_are_text: bool) -> IdRow:
    """One row by ``plan`` (:func:`id_plan`), or ``FieldProblem`` naming the cell."""
    qid = id_value(row.get(plan["qid"]), plan["qid"])
    if plan.get("documents"):
        key = plan["documents"]
        docs = _ids(row, key, cells_are_text)
        if not docs:
            raise FieldProblem(key, "empty list: no positive (the first id is the positive)")
        scores = _scores(row, plan.get("document_scores"), cells_are_text, len(docs))
        pairs = list(zip(docs, scores, strict=True))
        return IdRow(qid, pairs[:1], pairs[1:])
    if plan["pos_list"]:
        pos = _ids(row, plan["pos"], cells_are_text)
    else:
        pos = [id_value(row.get(plan["pos"]), plan["pos"])]
    if plan["neg_list"]:
        neg = _ids(row, plan["neg"], cells_are_text)
    else:
        neg = [id_value(row.get(plan["neg"]), plan["neg"])]
    pos_scores = _scores(row, plan.get("pos_score"), cells_are_text, len(pos))
    neg_scores = _scores(row, plan.get("neg_score"), cells_are_text, len(neg))
    return IdRow(qid, list(zip(pos, pos_scores, strict=True)), list(zip(neg, neg_scores, strict=True)))


def id_reader(
    plan: Plan, passages: Mapping[str, str], queries: Mapping[str, str], corpus_name: str, queries_name: str
) -> tuple[RowReader, dict[str, str]]:
    """How the id table's rows become records: a :class:`~transferdx.inputs.rows.RowReader` whose
    row function reads a row's ids (:func:`read_id_row`) and resolves them through the lookups into a
    :class:`~transferdx.inputs.rows.Row` (each text's id in ``Row.ids``; an id missing from its
    lookup a ``FieldProblem`` on the row). Also the query ids the reader folds into another's
    record (qid → the record's qid): rows are grouped by query text, so a query id whose text an
    earlier query id already has joins that one's record, and the writer finds it there."""
    first_qid: dict[str, str] = {}  # query text → the query id of its first row read
    folded: dict[str, str] = {}

    def row(raw: Mapping[str, Any], plan: Plan, cells_are_text: bool) -> Row:
        ids = read_id_row(raw, plan, cells_are_text)
        query = queries.get(ids.qid)
        if query is None:
            raise FieldProblem(plan["qid"], f"query {ids.qid!r} is not in {queries_name}")
        texts: dict[str, str] = {}

        def resolve(pairs: list[tuple[str, float | None]], where: str) -> list[tuple[str, float | None]]:
            out = []
            for pid, score in pairs:
                text = passages.get(pid)
                if text is None:
                    raise FieldProblem(where, f"passage id {pid!r} is not in {corpus_name}")
                texts.setdefault(text, pid)
                out.append((text, score))
            return out

        positives = resolve(ids.positives, plan.get("documents") or plan["pos"])
        negatives = resolve(ids.negatives, plan.get("documents") or plan["neg"])
        record_qid = first_qid.setdefault(query, ids.qid)
        if record_qid != ids.qid:
            folded[ids.qid] = record_qid
        return Row(query, positives, negatives, ids.qid, texts)

    reader = RowReader(
        FORMAT,
        row,
        mining_method="not recorded (id table)",
        ranking_rule=f"list order ({plan.get('documents') or plan['neg']}), rows grouped by query",
    )
    return reader, folded


def load_id_lists(
    path: str | Path,
    corpus: Any,
    queries: Any,
    on_error: str = "raise",
    source: str | None = None,
    split: str | None = None,
    k: int | None = None,
    slice_spec: str | Sequence[str] | None = None,
    method: str | None = None,
    kind: str = "genuine",
    keep_tables: bool = False,
    **_: Any,
) -> LoadResult:
    """An id table (``path``) with its ``corpus`` and ``queries`` lookup tables (see the module
    docstring), as one source (``source``, default the file's name), its rows made records by
    :meth:`~transferdx.inputs.rows.RowReader.read` (:func:`id_reader`). ``k`` / ``slice_spec``: the
    negatives of each record audited (``[a:b]``; the rest stay in the copy); ``method``: how the
    negatives were mined (the negatives' ``method`` and the descriptor's ``mining_method``).
    ``keep_tables``: keep the rows read for the clean verb, which writes the id table back."""
    path = require_path(path)
    passages, corpus_name, corpus_hash = lookup_texts(corpus, "passage")
    query_text, queries_name, queries_hash = lookup_texts(queries, "query")
    window = None if slice_spec is None and k is None else parse_slice(slice_spec, k)
    name = source or source_stem(path)
    builder = RecordBuilder(path, on_error, note_duplicates=True)
    table, storage = _read_ids(path, builder, split)
    table = held(table) if keep_tables else table
    plan = id_plan(table.columns)
    if plan is None:
        raise InputError(
            path,
            None,
            "<columns>",
            f"not an id table: expected a query id ({', '.join(QUERY_ID_COLUMNS)}), positives "
            f"({', '.join(POSITIVE_ID_COLUMNS + POSITIVE_LIST_COLUMNS)}) and negatives "
            f"({', '.join(NEGATIVE_LIST_COLUMNS + NEGATIVE_ID_COLUMNS)}), or {DOCUMENTS_COLUMN}; found {table.columns}",
        )
    reader, folded = id_reader(plan, passages, query_text, corpus_name, queries_name)
    reader.read(table, builder, name, plan, window=window, method=method, kind=kind)
    lookups = {
        "corpus": {"file": corpus_name, "sha256": corpus_hash},
        "queries": {"file": queries_name, "sha256": queries_hash},
    }
    builder.result.describe(name, lookups=lookups)
    not_read = [c for c in table.columns if c not in _used(plan)]
    if not_read:
        builder.result.describe(name, columns_not_read=not_read)
    if keep_tables:
        keep(
            builder.result,
            table,
            name,
            storage,
            path.name,
            artifact_name(path),
            path,
            split,
            plan | {FOLDED: folded},
            write_id_lists,
        )
    return builder.result


# ---------------------------------------------------------------------------------------------
# The cleaned copy: the id table in its own shape
# ---------------------------------------------------------------------------------------------


def write_id_lists(table: Table, plan: Plan, cleaning: Cleaning, source: str | None) -> Rewritten:
    """The id table after cleaning, every column kept: each row without the ids cleaning removed
    from its query's record (from ``neg_ids`` / ``document_ids``, their scores from the aligned
    score list; the candidates after the audited window stay); a triplet row that lost its negative
    is dropped; a row whose query kept no negative at all is dropped (``unwritable``); at most
    ``cleaning.keep`` negatives a list (``kept``). An id relabeled as a positive joins a positives
    list (with its score as a negative where positives have a score list), else is listed
    (``relabel_unwritten``)."""
    out: list[dict[str, Any]] = []
    changes: list[RowChange] = []
    skipped = 0
    placed: set[tuple[str, str]] = set()  # (qid, id) of relabeled ids written as positives
    unwritten: dict[tuple[str, str], str] = {}
    src = str(source or "")
    for line, row in zip(table.lines, table.rows, strict=True):
        if line in cleaning.skip_lines:
            skipped += 1  # excluded on reading: in the exclusion log
            continue
        qid = id_value(row.get(plan["qid"]), plan["qid"])
        key = (src, plan.get(FOLDED, {}).get(qid, qid))  # its record: another query id's, same text
        query = cleaning.by_qid.get(key)
        if query is None:  # no record of this query was cleaned: the row as read
            out.append(dict(row))
            continue
        gone = cleaning.dropped.get(key, frozenset())
        moved = {p.id: p for p in query.added}
        new, n_removed, n_over = _without(row, plan, gone, query.record.negatives, cleaning.keep, table.cells_are_text)
        if not query.record.negatives:
            changes.append(RowChange(line, qid, "unwritable", n_removed + n_over))
            continue
        if new is None:
            changes.append(RowChange(line, qid, "dropped", n_removed, "its one negative was removed"))
            continue
        for pid in moved:
            if (qid, pid) in placed:
                continue
            why = _add_positive(new, row, plan, moved[pid], table.cells_are_text)
            if why:
                unwritten.setdefault((qid, pid), why)
            else:
                placed.add((qid, pid))
        if n_removed:
            changes.append(RowChange(line, qid, "relabeled" if gone & set(moved) else "trimmed", n_removed + n_over))
        elif n_over:
            changes.append(RowChange(line, qid, "kept", n_over))
        out.append(new)
    for (qid, pid), why in unwritten.items():
        if (qid, pid) not in placed:
            changes.append(RowChange(None, qid, RELABEL_UNWRITTEN, 0, f"{pid}: {why}"))
    return Rewritten(list(table.columns), out, changes, skipped)


def _without(
    row: Mapping[str, Any],
    plan: Plan,
    gone: frozenset[str],
    record_negatives: Sequence[Passage],
    keep_n: int | None,
    cells_are_text: bool,
) -> tuple[dict[str, Any] | None, int, int]:
    """``row`` without the negative ids in ``gone`` and past the first ``keep_n`` (None: a triplet
    row that lost its one negative), and how many negatives went: removed, and past ``keep_n``."""
    new = dict(row)
    if not plan.get("documents") and not plan["neg_list"]:  # one negative a row
        removed = int(id_value(row.get(plan["neg"]), plan["neg"]) in gone)
        return (None if removed else new), removed, 0
    if plan.get("documents"):
        key, scores_key, start = plan["documents"], plan.get("document_scores"), 1
    else:
        key, scores_key, start = plan["neg"], plan.get("neg_score"), 0
    items = cell_list(row, key, cells_are_text)
    scores = None if scores_key is None or row.get(scores_key) is None else cell_list(row, scores_key, cells_are_text)
    # an id cleaning took from the record goes, except as often as the record still holds it (a
    # negative repeated within the row, the repeat removed as a duplicate_negative, keeps its first)
    held = Counter(n.id for n in record_negatives)
    at = []
    for i, v in enumerate(items):
        pid = str(v).strip()
        if i < start or pid not in gone:
            at.append(i)
        elif held[pid] > 0:
            at.append(i)
            held[pid] -= 1
    removed = len(items) - len(at)
    over = 0 if keep_n is None else max(0, len(at) - start - keep_n)
    at = at[: len(at) - over]
    new[key] = [items[i] for i in at]
    if scores is not None and scores_key is not None:
        new[scores_key] = [scores[i] for i in at]
    return new, removed, over


def _add_positive(new: dict[str, Any], row: Mapping[str, Any], plan: Plan, passage: Passage, text: bool) -> str:
    """Append a relabeled passage to ``new``'s positives list (and its score to an aligned positive
    score list); why it cannot be, or ``""``."""
    if not plan.get("pos_list"):
        return "the table holds one positive id a row"
    pos = list(cell_list(new, plan["pos"], text))
    if passage.id in {str(p).strip() for p in pos}:
        return ""
    score_key: str | None = plan.get("pos_score")
    scores = None if score_key is None else row.get(score_key)
    if score_key is not None and scores is not None:
        if not isinstance(scores, list) and not (text and str(scores).strip().startswith("[")):
            return f"{score_key} holds one score a row"
        if passage.score is None:
            return f"{score_key} lists a score per positive and the passage has none"
        new[score_key] = [*cell_list(new, score_key, text), passage.score]
    new[plan["pos"]] = [*pos, _like(pos, passage.id)]
    return ""


def _like(items: Sequence[Any], pid: str) -> Any:
    """``pid`` as the list's other ids are typed (an integer id in a list of integers)."""
    if items and all(isinstance(v, int) and not isinstance(v, bool) for v in items) and pid.lstrip("-").isdigit():
        return int(pid)
    return pid


register(Format(FORMAT, read=load_id_lists, chosen_by=("corpus",)))
