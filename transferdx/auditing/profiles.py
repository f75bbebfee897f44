"""Per-record diagnostics → the per-source audit profile, with percentile bootstrap CIs and flags.

Every source statistic is a ratio of per-record sums, stat = Σ_i num_i / Σ_i den_i, so means over
records (den = 1 where the value is defined) and shares over negatives (den = K_i) share one
bootstrap: records are resampled with replacement B times (seeded per source), and each resample's
record counts give every statistic at once. CIs are the (α/2, 1 − α/2) percentiles. The streams,
draws and percentiles are :mod:`transferdx.resampling`'s; the statistics (ratios of sums, margin
quantiles) are this module's.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from transferdx.inputs.records import Exclusion
from transferdx.resampling import (
    bootstrap_rng,
    check_bootstrap,
    collect,
    percentile_ci,
    resample_counts,
    resample_indices,
)

# The profile's column contract: later versions add columns, never rename these.
PROFILE_COLUMNS = [
    "source",
    "kind",
    "n_records",
    "n_negatives",
    "psi_mean",
    "psi_ci_low",
    "psi_ci_high",
    "coverage_mean",
    "n_psi_undefined",
]

SEMANTIC_COLUMNS = [
    "rho_mean",
    "eta_mean",
    "inversion_rate",
    "margin_mean",
    "margin_median",
    "margin_p05",
    "margin_p10",
    "margin_lt0",
    "margin_eq0",
    "margin_gt0",
    "h_mean",
    "loss_mean",
    "energy_mean",
    "band_inverted",
    "band_hard",
    "band_medium",
    "band_easy",
    "bucket_rho_lt_05",
    "bucket_eta_le_025",
    "bucket_c_ge_05",
    "composite_logdet",
    "composite_trace",
]


MEAN_STATS = [  # (profile column, CI prefix, label)
    ("rho_mean", "rho", "ρ"),
    ("eta_mean", "eta", "η"),
    ("psi_mean", "psi", "ψ"),
    ("inversion_rate", "inversion_rate", "inversion"),
    ("margin_mean", "margin", "margin"),
    ("h_mean", "h", "h"),
    ("loss_mean", "loss", "loss"),
    ("energy_mean", "energy", "energy"),
]


@dataclass(frozen=True)
class Stat:
    """A source statistic Σ num / Σ den over records; ``den=None`` means 1 per record with a defined
    ``num``. CI columns are ``<ci>_ci_low`` / ``<ci>_ci_high``."""

    name: str
    num: str
    den: str | None = None
    ci: str = ""

    @property
    def ci_prefix(self) -> str:
        return self.ci or (self.name[: -len("_mean")] if self.name.endswith("_mean") else self.name)


LEXICAL_STATS = (Stat("psi_mean", "psi"),)
SEMANTIC_STATS = (
    Stat("rho_mean", "rho"),
    Stat("eta_mean", "eta"),
    Stat("inversion_rate", "inversion"),
    Stat("margin_mean", "margin"),
    Stat("margin_lt0", "margin_lt0"),
    Stat("margin_eq0", "margin_eq0"),
    Stat("margin_gt0", "margin_gt0"),
    Stat("h_mean", "hardness"),
    Stat("loss_mean", "loss"),
    Stat("energy_mean", "energy"),
    Stat("band_inverted", "n_band_inverted", "n_negatives"),
    Stat("band_hard", "n_band_hard", "n_negatives"),
    Stat("band_medium", "n_band_medium", "n_negatives"),
    Stat("band_easy", "n_band_easy", "n_negatives"),
    Stat("bucket_rho_lt_05", "n_bucket_rho_lt_05", "n_negatives"),
    Stat("bucket_eta_le_025", "n_bucket_eta_le_025", "n_negatives"),
    Stat("bucket_c_ge_05", "n_bucket_c_ge_05", "n_psi_defined"),
)
# §3.9 false-negative suspicion: shares of negatives (the per-record counts come from the audit; a
# reason that was not checked, e.g. an encoder reason in a lexical audit, has NaN counts → NaN rate).
SUSPICION_STATS = (
    Stat("fn_suspect_rate", "n_fn_suspect", "n_negatives"),
    Stat("duplicate_positive_rate", "n_fn_duplicate_positive", "n_negatives"),
    Stat("duplicate_negative_rate", "n_fn_duplicate_negative", "n_negatives"),
    Stat("positive_aware_rate", "n_fn_positive_aware", "n_negatives"),
    Stat("combined_rate", "n_fn_combined", "n_negatives"),
    Stat("near_duplicate_positive_rate", "n_fn_near_duplicate_positive", "n_negatives"),
)
SUSPICION_COLUMNS = [s.name for s in SUSPICION_STATS]
# §3.5: the share of negatives that are another query's positive (not a suspicion reason; the
# absolute flag copies_other_positive reads it)
OTHER_POSITIVE_STATS = (Stat("other_positive_rate", "n_other_positive", "n_negatives"),)
QUANTILES = {"margin_median": 0.5, "margin_p05": 0.05, "margin_p10": 0.10}


def bootstrap_ratios(
    num: np.ndarray,
    den: np.ndarray,
    rng: np.random.Generator,
    resamples: int = 1000,
    confidence: float = 0.95,
) -> tuple[np.ndarray, np.ndarray]:
    """Percentile CIs of Σ num / Σ den for each column of ``num``/``den`` (n_records × n_stats), over
    the record multiplicities of :func:`transferdx.resampling.resample_counts`."""
    check_bootstrap(resamples, confidence)
    n, k = num.shape
    if n == 0:
        return np.full(k, np.nan), np.full(k, np.nan)

    def ratios(counts: np.ndarray) -> np.ndarray:
        with np.errstate(invalid="ignore", divide="ignore"):
            return (counts @ num) / (counts @ den)

    return percentile_ci(collect(resample_counts(n, rng, resamples), ratios), confidence)


def bootstrap_quantiles(
    values: np.ndarray,
    quantiles: Sequence[float],
    rng: np.random.Generator,
    resamples: int = 1000,
    confidence: float = 0.95,
) -> tuple[np.ndarray, np.ndarray]:
    """Percentile CIs of ``np.quantile(values, q)`` (numpy's default "linear" method, as the point
    estimate) for each q, resampling the record values with replacement (the resamples of
    :func:`transferdx.resampling.resample_indices`; each chunk of resamples is one gather and one
    vectorised quantile)."""
    check_bootstrap(resamples, confidence)
    values = np.asarray(values, dtype=np.float64)
    qs = np.asarray(quantiles, dtype=np.float64)
    if len(values) == 0:
        return np.full(len(qs), np.nan), np.full(len(qs), np.nan)

    def quantiles_of(idx: np.ndarray) -> np.ndarray:
        return np.quantile(values[idx], qs, axis=1).T

    return percentile_ci(collect(resample_indices(len(values), rng, resamples), quantiles_of), confidence)


def bootstrap_mean_ci(
    values: np.ndarray, rng: np.random.Generator, resamples: int = 1000, confidence: float = 0.95
) -> tuple[float, float]:
    """Percentile bootstrap CI of the mean of ``values`` (equals ``scipy.stats.bootstrap``'s
    percentile method for the same generator)."""
    values = np.asarray(values, dtype=np.float64)
    low, high = bootstrap_ratios(values[:, None], np.ones((len(values), 1)), rng, resamples, confidence)
    return float(low[0]), float(high[0])


def _num_den(frame: pd.DataFrame, stats: Sequence[Stat]) -> tuple[np.ndarray, np.ndarray]:
    num = np.empty((len(frame), len(stats)))
    den = np.empty((len(frame), len(stats)))
    for j, stat in enumerate(stats):
        values = frame[stat.num].to_numpy(dtype=np.float64)
        if stat.den is None:
            defined = ~np.isnan(values)
            num[:, j] = np.where(defined, values, 0.0)
            den[:, j] = defined
        else:
            num[:, j] = values
            den[:, j] = frame[stat.den].to_numpy(dtype=np.float64)
    return num, den


@dataclass(frozen=True)
class AuditProfile:
    """The audit profile: one row per source, plus exclusion counts, settings, thresholds and
    negative-set descriptors. ``n_excluded_unattributed``: excluded records whose source is not known
    (a line that did not parse), which no row's ``n_excluded_records`` counts."""

    rows: tuple[Mapping[str, Any], ...]
    exclusions: Mapping[str, int] = field(default_factory=dict)
    settings: Mapping[str, Any] = field(default_factory=dict)
    thresholds: Mapping[str, Any] = field(default_factory=dict)
    descriptors: Mapping[str, Any] = field(default_factory=dict)
    catch_rate: Mapping[str, Any] = field(default_factory=dict)
    n_excluded_unattributed: int = 0

    def to_frame(self) -> pd.DataFrame:
        frame = pd.DataFrame(list(self.rows))
        if not len(frame):
            return pd.DataFrame(columns=PROFILE_COLUMNS)
        extra = [c for c in frame.columns if c not in PROFILE_COLUMNS]
        return frame[PROFILE_COLUMNS + extra]

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "settings": dict(self.settings),
            "sources": [dict(r) for r in self.rows],
            "exclusions": dict(self.exclusions),
            "flag_thresholds": dict(self.thresholds),
            "catch_rate": dict(self.catch_rate),
            "descriptors": dict(self.descriptors),
        }
        if self.n_excluded_unattributed:
            out["n_excluded_unattributed"] = self.n_excluded_unattributed
        return out

    def summary(self) -> str:
        frame = self.to_frame()
        cols = ["source", "kind", "n_records", "psi_mean", "psi_ci_low", "psi_ci_high"]
        cols += [c for c in ("rho_mean", "eta_mean", "inversion_rate", "margin_mean", "loss_mean") if c in frame]
        cols += [c for c in ("flags",) if c in frame]
        text = frame[cols].to_string(index=False, float_format=lambda v: f"{v:.3f}")
        if self.n_excluded_unattributed:
            n = self.n_excluded_unattributed
            text += f"\n{n} excluded records of no known source (in no row's n_excluded_records; see exclusions.csv)"
        return text


