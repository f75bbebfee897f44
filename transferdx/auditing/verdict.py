"""The verdict: what an audit says about each source, in plain words (the top of report.md and the
end of ``transferdx-audit``'s output). Pure: profile rows and per-source facts in, Markdown lines out.

Each genuine source gets **one action**, its **bottom line**: the first of :data:`BOTTOM_LINE_ACTIONS`
whose advice (:data:`ADVICE`, a registry in that order) finds something, so re-mine beats clean beats
review beats use as is. Re-mine: an absolute flag says the negatives are mostly inverted, or mostly
another query's positive. Clean: suspects with a reason of
:data:`~transferdx.diagnostics.suspicion.ACT_REASONS` (copies and near-copies of a positive,
``fn_probability`` ≥ :data:`~transferdx.diagnostics.suspicion.MIN_PROBABILITY`), what default
cleaning removes. Review the listed suspects: the other suspects (the rule's precision on deep
judgments is little above the base rate). Use as is: nothing of the above. Each advice that applies
is a :class:`Finding`: a fact (the number behind it) and an instruction; the bottom line says the
facts of its action and its instruction, the milder findings follow as ``Also:`` lines, facts only
(mostly easy negatives are always such a note). The one command said, ``transferdx-clean``, names
the input the audit read and runs as printed (:func:`clean_command`). Every count of suspects comes
from the audit's one suspects table (:func:`source_facts`). A source with fewer than
:data:`MIN_RECORDS` records gets a warning instead of a place in the ranking."""

from __future__ import annotations

import functools
import itertools
import math
import re
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from transferdx.diagnostics.fn_combined import cleaning_cut
from transferdx.diagnostics.suspicion import (
    ACT_REASONS,
    MIN_PROBABILITY,
    PROBABILITY_REASON,
    SUSPECT_REASONS,
    MarginMining,
    margin_mining,
)
from transferdx.presets import preset_names

if TYPE_CHECKING:
    from transferdx.auditing.audit import AuditResult

# Fewer records than this: bootstrap CIs over records and the ranking of sources are not read
# (with under 30 resampling units a percentile interval is unreliable), a warning is said instead.
MIN_RECORDS = 30

EVIDENCE = Path(__file__).with_name("evidence.json")  # written by experiments/ship_evidence.py


@functools.cache
def evidence() -> dict[str, Any]:
    """What the package's own validation found, from the committed results (``evidence.json``)."""
    import json

    return dict(json.loads(EVIDENCE.read_text(encoding="utf-8")))


def _signed(value: float) -> str:
    return f"{value:+.2f}"


def _interval(bounds: Sequence[float] | None) -> str:
    return f" [{bounds[0]:.2f}, {bounds[1]:.2f}]" if bounds else ""


def psi_evidence() -> str:
    """ψ's rank agreement with transfer in the package's own validation, in words, from
    :func:`evidence`: over all trained sources and among the genuine ones."""
    e = evidence()["psi_rank_agreement"]
    return (
        f"the package's own validation ({e['backbone']}, {e['n_sources']} sources trained on {e['trained_on']})"
        f" found ψ's rank agreement with transfer {_signed(e['spearman_all'])}{_interval(e['interval_all'])}"
        f" over all sources, {e['why']}, and {_signed(e['spearman_genuine'])}{_interval(e['interval_genuine'])}"
        f" among its {e['n_genuine']} genuine sources"
    )


def _effect(arm: Mapping[str, Any]) -> str:
    """``+0.004 [−0.010, +0.018], not told apart from no change`` (or a gain / a loss when the
    interval excludes 0)."""
    low, high = arm["interval"]
    word = "a gain" if low > 0 else "a loss" if high < 0 else "not told apart from no change"
    return f"{arm['vs_raw']:+.3f} [{low:+.3f}, {high:+.3f}], {word}"


