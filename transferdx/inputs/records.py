"""Records: the data model (docs/design.md §2) and the identity of queries and passages.

A :class:`Record` is one training query with its reference positive(s) and the negatives of one
source; a :class:`LoadResult` holds the records of one or more inputs with the exclusion log (every
input item left out, :class:`Exclusion`), a descriptor per source and the measured false negatives;
a :class:`QuerySet` is what miners build sources from (queries, positives, a pool; no negatives).
Bad input is an :class:`InputError` naming file, line and field. A :class:`Table` is an input's
rows as read (each with the line errors cite), a :class:`KeptTable` one kept for the clean verb.
This module holds only the types and the rules that name things; reading lives in
:mod:`transferdx.inputs.reading` (validation), :mod:`~transferdx.inputs.textforms` and
:mod:`~transferdx.inputs.tables` (the saved forms) and the format families (one module each,
behind :mod:`transferdx.inputs.registry`).
"""

from __future__ import annotations

import hashlib
import os
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from transferdx import display

POLICIES = ("raise", "skip")
MERGED_NEGATIVE = "duplicate negative (also row"  # the reason of an expected merge (Exclusion.merged)
# the reason of a query a grouped file gives a positive and no negative (a miner found none under its
# settings): a counted exclusion under either error policy (Exclusion.no_negative), not an input error
NO_NEGATIVE = "query has no negative"
KINDS = ("genuine", "control")
# A negative whose text equals one of the record's positives is an error, except when the source
# built it on purpose (the own_positive_mix control marks such negatives with this relation).
OWN_POSITIVE_RELATION = "own_positive"


class InputError(ValueError):
    """Bad input, located: ``file:line: field: message``."""

    def __init__(self, file: str | Path, line: int | str | None, field: str, message: str):
        self.file, self.line, self.field, self.message = str(file), line, field, message
        where = f"{self.file}:{line}" if line is not None else self.file
        super().__init__(f"{where}: field '{field}': {message}")


@dataclass(frozen=True, slots=True)
class Exclusion:
    """One input item left out of the output, with where it came from and why (:attr:`merged`: an
    expected one, the same negative on another row of its query, kept once; :attr:`no_negative`: a
    query the file gives a positive and no negative)."""

    file: str
    line: str
    source: str
    qid: str
    # "record", "negative", "positive", "line" (an input line left out, e.g. a duplicate line of a
    # triples file) or "query" (a judged query, for every source at once)
    unit: str
    item: str  # passage id for negative/positive units, "" for records
    field: str
    reason: str

    @property
    def merged(self) -> bool:
        """A negative an earlier row of the same query already gave (one row per (query, positive)
        pair, as ``mine_hard_negatives`` writes): expected, the negative is kept once."""
        return self.unit == "negative" and self.reason.startswith(MERGED_NEGATIVE)

    @property
    def no_negative(self) -> bool:
        """A query of a grouped file (labeled pairs, labeled lists, ...) with a positive and no
        negative, as a miner leaves a query it found no candidate for: left out and counted."""
        return self.unit == "record" and self.reason == NO_NEGATIVE


@dataclass(frozen=True, slots=True)
class Passage:
    """A passage attached to a record. ``rank``/``judgment`` are kept when the input has them;
    ``score`` is the miner's similarity score when the input carries one (e.g. sentence-transformers
    ``mine_hard_negatives(..., output_scores=True)``), left out of ``to_dict`` when absent."""

    id: str
    text: str
    method: str | None = None
    relation: str | None = None
    rank: int | None = None
    judgment: int | None = None
    score: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None or k in ("method", "relation")}


@dataclass(frozen=True, slots=True)
class Record:
    """One query of one source: ``positives[0]`` is the reference positive p0."""

    qid: str
    query: str
    positives: tuple[Passage, ...]
    negatives: tuple[Passage, ...]
    source: str
    kind: str = "genuine"

    def to_dict(self) -> dict[str, Any]:
        return {
            "qid": self.qid,
            "query": self.query,
            "positives": [p.to_dict() for p in self.positives],
            "negatives": [n.to_dict() for n in self.negatives],
            "source": self.source,
            "kind": self.kind,
        }


@dataclass(frozen=True)
class QuerySet:
    """Queries with their positives and a passage pool (no negatives): the input of miners.

    ``judgments`` (qid → passage id → grade), when present, are deep relevance judgments: they let
    a build measure how many mined negatives are in fact relevant (grade ≥ ``relevant_grade``).
    """

    name: str
    queries: dict[str, str]
    positives: dict[str, list[str]]  # qid → positive passage ids, best first
    pool: dict[str, str]  # passage id → text
    judgments: dict[str, dict[str, int]] | None = None
    relevant_grade: int = 1


