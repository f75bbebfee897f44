"""The one registry of input formats and the one place that chooses among them.

Every format family (one module each: :mod:`~transferdx.inputs.transferdx_records`,
:mod:`~transferdx.inputs.sentence_transformers`, :mod:`~transferdx.inputs.flagembedding`,
:mod:`~transferdx.inputs.msmarco`, :mod:`~transferdx.inputs.beir`, :mod:`~transferdx.inputs.trec_dl`,
:mod:`~transferdx.inputs.tevatron`; the demo in :mod:`transferdx.sources.demo`) registers a
:class:`Format` under its name, with what it can do: ``read`` (records from a path:
``format=<name>``), ``shape`` (recognised by a table's columns), ``claims`` (a file or folder it
reads whole, before any table is read), ``query_set`` (queries, positives and a pool to build
sources from) with ``recognises`` (a folder it is), and ``corpus`` (passage texts for an external
IDF corpus), ``write`` (a table's rows after cleaning, in its own shape:
:func:`~transferdx.inputs.writing.rewrite`), ``chosen_by`` (options that choose its ``read`` for a
path given without ``format=``: an id table's ``corpus=``). ``names`` are words that stand for the
input when given instead of a path (``"demo"``). Register, don't branch: an unknown name is a
``ValueError`` listing the valid ones. Importing :mod:`transferdx.inputs` registers the families
in the order below, which is also the order in which detectors are tried (the first accepts).

:func:`read` chooses for records: a ``LoadResult`` as is; a ``pandas.DataFrame`` or a
``datasets.Dataset`` / ``DatasetDict`` (``split=``, default ``train``) by its columns
(:func:`load_table`); a list of records as they are; a Hub dataset, ``hf:OWNER/NAME[:CONFIG][@SPLIT]``,
loaded by :func:`~transferdx.inputs.hub.load_hub` and read as a ``Dataset`` is (:func:`load_hub_table`);
a registered name (``"demo"``); a path by its form and shape (:func:`load_path`), or by the reader
an option given chooses (``Format.chosen_by``: ``corpus=`` for an id table); and with ``format=``
the reader registered under that name.
:func:`read_query_set` chooses for query sets; :func:`read_corpus` for external IDF corpora.

A path (:func:`load_path`) is a file or a folder in JSONL, JSON, CSV, TSV, Parquet, Arrow, a
``datasets`` ``save_to_disk`` folder, or a ``.gz`` of the text forms
(:func:`~transferdx.inputs.tables.read_table`). A plain ``.jsonl`` records file (or a folder of
them) keeps the strict records reader, and a headerless ``.tsv`` of MS MARCO text triples is read
whole as ``msmarco_triples`` (their ``claims``); any other table is read by the first format whose
detector accepts its columns, as the source named after the file (``source=`` overrides); a folder
gives one source per recognised file, with its ``descriptors.json`` / ``false_negatives.json``
sidecars.
"""

from __future__ import annotations

