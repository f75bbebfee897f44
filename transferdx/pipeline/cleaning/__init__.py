"""The clean verb (design §3.9): a copy of the input, in its own shape and file format, with the
negatives the audit suspects removed, or moved to the positives (``relabel``, as RLHN does).

**What is acted on.** By default only the reasons whose measured precision is high
(:data:`~.core.DEFAULT_REASONS`: copies and near-copies of a positive) and, when the audit's per-negative
frame has the calibrated ``fn_probability`` column and ``min_probability`` is given, negatives with
``fn_probability ≥ min_probability`` (reason ``fn_probability``). The other reasons
(``positive_aware``, ``combined``, ``duplicate_negative``) are listed for review (the ``review``
table), not removed, unless asked for (``reasons=[...]``).

The core, :func:`~.core.clean_records`, is pure: records and the audit's per-negative frame
(``source``, ``qid``, ``neg_index``, ``fn_<reason>``, ``fn_reasons``, optionally ``fn_probability``)
in; one :class:`~transferdx.inputs.writing.CleanedQuery` per record (none dropped), the removed
table and the emptied table out.

``relabel`` moves a negative to the positives (after the existing ones, so p0 stays the reference
positive; ``relation`` becomes :data:`~.core.RELABELED_RELATION`) only when one of the reasons that say it
answers the query holds (:data:`~.core.RELABEL_REASONS`) and its normalised text is not already a positive.
Otherwise it is removed: a copy of a positive (``duplicate_positive``) or a repeat of an earlier
negative (``duplicate_negative``) adds nothing as a positive. A negative left with the normalised
text of a relabeled one would copy a positive, so it is removed too (reason ``duplicate_positive``).
``both`` (filtering plus relabelling, as ARHN does) relabels the same negatives and removes every other
suspect, the ones ``remove`` and ``relabel`` leave on the review list.

**Nothing is invented; every query that keeps a negative keeps its rows.** Rows keep the negatives
the cleaned record still holds, in their order; ``keep`` (``clean.keep=K``) writes the first K
accepted negatives of each row or record (a file mined with more negatives than it needs takes its
next accepted candidates). A row that lost negatives takes the query's next accepted ones not
already in it; a fixed-slot row (n-tuple) still short is, by default (``fill="repeat"``,
:data:`~transferdx.inputs.writing.DEFAULT_FILL`), filled with its own remaining negatives again, in
order (``a b c`` → ``a b c a b``; the summary says how many rows and slots), which a re-read reads
once (:func:`~transferdx.inputs.writing.filled_width`); a row of a query left with no negative is
dropped and listed in ``rows.csv`` (a triplet row that lost its negative is dropped); list shapes
(records, FlagEmbedding, labeled lists) keep a shorter list; labeled pairs keep a query's positive
rows. ``fill`` (``clean.fill``, :data:`~transferdx.inputs.writing.FILLS`): ``none`` drops a row left
short of its shape instead; ``borrow`` also lets a query left with none take the kept negatives of
the next query of its source (cyclically; ``borrowed_negative`` in the records view). A query left
without negatives is listed in ``emptied.csv`` with what became of it (``fallback``); rows follow
:func:`transferdx.inputs.writing.fill_slots`; every changed row is in ``rows.csv``;
:func:`~.plan.kept_rows` says, before cleaning, how many rows and queries a clean keeps.

The verb's room: :func:`clean` (here) loads, audits when no audit is given and composes the pure
steps — :mod:`.core` (which negatives go), :mod:`.plan` (the copy in the input's shape, the
accounting, ``clean.json``) — and :class:`~.result.CleanResult` writes the files (``save``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from transferdx.auditing.result import Audit
from transferdx.diagnostics.suspicion import MIN_PROBABILITY, TEXT_REASONS
from transferdx.inputs.registry import CLEANED_MARK, cleaned_copy_facts
from transferdx.inputs.writing import DEFAULT_FILL
from transferdx.pipeline.auditing import audit
from transferdx.pipeline.cleaning.core import clean_records, reasons_of, review_table, with_context
from transferdx.pipeline.cleaning.plan import (
    cleaned_copy,
    copy_facts,
    copy_tables,
    descriptor_of,
    output_plan,
    rows_frame,
)
from transferdx.pipeline.cleaning.result import CleanResult
from transferdx.pipeline.encoders import EncoderLike
from transferdx.pipeline.loading import load
from transferdx.pipeline.settings import AuditOptions

__all__ = ["CleanResult", "clean"]


def clean(
    records: Any,
    audit_result: Audit | pd.DataFrame | None = None,
    *,
    reasons: Sequence[str] | None = None,
    action: str = "remove",
    min_probability: float | str | None = "auto",
    fill: str = DEFAULT_FILL,
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
    :data:`~.core.DEFAULT_REASONS` the audit checked) and, when the audit's frame has
    ``fn_probability``, those with ``fn_probability ≥ min_probability`` (``"auto"``: with the
    default reasons, :data:`transferdx.diagnostics.suspicion.MIN_PROBABILITY` = 0.80, chosen out of
    year on TREC-DL19/DL21, precision 0.814; with reasons given, not used; None: not used). The other
    suspects are listed for review (``result.review``). ``records``: anything :func:`transferdx.load`
    takes (``format``, ``source`` as there); a path or a table is written back in its own shape and
    form (``result.to_dataset()``, ``result.save``). ``audit_result``: an :class:`Audit` of the same
    records or its per-negative frame; without it the records are audited here (``encoder``,
    ``options`` and keyword ``overrides`` as :func:`transferdx.audit`; no encoder when every reason
    asked for is a text reason). Nothing is invented: ``keep`` writes the first ``keep`` accepted
    negatives of each row or record; a row left short of its shape is refilled from its query's other
    kept negatives, then filled with its own again in order (``fill="repeat"``, the default: every
    query that keeps a negative keeps its rows), or dropped and listed (``"none"``), or, for a query
    left with none, given the next query's (``"borrow"``). With ``out`` the copy is written there
    (:meth:`CleanResult.save`)."""
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
    if audit_result is not None and isinstance(records, (str, Path)) and cleaned_copy_facts(records) is not None:
        # the audit of a cleaned copy names its sources <source>_cleaned (as_cleaned_copy); the copy's
        # records, and the tables written back, keep the file's own names
        frame = frame.assign(source=frame["source"].astype(str).str.removesuffix(CLEANED_MARK))
    chosen = reasons_of(frame, reasons)
    queries, removed, emptied = clean_records(
        loaded.records, frame, reasons=chosen, action=action, min_probability=min_probability, fill=fill
    )
    tables, note = copy_tables(loaded, queries, removed, records, fill, keep)
    plan = output_plan(records, tables, note)
    review = review_table(loaded.records, frame, removed)
    # the files a person reads: each row with the query, its positive and the user's own id
    removed, emptied, review = (with_context(t, loaded.records, loaded.origins) for t in (removed, emptied, review))
    descriptor = descriptor_of(
        loaded, frame, chosen, action, min_probability, (queries, removed, emptied), plan, result
    )
    descriptor |= copy_facts(loaded, tables, len(review), fill, keep)
    done = CleanResult(
        cleaned_copy(loaded, queries, descriptor, keep),
        removed,
        emptied,
        descriptor,
        result,
        review,
        rows_frame(tables),
        tuple(tables),
    )
    if out is not None:
        done.save(out)
    return done