def cleaning_evidence() -> str:
    """What following the default cleaning did to trained retrievers in the package's own experiment,
    in words, from :func:`evidence`: per run (miner), the default cleaning's and the oracle's change of
    nDCG@10 on held-out queries against training on the file as mined, and the design's MDD."""
    e = evidence()["cleaning"]
    parts = []
    for r in e["runs"].values():
        arms = r["arms"]
        low, high = r["raw_vs_frozen_interval"]
        unmeasured = (
            f"; training on that file did not beat the untrained model on these queries ({r['raw_vs_frozen']:+.3f}"
            f" [{low:+.3f}, {high:+.3f}]), so there the effect on transfer is unmeasured"
            if low <= 0
            else ""
        )
        parts.append(
            f"{r['label']}: {_effect(arms['tdx_default'])} (removing every judged false negative instead:"
            f" {_effect(arms['oracle'])}; detectable: ±{arms['tdx_default']['mdd']:.3f}{unmeasured})"
        )
    first = next(iter(e["runs"].values()))
    return (
        f"in the package's own training test (TREC-DL19 + DL21 single-label files, {e['k']} negatives from each"
        f" miner's ranking, {e['backbone']}, {e['seeds']} seeds, nDCG@10 on {first['n_queries']} held-out queries;"
        " experiments/results/cleaning) this cleaning changed the trained retriever by " + "; ".join(parts)
    )


# diagnostic column → (name, what a higher value means, which way is better or more defective)
DIRECTIONS: dict[str, tuple[str, str, str]] = {
    "psi_mean": (
        "ψ",
        "negatives share fewer of the query's (IDF-weighted) words",
        "in the study this package follows a higher mean ψ went with better transfer (the study's finding; "
        + psi_evidence()
        + ", so it is not a validated predictor of which genuine source trains better); above every genuine"
        " source (as random passages are) it means negatives too unrelated",
    ),
    "rho_mean": (
        "ρ",
        "the frozen encoder ranks the positive above the negatives more surely",
        "lower = harder negatives; above every genuine source = too easy",
    ),
    "eta_mean": (
        "η",
        "negatives sit closer to the query in the encoder's space",
        "higher = harder, but above every genuine source = false-negative-shaped",
    ),
    "inversion_rate": (
        "inversion",
        "more records have a negative scoring at least as high as the positive",
        "some inversions are what hard negatives look like; very high = look for false negatives",
    ),
    "fn_suspect_rate": (
        "suspected false negatives",
        "more negatives look like they answer the query (docs/design.md §3.9)",
        "lower is better",
    ),
    "duplicate_positive_rate": ("copies of a positive", "more negatives repeat a positive's text", "0 is right"),
}
# the random-mix controls, mildest first (the verdict's ladder sentence and the paper's ladder figure)
LADDER = ("random_mix_25", "random_mix_50", "random_mix_75", "random_mix_100")


@dataclass(frozen=True)
class SourceFacts:
    """What the bottom line counts per source, every count of suspects from the audit's one suspects
    table: negatives, suspects, those default cleaning removes (``n_act``: a reason of
    :data:`~transferdx.diagnostics.suspicion.ACT_REASONS`), copies and near-copies of a positive,
    those with ``fn_probability`` ≥ :data:`MIN_PROBABILITY` (``n_probable``), the positive-aware
    hits (None where a reason was not checked), a mining margin, and whether it is a cleaned copy."""

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
        cleaned = (descriptors or {}).get(name, {}).get("cleaned")
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
        )
    return out


def audit_facts(result: AuditResult) -> dict[str, SourceFacts]:
    """:func:`source_facts` of an :class:`~transferdx.auditing.audit.AuditResult`."""
    alpha = result.suspicion.get("alpha")
    alpha = float(alpha) if isinstance(alpha, (int, float)) else 0.95
    return source_facts(result.suspect_values, result.negatives, result.records, result.profile.descriptors, alpha)


# ---------------------------------------------------------------------------------------------
# Numbers and commands
# ---------------------------------------------------------------------------------------------


def _num(row: Mapping[str, Any], column: str) -> float:
    value = row.get(column)
    try:
        out = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return math.nan
    return out


def _ci(row: Mapping[str, Any], column: str) -> str:
    prefix = column.removesuffix("_mean")
    low, high = _num(row, f"{prefix}_ci_low"), _num(row, f"{prefix}_ci_high")
    value = _num(row, column)
    if math.isnan(low) or math.isnan(high):
        return f"{value:.3f}"
    return f"{value:.3f} [{low:.3f}, {high:.3f}]"