def profile_sources(
    per_record: pd.DataFrame,
    exclusions: Sequence[Exclusion] = (),
    *,
    seed: int = 0,
    resamples: int = 1000,
    confidence: float = 0.95,
    settings: Mapping[str, Any] | None = None,
    sources: Sequence[str] | None = None,
    extra: Mapping[str, Mapping[str, Any]] | None = None,
    kinds: Mapping[str, str] | None = None,
) -> AuditProfile:
    """One profile row per source (sorted by name), with CIs for every mean, rate and margin quantile.

    ``psi_mean`` = mean of record ψ over records with a defined ψ; ``coverage_mean`` = 1 − psi_mean.
    Semantic statistics are added when ``per_record`` has their columns; the margin quantiles get
    ``<name>_ci_low`` / ``<name>_ci_high`` from the same resamples as every other statistic
    (:func:`bootstrap_rng`). ``extra`` adds per-source values computed elsewhere (the composites and
    their CIs). A source whose every record was excluded still gets
    a row (n_records = 0, NaN statistics), of the kind ``kinds`` gives it (else genuine): an empty
    control stays a control.
    """
    known = kinds
    semantic = "rho" in per_record.columns
    suspicion = "n_fn_suspect" in per_record.columns
    # shares of negatives from per-record counts: integers, so every sum below is exact and a column's
    # value and CI do not depend on which other columns share the call
    counted = (SUSPICION_STATS if suspicion else ()) + (
        OTHER_POSITIVE_STATS if "n_other_positive" in per_record.columns else ()
    )
    stats = LEXICAL_STATS + (SEMANTIC_STATS if semantic else ())
    names = sorted(set(per_record["source"]) | set(sources or ()))
    excl_counts: dict[str, int] = {}
    for ex in exclusions:
        if ex.unit == "record":
            excl_counts[ex.source] = excl_counts.get(ex.source, 0) + 1
    rows = []
    for name in names:
        sub = per_record[per_record["source"] == name]
        num, den = _num_den(sub, stats)
        with np.errstate(invalid="ignore", divide="ignore"):
            point = num.sum(axis=0) / den.sum(axis=0)
        low, high = bootstrap_ratios(num, den, bootstrap_rng(seed, sub["qid"]), resamples, confidence)
        present = sorted(set(sub["kind"]))
        row: dict[str, Any] = {
            "source": name,
            "kind": present[0] if len(present) == 1 else ("mixed" if present else (known or {}).get(name, "genuine")),
            "n_records": len(sub),
            "n_negatives": int(sub["n_negatives"].sum()),
            "coverage_mean": float("nan"),
            "n_psi_undefined": int(sub["psi"].isna().sum()),
            "n_excluded_records": excl_counts.get(name, 0),
        }
        for j, stat in enumerate(stats):
            row[stat.name] = float(point[j])
            row[f"{stat.ci_prefix}_ci_low"] = float(low[j])
            row[f"{stat.ci_prefix}_ci_high"] = float(high[j])
        row["coverage_mean"] = 1.0 - row["psi_mean"]
        if semantic:
            margins = sub["margin"].to_numpy(dtype=np.float64)
            q_low, q_high = bootstrap_quantiles(
                margins, list(QUANTILES.values()), bootstrap_rng(seed, sub["qid"]), resamples, confidence
            )
            for j, (col, q) in enumerate(QUANTILES.items()):
                row[col] = float(np.quantile(margins, q)) if len(margins) else float("nan")
                row[f"{col}_ci_low"] = float(q_low[j])
                row[f"{col}_ci_high"] = float(q_high[j])
            row["n_h_undefined"] = int(sub["hardness"].isna().sum())
        if counted:
            # Its own call on the source's stream: the same resamples as the statistics above, which
            # stay bit-for-bit what they were before these columns existed.
            s_num, s_den = _num_den(sub, counted)
            with np.errstate(invalid="ignore", divide="ignore"):
                s_point = s_num.sum(axis=0) / s_den.sum(axis=0)
            s_low, s_high = bootstrap_ratios(s_num, s_den, bootstrap_rng(seed, sub["qid"]), resamples, confidence)
            for j, stat in enumerate(counted):
                row[stat.name] = float(s_point[j])
                row[f"{stat.ci_prefix}_ci_low"] = float(s_low[j])
                row[f"{stat.ci_prefix}_ci_high"] = float(s_high[j])
        row.update((extra or {}).get(name, {}))
        rows.append(row)
    return AuditProfile(
        tuple(rows),
        {k: excl_counts[k] for k in sorted(excl_counts)},
        dict(settings or {}),
        n_excluded_unattributed=excl_counts.get("", 0),
    )


