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

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from transferdx.auditing.commands import clean_command
from transferdx.auditing.facts import (
    DIRECTIONS,
    SourceFacts,
    cleaning_evidence,
    cut_precision_text,
    legend_lines,
    mined,
    mined_precision,
    precision_text,
    psi_evidence,
    row_number,
    span_text,
)
from transferdx.diagnostics.suspicion import MIN_PROBABILITY

# Fewer records than this: bootstrap CIs over records and the ranking of sources are not read
# (with under 30 resampling units a percentile interval is unreliable), a warning is said instead.
MIN_RECORDS = 30


# the random-mix controls, mildest first (the verdict's ladder sentence and the paper's ladder figure)
LADDER = ("random_mix_25", "random_mix_50", "random_mix_75", "random_mix_100")


# ---------------------------------------------------------------------------------------------
# Numbers and commands
# ---------------------------------------------------------------------------------------------


def _ci(row: Mapping[str, Any], column: str) -> str:
    prefix = column.removesuffix("_mean")
    low, high = row_number(row, f"{prefix}_ci_low"), row_number(row, f"{prefix}_ci_high")
    value = row_number(row, column)
    if math.isnan(low) or math.isnan(high):
        return f"{value:.3f}"
    return f"{value:.3f} [{low:.3f}, {high:.3f}]"


def _share(k: int, n: int) -> str:
    return f"{k} of {n} negatives ({k / n:.1%})" if n else f"{k} of 0 negatives"


def prior_unidentified(row: Mapping[str, Any]) -> bool:
    """The audit's estimate of the source's share of false negatives fell on 1, or on 0 with a mining
    margin in sight (``fn_prior_boundary``): the file looks filtered by the audit's own encoder
    (:func:`~transferdx.auditing.pooling.source_priors`)."""
    return not math.isnan(row_number(row, "fn_prior_boundary"))


def prior_sentence(row: Mapping[str, Any]) -> str:
    """That the source's share of false negatives is not estimated, why, and what was measured instead
    (:data:`~transferdx.auditing.pooling.PRIOR_WHY`)."""
    m = mined()
    said = ""
    if prior_unidentified(row):
        side = "0" if row_number(row, "fn_prior_boundary") < 0.5 else "1"
        said = (
            "its negatives fit no mix of the detectors' false and true negatives (the share's estimate falls on"
            f" {side}), as when the file's miner filtered them under the audit's own encoder; "
        )
    return (
        f"{said}how many of its negatives are false negatives is not estimated from the file, and fn_probability is"
        f" not moved to it: it is calibrated at TREC-DL's share (ECE {span_text(m['ece'])} on {m['n_files']} files"
        f" mined the way users mine, {m['where']}, where the share was {span_text(m['share'])} by regime and the"
        f" audit's estimate of it covered it on {m['em_covered']} of {m['em_estimated']} files and fell on 0 or 1 on"
        f" {m['em_boundary']})"
    )


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
        parts.append(
            f"{f.n_near_copies} are near-copies of one (s(p0,n) ≥ δ; {precision_text('near_duplicate_positive')})"
        )
    if f.n_probable is not None:
        parts.append(
            f"{f.n_probable} have fn_probability ≥ {MIN_PROBABILITY:.2f} ({cut_precision_text()}; {mined_precision()})"
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
        rule = f"the suspicion rule's {precision_text('default_rule')}; many are ordinary hard negatives"
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
        f" on files mined the way users mine {span_text(m['share'])} of the negatives were false negatives by regime,"
        f" and where the audit's own encoder mined with a margin default cleaning caught"
        f" {span_text(m['own_margin']['clean_recall'])} of them ({m['where']}).{hidden}",
        "Check before training: audit it with a second encoder (`backbone=static_minilm`, or `backbone=mpnet_base`),"
        " score it with a cross-encoder if you have one, or read the suspects"
        f" ({ctx.settings.get('_suspects_where') or 'suspects.csv lists them'}).",
    )


def _use(row: Mapping[str, Any], ctx: Context) -> Finding | None:
    f = ctx.facts
    inv = row_number(row, "inversion_rate")
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
        value = row_number(row, column)
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
    genuine = [r for r in rows if r.get("kind") == "genuine" and row_number(r, "n_records") > 0]
    semantic = any(not math.isnan(row_number(r, "rho_mean")) for r in rows)
    mode = str(settings.get("flags") or "envelope")
    out = ["## Verdict", ""]
    for row in genuine:
        name, n = str(row["source"]), int(row_number(row, "n_records"))
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
        fn = row_number(row, "fn_suspect_rate")
        if not math.isnan(fn):
            out.append(
                f"  Suspected false negatives: {f.n_suspects} ({_ci(row, 'fn_suspect_rate')} of its negatives);"
                f" the rule's {precision_text('default_rule', full=True)}."
            )
        inv = row_number(row, "inversion_rate")
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


def _facts_from_row(row: Mapping[str, Any]) -> SourceFacts:
    """Counts recovered from the profile's rates when no per-negative table is at hand."""
    n = int(row_number(row, "n_negatives")) if not math.isnan(row_number(row, "n_negatives")) else 0
    fn, dup = row_number(row, "fn_suspect_rate"), row_number(row, "duplicate_positive_rate")
    copies = round(dup * n) if not math.isnan(dup) else 0
    return SourceFacts(n, round(fn * n) if not math.isnan(fn) else 0, copies, copies)


def _parents(settings: Mapping[str, Any]) -> list[str]:
    built = settings.get("self_controls") or {}
    return [str(p) for p in (built.get("parents") or ([built["parent"]] if built.get("parent") else []))]


def _ladder_line(rows: Sequence[Mapping[str, Any]]) -> str | None:
    """What the random-mix ladder shows (None when none of its rungs was built with records)."""
    if not any(r.get("source") in LADDER and row_number(r, "n_records") > 0 for r in rows):
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
    empty = [str(r["source"]) for r in rows if r.get("kind") != "genuine" and not row_number(r, "n_records") > 0]
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
    big = [
        r for r in genuine if row_number(r, "n_records") >= MIN_RECORDS and not math.isnan(row_number(r, "psi_mean"))
    ]
    small = [r for r in genuine if row_number(r, "n_records") < MIN_RECORDS]
    out = []
    if len(big) >= 2:
        ranked = sorted(big, key=lambda r: (-row_number(r, "psi_mean"), str(r["source"])))
        parts = [f"{ranked[0]['source']} {row_number(ranked[0], 'psi_mean'):.3f}"]
        for a, b in itertools.pairwise(ranked):
            overlap = row_number(a, "psi_ci_low") <= row_number(b, "psi_ci_high")
            parts.append(f"{'≈' if overlap else '>'} {b['source']} {row_number(b, 'psi_mean'):.3f}")
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
            f"{MIN_RECORDS} records): " + ", ".join(f"{r['source']} ({int(row_number(r, 'n_records'))})" for r in small)
        )
    return out