def _share(k: int, n: int) -> str:
    return f"{k} of {n} negatives ({k / n:.1%})" if n else f"{k} of 0 negatives"


def _precision(rule: str, full: bool = False) -> str:
    """``precision 0.665 [0.570, 0.764] on TREC-DL19 (base rate 0.575) and 0.600 [0.508, 0.688] on
    TREC-DL21 (base rate 0.454) deep judgments`` of a rule, read from :func:`evidence` (each year where it suspected
    something), or that it was not measured there. ``full``: with each year's size and the encoder."""
    e = evidence()["rule_precision"]
    parts = []
    for year, m in e["rules"].get(rule, {}).items():
        if m is None:
            continue
        y = e["years"][year]
        size = f", {y['n_negatives']:,} negatives of {y['n_queries']} queries" if full else ""
        parts.append(
            f"{m['precision']:.3f} [{m['interval'][0]:.3f}, {m['interval'][1]:.3f}] on {y['name']}"
            f" (base rate {y['base_rate']:.3f}{size})"
        )
    if not parts:
        return "not measured on deep judgments (no instance in TREC-DL19 or DL21)"
    encoder = f", {e['encoder']}" if full else ""
    return f"precision {' and '.join(parts)} deep judgments{encoder}"


def _probability_precision() -> str:
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


def _span(bounds: Sequence[float]) -> str:
    return f"{bounds[0]:.2f}" if bounds[0] == bounds[1] else f"{bounds[0]:.2f}–{bounds[1]:.2f}"


def mined_precision() -> str:
    """The default clean's measured precision on files mined the way users mine, by regime."""
    m = mined()
    return (
        f"right {_span(m['clean_precision'])} of the time on {m['n_files']} files mined the way users mine"
        f" ({m['where']}, by regime; {_span(m['own_margin']['clean_precision'])} where the audit's own encoder"
        " mined with a margin)"
    )


def prior_unidentified(row: Mapping[str, Any]) -> bool:
    """The audit's estimate of the source's share of false negatives fell on 1, or on 0 with a mining
    margin in sight (``fn_prior_boundary``): the file looks filtered by the audit's own encoder
    (:func:`~transferdx.auditing.pooling.source_priors`)."""
    return not math.isnan(_num(row, "fn_prior_boundary"))


def prior_sentence(row: Mapping[str, Any]) -> str:
    """That the source's share of false negatives is not estimated, why, and what was measured instead
    (:data:`~transferdx.auditing.pooling.PRIOR_WHY`)."""
    m = mined()
    said = ""
    if prior_unidentified(row):
        side = "0" if _num(row, "fn_prior_boundary") < 0.5 else "1"
        said = (
            "its negatives fit no mix of the detectors' false and true negatives (the share's estimate falls on"
            f" {side}), as when the file's miner filtered them under the audit's own encoder; "
        )
    return (
        f"{said}how many of its negatives are false negatives is not estimated from the file, and fn_probability is"
        f" not moved to it: it is calibrated at TREC-DL's share (ECE {_span(m['ece'])} on {m['n_files']} files mined"
        f" the way users mine, {m['where']}, where the share was {_span(m['share'])} by regime and the audit's"
        f" estimate of it covered it on {m['em_covered']} of {m['em_estimated']} files and fell on 0 or 1 on"
        f" {m['em_boundary']})"
    )


IN_MEMORY = "(in memory)"  # the data label of records given in memory (pipeline.auditing)
# a value Hydra and bash both take unquoted; anything else is quoted for both
PLAIN_VALUE = re.compile(r"[A-Za-z0-9_./:@+-]+")


@functools.cache
def _data_presets() -> frozenset[str]:
    return frozenset(preset_names("data"))


def override(key: str, value: str) -> str:
    """``key=value`` as typed in bash: plain when safe, else Hydra's double quotes inside the shell's
    (a backslash doubled only before a quote or at the end, as Hydra reads them)."""
    if PLAIN_VALUE.fullmatch(value):
        return f"{key}={value}"
    inner = re.sub(r'(\\*)("|$)', lambda m: m.group(1) * 2 + ("\\" + m.group(2) if m.group(2) else ""), value)
    return shlex.quote(f'{key}="{inner}"')


