"""The one registry of input formats and the one place that chooses among them.

Every format family (one module each: :mod:`~transferdx.inputs.transferdx_records`,
:mod:`~transferdx.inputs.sentence_transformers`, :mod:`~transferdx.inputs.flagembedding`,
:mod:`~transferdx.inputs.msmarco`, :mod:`~transferdx.inputs.beir`, :mod:`~transferdx.inputs.trec_dl`;
the demo in :mod:`transferdx.sources.demo`) registers a :class:`Format` under its name, with what it
can do: ``read`` (records from a path: ``format=<name>``), ``shape`` (recognised by a table's
columns), ``claims`` (a file or folder it reads whole, before any table is read), ``query_set``
(queries, positives and a pool to build sources from) with ``recognises`` (a folder it is), and
``corpus`` (passage texts for an external IDF corpus), ``write`` (a table's rows after cleaning, in
its own shape: :func:`rewrite`). ``names`` are words that stand for the input
when given instead of a path (``"demo"``). Register, don't branch: an unknown name is a
``ValueError`` listing the valid ones. Importing :mod:`transferdx.inputs` registers the families
in the order below, which is also the order in which detectors are tried (the first accepts).

:func:`load` chooses for records: a ``LoadResult`` as is; a ``pandas.DataFrame`` or a
``datasets.Dataset`` / ``DatasetDict`` (``split=``, default ``train``) by its columns
(:func:`load_table`); a list of records as they are; a registered name (``"demo"``); a path by its
form and shape (:func:`load_path`); and with ``format=`` the reader registered under that name.
:func:`load_query_set` chooses for query sets; :func:`read_corpus` for external IDF corpora.

A path (:func:`load_path`) is a file or a folder in JSONL, JSON, CSV, TSV, Parquet, Arrow, a
``datasets`` ``save_to_disk`` folder, or a ``.gz`` of the text forms
(:func:`~transferdx.inputs.tables.read_table`). A plain ``.jsonl`` records file (or a folder of
them) keeps the strict records reader; any other table is read by the first format whose detector
accepts its columns, as the source named after the file (``source=`` overrides); a folder gives one
source per recognised file, with its ``descriptors.json`` / ``false_negatives.json`` sidecars.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from transferdx.inputs.reading import RecordBuilder, read_sidecars
from transferdx.inputs.records import InputError, LoadResult, Passage, QuerySet, Record
from transferdx.inputs.tables import (
    Plan,
    Table,
    dataset_table,
    folder_members,
    frame_table,
    is_saved_dataset,
    pick_split,
    read_table,
    recognised_suffixes,
    source_stem,
)


@dataclass(frozen=True)
class Shape:
    """A table recognised by its columns: ``detect`` (columns → plan, or None) and ``read`` (table,
    builder, source, plan → records). ``rows_name_source``: the rows carry their own source (the
    records format), so a table in memory gets no default one."""

    requires: str  # the required columns, in words (listed in the unrecognised-shape error)
    detect: Callable[[Sequence[str]], Plan | None]
    read: Callable[..., LoadResult]
    rows_name_source: bool = False


@dataclass(frozen=True)
class Format:
    """One registered input format and what it can do (see the module docstring)."""

    name: str
    read: Callable[..., LoadResult] | None = None  # (path or root, on_error=, [source=], **options)
    shape: Shape | None = None
    claims: Callable[[Path], bool] | None = None
    query_set: Callable[..., QuerySet] | None = None  # (root, **options)
    recognises: Callable[[Path], bool] | None = None
    corpus: Callable[[str], list[str]] | None = None
    names: tuple[str, ...] = ()
    # (table, plan, Cleaning, source) → Rewritten: the table's rows after cleaning, in its own shape
    write: Callable[..., Any] | None = None


FORMATS: dict[str, Format] = {}


def register(fmt: Format) -> Format:
    """Add ``fmt`` under its name (registering a name again replaces it, in place)."""
    FORMATS[fmt.name] = fmt
    return fmt


def names(capability: str) -> list[str]:
    """The registered formats that have ``capability`` (``read``, ``shape``, ``query_set``, ...),
    in registration order."""
    return [name for name, fmt in FORMATS.items() if getattr(fmt, capability) is not None]


def is_query_set(name: str) -> bool:
    """Whether ``name`` is a registered query-set format (sources are built from it)."""
    return name in names("query_set")


def _named(data: Any, capability: str) -> Format | None:
    """The format a registered name given instead of a path stands for (never an existing path)."""
    text = str(data)
    for fmt in FORMATS.values():
        if getattr(fmt, capability) is not None and text in fmt.names and not Path(text).exists():
            return fmt
    return None


def _reader(name: str, capability: str) -> Callable[..., Any]:
    """The ``capability`` (``read``, ``query_set``, ``corpus``) of the format named ``name``."""
    fmt = FORMATS.get(name)
    if fmt is not None and getattr(fmt, capability) is not None:
        reader: Callable[..., Any] = getattr(fmt, capability)
        return reader
    if capability == "read" and is_query_set(name):
        raise ValueError(f"{name!r} is a query set, not records: build sources from it (load_query_set)")
    what = {"read": "input", "query_set": "query-set", "corpus": "external IDF corpus"}[capability]
    raise ValueError(f"unknown {what} format {name!r}; valid: {sorted(names(capability))}")


# ---------------------------------------------------------------------------------------------
# Records
# ---------------------------------------------------------------------------------------------


def _is_table(data: Any) -> bool:
    return isinstance(data, pd.DataFrame) or (hasattr(data, "column_names") and hasattr(data, "map"))


def load(
    data: Any = None,
    *,
    format: str | None = None,
    source: str | None = None,
    on_error: str = "raise",
    **options: Any,
) -> LoadResult:
    """Records to audit (see the module docstring for how ``data`` is chosen). ``format`` names a
    registered reader (``records``, ``ntuple``, ``msmarco_triples``, ``flagembedding``,
    ``st_hard_negatives``, ``trec_dl``, ``demo``); the reader gets ``data`` as its path (or
    ``path=``/``root=`` among ``options``, as a config gives them), ``source`` when given, and the
    options. ``on_error``: ``raise`` | ``skip`` (exclude and count)."""
    if isinstance(data, LoadResult):
        return data
    if _is_table(data):
        return load_table(data, on_error=on_error, source=source, split=options.get("split"))
    if isinstance(data, list | tuple) and all(isinstance(r, Record) for r in data):
        return LoadResult(list(data))
    if format is None:
        if data is None:
            raise ValueError("load needs a path, a table, records, a registered name, or format=")
        named = _named(data, "read")
        if named is None:
            return load_path(data, on_error=on_error, source=source, split=options.get("split"))
        format = named.name
    read = _reader(format, "read")
    extra = {"source": source} if source else {}
    located = () if data is None else (data,)
    return read(*located, on_error=on_error, **extra, **options)


def _claimant(path: Path) -> Callable[..., LoadResult] | None:
    """The reader of the first format that reads ``path`` whole (a records JSONL file or folder)."""
    for fmt in FORMATS.values():
        if fmt.claims is not None and fmt.read is not None and fmt.claims(path):
            return fmt.read
    return None


def load_path(
    path: str | Path, on_error: str = "raise", source: str | None = None, split: str | None = None
) -> LoadResult:
    """A file or folder in any recognised form and shape (see the module docstring); a folder gives
    one source per recognised file (a ``save_to_disk`` folder is one source named after it)."""
    path = Path(path)
    if not path.exists():
        raise InputError(path, None, "<path>", "no such file or folder")
    if path.is_file() or is_saved_dataset(path):
        return _load_file(path, on_error, source, split)
    members = folder_members(path)
    if not members:
        raise InputError(
            path,
            None,
            "<path>",
            f"folder contains no *.jsonl files nor any other recognised file ({', '.join(recognised_suffixes())})",
        )
    whole = _claimant(path)
    if whole is not None:
        return whole(path, on_error=on_error, source=source)
    result = LoadResult()
    seen: set[tuple[str, str]] = set()
    for member in members:
        result.extend(_load_file(member, on_error, source, split, seen))
    read_sidecars(path, result)
    return result


def _load_file(
    path: Path,
    on_error: str = "raise",
    source: str | None = None,
    split: str | None = None,
    seen: set[tuple[str, str]] | None = None,
) -> LoadResult:
    """One file (or ``save_to_disk`` folder) in any recognised form and shape."""
    whole = _claimant(path)
    if whole is not None:
        return whole(path, on_error=on_error, source=source)
    builder = RecordBuilder(path, on_error, seen, note_duplicates=True)
    table = read_table(path, builder, split)
    return read_shaped(table, builder, source or source_stem(path))


def load_table(data: Any, on_error: str = "raise", source: str | None = None, split: str | None = None) -> LoadResult:
    """A ``pandas.DataFrame`` or a ``datasets.Dataset`` / ``DatasetDict`` in any recognised shape.
    Records-shaped rows take ``source`` as their default source; other shapes name the source
    ``source`` (default ``dataframe`` / ``dataset``)."""
    if hasattr(data, "to_dict") and hasattr(data, "columns"):  # pandas.DataFrame
        table, default = frame_table(data), "dataframe"
    else:
        data = pick_split(data, "<DatasetDict>", split)
        table, default = dataset_table(data, "<Dataset>", "Dataset"), "dataset"
    builder = RecordBuilder(table.file, on_error, note_duplicates=True)
    return read_shaped(table, builder, source, default)


def detect_shape(columns: Sequence[str]) -> tuple[Shape, Plan] | None:
    """The shape of the first registered format whose detector accepts ``columns``, with its plan."""
    for fmt in FORMATS.values():
        plan = None if fmt.shape is None else fmt.shape.detect(columns)
        if fmt.shape is not None and plan is not None:
            return fmt.shape, plan
    return None


def shapes_help() -> str:
    return "; ".join(f"{fmt.name} ({fmt.shape.requires})" for fmt in FORMATS.values() if fmt.shape is not None)


def read_shaped(table: Table, builder: RecordBuilder, source: str | None, default: str = "") -> LoadResult:
    """Recognise ``table``'s shape and read it (through ``builder``) into ``source``'s records
    (``default`` names the source when none is given and the rows do not name theirs)."""
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
    name = source if shape.rows_name_source else (source or default)
    return shape.read(table, builder, name, plan)


# ---------------------------------------------------------------------------------------------
# Query sets and external IDF corpora
# ---------------------------------------------------------------------------------------------


def load_query_set(data: str | Path = "demo", *, format: str | None = None, **options: Any) -> QuerySet:
    """Queries, their positives and a passage pool to build sources from: ``"demo"``, a BEIR folder
    (``format="beir"``, ``split=`` train/test) or a TREC-DL folder (``format="trec_dl_pool"``,
    ``relevant_grade=2``). Without ``format`` the folder's contents decide."""
    if format is None:
        root = Path(str(data))
        fmt = _named(data, "query_set") or next(
            (f for f in FORMATS.values() if f.query_set is not None and f.recognises and f.recognises(root)), None
        )
        if fmt is None:
            valid = sorted(names("query_set"))
            raise ValueError(f"cannot tell the query-set format of {data!r}; give format= one of {valid}")
        format = fmt.name
    query_set: QuerySet = _reader(format, "query_set")(root=str(data), **options)
    return query_set


