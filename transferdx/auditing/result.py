"""What :func:`transferdx.audit` returns: the audit as DataFrames, with texts, flags and ``save``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from transferdx.artifacts import owned_folder
from transferdx.auditing.audit import AuditResult
from transferdx.auditing.facts import audit_facts
from transferdx.auditing.legend import legend_lines
from transferdx.auditing.report import exclusions_frame, write_audit
from transferdx.auditing.verdict import verdict_lines, verdict_parts
from transferdx.display import audit_html, audit_markdown, audit_repr, exclusions_phrase
from transferdx.inputs.records import KINDS
from transferdx.inputs.texts import text_column


def _rows(frame: pd.DataFrame, keep: np.ndarray) -> pd.DataFrame:
    """The rows ``keep`` of ``frame``, renumbered, each categorical column with only the categories
    those rows use (so ``value_counts`` on a genuine source's rows lists no control)."""
    return _unused_dropped(frame.loc[keep].reset_index(drop=True))


def _unused_dropped(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` (a copy of some rows) with each categorical column's unused categories dropped."""
    for col in frame.select_dtypes("category").columns:
        frame[col] = frame[col].cat.remove_unused_categories()
    return frame


# whose negatives/suspects: the user's own (genuine), the controls', or every source's (all)
KINDS_OR_ALL = (*KINDS, "all")


@dataclass(frozen=True)
class Audit:
    """One audit: per-source ``profile``, per-record ``records``, per-negative ``negatives`` (with
    ``query`` and ``text`` columns), ``flags``, ``exclusions``; ``save(folder)`` writes the artifacts
    (the CSV files carry ids only, except the suspects files: join them with ``records.jsonl`` on
    ``qid`` and ``neg_id``). ``suspects`` is what ``suspects.csv`` holds and what the verdict counts:
    the user's own (genuine) sources'; ``control_suspects`` is ``control_suspects.csv``, the
    controls' the audit built. ``negatives`` is the genuine sources' too; ``negatives_of(kind)`` /
    ``suspects_of(kind)`` give ``"control"`` or every source's (``"all"``: what ``negatives.csv``
    holds). The texts come from ``result.texts`` (the audit's records; None: no
    text columns). ``input_path``: the input the audit read (a
    path is kept absolute), named by the command the verdict says; None: the name in ``settings``.
    In a notebook it shows the verdict and a compact profile."""

    result: AuditResult
    settings: Mapping[str, Any] = field(default_factory=dict)
    input_path: str | None = None

    def __post_init__(self) -> None:
        if self.input_path is not None and Path(self.input_path).exists():
            object.__setattr__(self, "input_path", str(Path(self.input_path).resolve()))

    @property
    def profile(self) -> pd.DataFrame:
        """One row per source: every statistic with its CI, ``flags`` and ``flag_reasons``."""
        return self.result.profile.to_frame()

    @property
    def records(self) -> pd.DataFrame:
        """One row per record (source, qid): ψ, ρ, η, margin, loss, … of its negatives."""
        return self.result.records

    @property
    def negatives(self) -> pd.DataFrame:
        """One row per negative of the genuine sources (the user's own; the controls':
        :meth:`negatives_of`), with the query's and the negative's text added (categorical: an id
        per row into the table of distinct texts, ``.cat.categories``)."""
        return self.negatives_of("genuine")

    def negatives_of(self, kind: str = "genuine") -> pd.DataFrame:
        """The negatives of the sources of ``kind``: ``genuine`` | ``control`` | ``all``, with texts."""
        full = self.result.negatives
        keep = self._of_kind(full, kind)
        frame = _rows(full, keep)
        if self.result.texts is None or frame.empty:
            return frame
        query, _, text = self.result.texts.of_rows(np.flatnonzero(keep))
        # categorical columns: codes into the distinct texts, so each text is held once however many
        # negatives share it (a plain str column would copy every occurrence)
        frame["query"] = text_column(query)
        frame["text"] = text_column(text)
        return frame

    @property
    def suspects(self) -> pd.DataFrame:
        """One row per suspected false negative (design §3.9: a checked reason holds, or
        ``fn_probability`` ≥ 0.80) of the genuine sources, the user's own: what ``suspects.csv``
        holds and every count of suspects the verdict states. Query, positive and negative texts,
        s(q,p), s(q,n), s(p0,n), ``fn_probability`` and the reasons, most probable first."""
        return self.suspects_of("genuine")

    @property
    def control_suspects(self) -> pd.DataFrame:
        """The suspects of the controls the audit built (``control_suspects.csv``), as :attr:`suspects`."""
        return self.suspects_of("control")

    def suspects_of(self, kind: str = "genuine") -> pd.DataFrame:
        """The suspects of the sources of ``kind``: ``genuine`` (:attr:`suspects`) | ``control``
        (:attr:`control_suspects`) | ``all``, in the same order."""
        full = self.result.suspect_values
        return _unused_dropped(self.result.suspect_rows(np.flatnonzero(self._of_kind(full, kind))))

    def _n_suspects(self, kind: str) -> int:
        """How many rows :meth:`suspects_of` gives (no text read)."""
        return int(self._of_kind(self.result.suspect_values, kind).sum())

    def _of_kind(self, frame: pd.DataFrame, kind: str) -> np.ndarray:
        """Which rows of a per-negative ``frame`` (``source``, ``qid``) belong to a record of ``kind``."""
        if kind not in KINDS_OR_ALL:
            raise ValueError(f"kind must be one of {KINDS_OR_ALL}, got {kind!r}")
        if kind == "all":
            return np.ones(len(frame), dtype=bool)
        if "kind" in frame.columns:
            return (frame["kind"] == kind).to_numpy(dtype=bool)
        recs = self.result.records
        of = dict(zip(zip(recs["source"], recs["qid"], strict=True), recs["kind"], strict=True))
        keys = zip(frame["source"], frame["qid"], strict=True)
        return np.fromiter((of.get(k) == kind for k in keys), dtype=bool, count=len(frame))

    @property
    def fn_evaluation(self) -> Mapping[str, Any]:
        """The suspicion scored against deep judgments (TREC-DL with ``labels=single``): base rate,
        the (α, δ) grid with precision/recall/F1 and CIs over queries, the best cell, the combined
        detector out of fold; ``{"status": "not_measured", "reason": ...}`` elsewhere."""
        return self.result.fn_evaluation

    @property
    def fn_grid(self) -> pd.DataFrame:
        """``fn_evaluation``'s (α, δ) grid as a frame (empty when not measured)."""
        return pd.DataFrame(self.result.fn_evaluation.get("grid", []))

    @property
    def flags(self) -> pd.DataFrame:
        """Flagged sources only: source, kind, flags, reasons."""
        frame = self.profile
        columns = [c for c in ("source", "kind", "flags", "flag_reasons") if c in frame.columns]
        if "flags" not in frame.columns:
            return frame.iloc[0:0][columns]
        return frame.loc[frame["flags"].fillna("").astype(str) != "", columns].reset_index(drop=True)

    @property
    def exclusions(self) -> pd.DataFrame:
        """Every input item left out, with file, line, field and reason."""
        return exclusions_frame(self.result.exclusions)

    @property
    def thresholds(self) -> Mapping[str, Any]:
        return self.result.profile.thresholds

    @property
    def catch_rate(self) -> Mapping[str, Any]:
        """Which controls each flag catches, and whether any genuine source is flagged."""
        return self.result.profile.catch_rate

    @property
    def descriptors(self) -> Mapping[str, Any]:
        """Per source: how its negatives were made (negative-set descriptor)."""
        return self.result.profile.descriptors

    def verdict(self, written: bool = False) -> str:
        """The verdict in plain words (Markdown; also the top of report.md): the decision, one line per
        genuine source (its action and the number behind it), then the evidence, one fact a line, and
        what holds for every source, once. ``written``: the artifacts were saved, so it points to
        suspects.csv; else to the ``.suspects`` attribute. Its command names :attr:`input_path`."""
        return "\n".join(verdict_lines(*self._verdict_args(), **self._verdict_kwargs(written)))

    def screen(self, report: str | Path | None = None) -> str:
        """The first screen ``transferdx-audit`` prints: the decision, a blank line, the path of the
        report (``report``; none when None), then the evidence: the verdict as plain text."""
        decision, evidence = verdict_parts(*self._verdict_args(), **self._verdict_kwargs(report is not None))
        where = [f"report: {Path(report).resolve()}", ""] if report is not None else []
        lines = [*decision, "", *where, *evidence]
        return "\n".join(line.replace("**", "") for line in lines).rstrip("\n")

    def _verdict_args(self) -> tuple[Any, Any, Any]:
        profile = self.result.profile
        return profile.rows, profile.catch_rate, self.settings

    def _verdict_kwargs(self, written: bool) -> dict[str, Any]:
        return {"written": written, "facts": audit_facts(self.result), "input_path": self.input_path}

    def legend(self) -> str:
        """What each direction means (the verdict's last section; the command line prints it first)."""
        return "\n".join(legend_lines(self.result.profile.rows)).strip("\n")

    def summary(self) -> str:
        """The profile as a fixed-width text table (what ``transferdx-audit`` prints) and, when the
        input had any, the exclusions, the expected ones named (queries with a positive and no
        negative, negatives merged across a query's rows)."""
        text = self.result.summary()
        if self.result.exclusions:
            text += f"\n{exclusions_phrase(self.result.exclusions)} (exclusions.csv; .exclusions)"
        return text

    def save(self, folder: str | Path) -> dict[str, Path]:
        """Write profile.csv/json, records.csv, negatives.csv, exclusions.csv, suspects.csv (the
        genuine sources'), control_suspects.csv, report.md and plots (report.md names the input by
        the name in ``settings``, so the same data gives the same bytes wherever it lives)."""
        with owned_folder(folder) as out:
            return write_audit(self.result, out, self.settings)

    def __repr__(self) -> str:  # a few lines, not the frames
        return audit_repr(self.profile, self._n_suspects("genuine"))

    def _repr_markdown_(self) -> str:  # notebooks show the verdict and a compact profile
        n_own, n_control = self._n_suspects("genuine"), self._n_suspects("control")
        return audit_markdown(self.verdict(), self.profile, n_own, n_control, len(self.result.exclusions))

    def _repr_html_(self) -> str:  # what notebooks prefer: the same display, rendered as report.html renders
        n_own, n_control = self._n_suspects("genuine"), self._n_suspects("control")
        return audit_html(self.verdict(), self.profile, n_own, n_control, len(self.result.exclusions))