def clean_command(settings: Mapping[str, Any] | None, input_path: str | None = None, lexical: bool = False) -> str:
    """The command that cleans the input the audit read, as it runs when pasted into bash:
    ``transferdx-clean input=<input_path>`` (else the input's name as the artifacts record it),
    ``data=<name>`` for a bundled data set, the Python call for records given in memory;
    ``diagnostics=lexical`` when the audit ran without an encoder."""
    label = str(input_path or (settings or {}).get("data") or IN_MEMORY)
    if label == IN_MEMORY:
        return "`transferdx.clean(records, audit)`"
    preset = label in _data_presets() and not Path(label).exists()
    argument = f"data={label}" if preset else override("input", label)
    return f"`transferdx-clean {argument}{' diagnostics=lexical' if lexical else ''}`"


def _absolute(row: Mapping[str, Any]) -> dict[str, str] | None:
    """The row's absolute flags (name → reason), or None when the profile has no such column."""
    if "absolute_flags" not in row:
        return None
    names = [n for n in str(row.get("absolute_flags") or "").split(";") if n]
    reasons = [r for r in str(row.get("absolute_flag_reasons") or "").split("; ") if r]
    return {n: (reasons[i] if i < len(reasons) else n) for i, n in enumerate(names)}


# ---------------------------------------------------------------------------------------------
# The bottom line: a registry of advice, each an action and the sentence that says why
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Context:
    """What the advice reads next to a source's row: its facts, the flag mode, the settings, and the
    path of the input the audit read (None: the name the settings record)."""

    facts: SourceFacts
    mode: str
    settings: Mapping[str, Any]
    input_path: str | None = None


@dataclass(frozen=True)
class Finding:
    """What one advice found: ``fact`` (the finding and the number behind it) and ``act`` (what to
    do, said only when its action is the bottom line). ``lead_only``: said only as the bottom line
    (the summary of a source where nothing else applies)."""

    fact: str
    act: str = ""
    lead_only: bool = False

    def said(self) -> str:
        return f"{self.fact} {self.act}" if self.act else self.fact


Advice = Callable[[Mapping[str, Any], Context], "Finding | None"]


def _on_flag(flag: str, fact: str, act: str) -> Advice:
    """Advice that fires on the absolute flag ``flag``: ``fact`` with its reason in ``{reason}``, and ``act``."""

    def advice(row: Mapping[str, Any], ctx: Context) -> Finding | None:
        reason = (_absolute(row) or {}).get(flag)
        return None if reason is None else Finding(fact.format(reason=reason), act)

    advice.__name__ = f"_on_{flag}"
    return advice


_remine_inverted = _on_flag(
    "mostly_inverted",
    "Most negatives outscore the positive under the frozen encoder ({reason}): the labels, not the"
    " encoder, are the likelier error.",
    "Re-mine with a margin below the positive: sentence-transformers' `mine_hard_negatives` with"
    " `relative_margin=0.05`, or `range_min=10` to skip the top ranks.",
)
_remine_other_positive = _on_flag(
    "copies_other_positive",
    "Most negatives are passages the file labels relevant to another query ({reason}): they are already"
    " in-batch negatives under MNRL, so the source was assembled from the file's positives, not mined.",
    "Re-mine from the corpus: sentence-transformers' `mine_hard_negatives` with `corpus=` the full passage collection.",
)


EASY_NOTE = "The negatives are mostly easy"


def _easy(row: Mapping[str, Any], ctx: Context) -> Finding | None:
    """Mostly easy negatives are a note, not a reason to re-mine: easy negatives waste compute, and
    in the package's own validation (docs/validation.md) sources flagged so did not train worse."""
    reason = (_absolute(row) or {}).get("mostly_easy")
    if reason is None:
        return None
    return Finding(
        f"{EASY_NOTE} ({reason}): each adds under a tenth of a tied negative's gradient, so they add"
        " little over in-batch negatives; not a defect: in transferdx's own validation, sources flagged"
        " so did not train worse (docs/validation.md)."
    )


def _copy_flags(row: Mapping[str, Any]) -> list[str]:
    absolute = _absolute(row) or {}
    return [absolute[n] for n in ("copies_positive", "near_copies_positive") if n in absolute]