# ---------------------------------------------------------------------------------------------
# Flags
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FlagRule:
    """Flag a source when ``column`` is above (``high``) or below the threshold."""

    name: str
    column: str
    high: bool
    symbol: str
    fixed_key: str


FLAG_RULES = (
    FlagRule("rho_high", "rho_mean", True, "ρ", "rho"),
    FlagRule("eta_high", "eta_mean", True, "η", "eta"),
    FlagRule("psi_high", "psi_mean", True, "ψ", "psi"),
    FlagRule("inversion_low", "inversion_rate", False, "inversion", "inversion"),
)
# §3.9: the suspected-false-negative share, same envelope rule (strict, genuine sources only); in
# ``fixed`` mode only when the config gives a threshold (the study had none). The exact-duplicate
# share has its own rule: a genuine perturbation source is near-duplicate by construction (its
# negatives are edits of p), which lifts the fn_suspect envelope above a source whose negatives are
# copies of p; no genuine source copies p, so duplicate_positive_high still separates that defect.
SUSPICION_FLAG_RULES = (
    FlagRule("fn_suspect_high", "fn_suspect_rate", True, "fn_suspect", "fn_suspect"),
    FlagRule("duplicate_positive_high", "duplicate_positive_rate", True, "duplicate_positive", "duplicate_positive"),
)
ALL_FLAG_RULES = FLAG_RULES + SUSPICION_FLAG_RULES
FLAG_MODES = ("envelope", "fixed")