# ---------------------------------------------------------------------------------------------
# Identity: ids of what comes without one, the passage key, the order of graded positives
# ---------------------------------------------------------------------------------------------


def text_id(text: str) -> str:
    """Content-addressed passage id for inputs that carry text but no id: ``t`` + sha1[:16]."""
    return "t" + hashlib.sha1(text.encode("utf-8")).hexdigest()[:16]


def query_id(query: str) -> str:
    """Stable id of a query that comes without one: ``q`` + the first 12 hex of sha256(text)."""
    return "q" + hashlib.sha256(query.encode("utf-8")).hexdigest()[:12]


def normalise_text(text: str) -> str:
    """Unicode NFKC, case-folded, runs of whitespace collapsed to one space, ends stripped."""
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


def passage_key(passage_id: str | None, text: str) -> str:
    """Identity of a passage for ``duplicate_negative``: its id, or its normalised text when the id
    is absent or empty."""
    return f"id:{passage_id}" if passage_id else f"text:{normalise_text(text)}"


def is_numeric_id(pid: str) -> bool:
    """An id of ASCII digits only (``"²"`` is a digit to ``str.isdigit`` but not an integer)."""
    return pid.isascii() and pid.isdigit()


def order_by_grade(ids: Sequence[str], grades: dict[str, int]) -> list[str]:
    """Passage ids by grade (descending), then id: numerically when every id is an integer (MS MARCO
    passage ids are), otherwise as strings (design §3, identity of passages)."""
    if all(is_numeric_id(p) for p in ids):
        return sorted(ids, key=lambda p: (-grades[p], int(p), p))
    return sorted(ids, key=lambda p: (-grades[p], p))


# ---------------------------------------------------------------------------------------------
# Results
# ---------------------------------------------------------------------------------------------

# Descriptor notes that count kept items worth knowing about; summed when results are merged.
DUPLICATE_NEGATIVES_KEPT = "duplicate_negatives_kept"
# negative cells of a filled row (its own negatives repeated in order, as transferdx-clean fills a
# fixed-slot row: inputs.writing.filled_width), each read once: not duplicate_negative suspects
FILLED_SLOTS = "filled_slots"
ADDITIVE_NOTES = (DUPLICATE_NEGATIVES_KEPT, FILLED_SLOTS)


@dataclass
class LoadResult:
    """Records and exclusions from one or more inputs."""

    records: list[Record] = field(default_factory=list)
    exclusions: list[Exclusion] = field(default_factory=list)
    # source → how its negatives were made (input, mining method, pool, ranking rule, slice, ...)
    descriptors: dict[str, dict[str, Any]] = field(default_factory=dict)
    # source → [(qid, negatives judged relevant, negatives)] of the single-label variant (only p0
    # known), where deep judgments exist: the measured false negatives
    false_negatives: dict[str, list[tuple[str, int, int]]] = field(default_factory=dict)
    # the grade from which a judged passage counts as relevant, where the input has graded judgments
    relevant_grade: int | None = None
    # with load(..., keep_tables=True): each table as its reader read it (inputs.tables.KeptTable),
    # so the clean verb writes the input back without reading it again; and why a part cannot be
    tables: list[Any] = field(default_factory=list, repr=False, compare=False)
    unwritable: list[str] = field(default_factory=list, repr=False, compare=False)
    # (source, qid) → where the record was read ("file:line" of its first row), where a reader knows
    origins: dict[tuple[str, str], str] = field(default_factory=dict, repr=False, compare=False)

    def extend(self, other: LoadResult) -> LoadResult:
        if self.relevant_grade is None:
            self.relevant_grade = other.relevant_grade
        self.records.extend(other.records)
        self.exclusions.extend(other.exclusions)
        self.tables.extend(other.tables)
        self.unwritable.extend(other.unwritable)
        self.origins.update(other.origins)
        for source, rows in other.false_negatives.items():
            self.false_negatives.setdefault(source, []).extend(rows)
        for source, desc in other.descriptors.items():
            mine = self.descriptors.setdefault(source, {})
            added = {k: mine[k] + desc[k] for k in ADDITIVE_NOTES if k in mine and k in desc}
            mine.update(desc, **added)
        return self

    def describe(self, source: str, **fields: Any) -> None:
        """Record how ``source``'s negatives were made (merged into its descriptor)."""
        self.descriptors.setdefault(source, {}).update(fields)

    def note(self, source: str, key: str, n: int) -> None:
        """Add ``n`` to a counted note of ``source``'s descriptor (e.g. duplicate negatives kept)."""
        if n:
            desc = self.descriptors.setdefault(source, {})
            desc[key] = desc.get(key, 0) + n

    @property
    def sources(self) -> list[str]:
        return sorted({r.source for r in self.records} | {e.source for e in self.exclusions if e.source})

    def __repr__(self) -> str:  # a few lines (transferdx.display), not every record
        return display.load_repr(display.source_counts(self.records, self.exclusions))

    def _repr_markdown_(self) -> str:
        first = [f"{e.file}:{e.line}: field '{e.field}': {e.reason}" for e in self.exclusions[:5]]
        return display.load_markdown(display.source_counts(self.records, self.exclusions), first)


