"""The facts the verdict states, each with where it was counted or measured: per source, what the
audit counted (:class:`SourceFacts`, from the audit's one suspects table); what the package
measured elsewhere (``evidence.json``, written by experiments/ship_evidence.py: ψ's and cleaning's
effect on training, the rules' precision on deep judgments, files mined the way users mine), in
short lines the verdict states once per run. What each diagnostic means is in
:mod:`transferdx.auditing.legend`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from transferdx.auditing.legend import evidence, interval, signed
from transferdx.diagnostics.fn_combined import cleaning_cut
from transferdx.diagnostics.miner import MinerFacts, source_miner_facts
from transferdx.diagnostics.suspicion import (
    ACT_REASONS,
    PROBABILITY_REASON,
    SUSPECT_REASONS,
    MarginMining,
    acted_on,
    margin_mining,
)

if TYPE_CHECKING:
    from transferdx.auditing.audit import AuditResult


def _change(arm: Mapping[str, Any]) -> str:
    """``+0.004 [−0.010, +0.018]``, with ``(a gain)`` / ``(a loss)`` when the interval excludes 0."""
    low, high = arm["interval"]
    word = " (a gain)" if low > 0 else " (a loss)" if high < 0 else ""
    return f"{arm['vs_raw']:+.3f} [{low:+.3f}, {high:+.3f}]{word}"


@dataclass(frozen=True)
class SourceFacts:
    """What the bottom line counts per source, every count of suspects from the audit's one suspects
    table: negatives, suspects, those default cleaning removes (``n_act``: a reason of
    :data:`~transferdx.diagnostics.suspicion.ACT_REASONS`), copies and near-copies of a positive,
    those with ``fn_probability`` ≥ :data:`MIN_PROBABILITY` (``n_probable``), the positive-aware
    hits (None where a reason was not checked), a mining margin, whether it is a cleaned copy, and the
    miner's scores (``miner``: their agreement with the audit's encoder and sentence-transformers'
    filters on them, :class:`~transferdx.diagnostics.miner.MinerFacts`)."""

    n_negatives: int = 0
    n_suspects: int = 0
    n_act: int = 0
    n_copies: int = 0
    n_near_copies: int | None = None
    n_probable: int | None = None
    n_positive_aware: int | None = None
    margin: MarginMining | None = None
    cleaned: Mapping[str, Any] | None = None
    review_expected: float | None = None  # mean fn_probability of the suspects left for review
    mean_probability: float | None = None  # mean fn_probability of all its negatives (None: not scored)
    expected_suspects: float | None = None  # Σ fn_probability over its suspects: how many are expected false
    expected_review: float | None = None  # Σ fn_probability over the suspects default cleaning leaves in place
    queries: int = 0  # its records (queries)
    queries_kept: int = 0  # those that keep a negative after default cleaning: the queries the clean keeps
    rows_read: int | None = None  # the input's rows read into its records (None: not recorded)
    # the miner's scores: their agreement with the audit's encoder and sentence-transformers' filters on
    # them (None: neither the file nor the audit's encoder scored the source)
    miner: MinerFacts | None = None

    @property
    def n_review(self) -> int:
        """The suspects default cleaning leaves in place: for review."""
        return self.n_suspects - self.n_act


def _unchecked(negatives: pd.DataFrame, reason: str) -> np.ndarray | None:
    """Per negative, whether the audit left ``reason`` unchecked (NA); None when it has no column."""
    column = f"fn_{reason}"
    return negatives[column].isna().to_numpy(dtype=bool) if column in negatives else None


def _checked(unchecked: np.ndarray | None, rows: np.ndarray) -> bool:
    """Whether the audit checked the reason of ``unchecked`` (:func:`_unchecked`) on ``rows``."""
    return unchecked is not None and not unchecked[rows].any()


def _held(suspects: pd.DataFrame) -> dict[str, np.ndarray]:
    """Reason → which rows of ``suspects`` hold it: each distinct ``reasons`` text parsed once, the
    rows reached through the codes of a categorical (no string per suspect)."""
    if "reasons" not in suspects:
        return {r: np.zeros(0, dtype=bool) for r in SUSPECT_REASONS}
    reasons = suspects["reasons"].astype("category")
    codes = reasons.cat.codes.to_numpy()  # -1: missing, read as no reason
    sets = [set(str(text).split(";")) for text in reasons.cat.categories] + [set()]
    return {r: np.asarray([r in x for x in sets], dtype=bool)[codes] for r in SUSPECT_REASONS}


def _mean(values: np.ndarray) -> float | None:
    return float(values.mean()) if len(values) and not np.isnan(values).any() else None


def _sum(values: np.ndarray) -> float | None:
    """Σ of ``values`` (0 for none), None where one is not scored."""
    return None if np.isnan(values).any() else float(values.sum())


def source_facts(
    suspects: pd.DataFrame,
    negatives: pd.DataFrame,
    records: pd.DataFrame,
    descriptors: Mapping[str, Any] | None = None,
    alpha: float = 0.95,
) -> dict[str, SourceFacts]:
    """:class:`SourceFacts` per source. Every count of suspects is a count of rows of ``suspects``
    (the audit's one table: ``source``, ``reasons``, ``fn_probability``); ``negatives`` and
    ``records`` (the audit's order, each record owning ``n_negatives`` consecutive rows of
    ``negatives``) give the number of negatives, which reasons were checked and the mining margin."""
    out: dict[str, SourceFacts] = {}
    if "source" not in records or not len(records):
        return out
    owner = np.repeat(np.arange(len(records)), records["n_negatives"].to_numpy(dtype=np.int64))
    neg_source = records["source"].to_numpy()[owner] if len(owner) else np.asarray([], dtype=object)
    scored = "s_qp" in records and "s_qn" in negatives
    prob = (
        negatives["fn_probability"].to_numpy(dtype=np.float64)
        if "fn_probability" in negatives
        else np.full(len(negatives), np.nan)
    )
    held = _held(suspects)
    removed = acted_on(negatives)
    left = np.bincount(owner[~removed], minlength=len(records)) if len(owner) else np.zeros(len(records), dtype=int)
    rec_source = records["source"].to_numpy()
    s_qn = negatives["s_qn"].to_numpy(dtype=np.float64) if scored else None
    near, aware = _unchecked(negatives, "near_duplicate_positive"), _unchecked(negatives, "positive_aware")
    sus_source = suspects["source"].to_numpy() if "source" in suspects else np.asarray([], dtype=object)
    sus_prob = (
        suspects["fn_probability"].to_numpy(dtype=np.float64)
        if "fn_probability" in suspects
        else np.full(len(suspects), np.nan)
    )
    for name in dict.fromkeys(records["source"]):
        rows = np.flatnonzero(neg_source == name)  # the source's negatives: read column by column, not copied
        mine = np.flatnonzero(sus_source == name)
        has = {r: hit[mine] for r, hit in held.items()}
        act = np.zeros(len(mine), dtype=bool)
        for reason in ACT_REASONS:
            act |= has[reason]
        p = sus_prob[mine]
        probable = int(has[PROBABILITY_REASON].sum()) if scored and not np.isnan(prob[rows]).any() else None
        margin = None
        if s_qn is not None and len(rows):
            s_qp = records["s_qp"].to_numpy(dtype=np.float64)[owner[rows]]
            margin = margin_mining(s_qp, s_qn[rows], alpha)
        described = (descriptors or {}).get(name, {})
        cleaned = described.get("cleaned")
        read = (described.get("rows") or {}).get("read")
        mine_records = rec_source == name
        miner = _miner(negatives, records, owner, rows, mine_records, prob if scored else None)
        out[str(name)] = SourceFacts(
            n_negatives=len(rows),
            n_suspects=len(mine),
            n_act=int(act.sum()),
            n_copies=int(has["duplicate_positive"].sum()),
            n_near_copies=int(has["near_duplicate_positive"].sum()) if _checked(near, rows) else None,
            n_probable=probable,
            n_positive_aware=int(has["positive_aware"].sum()) if _checked(aware, rows) else None,
            margin=margin,
            cleaned=cleaned if isinstance(cleaned, Mapping) else None,
            review_expected=_mean(p[~act]),
            mean_probability=_mean(prob[rows]) if scored else None,
            expected_suspects=_sum(p),
            expected_review=_sum(p[~act]),
            queries=int(mine_records.sum()),
            queries_kept=int((left[mine_records] > 0).sum()),
            rows_read=int(read) if isinstance(read, int) else None,
            miner=miner,
        )
    return out


def _miner(
    negatives: pd.DataFrame,
    records: pd.DataFrame,
    owner: np.ndarray,
    rows: np.ndarray,
    mine_records: np.ndarray,
    probability: np.ndarray | None,
) -> MinerFacts | None:
    """The source's :class:`~transferdx.diagnostics.miner.MinerFacts` (its negatives ``rows``, its
    records ``mine_records``): the miner's scores where the file carries them, the audit's s(q,n) and
    s(q,p0) standing in otherwise; ``probability`` None where the encoder did not score."""
    if "miner_score" not in negatives:
        return None
    recs = np.flatnonzero(mine_records)
    local = np.searchsorted(recs, owner[rows])  # each negative's query among the source's records
    scored = "s_qn" in negatives and "s_qp" in records
    return source_miner_facts(
        negatives["miner_score"].to_numpy(dtype=np.float64)[rows],
        negatives["miner_positive_score"].to_numpy(dtype=np.float64)[rows],
        negatives["s_qn"].to_numpy(dtype=np.float64)[rows] if scored else None,
        records["s_qp"].to_numpy(dtype=np.float64)[owner[rows]] if scored else None,
        local,
        probability[rows] if probability is not None else None,
        len(recs),
    )


def audit_facts(result: AuditResult) -> dict[str, SourceFacts]:
    """:func:`source_facts` of an :class:`~transferdx.auditing.audit.AuditResult`."""
    alpha = result.suspicion.get("alpha")
    alpha = float(alpha) if isinstance(alpha, (int, float)) else 0.95
    return source_facts(result.suspect_values, result.negatives, result.records, result.profile.descriptors, alpha)


def precision_lines(rule: str, label: str) -> list[str]:
    """One line per year of a rule's measured precision on deep judgments (:func:`evidence`), each
    with its base rate, size and encoder: what the verdict states once per run."""
    e = evidence()["rule_precision"]
    out = []
    for year, m in e["rules"].get(rule, {}).items():
        if m is None:
            continue
        y = e["years"][year]
        out.append(
            f"{label}: precision {m['precision']:.3f} [{m['interval'][0]:.3f}, {m['interval'][1]:.3f}] on {y['name']}"
            f" deep judgments (base rate {y['base_rate']:.3f}; {y['n_negatives']:,} negatives of {y['n_queries']}"
            f" queries; {e['encoder']})"
        )
    return out or [f"{label}: not measured on deep judgments (no instance in TREC-DL19 or DL21)"]


def calibration_lines() -> list[str]:
    """Where ``fn_probability`` was calibrated and how it held on files mined the way users mine."""
    m = mined()
    return [
        f"fn_probability is calibrated at TREC-DL's share of false negatives, not moved to your file: ECE"
        f" {span_text(m['ece'])} on {m['n_files']} files mined the way users mine ({m['where']})",
        f"on those files the share of false negatives was {span_text(m['share'])} by regime; the audit's estimate"
        f" of it covered it on {m['em_covered']} of {m['em_estimated']} files and fell on 0 or 1 on {m['em_boundary']}",
    ]


def cleaning_lines() -> list[str]:
    """What following the default cleaning did to trained retrievers one line per
    miner."""
    e = evidence()["cleaning"]
    first = next(iter(e["runs"].values()))
    out = [
        "default cleaning's effect on trained retrievers, measured (TREC-DL19 + DL21 files,"
        f" {e['k']} negatives per miner, {e['backbone']}, {e['seeds']} seeds, nDCG@10 on {first['n_queries']}"
        " held-out queries):"
    ]
    for r in e["runs"].values():
        arms = r["arms"]
        out.append(
            f"{r['label']} files: default clean {_change(arms['tdx_default'])}; all judged false negatives removed"
            f" {_change(arms['oracle'])}; detectable ±{arms['tdx_default']['mdd']:.3f}"
            + ("; unmeasured (no gain over untrained)" if r["raw_vs_frozen_interval"][0] <= 0 else "")
        )
    return out


def psi_lines() -> list[str]:
    """ψ's rank agreement with transfer in the package's own validation, in short lines."""
    e = evidence()["psi_rank_agreement"]
    return [
        f"ψ's rank agreement with transfer in the package's validation ({e['backbone']}, {e['n_sources']} sources"
        f" trained on {e['trained_on']}): {signed(e['spearman_all'])}{interval(e['interval_all'])} over all sources",
        f"that agreement is {e['why']}; among its {e['n_genuine']} genuine sources"
        f" {signed(e['spearman_genuine'])}{interval(e['interval_genuine'])}: so ψ's order describes, not"
        " predicts",
    ]


def cut_precision_text() -> str:
    """The cleaning cut's measured precision, out of year, and where it was measured."""
    cut = cleaning_cut()
    return (
        f"precision {cut['precision']:.3f} [{cut['precision_ci_low']:.3f}, {cut['precision_ci_high']:.3f}] out of"
        " year on TREC-DL (each year scored by the detector fitted on the other)"
    )


def mined() -> dict[str, Any]:
    """What the package measured on files mined the way users mine (``evidence.json`` →
    ``mined_share``, from ``experiments/fn_mined.py``)."""
    return dict(evidence()["mined_share"])


def span_text(bounds: Sequence[float]) -> str:
    return f"{bounds[0]:.2f}" if bounds[0] == bounds[1] else f"{bounds[0]:.2f}–{bounds[1]:.2f}"


def mined_precision() -> str:
    """The default clean's measured precision on files mined the way users mine, by regime."""
    m = mined()
    return (
        f"right {span_text(m['clean_precision'])} of the time on {m['n_files']} files mined the way users mine"
        f" ({m['where']}, by regime; {span_text(m['own_margin']['clean_precision'])} where the audit's own encoder"
        " mined with a margin)"
    )
