"""The cleaned copy's plan (design §3.9): the input's own tables rewritten by their formats'
writers (:func:`~transferdx.inputs.writing.rewrite`, in memory), rows in and out, how the copy is
written, what ``clean.json`` holds and the records view of the copy. Pure: nothing here writes a
file (:mod:`.result` does)."""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from transferdx.auditing.result import Audit
from transferdx.inputs.records import LoadResult, Record, file_stat
from transferdx.inputs.tables import is_saved_dataset, negative_columns
from transferdx.inputs.writing import (
    DEFAULT_FILL,
    RELABEL_UNWRITTEN,
    CleanedQuery,
    Cleaning,
    Rewritten,
    filled_width,
    rewrite,
    rows_dataset,
)
from transferdx.pipeline.cleaning.core import (
    PROBABILITY_REASON,
    RELABELED_RELATION,
    ROWS_COLUMNS,
    checked_reasons,
    unchecked_why,
)


@dataclass(frozen=True)
class CopyTable:
    """One table of the cleaned copy, in the input's shape: ``name`` (under ``cleaned/``), ``form``
    (:func:`~transferdx.inputs.tables.storage_form`, or ``DataFrame`` / ``Dataset`` in memory),
    ``like`` (the input file, whose schema is kept), ``split`` (of a ``DatasetDict``) and the rows."""

    name: str
    form: str
    rewritten: Rewritten
    like: Path | None = None
    split: str | None = None
    n_rows_in: int = 0  # the input table's rows (unreadable ones included)
    n_unreadable: int = 0  # rows that could not be read at all (in the exclusion log)
    companions: Mapping[str, bytes] = field(default_factory=dict)  # files of the input copied as read

    def save_form(self) -> str:
        return {"DataFrame": "parquet", "Dataset": "save_to_disk"}.get(self.form, self.form)

    def dataset(self) -> Any:
        r = self.rewritten
        return rows_dataset(r.columns, r.rows, self.save_form(), self.like, self.split)


ROW_EXCLUSION_UNITS = ("record", "line")  # exclusions that leave a whole table row out


def _cleaning(queries: Sequence[CleanedQuery], removed: pd.DataFrame, fill: str, keep: int | None) -> Cleaning:
    """The writers' view of the cleaned queries (built once; each table adds its skipped lines)."""
    dropped: dict[tuple[str, str], set[str]] = {}
    for source, qid, neg_id in zip(removed["source"], removed["qid"], removed["neg_id"], strict=True):
        dropped.setdefault((str(source), str(qid)), set()).add(str(neg_id))
    return Cleaning(
        {(q.record.source, q.record.qid): q for q in queries},
        {(q.record.source, q.record.query): q for q in queries},
        dropped={key: frozenset(ids) for key, ids in dropped.items()},
        fill=fill,
        keep=keep,
    )


def _skip_lines(loaded: LoadResult, label: str) -> frozenset[int]:
    """The lines of ``label`` (a file as the exclusion log names it) the reader left out whole."""
    return frozenset(
        int(e.line) for e in loaded.exclusions if e.file == label and e.unit in ROW_EXCLUSION_UNITS and e.line.isdigit()
    )


def copy_tables(
    loaded: LoadResult,
    queries: Sequence[CleanedQuery],
    removed: pd.DataFrame,
    data: Any,
    fill: str = DEFAULT_FILL,
    keep: int | None = None,
) -> tuple[list[CopyTable], str]:
    """The input's own tables, as its readers kept them (never read again), rewritten by their
    formats' writers; none, with the reason, when a part of the input cannot be written back."""
    if loaded.unwritable or not loaded.tables:
        if loaded.unwritable:
            why = loaded.unwritable[0]
        elif str(data) == "demo":
            why = "the embedded demo"
        elif isinstance(data, str | Path):
            why = "this input's reader"
        else:
            why = f"in-memory input ({type(data).__name__})"
        return [], f"{why} cannot be written back in its own format; the copy is records JSONL"
    base = _cleaning(queries, removed, fill, keep)
    out = []
    for kept in loaded.tables:
        rewritten = rewrite(kept, dataclasses.replace(base, skip_lines=_skip_lines(loaded, kept.label)))
        n_in = len(kept.table.rows) + kept.table.n_unreadable
        out.append(
            CopyTable(
                kept.name,
                kept.storage,
                rewritten,
                kept.path,
                kept.split,
                n_in,
                kept.table.n_unreadable,
                kept.companions,
            )
        )
    return out, ""


