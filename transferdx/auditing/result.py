"""What :func:`transferdx.audit` returns: the audit as DataFrames, with texts, flags and ``save``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from transferdx.auditing.core import AuditResult
from transferdx.auditing.report import exclusions_frame, write_audit
from transferdx.auditing.verdict import verdict_lines
from transferdx.inputs.records import Record
from transferdx.inputs.texts import text_column


@dataclass(frozen=True)
class Audit:
    """One audit: per-source ``profile``, per-record ``records``, per-negative ``negatives`` (with
    ``query`` and ``text`` columns), ``flags``, ``exclusions``; ``save(folder)`` writes the artifacts
    (the CSV files carry ids only, except ``suspects.csv``: join them with ``records.jsonl`` on ``qid``
    and ``neg_id``)."""

    result: AuditResult
    settings: Mapping[str, Any] = field(default_factory=dict)
    texts: Mapping[tuple[str, str], Record] = field(default_factory=dict, repr=False)

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
        """One row per negative, with the query's and the negative's text added (categorical: an id
        per row into the table of distinct texts, ``.cat.categories``)."""
        frame = self.result.negatives.copy()
        if not self.texts or frame.empty:
            return frame
        keys = list(zip(frame["source"], frame["qid"], strict=True))
        # categorical columns: codes into the distinct texts, so each text is held once however many
        # negatives share it (a plain str column would copy every occurrence)
        frame["query"] = text_column(self.texts[k].query if k in self.texts else None for k in keys)
        frame["text"] = text_column(
            self.texts[k].negatives[i].text if k in self.texts else None
            for k, i in zip(keys, frame["neg_index"], strict=True)
        )
        return frame

    @property
    def suspects(self) -> pd.DataFrame:
        """One row per suspected false negative (design §3.9) with query, positive and negative
        texts, s(q,p), s(q,n), s(p0,n) and the reasons, most suspicious first (``suspects.csv``)."""
        return self.result.suspects

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

    def verdict(self) -> str:
        """The verdict in plain words (Markdown): flags, suspected false negatives, where each source
        sits against the controls, the genuine sources by mean ψ (also the top of report.md)."""
        return "\n".join(verdict_lines(self.result.profile.rows, self.result.profile.catch_rate, self.settings))

    def summary(self) -> str:
        """The profile as a fixed-width text table (what ``transferdx-audit`` prints)."""
        return self.result.summary()

    def save(self, folder: str | Path) -> dict[str, Path]:
        """Write profile.csv/json, records.csv, negatives.csv, exclusions.csv, suspects.csv, report.md
        and plots."""
        return write_audit(self.result, Path(folder), self.settings)

    def _repr_html_(self) -> str:  # notebooks show the profile
        return str(self.profile._repr_html_())