def sample_queries(loaded: LoadResult, fraction: float, seed: int = 0) -> tuple[LoadResult, int]:
    """A seeded subset of ⌈fraction × #queries⌉ query ids, the same for every source, and the
    records (and measured false negatives) of those queries; ``fraction`` ∈ (0, 1]. Returns the
    sample and how many records it leaves out (reported with the run, never silently)."""
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"sample_fraction must be in (0, 1], got {fraction}")
    if fraction == 1.0:
        return loaded, 0
    qids = sorted({r.qid for r in loaded.records})
    n = int(np.ceil(fraction * len(qids)))
    kept = {qids[i] for i in np.random.default_rng([seed, 0x5A]).choice(len(qids), size=n, replace=False)}
    records = [r for r in loaded.records if r.qid in kept]
    sample = LoadResult(
        records,
        list(loaded.exclusions),
        {k: dict(v) for k, v in loaded.descriptors.items()},
        {s: [row for row in rows if row[0] in kept] for s, rows in loaded.false_negatives.items()},
        loaded.relevant_grade,
    )
    return sample, len(loaded.records) - len(records)


# ---------------------------------------------------------------------------------------------
# Tables: an input's rows as read
# ---------------------------------------------------------------------------------------------

ANCHORS = ("anchor", "query", "question")  # the query column's names, in the order they are tried
# the positive column's names, in the order they are tried (mine_hard_negatives keeps the name of the
# dataset's second column: "positive", or "answer" for the natural-questions and gooaq pairs, ...)
POSITIVES = ("positive", "answer", "document", "passage", "context", "response")
# columns a sentence-transformers table carries besides its (query, positive) pair and its negatives
ST_EXTRAS = ("scores", "score", "label", "labels", "qid")

# what a format's detector read off a table's columns (which column is the anchor, are there scores)
Plan = dict[str, Any]


@dataclass
class Table:
    """Rows of one input (Python values), each with the line (or row) number errors cite."""

    file: str
    form: str
    columns: list[str]
    rows: Sequence[Mapping[str, Any]]
    lines: Sequence[int]
    cells_are_text: bool = False  # CSV/TSV: list cells arrive as their printed form
    sha256: str | None = None
    n_unreadable: int = 0  # rows that could not be parsed at all (counted exclusions under skip)
    header: bool = True  # tab-separated lines: whether the file named its columns on a first line
    stat: tuple[int, int, int] | None = None  # (size, mtime_ns, inode) of the file when it was read


def file_stat(path: str | Path) -> tuple[int, int, int] | None:
    """(size, mtime_ns, inode) of a file: what changes when it is rewritten or replaced; None if gone."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_size, st.st_mtime_ns, st.st_ino)


# a table stored as tab-separated lines without quoting (MS MARCO triples, n-tuple TSV lines),
# without or with a first line naming the columns
LINES_FORM = "tsv_lines"


LINES_HEADER_FORM = "tsv_lines_header"


@dataclass(frozen=True)
class KeptTable:
    """One table as its reader read it, kept so that the clean verb writes it back without reading
    the input again: the ``table`` (rows, lines), the ``write`` of its format with the ``plan`` its
    detector made, the ``source`` its rows' records belong to (row shapes), where it came from
    (``path``: the file; None for a table in memory) and how it was stored (``storage``:
    :func:`storage_form`, or ``DataFrame`` / ``Dataset`` in memory; ``split`` of a ``DatasetDict``);
    ``name``: the copy's file name under ``cleaned/``; ``label``: the file as the exclusion log
    names it."""

    table: Table
    write: Callable[..., Any]  # (table, plan, Cleaning, source) → Rewritten (inputs.writing)
    plan: Plan
    source: str | None
    storage: str
    name: str
    label: str
    path: Path | None = None
    split: str | None = None
    companions: Mapping[str, bytes] = field(default_factory=dict)  # files written beside it, as read
