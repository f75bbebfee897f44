"""What a clean returns (:class:`CleanResult`): the cleaned records, the tables a person reads,
the copy in the input's shape, its summary — and :meth:`CleanResult.save`, the one place a clean
writes files."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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
from transferdx.inputs.records import LoadResult, Record
from transferdx.inputs.transferdx_records import write_records, write_source_folder
from transferdx.inputs.writing import RELABEL_UNWRITTEN, write_rows, write_sidecars
from transferdx.pipeline.cleaning.core import COPY_DIR, FILES, REVIEW_COLUMNS, ROWS_COLUMNS
from transferdx.pipeline.cleaning.plan import CopyTable


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
    """The summary's line on what the copy holds: the fill used (``repeat`` by default: how many rows
    and slots it filled), or none."""
    keep = f"the first {d['keep']} accepted negatives of each row or record; " if d.get("keep") else ""
    fill = d.get("fill", "none")
    if fill == "none":
        return (
            f"negatives: {keep}clean.fill=none — a row left short of its shape is dropped (rows.csv); "
            "the default, clean.fill=repeat, fills it with its own"
        )
    rows = d.get("rows") or {}
    filled = ""
    if "filled_slots" in rows:
        filled = (
            f": {rows['filled_rows']} rows filled, {rows['filled_slots']} slots (each slot holds one of its row's own "
            "negatives again; a re-read of the copy reads each once)"
        )
    what = {
        "repeat": "a row short of its shape takes its query's next accepted negatives, then its own again in order",
        "borrow": "as repeat, and a query left with none borrows the next query's negatives",
    }[fill]
    default = ", the default" if fill == "repeat" else ""
    return f"negatives: {keep}clean.fill={fill}{default} — none invented; {what}{filled}"
