"""Fix suspected false negatives (design §3.9): a copy of the input, in its own shape and file
format, with the negatives the audit suspects removed, or moved to the positives (``relabel``, as
RLHN does).

**What is acted on.** By default only the reasons whose measured precision is high
(:data:`DEFAULT_REASONS`: copies and near-copies of a positive) and, when the audit's per-negative
frame has the calibrated ``fn_probability`` column and ``min_probability`` is given, negatives with
``fn_probability ≥ min_probability`` (reason ``fn_probability``). The other reasons
(``positive_aware``, ``combined``, ``duplicate_negative``) are listed for review (the ``review``
table), not removed, unless asked for (``reasons=[...]``).

The core, :func:`clean_records`, is pure: records and the audit's per-negative frame (``source``,
``qid``, ``neg_index``, ``fn_<reason>``, ``fn_reasons``, optionally ``fn_probability``) in; one
:class:`~transferdx.inputs.writing.CleanedQuery` per record (none dropped), the removed table and
the emptied table out. The verb, :func:`transferdx.pipeline.clean`, loads, audits when no audit is
given, cleans, rewrites the input's own tables through each family's writer
(:func:`transferdx.inputs.writing.rewrite`) and, with ``out``, writes the copy
(:meth:`CleanResult.save`).

``relabel`` moves a negative to the positives (after the existing ones, so p0 stays the reference
positive; ``relation`` becomes :data:`RELABELED_RELATION`) only when one of the reasons that say it
answers the query holds (:data:`RELABEL_REASONS`) and its normalised text is not already a positive.
Otherwise it is removed: a copy of a positive (``duplicate_positive``) or a repeat of an earlier
negative (``duplicate_negative``) adds nothing as a positive. A negative left with the normalised
text of a relabeled one would copy a positive, so it is removed too (reason ``duplicate_positive``).
``both`` (filtering plus relabelling, as ARHN does) relabels the same negatives and removes every other
suspect, the ones ``remove`` and ``relabel`` leave on the review list.

**Nothing is invented.** Rows keep the negatives the cleaned record still holds, in their order;
``keep`` (``clean.keep=K``) writes the first K accepted negatives of each row or record (a file
mined with more negatives than it needs takes its next accepted candidates). A row that lost
negatives takes the query's next accepted ones not already in it; a row still short of its shape
(triplet, n-tuple: fixed slots; FlagEmbedding and records: at least one) is dropped and listed in
``rows.csv``; list shapes (records, FlagEmbedding, labeled lists) keep
a shorter list; labeled pairs keep a query's positive rows. ``fill`` (``clean.fill``, :data:`FILLS`)
asks for more: ``repeat`` refills a short row from the query's other kept negatives, then repeats
its own; ``borrow`` also lets a query left with none take the kept negatives of the next query of
its source (cyclically; ``borrowed_negative`` in the records view). A query left without negatives
is listed in ``emptied.csv`` with what became of it (``fallback``); rows follow
:func:`transferdx.inputs.writing.fill_slots`; every changed row is in ``rows.csv``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from transferdx import display
from transferdx.artifacts import (
    atomic_write_bytes,
    atomic_write_text,
    canonical_json,
    csv_text,
    owned_folder,
    safe_join,
)
from transferdx.auditing.report import exclusions_frame
from transferdx.auditing.result import Audit
from transferdx.diagnostics.suspicion import ENCODER_REASONS, REASONS, RULES, normalise_text
from transferdx.inputs.records import LoadResult, Passage, Record, query_id, text_id
from transferdx.inputs.transferdx_records import write_records, write_source_folder
from transferdx.inputs.writing import (
    BORROWED_RELATION,
    FILLS,
    RELABEL_UNWRITTEN,
    CleanedQuery,
    Rewritten,
    rows_dataset,
    write_rows,
    write_sidecars,
)

# remove: take the acted-on suspects out; relabel: move those that answer the query to the positives;
# both (ARHN's filter + relabel): relabel as ``relabel`` does, and also remove every suspect listed for review
ACTIONS = ("remove", "relabel", "both")
RELABELED_RELATION = "relabeled_false_negative"
# high measured precision: acted on by default (the rest is for review)
DEFAULT_REASONS = ("duplicate_positive", "near_duplicate_positive")
PROBABILITY_REASON = "fn_probability"  # fn_probability ≥ min_probability (when the column exists)
# the reasons that say a negative answers the query (the others say it copies a passage)
RELABEL_REASONS = frozenset({"positive_aware", "combined", "near_duplicate_positive", PROBABILITY_REASON})
REMOVED_COLUMNS = ["source", "qid", "neg_index", "neg_id", "negative", "reasons", "action"]
REVIEW_COLUMNS = ["source", "qid", "neg_index", "neg_id", "negative", "reasons", "fn_probability"]
EMPTIED_COLUMNS = ["source", "qid", "n_negatives", "n_removed", "n_relabeled", "fallback"]
ROWS_COLUMNS = ["file", "line", "qid", "change", "n_lost", "detail"]
COPY_DIR = "cleaned"  # the copy, apart from the tables (a folder is read whole, CSV included)
FILES = {
    "removed": "removed.csv",
    "emptied": "emptied.csv",
    "review": "review.csv",
    "rows": "rows.csv",
    "descriptor": "clean.json",
}


def checked_reasons(suspicion: pd.DataFrame) -> list[str]:
    """The reasons the audit checked (a column with no NA)."""
    return [r for r in REASONS if f"fn_{r}" in suspicion.columns and not suspicion[f"fn_{r}"].isna().any()]


def reasons_of(suspicion: pd.DataFrame, reasons: Sequence[str] | None) -> tuple[str, ...]:
    """The reasons to act on (None: :data:`DEFAULT_REASONS` the audit checked), validated: a reason
    the audit could not check (an encoder reason of a lexical audit) is an error, never a no-op."""
    checked = checked_reasons(suspicion)
    if reasons is None:
        return tuple(r for r in DEFAULT_REASONS if r in checked)
    unknown = [r for r in reasons if r not in REASONS]
    if unknown:
        raise ValueError(f"unknown suspicion reason(s) {unknown}; valid: {list(REASONS)}")
    unchecked = [r for r in reasons if r not in checked]
    if unchecked:
        raise ValueError(
            f"reason(s) {unchecked} were not checked by the audit (they need the encoder, or the other "
            f"score rule); checked: {checked}"
        )
    return tuple(r for r in REASONS if r in reasons)


def _probabilities(suspicion: pd.DataFrame) -> np.ndarray | None:
    if PROBABILITY_REASON not in suspicion.columns:
        return None
    return pd.to_numeric(suspicion[PROBABILITY_REASON], errors="coerce").to_numpy(dtype=np.float64)


def _held(
    suspicion: pd.DataFrame, chosen: set[str], min_probability: float | None
) -> tuple[dict[tuple[str, str], dict[int, list[str]]], dict[tuple[str, str], int]]:
    """(source, qid) → negative index → the chosen reasons that hold; and negatives per record."""
    fn_reasons = suspicion["fn_reasons"].fillna("").astype(str)
    probs = _probabilities(suspicion) if min_probability is not None else None
    hits: dict[tuple[str, str], dict[int, list[str]]] = {}
    seen: dict[tuple[str, str], int] = {}
    for i, (src, qid, k, joined) in enumerate(
        zip(suspicion["source"], suspicion["qid"], suspicion["neg_index"], fn_reasons, strict=True)
    ):
        key = (str(src), str(qid))
        seen[key] = seen.get(key, 0) + 1
        held = [r for r in joined.split(";") if r in chosen]
        if probs is not None and min_probability is not None and probs[i] >= min_probability:
            held.append(PROBABILITY_REASON)
        if held:
            hits.setdefault(key, {})[int(k)] = held
    return hits, seen


def review_table(records: Sequence[Record], suspicion: pd.DataFrame, removed: pd.DataFrame) -> pd.DataFrame:
    """The suspects not acted on (any reason held, the negative not in ``removed``): for review."""
    done = {
        (str(s), str(q), int(k))
        for s, q, k in zip(removed["source"], removed["qid"], removed["neg_index"], strict=True)
    }
    texts = {(r.source, r.qid): r.negatives for r in records}
    probs = _probabilities(suspicion)
    rows = []
    joined = suspicion["fn_reasons"].fillna("").astype(str).tolist()
    for i, (src, qid, k) in enumerate(zip(suspicion["source"], suspicion["qid"], suspicion["neg_index"], strict=True)):
        key = (str(src), str(qid), int(k))
        if not joined[i] or key in done or (key[0], key[1]) not in texts:
            continue
        neg = texts[(key[0], key[1])][key[2]]
        p = None if probs is None or np.isnan(probs[i]) else float(probs[i])
        rows.append((key[0], key[1], key[2], neg.id, neg.text, joined[i], p))
    frame = pd.DataFrame(rows, columns=REVIEW_COLUMNS)
    if probs is not None and len(frame):
        frame = frame.sort_values("fn_probability", ascending=False, kind="stable").reset_index(drop=True)
    return frame


CONTEXT_COLUMNS = ["input_id", "query", "positive"]  # what a person reviewing a row needs beside its keys


def with_context(
    frame: pd.DataFrame, records: Sequence[Record], origins: Mapping[tuple[str, str], str]
) -> pd.DataFrame:
    """``frame`` (rows keyed by ``source``, ``qid``) with :data:`CONTEXT_COLUMNS` after ``qid``:
    ``input_id`` — the query's id in the user's file, or ``file:line`` of its first row where the file
    had none (transferdx made the qid from the text) — and the query and reference positive texts."""
    by_key = {(r.source, r.qid): r for r in records}
    ids, queries, positives = [], [], []
    for source, qid in zip(frame["source"].astype(str), frame["qid"].astype(str), strict=True):
        rec = by_key.get((source, qid))
        made = rec is not None and qid in (query_id(rec.query), text_id(rec.query))
        ids.append(origins.get((source, qid), "") if made else qid)
        queries.append("" if rec is None else rec.query)
        positives.append("" if rec is None or not rec.positives else rec.positives[0].text)
    out = frame.copy()
    at = list(out.columns).index("qid") + 1
    for offset, (name, values) in enumerate(zip(CONTEXT_COLUMNS, (ids, queries, positives), strict=True)):
        out.insert(at + offset, name, values)
    return out


def clean_records(
    records: Sequence[Record],
    suspicion: pd.DataFrame,
    *,
    reasons: Sequence[str] | None = None,
    action: str = "remove",
    min_probability: float | None = None,
    fill: str = "none",
) -> tuple[list[CleanedQuery], pd.DataFrame, pd.DataFrame]:
    """(one cleaned query per record, in input order; removed table; emptied table). ``suspicion``
    has a row per negative of every record (the audit's ``negatives`` frame or ``negatives.csv``);
    ``reasons``: the reasons to act on (None: :data:`DEFAULT_REASONS`); ``min_probability``: also
    act on ``fn_probability ≥`` it (ignored when the frame has no such column). A record left
    without negatives is listed in the emptied table; with ``fill="borrow"`` it borrows the next
    record's (see the module docstring)."""
    if action not in ACTIONS:
        raise ValueError(f"clean action must be one of {ACTIONS}, got {action!r}")
    if fill not in FILLS:
        raise ValueError(f"clean fill must be one of {FILLS}, got {fill!r}")
    if min_probability is not None and not 0.0 <= float(min_probability) <= 1.0:
        raise ValueError(f"clean min_probability must be in [0, 1] or null, got {min_probability!r}")
    chosen = set(reasons_of(suspicion, reasons))
    hits, seen = _held(suspicion, chosen, min_probability)
    acted = hits  # relabel and both move these (the chosen reasons, or the probability cut)
    if action == "both":  # ... and both also removes every other suspect (the review list)
        review, _ = _held(suspicion, set(checked_reasons(suspicion)), None)
        hits = {key: {**review.get(key, {}), **acted.get(key, {})} for key in review.keys() | acted.keys()}
    cleaned: list[tuple[Record, tuple[Passage, ...]]] = []
    removed: list[tuple[Any, ...]] = []
    for rec in records:
        key = (rec.source, rec.qid)
        if seen.get(key) != len(rec.negatives):
            raise ValueError(
                f"the audit does not cover record {rec.source}/{rec.qid} ({seen.get(key, 0)} of "
                f"{len(rec.negatives)} negatives): audit the same records (sample_fraction=1.0)"
            )
        new, rows = _clean_one(rec, hits.get(key, {}), action, set(acted.get(key, {})))
        removed.extend(rows)
        cleaned.append((new, tuple(new.positives[len(rec.positives) :])))
    queries = _borrow(cleaned) if fill == "borrow" else [CleanedQuery(rec, added) for rec, added in cleaned]
    emptied = []
    for (rec, _), q, before in zip(cleaned, queries, records, strict=True):
        if rec.negatives:
            continue
        n_relabeled = sum(1 for r in removed if (r[0], r[1]) == (rec.source, rec.qid) and r[-1] == "relabeled")
        n_all = len(before.negatives)
        emptied.append((rec.source, rec.qid, n_all, n_all - n_relabeled, n_relabeled, _fallback(q, fill)))
    return (
        queries,
        pd.DataFrame(removed, columns=REMOVED_COLUMNS),
        pd.DataFrame(emptied, columns=EMPTIED_COLUMNS),
    )


def _borrow(cleaned: Sequence[tuple[Record, tuple[Passage, ...]]]) -> list[CleanedQuery]:
    """Each record with no negative left borrows the kept negatives of the next record of its source
    (input order, cyclically), marked :data:`BORROWED_RELATION`."""
    order: dict[str, list[int]] = {}
    for i, (rec, _) in enumerate(cleaned):
        order.setdefault(rec.source, []).append(i)
    out = []
    for i, (rec, added) in enumerate(cleaned):
        borrowed: tuple[Passage, ...] = ()
        if not rec.negatives:
            idx = order[rec.source]
            at = idx.index(i)
            for j in idx[at + 1 :] + idx[:at]:
                lender = cleaned[j][0]
                if lender.negatives:
                    borrowed = tuple(
                        dataclasses.replace(n, relation=BORROWED_RELATION, method=f"borrowed from {lender.qid}")
                        for n in lender.negatives
                    )
                    break
        out.append(CleanedQuery(rec, added, borrowed))
    return out


def _fallback(query: CleanedQuery, fill: str) -> str:
    """What the copy does with a query left without negatives (the emptied table's ``fallback``)."""
    if query.borrowed:
        lender = query.borrowed[0].method
        return f"borrowed {len(query.borrowed)} negatives ({lender}); positives-only where the shape allows"
    if fill == "borrow":
        return "no query of the source keeps a negative: positives-only where the shape allows, else not written"
    return "positives-only where the shape allows (labeled pairs), else its rows dropped (clean.fill=borrow lends)"


def _clean_one(
    rec: Record, held: Mapping[int, list[str]], action: str, acted: set[int]
) -> tuple[Record, list[tuple[Any, ...]]]:
    """One record: its negatives that hold a reason removed or, those in ``acted`` (relabel, both),
    relabeled, in order."""
    positives = list(rec.positives)
    known = {normalise_text(p.text) for p in positives}
    moved: set[str] = set()
    kept: list[tuple[int, Passage]] = []
    rows: list[tuple[Any, ...]] = []
    for k, neg in enumerate(rec.negatives):
        reasons, text = held.get(k), normalise_text(neg.text)
        if not reasons and text in moved:
            reasons = ["duplicate_positive"]  # copies a negative relabeled above
        if not reasons:
            kept.append((k, neg))
            continue
        verb = "removed"
        if action != "remove" and k in acted and RELABEL_REASONS.intersection(reasons) and text not in known:
            positives.append(dataclasses.replace(neg, relation=RELABELED_RELATION))
            known.add(text)
            moved.add(text)
            verb = "relabeled"
        rows.append((rec.source, rec.qid, k, neg.id, neg.text, ";".join(reasons), verb))
    # a kept negative before the one relabeled with its text copies a positive now
    late = [(k, n) for k, n in kept if normalise_text(n.text) in moved]
    rows += [(rec.source, rec.qid, k, n.id, n.text, "duplicate_positive", "removed") for k, n in late]
    rows.sort(key=lambda r: int(r[2]))
    negatives = tuple(n for k, n in kept if normalise_text(n.text) not in moved)
    return dataclasses.replace(rec, positives=tuple(positives), negatives=negatives), rows


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


@dataclass(frozen=True)
class CleanResult:
    """What :func:`transferdx.pipeline.clean` did: the cleaned records (``loaded``: the records
    view, emptied ones with their borrowed negatives), the ``removed``, ``emptied``, ``review``
    (suspects not acted on) and ``rows`` (each changed row) tables, ``tables`` (the copy in the
    input's own shape, when it could be written so) and ``descriptor`` (what ``clean.json`` holds)."""

    loaded: LoadResult
    removed: pd.DataFrame
    emptied: pd.DataFrame
    descriptor: Mapping[str, Any]
    audit: Audit | None = field(default=None, repr=False)
    review: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=REVIEW_COLUMNS), repr=False)
    rows: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=ROWS_COLUMNS), repr=False)
    tables: tuple[CopyTable, ...] = field(default=(), repr=False)

    @property
    def records(self) -> list[Record]:
        return self.loaded.records

    def __repr__(self) -> str:  # a few lines (transferdx.display), not every record
        return display.clean_repr(self.summary())

    def _repr_markdown_(self) -> str:
        return display.clean_markdown(self.summary(), self.removed)

    def to_dataset(self) -> Any:
        """The cleaned copy as a ``datasets.Dataset`` in the input's shape (columns, order, types);
        several input tables with the same columns are concatenated; records in memory give the
        records shape (``qid, query, positives, negatives, source, kind``)."""
        import datasets

        if not self.tables:
            return datasets.Dataset.from_list([r.to_dict() for r in self.records])
        parts = [t.dataset() for t in self.tables]
        if len({tuple(p.column_names) for p in parts}) > 1:
            raise ValueError("the input's tables have different columns: take them one by one (result.tables)")
        return parts[0] if len(parts) == 1 else datasets.concatenate_datasets(parts)

    def summary(self) -> str:
        d = self.descriptor
        acted = list(d["reasons"]) + ([f"fn_probability ≥ {d['min_probability']}"] if d.get("probability_used") else [])
        unheld = int(d.get("n_relabeled_unwritten", 0))
        relabeled = f"{d['n_relabeled']} relabeled as positives"
        if unheld:  # never claimed as positives of the copy when it does not hold them
            relabeled = f"{d['n_relabeled']} relabeled ({d['n_relabeled'] - unheld} of them positives in the copy)"
        lines = [
            f"{d['action']} on {', '.join(acted) or '(no reason)'}: {d['n_removed']} negatives removed, "
            f"{relabeled}, of {d['n_negatives_in']} in {d['n_records_in']} records",
            f"checked: {', '.join(d['reasons_checked']) or '(none)'}",
            *[f"not checked: {r} ({why})" for r, why in d["reasons_unchecked"].items()],
        ]
        if len(self.review):
            lines.append(f"{len(self.review)} other suspects listed for review, not removed (review.csv)")
        if unheld:
            lines.append(
                f"{unheld} relabeled passages are not in the copy, as positive or negative: the shape holds a positive "
                f"only in a row with negatives the query no longer keeps (rows.csv, {RELABEL_UNWRITTEN}: each, and "
                "what would write it)"
            )
        lines.append(_fill_line(d))
        if d["n_emptied"]:
            borrowing = f"{d['n_borrowed']} borrow the next query's negatives; " if d.get("fill") == "borrow" else ""
            lines.append(
                f"{d['n_emptied']} records left without negatives (emptied.csv: {borrowing}positives-only where the "
                "shape allows, else their rows are dropped)"
            )
        lines += [_emptied_line(row) for row in self.emptied.head(20).itertuples()]
        if len(self.emptied) > 20:
            lines.append(f"  … and {len(self.emptied) - 20} more")
        if d["n_excluded"]:
            lines.append(f"{display.exclusions_phrase(self.loaded.exclusions)} on reading (exclusions.csv)")
        rows = d.get("rows")
        if rows:
            changed = ", ".join(f"{v} {k}" for k, v in rows["by_change"].items()) or "none changed"
            lines.append(
                f"rows: {rows['read']} read = {rows['written']} written + {rows['excluded_on_read']} excluded on "
                f"reading + {rows['dropped']} dropped − {rows['added']} added; {rows['lost_negatives']} rows lost "
                f"negatives ({changed}; rows.csv)"
            )
        if rows:  # the input's own tables: what the file holds is rows
            lines.append(f"{rows['written']} rows written to {COPY_DIR}/ as {d['output_format']}")
        else:
            lines.append(f"{d['n_records_out']} records written to {COPY_DIR}/ as {d['output_format']}")
        if not d["faithful"]:
            lines.append(f"note: {d['note']}")
        if d.get("input_changed"):
            lines.append(
                f"note: {', '.join(d['input_changed'])} changed on disk while cleaning ran; the copy is of the"
                " version read (its sha256 in clean.json), every row of it accounted for; rerun to clean the new one"
            )
        return "\n".join(lines)

    def save(self, folder: str | Path) -> list[Path]:
        """Write the cleaned copy into ``folder/cleaned/`` (each input table under its own name, in
        its own form and shape; records in memory as one ``<source>.jsonl`` per source with sidecars)
        and ``removed.csv``, ``emptied.csv``, ``review.csv``, ``rows.csv``, ``exclusions.csv``,
        ``clean.json`` next to it; returns the paths written. The folder's completion marker lists
        them (a later clean into the folder removes those it does not write again)."""
        with owned_folder(folder) as out:
            return self._save(out)

    def _save(self, folder: Path) -> list[Path]:
        copy = safe_join(folder, COPY_DIR)
        written: list[Path] = []
        name = self.descriptor.get("file_name")
        if self.tables:
            for t in self.tables:
                r = t.rewritten
                written.append(write_rows(r.columns, r.rows, safe_join(copy, t.name), t.save_form(), t.like, t.split))
                for companion, data in sorted(t.companions.items()):
                    written.append(safe_join(copy, companion))
                    atomic_write_bytes(written[-1], data)
            if self.descriptor.get("input_is_folder"):
                written += write_sidecars(self.loaded, copy)
        elif name:
            path = safe_join(copy, str(name))
            write_records(self.loaded.records, path)
            written = [path]
        else:
            written = write_source_folder(self.loaded, copy)
        for key, frame in (("removed", self.removed), ("emptied", self.emptied), ("review", self.review)):
            written.append(safe_join(folder, FILES[key]))
            atomic_write_text(written[-1], csv_text(frame))
        written.append(safe_join(folder, FILES["rows"]))
        atomic_write_text(written[-1], csv_text(self.rows))
        written.append(safe_join(folder, "exclusions.csv"))
        atomic_write_text(written[-1], csv_text(exclusions_frame(tuple(self.loaded.exclusions))))
        written.append(safe_join(folder, FILES["descriptor"]))
        atomic_write_text(written[-1], canonical_json(dict(self.descriptor)))
        return written


