"""Fix suspected false negatives (design §3.9): a copy of the records with the negatives the audit
suspects removed, or moved to the positives (``relabel``, as RLHN does).

The core, :func:`clean_records`, is pure: records and the audit's per-negative frame (``source``,
``qid``, ``neg_index``, ``fn_<reason>``, ``fn_reasons``) in; cleaned records, the removed table and
the emptied records out. The verb, :func:`transferdx.pipeline.clean`, loads, audits when no audit is
given, cleans and, with ``out``, writes the copy (:meth:`CleanResult.save`).

``relabel`` moves a negative to the positives (after the existing ones, so p0 stays the reference
positive; ``relation`` becomes :data:`RELABELED_RELATION`) only when one of the reasons that say it
answers the query holds (:data:`RELABEL_REASONS`) and its normalised text is not already a positive.
Otherwise it is removed: a copy of a positive (``duplicate_positive``) or a repeat of an earlier
negative (``duplicate_negative``) adds nothing as a positive. A negative left with the normalised
text of a relabeled one would copy a positive, so it is removed too (reason ``duplicate_positive``).

A record left without negatives cannot be written (the records format needs one): it is left out of
the copy and listed in ``emptied.csv``, counted in the summary and in ``clean.json``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from transferdx.artifacts import atomic_write_text, canonical_json, csv_text, safe_join
from transferdx.auditing.report import exclusions_frame
from transferdx.auditing.result import Audit
from transferdx.diagnostics.suspicion import REASONS, normalise_text
from transferdx.inputs.records import LoadResult, Passage, Record
from transferdx.inputs.transferdx_records import write_records, write_source_folder

ACTIONS = ("remove", "relabel")
RELABELED_RELATION = "relabeled_false_negative"
# the reasons that say a negative answers the query (the others say it copies a passage)
RELABEL_REASONS = frozenset({"positive_aware", "combined", "near_duplicate_positive"})
REMOVED_COLUMNS = ["source", "qid", "neg_index", "neg_id", "negative", "reasons", "action"]
EMPTIED_COLUMNS = ["source", "qid", "n_negatives", "n_removed", "n_relabeled"]
COPY_DIR = "cleaned"  # the copy, apart from the tables (a folder is read whole, CSV included)
FILES = {"removed": "removed.csv", "emptied": "emptied.csv", "descriptor": "clean.json"}


def reasons_of(suspicion: pd.DataFrame, reasons: Sequence[str] | None) -> tuple[str, ...]:
    """The reasons to act on (all that were checked when ``reasons`` is None), validated: a reason
    the audit could not check (an encoder reason of a lexical audit) is an error, never a no-op."""
    checked = [r for r in REASONS if f"fn_{r}" in suspicion.columns and not suspicion[f"fn_{r}"].isna().any()]
    if reasons is None:
        return tuple(checked)
    unknown = [r for r in reasons if r not in REASONS]
    if unknown:
        raise ValueError(f"unknown suspicion reason(s) {unknown}; valid: {list(REASONS)}")
    unchecked = [r for r in reasons if r not in checked]
    if unchecked:
        raise ValueError(
            f"reason(s) {unchecked} were not checked by the audit (they need the encoder); checked: {checked}"
        )
    return tuple(r for r in REASONS if r in reasons)


def clean_records(
    records: Sequence[Record],
    suspicion: pd.DataFrame,
    *,
    reasons: Sequence[str] | None = None,
    action: str = "remove",
) -> tuple[list[Record], pd.DataFrame, pd.DataFrame]:
    """(cleaned records in input order, removed table, emptied table). ``suspicion`` has a row per
    negative of every record (the audit's ``negatives`` frame or ``negatives.csv``); ``reasons``:
    the reasons to act on (None: every reason the audit checked). Records without a negative left
    are not in the cleaned list; they are the rows of the emptied table."""
    if action not in ACTIONS:
        raise ValueError(f"clean action must be one of {ACTIONS}, got {action!r}")
    chosen = set(reasons_of(suspicion, reasons))
    fn_reasons = suspicion["fn_reasons"].fillna("").astype(str)
    hits: dict[tuple[str, str], dict[int, list[str]]] = {}
    seen: dict[tuple[str, str], int] = {}
    for src, qid, k, joined in zip(
        suspicion["source"], suspicion["qid"], suspicion["neg_index"], fn_reasons, strict=True
    ):
        key = (str(src), str(qid))
        seen[key] = seen.get(key, 0) + 1
        held = [r for r in joined.split(";") if r in chosen]
        if held:
            hits.setdefault(key, {})[int(k)] = held
    cleaned: list[Record] = []
    removed: list[tuple[Any, ...]] = []
    emptied: list[tuple[Any, ...]] = []
    for rec in records:
        key = (rec.source, rec.qid)
        if seen.get(key) != len(rec.negatives):
            raise ValueError(
                f"the audit does not cover record {rec.source}/{rec.qid} ({seen.get(key, 0)} of "
                f"{len(rec.negatives)} negatives): audit the same records (sample_fraction=1.0)"
            )
        new, rows = _clean_one(rec, hits.get(key, {}), action)
        removed.extend(rows)
        if new.negatives:
            cleaned.append(new)
        else:
            n_relabeled = sum(1 for r in rows if r[-1] == "relabeled")
            emptied.append((rec.source, rec.qid, len(rec.negatives), len(rows) - n_relabeled, n_relabeled))
    return cleaned, pd.DataFrame(removed, columns=REMOVED_COLUMNS), pd.DataFrame(emptied, columns=EMPTIED_COLUMNS)


def _clean_one(rec: Record, held: Mapping[int, list[str]], action: str) -> tuple[Record, list[tuple[Any, ...]]]:
    """One record: its negatives that hold a chosen reason removed or relabeled, in order."""
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
        if action == "relabel" and RELABEL_REASONS.intersection(reasons) and text not in known:
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
class CleanResult:
    """What :func:`transferdx.pipeline.clean` did: the cleaned records (``loaded``), the ``removed`` and ``emptied``
    tables, and ``descriptor`` (what ``clean.json`` holds: action, reasons, counts, output format
    and whether it is the input's own)."""

    loaded: LoadResult
    removed: pd.DataFrame
    emptied: pd.DataFrame
    descriptor: Mapping[str, Any]
    audit: Audit | None = field(default=None, repr=False)

    @property
    def records(self) -> list[Record]:
        return self.loaded.records

    def summary(self) -> str:
        d = self.descriptor
        unchecked = [r for r in REASONS if r not in d["reasons_checked"]]
        lines = [
            f"{d['action']} on {', '.join(d['reasons']) or '(no reason)'}: {d['n_removed']} negatives removed, "
            f"{d['n_relabeled']} relabeled as positives, of {d['n_negatives_in']} in {d['n_records_in']} records",
            *([f"not checked (no encoder): {', '.join(unchecked)}"] if unchecked else []),
            f"{d['n_emptied']} records left without negatives (not written; listed in emptied.csv)",
        ]
        lines += [f"  emptied: {row.source}/{row.qid}" for row in self.emptied.head(20).itertuples()]
        if len(self.emptied) > 20:
            lines.append(f"  … and {len(self.emptied) - 20} more")
        if d["n_excluded"]:
            lines.append(f"{d['n_excluded']} input items excluded on reading (exclusions.csv)")
        lines.append(f"{d['n_records_out']} records written to {COPY_DIR}/ as {d['output_format']}")
        if not d["faithful"]:
            lines.append(f"note: {d['note']}")
        return "\n".join(lines)

    def save(self, folder: str | Path) -> list[Path]:
        """Write the cleaned copy into ``folder/cleaned/`` (a records file named as the input's, or
        one ``<source>.jsonl`` per source with sidecars: what ``transferdx-audit input=`` reads) and
        ``removed.csv``, ``emptied.csv``, ``exclusions.csv``, ``clean.json`` next to it; returns the
        paths written."""
        folder = Path(folder)
        copy = safe_join(folder, COPY_DIR)
        name = self.descriptor.get("file_name")
        if name:
            path = safe_join(copy, str(name))
            write_records(self.loaded.records, path)
            written = [path]
        else:
            written = write_source_folder(self.loaded, copy)
        for key, frame in (("removed", self.removed), ("emptied", self.emptied)):
            written.append(safe_join(folder, FILES[key]))
            atomic_write_text(written[-1], csv_text(frame))
        written.append(safe_join(folder, "exclusions.csv"))
        atomic_write_text(written[-1], csv_text(exclusions_frame(tuple(self.loaded.exclusions))))
        written.append(safe_join(folder, FILES["descriptor"]))
        atomic_write_text(written[-1], canonical_json(dict(self.descriptor)))
        return written