def flag_thresholds(rows: Sequence[Mapping[str, Any]], mode: str, fixed: Mapping[str, float]) -> dict[str, Any]:
    """Thresholds per rule: the envelope of the genuine sources (max for "high" rules, min for
    "low"), or the fixed values from config."""
    if mode not in FLAG_MODES:
        raise ValueError(f"flag mode must be one of {FLAG_MODES}, got {mode!r}")
    out: dict[str, Any] = {"mode": mode}
    genuine = [r for r in rows if r.get("kind") == "genuine"]
    for rule in ALL_FLAG_RULES:
        if not rows or rule.column not in rows[0]:
            continue
        if mode == "fixed":
            if rule.fixed_key in fixed:
                out[rule.name] = float(fixed[rule.fixed_key])
            continue
        values = [r[rule.column] for r in genuine if not _nan(r[rule.column])]
        if values:
            out[rule.name] = float(max(values) if rule.high else min(values))
    return out


# A value must clear its threshold by more than floating-point noise: |v − t| ≤ NOISE · max(1, |t|)
# is a tie, never a flag (an envelope threshold is some genuine source's own value, recomputed).
FLAG_NOISE = 1e-9


def _beyond(value: float, threshold: float, high: bool) -> bool:
    """``value`` strictly beyond ``threshold`` in the rule's direction by more than :data:`FLAG_NOISE`."""
    tol = FLAG_NOISE * max(1.0, abs(threshold))
    return value > threshold + tol if high else value < threshold - tol