def rows_frame(tables: Sequence[CopyTable]) -> pd.DataFrame:
    rows = [(t.name, c.line, c.qid, c.change, c.n_lost, c.detail) for t in tables for c in t.rewritten.changes]
    return pd.DataFrame(rows, columns=ROWS_COLUMNS)


def filled_cells(tables: Sequence[CopyTable]) -> tuple[int, int]:
    """(rows, slots) of the copy filled with their own negatives repeated in order (``clean.fill``:
    the cells past :func:`~transferdx.inputs.writing.filled_width` of an n-tuple row), which a
    re-read reads once (``filled_slots`` in the source's descriptor)."""
    n_rows = n_slots = 0
    for t in tables:
        cols = negative_columns(t.rewritten.columns)
        for row in t.rewritten.rows:
            texts = [str(row[c]) for c in cols if row.get(c) is not None]
            extra = len(texts) - filled_width(texts)
            n_rows += extra > 0
            n_slots += extra
    return n_rows, n_slots


def row_accounting(tables: Sequence[CopyTable]) -> dict[str, Any]:
    """Rows in and out: read = written + excluded on reading + dropped − added; ``lost_negatives``:
    input rows that lost at least one negative; ``by_change``: rows per change; ``filled_rows``,
    ``filled_slots``: :func:`filled_cells`."""
    changes = [c for t in tables for c in t.rewritten.changes]
    by_change: dict[str, int] = {}
    for c in changes:
        by_change[c.change] = by_change.get(c.change, 0) + 1
    filled_rows, filled_slots = filled_cells(tables)
    return {
        "read": sum(t.n_rows_in for t in tables),
        "written": sum(len(t.rewritten.rows) for t in tables),
        "excluded_on_read": sum(t.rewritten.skipped + t.n_unreadable for t in tables),
        "dropped": sum(_dropped(t) for t in tables),
        "added": sum(_added(t) for t in tables),
        "lost_negatives": sum(1 for c in changes if c.line is not None and c.n_lost > 0),
        "by_change": dict(sorted(by_change.items())),
        "filled_rows": filled_rows,
        "filled_slots": filled_slots,
    }


def _dropped(t: CopyTable) -> int:
    return sum(1 for c in t.rewritten.changes if c.line is not None and c.change in ("dropped", "unwritable"))


def _added(t: CopyTable) -> int:
    return sum(1 for c in t.rewritten.changes if c.line is None and c.change == "added")


def changed_since_read(loaded: LoadResult) -> list[str]:
    """The input files that changed on disk after they were read (size, mtime or inode): the copy is
    made from the rows read, so it is of the version read, whole; the summary says so."""
    return sorted(
        Path(kept.table.file).name
        for kept in loaded.tables
        if kept.table.stat is not None and file_stat(kept.table.file) != kept.table.stat
    )


def output_plan(data: Any, tables: Sequence[CopyTable], note: str) -> dict[str, Any]:
    """How the copy is written and whether that is the input's own shape and form (never pretended)."""
    if tables:
        forms = ", ".join(sorted({t.save_form() for t in tables}))
        is_folder = isinstance(data, str | Path) and Path(str(data)).is_dir() and not is_saved_dataset(Path(str(data)))
        return {
            "file_name": None,
            "input_is_folder": is_folder,
            "output_format": f"the input's own shape and form ({forms}; {', '.join(t.name for t in tables)})",
            "faithful": True,
            "note": "",
        }
    return {
        "file_name": None,
        "input_is_folder": False,
        "output_format": "records JSONL folder (one <source>.jsonl per source)",
        "faithful": False,
        "note": note,
    }


