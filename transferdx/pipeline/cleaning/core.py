"""Which negatives a clean acts on, and the cleaned queries (design §3.9): pure — records and the
audit's per-negative frame in, one :class:`~transferdx.inputs.writing.CleanedQuery` per record and
the removed, emptied and review tables out. Nothing here reads or writes a file (the verb:
:func:`transferdx.pipeline.clean`; the copy's plan: :mod:`.plan`; the files: :mod:`.result`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from transferdx.diagnostics.suspicion import ENCODER_REASONS, REASONS, RULES, normalise_text
from transferdx.inputs.records import Passage, Record, query_id, text_id
from transferdx.inputs.writing import BORROWED_RELATION, DEFAULT_FILL, FILLS, CleanedQuery

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
    fill: str = DEFAULT_FILL,
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