def apply_flags(rows: Sequence[Mapping[str, Any]], thresholds: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Add ``flags`` (names joined by ``;``) and ``flag_reasons`` to each row (envelope or fixed
    rules; strict beyond floating noise, so no genuine source is flagged by its own envelope), and
    ``absolute_flags`` / ``absolute_flag_reasons`` (:data:`ABSOLUTE_FLAG_RULES`, which can flag any
    source, genuine ones included)."""
    out = []
    for row in rows:
        names, reasons = [], []
        for rule in ALL_FLAG_RULES:
            if rule.name not in thresholds or rule.column not in row or _nan(row[rule.column]):
                continue
            t, v = thresholds[rule.name], row[rule.column]
            if _beyond(v, t, rule.high):
                names.append(rule.name)
                source = (
                    "max genuine"
                    if thresholds["mode"] == "envelope" and rule.high
                    else ("min genuine" if thresholds["mode"] == "envelope" else "fixed")
                )
                op = ">" if rule.high else "<"
                reasons.append(f"{rule.symbol} {v:.6g} {op} {t:.6g} ({source})")
        absolute = absolute_flags(row)
        out.append(
            {
                **row,
                "flags": ";".join(names),
                "flag_reasons": "; ".join(reasons),
                "absolute_flags": ";".join(absolute),
                "absolute_flag_reasons": "; ".join(absolute.values()),
            }
        )
    return out


# ---------------------------------------------------------------------------------------------
# Absolute flags: fixed thresholds from a stated principle, not from the genuine sources
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AbsoluteRule:
    """Flag a source when ``column`` > ``threshold``; ``principle`` says why the line is there."""

    name: str
    column: str
    threshold: float
    text: str
    principle: str


# Fixed before the validation run of issue 21 (experiments/results/validation/PLAN.md) and not tuned on
# any result. Each is a share of the source's negatives, in [0, 1].
ABSOLUTE_FLAG_RULES = (
    AbsoluteRule(
        "copies_positive",
        "duplicate_positive_rate",
        0.01,
        "of negatives are exact copies of a positive",
        "a negative that is the positive makes the contrastive target contradictory: the loss cannot "
        "rank a text above itself; more than 1 in 100 is a defect of the file, not an accident",
    ),
    AbsoluteRule(
        "near_copies_positive",
        "near_duplicate_positive_rate",
        0.10,
        "of negatives are near-copies of a positive (s(p,n) ≥ δ)",
        "a passage the encoder places next to the positive (cosine ≥ 0.85) most likely carries the same "
        "answer; when one negative in ten does, the source teaches the model to push answers away",
    ),
    AbsoluteRule(
        "mostly_inverted",
        "band_inverted",
        0.5,
        "of negatives score at least as high as the positive",
        "when most negatives outscore the positive under a frozen encoder, the labels, not the "
        "encoder, are the likelier error (most negatives score like the positive)",
    ),
    AbsoluteRule(
        "mostly_easy",
        "band_easy",
        0.9,
        "of negatives are easy (InfoNCE weight w < 0.1)",
        "a negative with w = exp((s(q,n) − s(q,p))/τ) < 0.1 contributes under a tenth of a tied "
        "negative's gradient; when nine in ten are easy, the explicit negatives add little over "
        "in-batch ones",
    ),
    # Fixed in experiments/results/fn_years/PLAN.md ("The missed defect") before any result; not tuned.
    AbsoluteRule(
        "copies_other_positive",
        "other_positive_rate",
        0.5,
        "of negatives are another query's positive",
        "a passage the file itself labels relevant to another query is already an in-batch negative under "
        "MNRL, and among neighbouring queries it carries their answer; when most negatives are such, the "
        "source was assembled from the file's positives, not mined from the corpus",
    ),
)


def above(value: float, threshold: float, digits: int = 3) -> str:
    """``value`` with at least ``digits`` decimals and as many more as needed that it reads above
    ``threshold`` as printed (0.9004 against 0.9 is ``0.9004``, not ``0.900``)."""
    for d in range(digits, 17):
        if float(f"{value:.{d}f}") > threshold:
            return f"{value:.{d}f}"
    return repr(value)


def below(value: float, threshold: float, digits: int = 1) -> str:
    """``value`` with at least ``digits`` decimals and as many more as needed that it reads below
    ``threshold`` as printed (0.96 against 1 is ``0.96``, not ``1.0``)."""
    for d in range(digits, 17):
        if float(f"{value:.{d}f}") < threshold:
            return f"{value:.{d}f}"
    return repr(value)


def absolute_flags(row: Mapping[str, Any]) -> dict[str, str]:
    """The :data:`ABSOLUTE_FLAG_RULES` a profile row breaks, each with its reason (value, threshold,
    what it means). A rule whose column is missing or NaN (e.g. an encoder rule in a lexical audit)
    does not fire."""
    out = {}
    for rule in ABSOLUTE_FLAG_RULES:
        value = row.get(rule.column)
        if value is None or _nan(value) or not _beyond(float(value), rule.threshold, True):
            continue
        out[rule.name] = f"{above(float(value), rule.threshold)} > {rule.threshold:g} {rule.text}"
    return out


def catch_rate(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Which controls each flag rule catches, how many controls are flagged in all, and which
    genuine sources are flagged (none under the envelope rule, by construction); the same for the
    absolute rules (``absolute_*``), which may flag genuine sources."""
    controls = [r for r in rows if r.get("kind") == "control"]
    flagged = {r["source"]: set(filter(None, str(r.get("flags", "")).split(";"))) for r in rows}
    absolute = {r["source"]: set(filter(None, str(r.get("absolute_flags", "")).split(";"))) for r in rows}
    return {
        "n_controls": len(controls),
        "n_controls_flagged": sum(bool(flagged[r["source"]]) for r in controls),
        "by_flag": {
            rule.name: [r["source"] for r in controls if rule.name in flagged[r["source"]]]
            for rule in ALL_FLAG_RULES
            if rule in FLAG_RULES or any(rule.column in r for r in rows)
        },
        "controls_not_flagged": [r["source"] for r in controls if not flagged[r["source"]]],
        "genuine_flagged": [r["source"] for r in rows if r.get("kind") == "genuine" and flagged[r["source"]]],
        "n_controls_absolute_flagged": sum(bool(absolute[r["source"]]) for r in controls),
        "absolute_by_flag": {
            rule.name: [r["source"] for r in rows if rule.name in absolute[r["source"]]] for rule in ABSOLUTE_FLAG_RULES
        },
        "genuine_absolute_flagged": [r["source"] for r in rows if r.get("kind") == "genuine" and absolute[r["source"]]],
    }


def false_negative_rates(
    counts: Mapping[str, Sequence[tuple[str, int, int]]],
    sources: Sequence[str],
    *,
    seed: int = 0,
    resamples: int = 1000,
    confidence: float = 0.95,
) -> dict[str, dict[str, Any]]:
    """``false_negative_rate`` = Σ negatives judged relevant / Σ negatives over a source's records
    (single-label variant), with a percentile bootstrap CI over records; ``not_measured`` where the
    source has no judgments."""
    out: dict[str, dict[str, Any]] = {}
    for name in sources:
        rows = counts.get(name)
        if not rows:
            out[name] = {
                "false_negative_rate": "not_measured",
                "false_negative_rate_ci_low": "not_measured",
                "false_negative_rate_ci_high": "not_measured",
            }
            continue
        num = np.array([[r[1]] for r in rows], dtype=np.float64)
        den = np.array([[r[2]] for r in rows], dtype=np.float64)
        rng = bootstrap_rng(seed, [r[0] for r in rows], 0xF1)  # a stream of its own, apart from the profile's
        low, high = bootstrap_ratios(num, den, rng, resamples, confidence)
        out[name] = {
            "false_negative_rate": float(num.sum() / den.sum()) if den.sum() else float("nan"),
            "false_negative_rate_ci_low": float(low[0]),
            "false_negative_rate_ci_high": float(high[0]),
        }
    return out


def _nan(value: Any) -> bool:
    return isinstance(value, float) and math.isnan(value)