def descriptor_of(
    loaded: LoadResult,
    frame: pd.DataFrame,
    chosen: Sequence[str],
    action: str,
    min_probability: float | None,
    outcome: tuple[list[CleanedQuery], pd.DataFrame, pd.DataFrame],
    plan: Mapping[str, Any],
    result: Audit | None,
) -> dict[str, Any]:
    """What ``clean.json`` holds: action, reasons (acted on, checked, not checked and why), counts
    in and out (``outcome``: cleaned queries, removed and emptied tables), the output ``plan``, and
    the audit's settings and suspicion summary when the audit ran here."""
    queries, removed, emptied = outcome
    counts = removed["action"].value_counts()
    checked = checked_reasons(frame)
    descriptor: dict[str, Any] = {
        "action": action,
        "reasons": list(chosen),
        "min_probability": min_probability,
        "probability_used": min_probability is not None and PROBABILITY_REASON in frame.columns,
        "reasons_checked": checked,
        "reasons_unchecked": unchecked_why(checked),
        "relabeled_relation": RELABELED_RELATION if action != "remove" else None,
        "n_records_in": len(loaded.records),
        "n_negatives_in": sum(len(r.negatives) for r in loaded.records),
        "n_removed": int(counts.get("removed", 0)),
        "n_relabeled": int(counts.get("relabeled", 0)),
        "n_emptied": len(emptied),
        "n_borrowed": sum(1 for q in queries if q.borrowed),
        "n_records_out": sum(1 for q in queries if q.fill),
        "n_excluded": len(loaded.exclusions),
        "measured_false_negatives_dropped": sorted(loaded.false_negatives),
        **plan,
    }
    if result is not None:
        descriptor["audit"] = {k: result.settings[k] for k in sorted(result.settings)}
        descriptor["fn_suspicion"] = dict(result.result.suspicion)
    return descriptor


def copy_facts(
    loaded: LoadResult, tables: Sequence[CopyTable], n_review: int, fill: str, keep: int | None
) -> dict[str, Any]:
    """The rest of ``clean.json``: the fill and keep asked for, the suspects left for review, each input
    file's sha256 and whether it changed while the clean ran, the relabeled passages the copy's shape
    could not hold (each listed in rows.csv) and, for the input's own tables, rows in and out."""
    facts: dict[str, Any] = {"fill": fill, "keep": keep, "n_review": n_review}
    facts["input_sha256"] = {Path(k.table.file).name: k.table.sha256 for k in loaded.tables if k.table.sha256}
    facts["input_changed"] = changed_since_read(loaded)
    facts["n_relabeled_unwritten"] = sum(
        1 for t in tables for c in t.rewritten.changes if c.change == RELABEL_UNWRITTEN
    )
    if tables:
        facts["rows"] = row_accounting(tables)
    return facts


def cleaned_copy(
    loaded: LoadResult, queries: Sequence[CleanedQuery], descriptor: Mapping[str, Any], keep: int | None = None
) -> LoadResult:
    """The records view of the copy (the first ``keep`` negatives of each record; a record left
    without negatives with its borrowed ones, or left out and listed in ``emptied``) with the input's
    exclusions and descriptors, each cleaned source's descriptor noting how (action, reasons,
    relabeled relation, fill, keep)."""
    records: list[Record] = [
        dataclasses.replace(q.record, negatives=q.fill[:keep]) if q.borrowed or keep is not None else q.record
        for q in queries
        if q.fill
    ]
    out_loaded = LoadResult(
        records,
        list(loaded.exclusions),
        {s: dict(d) for s, d in loaded.descriptors.items()},
        {},  # measured false negatives were counted before cleaning: not carried over
    )
    summary = {k: descriptor[k] for k in ("action", "reasons", "min_probability", "relabeled_relation", "fill", "keep")}
    for name in {r.source for r in records}:
        out_loaded.describe(name, cleaned=summary)
    return out_loaded