import dataclasses
import json
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from transferdx.artifacts import COMPLETE_FILE, IncompleteOutputWarning, incomplete_output
from transferdx.inputs.hub import hub_source, is_hub_spec, load_hub
from transferdx.inputs.reading import RecordBuilder, artifact_name
from transferdx.inputs.records import (
    ANCHORS,
    POSITIVES,
    ST_EXTRAS,
    InputError,
    KeptTable,
    LoadResult,
    Plan,
    QuerySet,
    Record,
    Table,
)
from transferdx.inputs.tables import (
    dataset_table,
    folder_members,
    frame_table,
    held,
    is_saved_dataset,
    negative_columns,
    pick_split,
    read_sidecars,
    read_table,
    recognised_suffixes,
    source_stem,
    storage_form,
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
    # a near miss: columns this shape's family writes but that cannot be read (why, and what to do
    # instead), named first in the unrecognised-shape error; None when ``columns`` are not one
    near_miss: Callable[[Sequence[str]], str | None] | None = None
    # a last resort, given the whole table (its cells): a plan when no shape's ``detect`` accepts the
    # columns and none is named missing (:func:`detect_by_cells`); None when the table is not one,
    # or why not (a string, named in the unrecognised-shape error) when it nearly is
    by_cells: Callable[[Table], Plan | str | None] | None = None


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
    # options that, given with a path and no format=, choose this reader (an id table's corpus=)
    chosen_by: tuple[str, ...] = ()
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


def read(
    data: Any = None,
    *,
    format: str | None = None,
    source: str | None = None,
    on_error: str = "raise",
    keep_tables: bool = False,
    **options: Any,
) -> LoadResult:
    """Records to audit (see the module docstring for how ``data`` is chosen). ``format`` names a
    registered reader (``records``, ``ntuple``, ``msmarco_triples``, ``flagembedding``,
    ``st_hard_negatives``, ``trec_dl``, ``tevatron``, ``demo``); the reader gets ``data`` as its path (or
    ``path=``/``root=`` among ``options``, as a config gives them), ``source`` when given, and the
    options. ``on_error``: ``raise`` | ``skip`` (exclude and count). ``keep_tables``: the readers
    that can write their input back keep what they read on ``result.tables``
    (:class:`~transferdx.inputs.tables.KeptTable`), for the clean verb."""
    if isinstance(data, LoadResult):
        return data
    if _is_table(data):
        return load_table(data, on_error=on_error, source=source, split=options.get("split"), keep_tables=keep_tables)
    if isinstance(data, list | tuple) and all(isinstance(r, Record) for r in data):
        return LoadResult(list(data))
    if is_hub_spec(data):
        if format is not None:
            raise ValueError(f"{data}: a Hub dataset is read by its columns; give no format= (got {format!r})")
        if chosen := sorted(set(options) & {o for f in FORMATS.values() for o in f.chosen_by}):
            raise ValueError(
                f"{data}: an id table is read from a file, not yet from the Hub (given {', '.join(chosen)}=):"
                " save the config with datasets' to_parquet and give that file; its lookups may stay hf:…"
            )
        return load_hub_table(data, on_error=on_error, source=source, keep_tables=keep_tables)
    if format is None:
        if data is None:
            raise ValueError("load needs a path, a table, records, a registered name, or format=")
        named = _named(data, "read") or next(
            (f for f in FORMATS.values() if f.read is not None and set(f.chosen_by) & set(options)), None
        )
        if named is None:
            return load_path(
                data, on_error=on_error, source=source, split=options.get("split"), keep_tables=keep_tables
            )
        format = named.name
    read = _reader(format, "read")
    extra: dict[str, Any] = {"source": source} if source else {}
    if keep_tables:
        extra["keep_tables"] = True
    located = () if data is None else (data,)
    return read(*located, on_error=on_error, **extra, **options)


def _claimant(path: Path) -> Callable[..., LoadResult] | None:
    """The reader of the first format that reads ``path`` whole (a records JSONL file or folder,
    MS MARCO text triples)."""
    for fmt in FORMATS.values():
        if fmt.claims is not None and fmt.read is not None and fmt.claims(path):
            return fmt.read
    return None


def warn_if_incomplete(path: Path) -> None:
    """Warn when ``path`` lies in a transferdx output folder whose run did not finish."""
    folder = incomplete_output(path)
    if folder is not None:
        warnings.warn(
            f"{path} is in {folder}, written by a transferdx run that has not finished or was cut short"
            f" (no {COMPLETE_FILE}): it may be incomplete; rerun that command to finish it",
            IncompleteOutputWarning,
            stacklevel=3,
        )


def load_path(
    path: str | Path,
    on_error: str = "raise",
    source: str | None = None,
    split: str | None = None,
    keep_tables: bool = False,
) -> LoadResult:
    """A file or folder in any recognised form and shape (see the module docstring); a folder gives
    one source per recognised file (a ``save_to_disk`` folder is one source named after it)."""
    path = Path(path)
    if not path.exists():
        raise InputError(path, None, "<path>", "no such file or folder")
    warn_if_incomplete(path)
    if path.is_file() or is_saved_dataset(path):
        return _load_file(path, on_error, source, split, keep_tables=keep_tables)
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
        return whole(path, on_error=on_error, source=source, keep_tables=keep_tables)
    result = LoadResult()
    seen: set[tuple[str, str]] = set()
    for member in members:
        result.extend(_load_file(member, on_error, source, split, seen, keep_tables))
    read_sidecars(path, result)
    return result


def _load_file(
    path: Path,
    on_error: str = "raise",
    source: str | None = None,
    split: str | None = None,
    seen: set[tuple[str, str]] | None = None,
    keep_tables: bool = False,
) -> LoadResult:
    """One file (or ``save_to_disk`` folder) in any recognised form and shape."""
    whole = _claimant(path)
    if whole is not None:
        return whole(path, on_error=on_error, source=source, keep_tables=keep_tables)
    builder = RecordBuilder(path, on_error, seen, note_duplicates=True)
    table = read_table(path, builder, split)
    table = held(table) if keep_tables else table
    name = source or source_stem(path)
    result = read_shaped(table, builder, name)
    if keep_tables:
        keep(result, table, name, storage_form(path), path.name, artifact_name(path), path, split)
    return result


def keep(
    result: LoadResult,
    table: Table,
    source: str | None,
    storage: str | None,
    name: str,
    label: str,
    path: Path | None = None,
    split: str | None = None,
    plan: Plan | None = None,
    write: Callable[..., Any] | None = None,
) -> None:
    """Keep ``table`` on ``result.tables`` with the writer of the format its columns are read as
    (or ``write``/``plan`` given by a reader chosen by name); nothing is kept when that format has no
    writer or the storage form is unknown (the clean verb then writes records JSONL and says why)."""
    if write is None:
        found = detect_shape(table.columns) or detect_by_cells(table)
        if found is None or found[0].write is None:
            result.unwritable.append(f"{name} (columns {table.columns}) has no writer")
            return
        write, plan = found[0].write, found[1]
    if storage is None:
        result.unwritable.append(f"{name} has no recognised form")
        return
    result.tables.append(KeptTable(table, write, plan or {}, source, storage, name, label, path, split))


def load_hub_table(
    spec: str, on_error: str = "raise", source: str | None = None, keep_tables: bool = False
) -> LoadResult:
    """A Hub dataset (``hf:OWNER/NAME[:CONFIG][@SPLIT]``: :func:`~transferdx.inputs.hub.load_hub`) read
    as a ``Dataset`` in memory is (:func:`load_table`), as the source
    :func:`~transferdx.inputs.hub.hub_source` names (``source=`` overrides), its errors citing the
    spec; with ``keep_tables`` the clean verb writes its copy as ``<source>.parquet``."""
    name = source or hub_source(spec)
    return load_table(load_hub(spec), on_error, name, keep_tables=keep_tables, origin=spec, storage="parquet")


def load_table(
    data: Any,
    on_error: str = "raise",
    source: str | None = None,
    split: str | None = None,
    keep_tables: bool = False,
    origin: str | None = None,
    storage: str | None = None,
) -> LoadResult:
    """A ``pandas.DataFrame`` or a ``datasets.Dataset`` / ``DatasetDict`` in any recognised shape.
    Records-shaped rows take ``source`` as their default source; other shapes name the source
    ``source`` (default ``dataframe`` / ``dataset``). ``origin``: what errors cite for a ``Dataset``
    (default ``<Dataset>``); ``storage``: the form its cleaned copy is written in (default a
    ``save_to_disk`` folder; ``parquet``: ``<source>.parquet``)."""
    if hasattr(data, "to_dict") and hasattr(data, "columns"):  # pandas.DataFrame
        table, default, storage = frame_table(data), "dataframe", "DataFrame"
    else:
        if keep_tables and isinstance(getattr(data, "column_names", None), dict):
            whole = LoadResult()
            whole.unwritable.append("a DatasetDict in memory is written as records JSONL (pass its split)")
            return whole.extend(load_table(data, on_error, source, split))
        data = pick_split(data, "<DatasetDict>", split)
        table, default, storage = dataset_table(data, origin or "<Dataset>", "Dataset"), "dataset", storage or "Dataset"
    table = held(table) if keep_tables else table
    builder = RecordBuilder(table.file, on_error, note_duplicates=True)
    result = read_shaped(table, builder, source, default)
    if keep_tables:
        name = source or default
        file_name = f"{name}.parquet" if storage in ("DataFrame", "parquet") else name
        keep(result, table, name, storage, file_name, table.file)
    return result


def detect_shape(columns: Sequence[str]) -> tuple[Format, Plan] | None:
    """The first registered format whose shape's detector accepts ``columns``, with its plan."""
    for fmt in FORMATS.values():
        plan = None if fmt.shape is None else fmt.shape.detect(columns)
        if plan is not None:
            return fmt, plan
    return None


def detect_by_cells(table: Table, why_not: list[str] | None = None) -> tuple[Format, Plan] | None:
    """The first registered format whose shape reads ``table`` by its cells (:attr:`Shape.by_cells`:
    a table of text columns read by their order), with its plan; tried only when no detector
    accepts the columns. ``why_not`` collects why a shape nearly read it."""
    for fmt in FORMATS.values():
        plan = None if fmt.shape is None or fmt.shape.by_cells is None else fmt.shape.by_cells(table)
        if isinstance(plan, str):
            if why_not is not None:
                why_not.append(plan)
        elif plan is not None:
            return fmt, plan
    return None


def near_misses(columns: Sequence[str]) -> list[str]:
    """What the registered shapes say about ``columns`` that none of them reads (:attr:`Shape.near_miss`)."""
    out = []
    for fmt in FORMATS.values():
        if fmt.shape is not None and fmt.shape.near_miss is not None and (why := fmt.shape.near_miss(columns)):
            out.append(why)
    return out


def shapes_help() -> str:
    return "; ".join(f"{fmt.name} ({fmt.shape.requires})" for fmt in FORMATS.values() if fmt.shape is not None)


# what marks a table as one of hard negatives (a column of negatives, labels or positives), so that a
# table with one of these that no shape reads lacks a query or a positive column: say which
_NEGATIVE_MARKS = ("negative", "negatives", "neg", "label", "labels", "positives", "pos")
_RECORDS_COLUMNS = ("qid", "query", "positives", "negatives")
_FOUND_SHOWN = 8  # columns a missing-column error lists before "…"


class MissingColumnError(InputError):
    """A table of hard negatives without its query or positive column (:func:`missing_column`): a
    short line, ``<file>: no positive column: expected …; found …`` (no field: the file has none)."""

    def __init__(self, file: str | Path, message: str):
        super().__init__(file, None, "<columns>", message)
        self.args = (f"{self.file}: {message}",)


def _listed(names: Sequence[str]) -> str:
    shown = ", ".join(names[:_FOUND_SHOWN])
    return shown + (", …" if len(names) > _FOUND_SHOWN else "") if names else "none"


def _one_of(names: Sequence[str]) -> str:
    return f"one of {', '.join(names)}" if len(names) > 1 else names[0]


def missing_column(columns: Sequence[str]) -> str | None:
    """The column a table of hard negatives lacks, as a short message naming what was expected and
    what was found (``no positive column: expected one of positive, pos, answer, …; found query,
    negative``); None when ``columns`` do not look like hard negatives (nothing marks them) or no one
    column is missing (the general unrecognised-shape error then lists the shapes)."""
    cols = [str(c) for c in columns]
    present = set(cols)
    marked = bool(present & set(_NEGATIVE_MARKS) or negative_columns(cols))
    if not marked:
        return None
    found = _listed(cols)
    if present & {"positives", "negatives"}:  # the records shape
        lacking = [c for c in _RECORDS_COLUMNS if c not in present]
        return f"no {lacking[0]} column: records need {', '.join(_RECORDS_COLUMNS)}; found {found}" if lacking else None
    anchors = ("query",) if "neg" in present else ANCHORS
    positives = ("pos",) if "neg" in present else (POSITIVES[0], "pos", *POSITIVES[1:])
    has_anchor = bool(present & set(anchors))
    has_positive = bool(present & set(positives))
    negatives = present & {"negative", "neg", "label", "labels"} or negative_columns(cols)
    if has_anchor and has_positive and not negatives:
        return f"no negative column: expected negative, negative_1..n, label or neg; found {found}"
    if has_anchor and has_positive:
        return None
    rest = [c for c in cols if c not in _NEGATIVE_MARKS and not negative_columns([c]) and c not in ST_EXTRAS]
    if has_positive or not rest:
        return f"no query column: expected {_one_of(anchors)}; found {found}"
    if has_anchor or len(rest) == 1:
        return f"no positive column: expected {_one_of(positives)}; found {found}"
    return f"cannot tell the query and positive columns: name them {anchors[0]} and {positives[0]}; found {found}"


def read_shaped(table: Table, builder: RecordBuilder, source: str | None, default: str = "") -> LoadResult:
    """Recognise ``table``'s shape and read it (through ``builder``) into ``source``'s records
    (``default`` names the source when none is given and the rows do not name theirs). A table of
    hard negatives missing its query or positive column is a short error naming the column
    (:func:`missing_column`); any other unrecognised table, one listing the shapes read."""
    found = detect_shape(table.columns)
    if found is None and not near_misses(table.columns) and (missing := missing_column(table.columns)):
        raise MissingColumnError(table.file, missing)
    why_not: list[str] = []
    if found is None and not near_misses(table.columns):
        found = detect_by_cells(table, why_not)
    if found is None:
        hint = ""
        if table.form in ("csv", "tsv"):
            hint = " (a file without a header row: give format='ntuple' or 'msmarco_triples')"
        why = "".join(f"{m}; " for m in [*near_misses(table.columns), *why_not])
        raise InputError(
            table.file,
            None,
            "<columns>",
            f"unrecognised shape: columns {table.columns}; {why}recognised shapes: {shapes_help()}{hint}",
        )
    fmt, plan = found
    assert fmt.shape is not None
    name = source if fmt.shape.rows_name_source else (source or default)
    return fmt.shape.read(table, builder, name, plan)


# ---------------------------------------------------------------------------------------------
# Query sets and external IDF corpora
# ---------------------------------------------------------------------------------------------


def read_query_set(data: str | Path = "demo", *, format: str | None = None, **options: Any) -> QuerySet:
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
# A cleaned copy read back
# ---------------------------------------------------------------------------------------------

# transferdx-clean writes the copy to <output_dir>/cleaned/ with clean.json beside that folder
# (pipeline.cleaning.core.COPY_DIR, FILES["descriptor"]); the inputs do not import the pipeline
CLEANED_DIR, CLEAN_FILE = "cleaned", "clean.json"
CLEANED_MARK = "_cleaned"  # appended to a cleaned copy's source names when it is audited
# what the copy's descriptor says of its cleaning (pipeline.cleaning.plan.cleaned_copy)
CLEANED_FACTS = ("action", "reasons", "min_probability", "relabeled_relation", "fill", "keep")


def cleaned_copy_facts(path: str | Path | None) -> dict[str, Any] | None:
    """How ``path`` was cleaned when it is a ``transferdx-clean`` copy (a file or folder in
    ``<output_dir>/cleaned/``, or that folder, with ``<output_dir>/clean.json``): the facts of
    clean.json a copy's descriptor keeps (``cleaned``); None for anything else."""
    if path is None:
        return None
    path = Path(path)
    for folder in (path, path.parent):
        descriptor = folder.parent / CLEAN_FILE
        if folder.name == CLEANED_DIR and descriptor.is_file():
            try:
                data = json.loads(descriptor.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                return None
            return {k: data.get(k) for k in CLEANED_FACTS} if isinstance(data, dict) else None
    return None


def cleaned_label(path: str | Path) -> str | None:
    """A cleaned copy as its audit's settings name it, portably: ``cleaned/<name>`` (None when
    ``path`` is no cleaned copy)."""
    path = Path(path)
    if cleaned_copy_facts(path) is None:
        return None
    return CLEANED_DIR if path.name == CLEANED_DIR else f"{CLEANED_DIR}/{path.name}"


def as_cleaned_copy(loaded: LoadResult, facts: Mapping[str, Any]) -> LoadResult:
    """``loaded`` read from a cleaned copy, for its audit: each source named ``<source>_cleaned`` (so
    its profile, verdict and suspects are told apart from the original's) and described as cleaned
    (``facts``: :func:`cleaned_copy_facts`, unless its descriptor already says how). The records
    themselves are not changed; ``loaded`` is left as it is (the clean verb writes back under the
    file's own names)."""

    def name(source: str) -> str:
        return source if not source or source.endswith(CLEANED_MARK) else source + CLEANED_MARK

    out = LoadResult(
        [dataclasses.replace(r, source=name(r.source)) for r in loaded.records],
        [dataclasses.replace(e, source=name(e.source)) for e in loaded.exclusions],
        {name(s): dict(d) for s, d in loaded.descriptors.items()},
        {name(s): list(rows) for s, rows in loaded.false_negatives.items()},
        loaded.relevant_grade,
        unwritable=list(loaded.unwritable),
        origins={(name(s), q): where for (s, q), where in loaded.origins.items()},
    )
    for source in out.sources:
        if "cleaned" not in out.descriptors.get(source, {}):
            out.describe(source, cleaned=dict(facts))
    return out