def _cleans(row: Mapping[str, Any], f: SourceFacts) -> bool:
    """Whether "clean" is the action: negatives that copy a positive, or an absolute flag that most are
    (near-)copies. Near-copies and fn_probability ≥ 0.80 alone do not decide it: their precision
    depends on how the file was mined (0 on a pool whose every relevant passage is a positive), and
    the file's share of false negatives is not estimated (:func:`prior_sentence`)."""
    return f.n_copies > 0 or bool(_copy_flags(row))


def _removable(f: SourceFacts) -> str:
    """What default cleaning removes besides copies, with what was measured of it."""
    parts = []
    if f.n_near_copies is not None:
        parts.append(f"{f.n_near_copies} are near-copies of one (s(p0,n) ≥ δ; {_precision('near_duplicate_positive')})")
    if f.n_probable is not None:
        parts.append(
            f"{f.n_probable} have fn_probability ≥ {MIN_PROBABILITY:.2f}"
            f" ({_probability_precision()}; {mined_precision()})"
        )
    return ", ".join(parts)


def _clean(row: Mapping[str, Any], ctx: Context) -> Finding | None:
    f = ctx.facts
    copies = _copy_flags(row)
    if not _cleans(row, f):
        return None
    parts = [f"{f.n_copies} copy a positive", *filter(None, [_removable(f)])]
    flagged = f" Absolute flag: {'; '.join(copies)}." if copies else ""
    lexical = f.n_near_copies is None and f.n_probable is None
    return Finding(
        f"{_share(f.n_act, f.n_negatives)} are probable false negatives: {', '.join(parts)}.{flagged}",
        f"Remove them with {clean_command(ctx.settings, ctx.input_path, lexical)}. Measured, not assumed:"
        f" {cleaning_evidence()}.",
    )


def _by_construction(row: Mapping[str, Any], ctx: Context) -> Finding | None:
    m = ctx.facts.margin
    if m is None or ctx.facts.n_positive_aware != 0:
        return None
    return Finding(
        f"Its mining already applied a margin with this encoder: every negative scores at most"
        f" {1 - m.relative:.3f}·s(q,p) (a relative margin of {m.relative:.3f}; the smallest gap s(q,p) − s(q,n) is"
        f" {m.absolute:.3f}), below the positive-aware bar {m.alpha}·s(q,p), so that rule finds 0 suspects by"
        " construction; it says nothing about false negatives below the margin."
    )


def _review(row: Mapping[str, Any], ctx: Context) -> Finding | None:
    f = ctx.facts
    cleans = _cleans(row, f)
    rest = f.n_review if cleans else f.n_suspects
    removable = 0 if cleans else f.n_act
    flags = str(row.get("flags") or "") if ctx.mode == "envelope" else ""
    out = []
    if rest > 0:
        where = f"({ctx.settings.get('_suspects_where') or 'suspects.csv lists them'}, most probable first)"
        rule = f"the suspicion rule's {_precision('default_rule')}; many are ordinary hard negatives"
        if removable:
            out.append(
                f"{_share(rest, f.n_negatives)} are suspected false negatives. Default cleaning would remove"
                f" {removable} of them: {_removable(f)}"
                + (f"; the other {rest - removable} are suspects of {rule}" if rest > removable else "")
                + f" {where}."
            )
        else:
            mean = (
                f"; their mean fn_probability, at TREC-DL's share, is {f.review_expected:.2f}"
                if f.review_expected is not None
                else ""
            )
            out.append(
                f"{_share(rest, f.n_negatives)} are suspects that default cleaning leaves in place:"
                f" {rule}{mean} {where}."
            )
    if flags:
        out.append(f"Against the other sources' range (envelope): {row.get('flag_reasons')}.")
    if not out:
        return None
    act = ""
    if rest > 0:
        act = "Read them before training on the file" + (
            f"; {clean_command(ctx.settings, ctx.input_path)} removes the {removable}." if removable else "."
        )
    return Finding(" ".join(out), act)


# "use as is" needs the detector to expect few false negatives: a mean fn_probability (at TREC-DL's
# share) below this. Every one of the 42 files mined the way users mine read 0.29–0.71 (their judged
# share 0.11–0.65; experiments/results/fn_mined), the demo's BM25 and handwritten sources 0.10 and 0.07.
USE_MAX_MEAN = 0.20


