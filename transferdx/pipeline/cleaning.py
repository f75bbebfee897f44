"""The clean verb (design §3.9): load the records, audit them when no audit is given, and write a
copy, in the input's own shape and file format, with the suspected false negatives removed or
relabeled (:mod:`transferdx.cleaning` holds the pure core and :class:`CleanResult`; each format
family's writer, :func:`transferdx.inputs.writing.rewrite`, turns the cleaned queries back into
the input's rows)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from transferdx.auditing.result import Audit
from transferdx.cleaning import (
    PROBABILITY_REASON,
    RELABELED_RELATION,
    ROWS_COLUMNS,
    CleanResult,
    CopyTable,
    checked_reasons,
    clean_records,
    reasons_of,
    review_table,
    unchecked_why,
    with_context,
)
from transferdx.diagnostics.suspicion import MIN_PROBABILITY, TEXT_REASONS
from transferdx.inputs.records import LoadResult, Record, file_stat
from transferdx.inputs.tables import is_saved_dataset
from transferdx.inputs.writing import RELABEL_UNWRITTEN, CleanedQuery, Cleaning, rewrite
from transferdx.pipeline.auditing import audit
from transferdx.pipeline.encoders import EncoderLike
from transferdx.pipeline.loading import load
from transferdx.pipeline.settings import AuditOptions

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


def _copy_tables(
    loaded: LoadResult,
    queries: Sequence[CleanedQuery],
    removed: pd.DataFrame,
    data: Any,
    fill: str = "none",
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


def _rows_frame(tables: Sequence[CopyTable]) -> pd.DataFrame:
    rows = [(t.name, c.line, c.qid, c.change, c.n_lost, c.detail) for t in tables for c in t.rewritten.changes]
    return pd.DataFrame(rows, columns=ROWS_COLUMNS)


def row_accounting(tables: Sequence[CopyTable]) -> dict[str, Any]:
    """Rows in and out: read = written + excluded on reading + dropped − added; ``lost_negatives``:
    input rows that lost at least one negative; ``by_change``: rows per change."""
    changes = [c for t in tables for c in t.rewritten.changes]
    by_change: dict[str, int] = {}
    for c in changes:
        by_change[c.change] = by_change.get(c.change, 0) + 1
    return {
        "read": sum(t.n_rows_in for t in tables),
        "written": sum(len(t.rewritten.rows) for t in tables),
        "excluded_on_read": sum(t.rewritten.skipped + t.n_unreadable for t in tables),
        "dropped": sum(_dropped(t) for t in tables),
        "added": sum(_added(t) for t in tables),
        "lost_negatives": sum(1 for c in changes if c.line is not None and c.n_lost > 0),
        "by_change": dict(sorted(by_change.items())),
    }


def _dropped(t: CopyTable) -> int:
    return sum(1 for c in t.rewritten.changes if c.line is not None and c.change in ("dropped", "unwritable"))


def _added(t: CopyTable) -> int:
    return sum(1 for c in t.rewritten.changes if c.line is None and c.change == "added")


def clean(
    records: Any,
    audit_result: Audit | pd.DataFrame | None = None,
    *,
    reasons: Sequence[str] | None = None,
    action: str = "remove",
    min_probability: float | str | None = "auto",
    fill: str = "none",
    keep: int | None = None,
    out: str | Path | None = None,
    encoder: EncoderLike | None = "minilm_l6",
    cache_dir: str | Path | None = None,
    format: str = "records",
    source: str | None = None,
    options: AuditOptions | None = None,
    **overrides: Any,
) -> CleanResult:
    """Remove (``action="remove"``) or relabel as positives (``"relabel"``; ``"both"``: relabel them
    and remove every other suspect, the review list) the negatives suspected
    of being false negatives for ``reasons`` (None: the high-precision
    :data:`transferdx.cleaning.DEFAULT_REASONS` the audit checked) and, when the audit's frame has
    ``fn_probability``, those with ``fn_probability ≥ min_probability`` (``"auto"``: with the
    default reasons, :data:`transferdx.diagnostics.suspicion.MIN_PROBABILITY` = 0.80, chosen out of
    year on TREC-DL19/DL21, precision 0.814; with reasons given, not used; None: not used). The other
    suspects are listed for review (``result.review``). ``records``: anything :func:`transferdx.load`
    takes (``format``, ``source`` as there); a path or a table is written back in its own shape and
    form (``result.to_dataset()``, ``result.save``). ``audit_result``: an :class:`Audit` of the same
    records or its per-negative frame; without it the records are audited here (``encoder``,
    ``options`` and keyword ``overrides`` as :func:`transferdx.audit`; no encoder when every reason
    asked for is a text reason). Nothing is invented: ``keep`` writes the first ``keep`` accepted
    negatives of each row or record; a row left short of its shape is dropped and listed unless
    ``fill`` asks to ``repeat`` (refill, repeat) or ``borrow`` (also lend the next query's negatives
    to a query left with none). With ``out`` the copy is written there (:meth:`CleanResult.save`)."""
    if keep is not None and (isinstance(keep, bool) or not isinstance(keep, int) or keep < 1):
        raise ValueError(f"clean keep must be a positive integer or None, got {keep!r}")
    options = dataclasses.replace(options or AuditOptions(), **overrides)
    if min_probability == "auto":
        min_probability = MIN_PROBABILITY if reasons is None else None
    elif isinstance(min_probability, str):
        raise ValueError(f"min_probability must be a number in [0, 1], 'auto' or None, got {min_probability!r}")
    loaded = load(records, format=format, source=source, on_error=options.on_error, keep_tables=True)
    frame: pd.DataFrame
    result: Audit | None = audit_result if isinstance(audit_result, Audit) else None
    if audit_result is None:
        text_only = reasons is not None and set(reasons) <= set(TEXT_REASONS)
        enc = None if text_only else encoder
        # controls would only add sources to audit: suspicion is per negative, of the records alone
        result = audit(loaded, options, encoder=enc, cache_dir=cache_dir, controls="none")
        frame = result.result.negatives
    else:
        frame = audit_result.result.negatives if isinstance(audit_result, Audit) else audit_result
    chosen = reasons_of(frame, reasons)
    queries, removed, emptied = clean_records(
        loaded.records, frame, reasons=chosen, action=action, min_probability=min_probability, fill=fill
    )
    tables, note = _copy_tables(loaded, queries, removed, records, fill, keep)
    plan = _output_plan(records, tables, note)
    review = review_table(loaded.records, frame, removed)
    # the files a person reads: each row with the query, its positive and the user's own id
    removed, emptied, review = (with_context(t, loaded.records, loaded.origins) for t in (removed, emptied, review))
    descriptor = _descriptor(loaded, frame, chosen, action, min_probability, (queries, removed, emptied), plan, result)
    descriptor |= {"fill": fill, "keep": keep}
    descriptor["n_review"] = len(review)
    descriptor["input_sha256"] = {Path(k.table.file).name: k.table.sha256 for k in loaded.tables if k.table.sha256}
    descriptor["input_changed"] = changed_since_read(loaded)
    # relabeled passages the copy's shape could not hold as positives (each listed in rows.csv)
    descriptor["n_relabeled_unwritten"] = sum(
        1 for t in tables for c in t.rewritten.changes if c.change == RELABEL_UNWRITTEN
    )
    if tables:
        descriptor["rows"] = row_accounting(tables)
    done = CleanResult(
        _cleaned_copy(loaded, queries, descriptor, keep),
        removed,
        emptied,
        descriptor,
        result,
        review,
        _rows_frame(tables),
        tuple(tables),
    )
    if out is not None:
        done.save(out)
    return done


def changed_since_read(loaded: LoadResult) -> list[str]:
    """The input files that changed on disk after they were read (size, mtime or inode): the copy is
    made from the rows read, so it is of the version read, whole; the summary says so."""
    return sorted(
        Path(kept.table.file).name
        for kept in loaded.tables
        if kept.table.stat is not None and file_stat(kept.table.file) != kept.table.stat
    )


def _output_plan(data: Any, tables: Sequence[CopyTable], note: str) -> dict[str, Any]:
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


def _descriptor(
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


def _cleaned_copy(
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