def read_corpus(format: str, path: str | Path) -> list[str]:
    """The passage texts of an external IDF corpus (``beir``, ``tsv``, ``records``)."""
    texts: list[str] = _reader(format, "corpus")(str(path))
    return texts


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
    ``skip_lines``: the table lines the reader excluded (never written: already in the exclusion log)."""

    by_qid: Mapping[tuple[str, str], CleanedQuery]
    by_query: Mapping[tuple[str, str], CleanedQuery]
    skip_lines: frozenset[int] = frozenset()


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
# kept negatives, the row's own repeated; borrowed: the query kept none, slots hold the next query's;
# dropped: row left out (its pair keeps other rows, or a removed negative's labeled row);
# relabeled: a negative became a positive in the row; added: a new row for a relabeled positive;
# trimmed: lost negatives where the format takes any number (a list); unwritable: no negative anywhere
ROW_CHANGES = ("refilled", "repeated", "borrowed", "dropped", "relabeled", "added", "trimmed", "unwritable")


@dataclass(frozen=True)
class Rewritten:
    """A table's rows after cleaning (the input's columns, in order) and what changed."""

    columns: list[str]
    rows: list[dict[str, Any]]
    changes: list[RowChange]
    skipped: int = 0  # rows not written because the reader excluded them (in the exclusion log)


def kept_cells(texts: Sequence[str], kept: Sequence[Passage]) -> list[bool]:
    """Which of a row's negative cells stay: a cell stays while the cleaned record still holds its
    text (a text repeated within the row at most as often as the record holds it)."""
    allowed: dict[str, int] = {}
    for n in kept:
        allowed[n.text] = allowed.get(n.text, 0) + 1
    used: dict[str, int] = {}
    out = []
    for t in texts:
        used[t] = used.get(t, 0) + 1
        out.append(used[t] <= allowed.get(t, 0))
    return out


def fill_slots(kept: Sequence[Passage], k: int, query: CleanedQuery) -> tuple[list[Passage], str]:
    """``k`` negatives for a row that kept ``kept``: refilled, in order, from the query's kept
    negatives not in the row; then the row's own repeated cyclically; a row with none left and a
    query with none takes the borrowed ones (repeated when fewer). Returns the slots and the change
    (``""`` when nothing was missing, else ``refilled`` / ``repeated`` / ``borrowed`` /
    ``unwritable`` when there is nothing to fill from)."""
    if len(kept) >= k:
        return list(kept[:k]), ""
    slots = list(kept)
    change = "refilled"
    if not query.record.negatives:
        if not query.borrowed:
            return [], "unwritable"
        slots, change = [], "borrowed"
    have = {p.text for p in slots}
    for p in query.fill:
        if len(slots) == k:
            break
        if p.text not in have:
            slots.append(p)
            have.add(p.text)
    pool = list(slots)
    i = 0
    while len(slots) < k:
        slots.append(pool[i % len(pool)])
        i += 1
        change = "repeated" if change == "refilled" else change
    return slots, change


def writer_for(columns: Sequence[str]) -> tuple[Format, Plan] | None:
    """The first registered format with a writer whose detector accepts ``columns``, and its plan."""
    for fmt in FORMATS.values():
        plan = None if fmt.shape is None else fmt.shape.detect(columns)
        if plan is not None and fmt.write is not None:
            return fmt, plan
    return None


def rewrite(table: Table, cleaning: Cleaning, source: str | None) -> Rewritten:
    """``table``'s rows after cleaning, in its own shape (the writer of the format whose detector
    accepts its columns); ``source`` names the table's records (row shapes) when rows do not."""
    found = detect_shape(table.columns)
    chosen = writer_for(table.columns)
    if found is None or chosen is None or found[0] is not chosen[0].shape:
        raise ValueError(f"no writer for a table with columns {table.columns}; shapes: {shapes_help()}")
    fmt, plan = chosen
    assert fmt.write is not None
    rewritten: Rewritten = fmt.write(table, plan, cleaning, source)
    return rewritten
