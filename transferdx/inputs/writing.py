"""Writing inputs back: the cleaned copy in the input's own shape and form, and the records folder.

The write model is here, next to the writers: a :class:`CleanedQuery` per record (what cleaning
kept, relabeled and, for a query left with none, borrowed), looked up by a :class:`Cleaning` the
way each family's rows name their queries; a family's ``write`` (registered on its
:class:`~transferdx.inputs.registry.Format`, in the family's module beside its reader) turns a
:class:`KeptTable` — the rows its reader read, kept on the :class:`LoadResult` so nothing is read
twice — into :class:`Rewritten` rows; :func:`write_rows` stores rows in a table's own form
(JSONL, JSON, CSV, TSV, headerless tab-separated lines, their ``.gz``, Parquet, Arrow,
``save_to_disk``); :func:`write_sidecars` is the one writer of a folder's ``descriptors.json`` and
``false_negatives.json``.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from transferdx.artifacts import atomic_write_text, canonical_json, safe_join
from transferdx.inputs.records import (
    LINES_FORM,
    LINES_HEADER_FORM,
    KeptTable,
    LoadResult,
    Passage,
    Record,
    Table,
)
from transferdx.inputs.tables import SIDECARS, TEXT_FORMS, form_of, load_from_disk, read_arrow

# ---------------------------------------------------------------------------------------------
# Writers: a cleaned copy in the input's own shape (each family's ``write``)
# ---------------------------------------------------------------------------------------------

BORROWED_RELATION = "borrowed_negative"  # a negative lent by the next query (a query left with none)


@dataclass(frozen=True)
class CleanedQuery:
    """One record after cleaning, as the writers need it: ``record`` (its positives, relabeled ones
    after p0, and the negatives kept), ``added`` (the negatives relabeled as positives) and
    ``borrowed`` (when no negative is left: the kept negatives of the next query of the source, in
    file order, marked :data:`BORROWED_RELATION`; empty when no query of the source keeps one)."""

    record: Record
    added: tuple[Passage, ...] = ()
    borrowed: tuple[Passage, ...] = ()

    @property
    def fill(self) -> tuple[Passage, ...]:
        """What a negative slot is filled from: the kept negatives, else the borrowed ones."""
        return self.record.negatives or self.borrowed


@dataclass(frozen=True)
class Cleaning:
    """The cleaned queries of one input, looked up the way each family's rows name them:
    ``by_qid[(source, qid)]`` (records rows) and ``by_query[(source, query text)]`` (row shapes);
    ``skip_lines``: the table lines the reader excluded (never written: already in the exclusion log);
    ``dropped``: the ids each record lost (formats that list ids: sentence-transformers' hard-negative
    files, TREC-DL runs)."""

    by_qid: Mapping[tuple[str, str], CleanedQuery]
    by_query: Mapping[tuple[str, str], CleanedQuery]
    skip_lines: frozenset[int] = frozenset()
    # (source, qid) → ids of the negatives removed or relabeled (the id-list formats' writers)
    dropped: Mapping[tuple[str, str], frozenset[str]] = field(default_factory=dict)
    fill: str = "repeat"  # FILLS: how a row short of negatives is completed (DEFAULT_FILL)
    keep: int | None = None  # at most this many negatives a row or record (the first accepted)

    def slots(self, n_columns: int) -> int:
        """How many negative slots a fixed-slot row writes: its columns, at most :attr:`keep`."""
        return n_columns if self.keep is None else min(n_columns, self.keep)


# How a row left with fewer negatives than its shape needs is completed, after the query's next
# accepted negatives (always taken): ``repeat`` (the default: the row's own remaining negatives fill
# its emptied slots, cycling through them in order — nothing another query gave, nothing invented;
# a re-read reads each once, :func:`filled_width`), ``none`` (the row is dropped and listed),
# ``borrow`` (as repeat, and a query left with none takes the next query's kept negatives). A row
# of a query left with no negative is dropped and counted (change ``unwritable``; ``dropped`` under
# ``none``) unless ``borrow`` lends it some.
FILLS = ("none", "repeat", "borrow")
DEFAULT_FILL = "repeat"


def filled_width(texts: Sequence[str]) -> int:
    """How many of a row's negative cells are its own negatives when the rest fill its slots the way
    :func:`fill_slots` repeats (``repeat``): the first ``m`` cells distinct and every later cell
    ``j`` the text of cell ``j mod m`` (``a b c a b``: 3). ``len(texts)`` when the row is not so
    filled (no repeat, or a repeat out of that order: ``a b a c d`` stays 5, its repeat a
    ``duplicate_negative``). The readers read a filled row's own negatives once (each filled cell
    counted, ``filled_slots`` in the source's descriptor) and :func:`kept_cells` keeps a filled cell
    with the cell it repeats, so a re-read or a second clean of a cleaned copy sees no new defect."""
    seen: set[str] = set()
    m = len(texts)
    for i, t in enumerate(texts):
        if t in seen:
            m = i
            break
        seen.add(t)
    if m == len(texts) or any(texts[j] != texts[j % m] for j in range(m, len(texts))):
        return len(texts)
    return m


@dataclass(frozen=True)
class RowChange:
    """A row the cleaning changed: its table line (None for an added row), qid, ``change``
    (:data:`ROW_CHANGES`) and the negatives it lost."""

    line: int | None
    qid: str
    change: str
    n_lost: int = 0
    detail: str = ""


# refilled: lost negatives, slots refilled from the query's other kept negatives; repeated: too few
# kept negatives, the row's own repeated; borrowed: the query kept none, slots hold the next query's
# (refilled, repeated, borrowed: only with clean.fill); dropped: row left out (fewer negatives than
# its shape needs, its pair keeps other rows, or a removed negative's labeled row); kept: the row
# wrote its first clean.keep accepted negatives;
# relabeled: a negative became a positive in the row; added: a new row for a relabeled positive;
# trimmed: lost negatives where the format takes any number (a list); unwritable: no negative anywhere;
# relabel_unwritten: a relabeled passage the copy does not hold (RELABEL_UNWRITTEN)
ROW_CHANGES = (
    "refilled",
    "repeated",
    "borrowed",
    "dropped",
    "relabeled",
    "added",
    "trimmed",
    "kept",
    "unwritable",
    "relabel_unwritten",
)
# A passage cleaning relabeled that the copy could not hold as a positive: the shape needs a row of
# negatives the query no longer has (a triplet or n-tuple row short of its slots and no pair form in
# the table; a FlagEmbedding line or a record left with none). Listed (line None, detail: which
# passage and why), counted in the summary, never claimed as relabeled in the copy.
RELABEL_UNWRITTEN = "relabel_unwritten"


@dataclass(frozen=True)
class Rewritten:
    """A table's rows after cleaning (the input's columns, in order) and what changed."""

    columns: list[str]
    rows: list[dict[str, Any]]
    changes: list[RowChange]
    skipped: int = 0  # rows not written because the reader excluded them (in the exclusion log)


def rows_with_queries(
    table: Table, cleaning: Cleaning, query_of: Callable[[Mapping[str, Any]], CleanedQuery | None]
) -> tuple[list[tuple[int, Mapping[str, Any], CleanedQuery]], int]:
    """The rows of ``table`` a writer rewrites, each with its line and cleaned query
    (``query_of(row)``), and how many it skips: rows the reader excluded (already in the exclusion
    log) or whose query was not cleaned."""
    out = []
    for line, row in zip(table.lines, table.rows, strict=True):
        query = query_of(row)
        if line not in cleaning.skip_lines and query is not None:
            out.append((line, row, query))
    return out, len(table.rows) - len(out)


def positives_first(rows: Sequence[tuple[str, str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """The rows in order, ``(qid, role, row)``, except that a row whose positive is a relabeled one
    (role ``relabeled``) waits until its query's first row with an input positive (role ``original``)
    is written: a re-read takes a query's positives in order of first appearance, so the input's
    first positive stays p0 and a relabeled passage never takes its place. Other rows (role
    ``other``: a labeled pair's negative) keep their place; a relabeled row whose query has no
    original row in the copy ends the table."""
    out: list[dict[str, Any]] = []
    started: set[str] = set()
    waiting: dict[str, list[dict[str, Any]]] = {}
    for qid, role, row in rows:
        if role == "relabeled" and qid not in started:
            waiting.setdefault(qid, []).append(row)
            continue
        out.append(row)
        if role == "original" and qid not in started:
            started.add(qid)
            out += waiting.pop(qid, [])
    return out + [row for held in waiting.values() for row in held]


def kept_cells(texts: Sequence[str], kept: Sequence[Passage]) -> list[bool]:
    """Which of a row's negative cells stay: a cell stays while the cleaned record still holds its
    text (a text repeated within the row at most as often as the record holds it); a filled row's
    filled cells (:func:`filled_width`) stay with the cell each repeats."""
    allowed: dict[str, int] = {}
    for n in kept:
        allowed[n.text] = allowed.get(n.text, 0) + 1
    m = filled_width(texts)
    used: dict[str, int] = {}
    out = []
    for t in texts[:m]:
        used[t] = used.get(t, 0) + 1
        out.append(used[t] <= allowed.get(t, 0))
    return out + [out[j % m] for j in range(m, len(texts))]


def fill_slots(
    kept: Sequence[Passage], k: int, query: CleanedQuery, fill: str = DEFAULT_FILL
) -> tuple[list[Passage], str]:
    """``k`` negatives for a row that kept ``kept`` (in row order): the first ``k`` when it kept
    enough (``""``); otherwise the query's next accepted negatives not in the row, in record order
    (``refilled``: candidates the input gave this query, e.g. in its other rows). Still short, by
    ``fill`` (:data:`FILLS`): ``repeat`` (the default) cycles through the row's own, in order, into
    its emptied slots (``repeated``: ``a b c`` fills 5 slots as ``a b c a b``); ``none`` gives no
    slots (``dropped``: the shape cannot hold fewer); ``borrow`` also lets a row of a query left with
    none take the borrowed ones (``borrowed``). A query left with no negative gives no slots:
    ``unwritable`` (nothing anywhere to fill from; ``dropped`` with ``none``)."""
    if len(kept) >= k:
        return list(kept[:k]), ""
    slots: list[Passage] = []  # the row's own, each once, in row order (a filled row's repeats go)
    for p in kept:
        if all(p.text != q.text for q in slots):
            slots.append(p)
    change = "refilled"
    if not query.record.negatives:
        if fill != "borrow" or not query.borrowed:
            return [], "dropped" if fill == "none" else "unwritable"
        slots, change = [], "borrowed"
    have = {p.text for p in slots}
    for p in query.fill:
        if len(slots) == k:
            break
        if p.text not in have:
            slots.append(p)
            have.add(p.text)
    if len(slots) < k and fill == "none":
        return [], "dropped"
    pool = list(slots)
    i = 0
    while len(slots) < k:
        slots.append(pool[i % len(pool)])
        i += 1
        change = "repeated" if change == "refilled" else change
    return slots, change


def rewrite(kept: KeptTable, cleaning: Cleaning) -> Rewritten:
    """``kept``'s rows after cleaning, in its own shape: the writer its reader named."""
    rewritten: Rewritten = kept.write(kept.table, kept.plan, cleaning, kept.source)
    return rewritten


def write_sidecars(loaded: LoadResult, folder: Path) -> list[Path]:
    """``descriptors.json`` and ``false_negatives.json`` of a folder (read back with it by
    :func:`~transferdx.inputs.tables.read_sidecars`); the one writer of both."""
    paths = [safe_join(folder, SIDECARS["descriptors"]), safe_join(folder, SIDECARS["false_negatives"])]
    atomic_write_text(paths[0], canonical_json(loaded.descriptors))
    fn = {s: [list(row) for row in rows] for s, rows in loaded.false_negatives.items()}
    atomic_write_text(paths[1], canonical_json(fn))
    return paths


# ---------------------------------------------------------------------------------------------
# Writing rows back in a table's own form (the cleaned copy)
# ---------------------------------------------------------------------------------------------


def _cell(value: Any) -> str:
    """A CSV/TSV cell: text as it is, a list or an object as JSON (what the readers parse back)."""
    if value is None:
        return ""
    if isinstance(value, list | dict):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


def _field(value: Any) -> str:
    """A field of a headerless tab-separated line: :func:`_cell` with tabs and line breaks as spaces."""
    return " ".join(_cell(value).replace("\r", " ").replace("\n", " ").split("\t"))


def _text_bytes(columns: Sequence[str], rows: Sequence[Mapping[str, Any]], form: str) -> bytes:
    if form == "jsonl":
        return "".join(json.dumps(dict(r), ensure_ascii=False) + "\n" for r in rows).encode("utf-8")
    if form == "json":
        return (json.dumps([dict(r) for r in rows], ensure_ascii=False) + "\n").encode("utf-8")
    if form.startswith(LINES_FORM):  # MS MARCO style: no quoting (a tab or line break in a cell is a space)
        head = ["\t".join(columns) + "\n"] if form == LINES_HEADER_FORM else []
        return "".join(head + ["\t".join(_field(r.get(c)) for c in columns) + "\n" for r in rows]).encode("utf-8")
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
        schema = read_arrow(like).schema
    data = [{c: r.get(c) for c in columns} for r in rows]
    if schema is not None and set(columns) <= set(schema.names):
        # the input's types for the columns written (clean.keep may write fewer negative columns)
        same = list(columns) == list(schema.names)  # the pandas metadata names the columns: kept only then
        schema = schema if same else pa.schema([schema.field(c) for c in columns])
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
        features = load_from_disk(like, split).features
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
    if base in (*TEXT_FORMS.values(), LINES_FORM, LINES_HEADER_FORM):
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