# ---------------------------------------------------------------------------------------------
# What a clean will keep, before cleaning (the verdict's "cleaning keeps N of M rows")
# ---------------------------------------------------------------------------------------------

# a row of a record: its (anchor, positive) pair (any hashable: rows of one pair share it) and the
# indices, into the record's negatives, of the negatives it holds, in row order
RowOfRecord = tuple[Hashable, Sequence[int]]


@dataclass(frozen=True)
class KeptRows:
    """How many rows and queries (records) a clean keeps of those it reads (:func:`kept_rows`)."""

    rows: int
    rows_in: int
    queries: int
    queries_in: int

    def __str__(self) -> str:
        return f"cleaning keeps {self.rows} of {self.rows_in} rows ({self.queries} of {self.queries_in} queries)"


def kept_rows(
    removed: Sequence[bool] | np.ndarray,
    n_negatives: Sequence[int] | np.ndarray,
    rows: Sequence[Sequence[RowOfRecord]] | None = None,
    fill: str = DEFAULT_FILL,
) -> KeptRows:
    """How many rows and queries a clean that removes ``removed`` will keep, before it runs.

    ``removed``: per negative, in the audit's order (its ``negatives`` frame; each record owning
    ``n_negatives`` consecutive ones), whether the clean removes it — for the default clean, the
    suspects it acts on (:func:`transferdx.diagnostics.suspicion.acted_on`). ``n_negatives``: per
    record (the audit's ``records`` frame). ``rows``: per record, its rows in file order
    (:data:`RowOfRecord`); None: one row per record holding all its negatives (an n-tuple file with
    one row per query, as ``mine_hard_negatives`` writes for one positive; a FlagEmbedding line or a
    records line per query). A triplet file: one row per negative, ``[(pair, [i]) for i in ...]``.

    The rules are the fixed-slot writer's (:func:`~transferdx.inputs.sentence_transformers.write_slots`,
    ``action="remove"``, no ``keep``): a row that keeps all its negatives is kept; one that keeps
    some is filled (``repeat``, the default, and ``borrow``; with ``none`` only when the record's
    other kept negatives fill its slots); one that keeps none is dropped when a row of its pair keeps
    one, else filled from the record's kept negatives; a record that keeps no negative keeps no row
    (``borrow``: unless another record keeps one). A query is kept when one of its rows is. Pure;
    pass one source's records and negatives for that source's counts."""
    flags = np.asarray(removed, dtype=bool)
    counts = np.asarray(n_negatives, dtype=np.int64)
    if len(flags) != int(counts.sum()):
        raise ValueError(f"{len(flags)} removal decisions for {int(counts.sum())} negatives")
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]]) if len(counts) else counts
    left = [int((~flags[s : s + n]).sum()) for s, n in zip(starts, counts, strict=True)]
    lender = any(left)
    n_rows = n_rows_in = n_queries = 0
    for r, (start, n) in enumerate(zip(starts, counts, strict=True)):
        own_rows = rows[r] if rows is not None else [((), range(int(n)))]
        gone = flags[start : start + n]
        pairs_kept = {pair for pair, idx in own_rows if any(not gone[i] for i in idx)}
        written = 0
        for pair, idx in own_rows:
            kept = [i for i in idx if not gone[i]]
            if len(kept) == len(idx):
                ok = True
            elif not kept and pair in pairs_kept:
                ok = False
            elif left[r] == 0:
                ok = fill == "borrow" and lender
            else:  # refilled from the record's other kept negatives, then (not with none) repeated
                ok = fill != "none" or left[r] >= len(idx)
            if ok:
                pairs_kept.add(pair)
                written += 1
        n_rows_in += len(own_rows)
        n_rows += written
        n_queries += written > 0
    return KeptRows(n_rows, n_rows_in, n_queries, len(counts))