def _unseen(row: Mapping[str, Any], ctx: Context) -> Finding | None:
    """No reassurance where the audit cannot see the false negatives: a file that looks filtered by its
    own encoder (:func:`prior_unidentified`), or one with no suspect whose negatives the detector reads
    as often false (mean fn_probability ≥ :data:`USE_MAX_MEAN`) — few suspects may be all it can see."""
    f = ctx.facts
    m = mined()
    mean = f.mean_probability
    high = mean is not None and mean >= USE_MAX_MEAN and f.n_suspects == 0
    if not prior_unidentified(row) and not high:
        return None
    hidden = ""
    if f.margin is not None:
        hidden = (
            " Its negatives stop at a margin under this encoder (every one at most"
            f" {1 - f.margin.relative:.3f}·s(q,p)): the miner removed exactly the negatives this encoder would"
            " flag, so what is left looks clean to it whatever it holds."
        )
    seen = f" (mean fn_probability {mean:.2f}, at TREC-DL's share)" if mean is not None else ""
    return Finding(
        f"The audit cannot see how many of its negatives are false negatives: it found {f.n_suspects}"
        f" suspect{'' if f.n_suspects == 1 else 's'}{seen};"
        f" on files mined the way users mine {_span(m['share'])} of the negatives were false negatives by regime,"
        f" and where the audit's own encoder mined with a margin default cleaning caught"
        f" {_span(m['own_margin']['clean_recall'])} of them ({m['where']}).{hidden}",
        "Check before training: audit it with a second encoder (`backbone=static_minilm`, or `backbone=mpnet_base`),"
        " score it with a cross-encoder if you have one, or read the suspects"
        f" ({ctx.settings.get('_suspects_where') or 'suspects.csv lists them'}).",
    )


def _use(row: Mapping[str, Any], ctx: Context) -> Finding | None:
    f = ctx.facts
    inv = _num(row, "inversion_rate")
    said = f"{f.n_suspects} of its {f.n_negatives} negatives are suspected false negatives"
    if f.n_probable is not None:
        said += f", {f.n_probable} have fn_probability ≥ {MIN_PROBABILITY:.2f}"
    if not math.isnan(inv):
        said += f", and in {inv:.1%} of records a negative scores at least as high as the positive"
    return Finding(said + ".", lead_only=True)


# action → the advice that finds it, most severe action first (:data:`BOTTOM_LINE_ACTIONS`); the first
# action with a finding is the bottom line, the milder findings are said as facts
ADVICE: tuple[tuple[str, tuple[Advice, ...]], ...] = (
    ("re-mine", (_remine_inverted, _remine_other_positive)),
    ("clean", (_clean,)),
    ("review the listed suspects", (_unseen, _review)),
    ("use as is", (_by_construction, _use, _easy)),
)
BOTTOM_LINE_ACTIONS = tuple(action for action, _ in ADVICE)  # most severe first: the order that decides


@dataclass(frozen=True)
class Judgement:
    """A source's one ``action``, what ``lead`` says with it (its findings: facts and instruction),
    and the ``support`` (the milder findings' facts, no instruction)."""

    action: str
    lead: tuple[str, ...]
    support: tuple[str, ...]


def judge(row: Mapping[str, Any], ctx: Context) -> Judgement:
    """The first action of :data:`ADVICE` with a finding, its findings, and the milder ones' facts."""
    found = [(action, f) for action, rules in ADVICE for rule in rules if (f := rule(row, ctx)) is not None]
    action = found[0][0]
    lead = tuple(f.said() for a, f in found if a == action)
    support = tuple(f.fact for a, f in found if a != action and not f.lead_only)
    return Judgement(action, lead, support)


def bottom_line(row: Mapping[str, Any], ctx: Context) -> tuple[str, list[str]]:
    """(action, sentences): :func:`judge`'s action and what the bottom line says with it."""
    j = judge(row, ctx)
    return j.action, list(j.lead)


def _small(n: int) -> str | None:
    if n >= MIN_RECORDS:
        return None
    few = "1 record is" if n == 1 else f"{n} records are"
    return (
        f"  Warning: {few} too few for the statistics (fewer than {MIN_RECORDS}): its intervals are"
        " not reliable and it is left out of the ranking; read its suspects one by one."
    )