def _emptied_line(row: Any) -> str:
    """One emptied query as a person finds it: the user's own id (or file:line) and the query's text."""
    where = getattr(row, "input_id", "") or f"{row.source}/{row.qid}"
    query = str(getattr(row, "query", "") or "")
    text = query if len(query) <= 70 else query[:69] + "…"
    return f"  emptied: {where} ({row.source}): {text}" if text else f"  emptied: {where} ({row.source})"


def _fill_line(d: Mapping[str, Any]) -> str:
    """The summary's line on what the copy holds: nothing invented, or the fill asked for."""
    keep = f"the first {d['keep']} accepted negatives of each row or record; " if d.get("keep") else ""
    fill = d.get("fill", "none")
    if fill == "none":
        return (
            f"negatives: {keep}none invented — a row left short of its shape is dropped (rows.csv); "
            "clean.fill=repeat|borrow completes it"
        )
    what = {
        "repeat": "refilled from the query's other kept negatives, then repeated",
        "borrow": "refilled, repeated, and a query left with none borrows the next query's",
    }[fill]
    return f"negatives: {keep}clean.fill={fill}: a short row is {what}"


def unchecked_why(checked: Sequence[str]) -> dict[str, str]:
    """Each reason the audit did not check, and why: no encoder ran, or the other score rule was chosen."""
    encoder_ran = bool(ENCODER_REASONS.intersection(checked))
    rule = next((r for r in RULES if r in checked), None)
    out = {}
    for r in REASONS:
        if r in checked:
            continue
        if not encoder_ran and r in ENCODER_REASONS:
            out[r] = "no encoder"
        elif r in RULES and rule is not None:
            out[r] = f"the audit's score rule is {rule}"
        else:
            out[r] = "not in the audit's frame"
    return out