def _fixed_comparison(row: Mapping[str, Any], thresholds: Mapping[str, float]) -> list[str]:
    out = []
    for column, threshold in thresholds.items():
        value = _num(row, column)
        if not math.isnan(value):
            out.append(f"{DIRECTIONS[column][0]} {value:.3f} (study: {threshold})")
    return out


FIXED = {"rho_mean": 0.870, "eta_mean": 0.443, "psi_mean": 0.529, "inversion_rate": 0.083}  # the study's


def verdict_lines(
    rows: Sequence[Mapping[str, Any]],
    catch: Mapping[str, Any],
    settings: Mapping[str, Any] | None = None,
    *,
    facts: Mapping[str, SourceFacts] | None = None,
    written: bool = True,
    input_path: str | None = None,
    legend: bool = True,
) -> list[str]:
    """The verdict section: per genuine source its bottom line (:func:`bottom_line`), a small-sample
    warning, the suspects with the rule's measured precision, inversions, what the controls built
    from it show; the controls caught; the genuine sources by mean ψ (the study's finding, not a
    validated predictor here) with whether neighbouring CIs overlap; what each direction means.
    ``facts``: :func:`source_facts` (without them the counts come from the profile's rates);
    ``written``: whether suspects.csv was written (the Python verdict points to ``.suspects``);
    ``input_path``: the input the audit read, for the command said (None: the name in ``settings``)."""
    settings = dict(settings or {})
    settings["_suspects_where"] = "suspects.csv lists them" if written else "`.suspects` lists them"
    genuine = [r for r in rows if r.get("kind") == "genuine" and _num(r, "n_records") > 0]
    semantic = any(not math.isnan(_num(r, "rho_mean")) for r in rows)
    mode = str(settings.get("flags") or "envelope")
    out = ["## Verdict", ""]
    for row in genuine:
        name, n = str(row["source"]), int(_num(row, "n_records"))
        f = (facts or {}).get(name) or _facts_from_row(row)
        j = judge(row, Context(f, mode, settings, input_path))
        unit = "record" if n == 1 else "records"
        out.append(f"- **{name}** ({n} {unit}) — **bottom line: {j.action}.** " + " ".join(j.lead))
        out += [f"  Also: {fact}" for fact in j.support]
        if (small := _small(n)) is not None:
            out.append(small)
        if f.cleaned:
            reasons = ", ".join(map(str, f.cleaned.get("reasons") or [])) or "none"
            out.append(
                f"  This is a cleaned copy (action {f.cleaned.get('action')}, reasons {reasons}): what was removed"
                " is no longer counted here."
            )
        if semantic:
            out.append(f"  False negatives: {prior_sentence(row)}.")
        fn = _num(row, "fn_suspect_rate")
        if not math.isnan(fn):
            out.append(
                f"  Suspected false negatives: {f.n_suspects} ({_ci(row, 'fn_suspect_rate')} of its negatives);"
                f" the rule's {_precision('default_rule', full=True)}."
            )
        inv = _num(row, "inversion_rate")
        if not math.isnan(inv):
            out.append(
                f"  Inversions: in {inv:.1%} of records a negative scores at least as high as the positive"
                f" ({_ci(row, 'inversion_rate')})."
            )
        if name in _parents(settings) and (ladder := _ladder_line(rows)):
            out.append(ladder)
        if semantic and mode == "fixed":
            compared = _fixed_comparison(row, FIXED)
            if compared:
                out.append(
                    "  The study's values, fixed on another encoder and data set, for reference only (not flags"
                    f" here): {', '.join(compared)}."
                )
    out += _controls_lines(rows, catch, settings)
    out += _ranking_lines(genuine)
    return out + legend_lines(rows) if legend else out


def legend_lines(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """What each direction means, for the diagnostics the profile has (the verdict's last section in
    report.md; the command line prints it before the verdict, so that the verdict ends the output)."""
    out = ["", "Which way is which:", ""]
    for column, (symbol, higher, better) in DIRECTIONS.items():
        if any(not math.isnan(_num(r, column)) for r in rows):
            out.append(f"- {symbol}: higher = {higher}; {better}.")
    out.append("")
    return out


def _facts_from_row(row: Mapping[str, Any]) -> SourceFacts:
    """Counts recovered from the profile's rates when no per-negative table is at hand."""
    n = int(_num(row, "n_negatives")) if not math.isnan(_num(row, "n_negatives")) else 0
    fn, dup = _num(row, "fn_suspect_rate"), _num(row, "duplicate_positive_rate")
    copies = round(dup * n) if not math.isnan(dup) else 0
    return SourceFacts(n, round(fn * n) if not math.isnan(fn) else 0, copies, copies)


def _parents(settings: Mapping[str, Any]) -> list[str]:
    built = settings.get("self_controls") or {}
    return [str(p) for p in (built.get("parents") or ([built["parent"]] if built.get("parent") else []))]


def _ladder_line(rows: Sequence[Mapping[str, Any]]) -> str | None:
    """What the random-mix ladder shows (None when none of its rungs was built with records)."""
    if not any(r.get("source") in LADDER and _num(r, "n_records") > 0 for r in rows):
        return None
    flagged = [r["source"] for r in rows if r.get("source") in LADDER and r.get("flags")]
    smallest = min(flagged, key=LADDER.index).rsplit("_", 1)[1] if flagged else None
    return "  The controls are made from this source, so they show what the diagnostics can see: " + (
        f"replacing {smallest}% of its negatives by random passages is already flagged."
        if smallest
        else "no rung of the random-mix ladder is flagged (the diagnostics are blind to that defect here)."
    )


def _controls_lines(
    rows: Sequence[Mapping[str, Any]], catch: Mapping[str, Any], settings: Mapping[str, Any]
) -> list[str]:
    out = []
    n_controls = int(catch.get("n_controls") or 0)
    empty = [str(r["source"]) for r in rows if r.get("kind") != "genuine" and not _num(r, "n_records") > 0]
    if n_controls:
        missed = [m for m in catch.get("controls_not_flagged") or [] if m not in empty]
        out.append(
            f"- Controls (known defects) flagged: {catch.get('n_controls_flagged', 0)} of {n_controls}"
            + (f"; not caught: {', '.join(map(str, missed))}" if missed else "")
            + (f"; built empty (no records, not audited): {', '.join(empty)}" if empty else "")
            + "."
        )
    built = settings.get("self_controls")
    if built:
        parents = _parents(settings)
        whose = " and ".join(f"`{p}`" for p in parents)
        out.append(
            f"- The controls were built from {whose}'s own records and passages"
            + (
                "; not built: " + "; ".join(f"{k} ({v})" for k, v in sorted(built["skipped"].items())) + "."
                if built.get("skipped")
                else "."
            )
        )
    return out


def _ranking_lines(genuine: Sequence[Mapping[str, Any]]) -> list[str]:
    big = [r for r in genuine if _num(r, "n_records") >= MIN_RECORDS and not math.isnan(_num(r, "psi_mean"))]
    small = [r for r in genuine if _num(r, "n_records") < MIN_RECORDS]
    out = []
    if len(big) >= 2:
        ranked = sorted(big, key=lambda r: (-_num(r, "psi_mean"), str(r["source"])))
        parts = [f"{ranked[0]['source']} {_num(ranked[0], 'psi_mean'):.3f}"]
        for a, b in itertools.pairwise(ranked):
            overlap = _num(a, "psi_ci_low") <= _num(b, "psi_ci_high")
            parts.append(f"{'≈' if overlap else '>'} {b['source']} {_num(b, 'psi_mean'):.3f}")
        legend = " (≈: the CIs overlap, so that order is not established)" if any("≈" in x for x in parts) else ""
        out.append(
            "- Genuine sources by mean ψ (in the study this package follows, higher mean ψ went with better"
            f" transfer; {psi_evidence()}, so this order is a description, not a prediction): "
            + " ".join(parts)
            + legend
        )
    if small and len(genuine) >= 2:
        out.append(
            "- Not ranked (fewer than "
            f"{MIN_RECORDS} records): " + ", ".join(f"{r['source']} ({int(_num(r, 'n_records'))})" for r in small)
        )
    return out
