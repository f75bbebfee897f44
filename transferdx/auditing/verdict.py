"""The verdict: what an audit says about each source, in plain words (the top of report.md, the first
screen of ``transferdx-audit`` and the notebook display). Pure: profile rows and per-source facts in,
Markdown lines out.

It has three parts (:func:`verdict_parts`). **The decision**: one line per genuine source — its
name, records, its one action (its **bottom line**) and the one number behind it. **The evidence**,
per source: short lines, one fact each (the command to run first, where there is one). **What holds
for every source**, stated once per run: the rules' measured precision, where ``fn_probability`` was
calibrated, what cleaning did to trained retrievers, what ψ's order means, what the controls caught.

The action is the first of :data:`BOTTOM_LINE_ACTIONS` whose advice (:data:`ADVICE`, a registry in
that order) finds something, so re-mine beats clean beats check beats review beats use as is.
Re-mine: an absolute flag says the negatives are mostly inverted, or mostly another query's
positive. Clean: negatives that copy a positive (default cleaning removes them, and the near-copies
and ``fn_probability`` ≥ :data:`~transferdx.diagnostics.suspicion.MIN_PROBABILITY` with them). Check
with a second encoder: the audit cannot see the false negatives (:func:`prior_unidentified`, or no
suspect where the detector reads the negatives as often false). Review the listed suspects: at least
:data:`REVIEW_MIN_EXPECTED` of them are expected to be false negatives (Σ ``fn_probability``) — fewer
is "use as is", with the count said. An action is never said against its own number: each finding's
``number`` is the fact that decides it. A source with fewer than :data:`MIN_RECORDS` records gets a
warning instead of a place in the ranking."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from transferdx.auditing.commands import clean_command
from transferdx.auditing.facts import (
    SourceFacts,
    calibration_lines,
    cleaning_lines,
    cut_precision_text,
    mined,
    mined_precision,
    precision_lines,
    psi_lines,
    span_text,
)
from transferdx.auditing.legend import DIRECTIONS, row_number
from transferdx.auditing.profiles import below
from transferdx.diagnostics.miner import SAME_ENCODER_MIN, MinerFacts
from transferdx.diagnostics.suspicion import MIN_PROBABILITY

# Fewer records than this: bootstrap CIs over records and the ranking of sources are not read
# (with under 30 resampling units a percentile interval is unreliable), a warning is said instead.
MIN_RECORDS = 30

# "review the listed suspects" needs at least this many of them expected to be false negatives
# (Σ fn_probability at TREC-DL's share): reading suspects where under one is expected finds nothing.
REVIEW_MIN_EXPECTED = 1.0

# the random-mix controls, mildest first (the verdict's ladder sentence and the paper's ladder figure)
LADDER = ("random_mix_25", "random_mix_50", "random_mix_75", "random_mix_100")


# ---------------------------------------------------------------------------------------------
# Numbers
# ---------------------------------------------------------------------------------------------


def _ci(row: Mapping[str, Any], column: str, percent: bool = False) -> str:
    prefix = column.removesuffix("_mean")
    low, high = row_number(row, f"{prefix}_ci_low"), row_number(row, f"{prefix}_ci_high")
    value = row_number(row, column)
    fmt = (lambda v: f"{v:.1%}") if percent else (lambda v: f"{v:.3f}")
    if math.isnan(low) or math.isnan(high):
        return fmt(value)
    return f"{fmt(value)} [{fmt(low)}, {fmt(high)}]"


def _share(k: int, n: int) -> str:
    return f"{k} of {n} negatives ({k / n:.1%})" if n else f"{k} of 0 negatives"


def _suspects(k: int) -> str:
    return f"{k} suspect{'' if k == 1 else 's'}"


def prior_unidentified(row: Mapping[str, Any]) -> bool:
    """The audit's estimate of the source's share of false negatives fell on 1, or on 0 with a mining
    margin in sight (``fn_prior_boundary``): the file looks filtered by the audit's own encoder
    (:func:`~transferdx.auditing.pooling.source_priors`)."""
    return not math.isnan(row_number(row, "fn_prior_boundary"))


def prior_sentence(row: Mapping[str, Any]) -> str:
    """Why the source's share of false negatives is not estimated from the file (one short line; where
    ``fn_probability`` was calibrated instead is said once per run, :func:`calibration_lines`)."""
    if prior_unidentified(row):
        side = "0" if row_number(row, "fn_prior_boundary") < 0.5 else "1"
        return (
            f"its share of false negatives is not estimated (fits no mix: estimate on {side}, as if filtered by"
            " this encoder)"
        )
    return "its share of false negatives is not estimated from the file (fn_probability is at TREC-DL's share)"


def _absolute(row: Mapping[str, Any]) -> dict[str, str] | None:
    """The row's absolute flags (name → reason), or None when the profile has no such column."""
    if "absolute_flags" not in row:
        return None
    names = [n for n in str(row.get("absolute_flags") or "").split(";") if n]
    reasons = [r for r in str(row.get("absolute_flag_reasons") or "").split("; ") if r]
    return {n: (reasons[i] if i < len(reasons) else n) for i, n in enumerate(names)}


# ---------------------------------------------------------------------------------------------
# The bottom line: a registry of advice, each an action and the number that decides it
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
    """What one advice found: ``number`` (the fact that decides it, with its number: the decision
    line's when its action is the bottom line, else one evidence line), ``lines`` (more facts, one a
    line), ``act`` (what to do, said only when its action is the bottom line: a command or an
    instruction). ``lead_only``: said only as the bottom line."""

    number: str
    lines: tuple[str, ...] = ()
    act: str = ""
    lead_only: bool = False


Advice = Callable[[Mapping[str, Any], Context], "Finding | None"]


def _on_flag(flag: str, why: str, act: str) -> Advice:
    """Advice that fires on the absolute flag ``flag``: its reason, ``why`` and ``act``."""

    def advice(row: Mapping[str, Any], ctx: Context) -> Finding | None:
        reason = (_absolute(row) or {}).get(flag)
        return None if reason is None else Finding(reason, (why,), act)

    advice.__name__ = f"_on_{flag}"
    return advice


def _whose(m: MinerFacts) -> str:
    """Whose scores the filters were weighed on: the file's, or the audit's encoder's standing in."""
    return "your scores" if m.scores == "file" else "this encoder's scores (your file has none)"


def remine_act(m: MinerFacts | None) -> str:
    """The re-mine instruction for mostly inverted negatives: the filter setting chosen on the file's
    scores (:func:`~transferdx.diagnostics.miner.choose`), or, where no setting removes more probable
    false negatives than hard negatives, none named; without the per-negative table (a profile row
    alone) the library docs' example."""
    head = "re-mine with sentence-transformers' `mine_hard_negatives`"
    if m is None:
        return (
            f"{head} with a margin below the positive: `relative_margin=0.05`, or `range_min=10` to skip the top ranks"
        )
    if m.chosen is not None:
        return f"{head} with `{m.chosen.setting.text}` (chosen on {_whose(m)}: what it drops is below)"
    return (
        f"{head}: on {_whose(m)} no filter setting removes more probable false negatives than hard negatives, so"
        " none is named; `range_min=10` skips the top ranks"
    )


def _remine_inverted(row: Mapping[str, Any], ctx: Context) -> Finding | None:
    """Most negatives outscore the positive (absolute flag ``mostly_inverted``): re-mine, with the filter
    setting chosen on the file's scores (:func:`remine_act`)."""
    reason = (_absolute(row) or {}).get("mostly_inverted")
    if reason is None:
        return None
    why = (
        "most negatives outscore the positive under the frozen encoder: the labels, not the encoder, are the"
        " likelier error"
    )
    return Finding(reason, (why,), remine_act(ctx.facts.miner))


def filter_line(m: MinerFacts) -> str:
    """The one evidence line of sentence-transformers' filters on the source's scores: the setting
    chosen (:func:`~transferdx.diagnostics.miner.choose`) with what it drops, or that none is worth it;
    the Σ are at fn_probability's calibration (ECE on mined files). report.md has every setting."""
    head = f"filters on {_whose(m)}"
    if not m.scored:
        return f"{head}: not weighed (fn_probability needs the encoder); report.md lists what each setting drops"
    ece = f"fn_probability, ECE {span_text(mined()['ece'])} on mined files"
    c = m.chosen
    if c is None:
        return f"{head}: no setting removes more probable false negatives than hard negatives ({ece}); none named"
    return (
        f"{head}: `{c.setting.text}` drops {c.dropped} negatives: {c.expected_false:.1f} expected false,"
        f" {c.expected_hard:.1f} hard ({ece}); {c.emptied} queries emptied"
    )


def agreement_line(m: MinerFacts) -> str | None:
    """The miner's scores against the audit's encoder (Spearman's ρ over the source's negatives), one
    line; None where not measured (no file scores, or no encoder)."""
    if m.agreement is None:
        return None
    said = f"the miner's scores vs this encoder's: Spearman {m.agreement:.3f} over {m.n_scored} negatives"
    if m.same_encoder:
        return said + ": as if mined by this encoder, so the audit cannot see what that encoder would flag"
    return said + " (another scorer)"


_remine_other_positive = _on_flag(
    "copies_other_positive",
    "they are passages the file labels relevant to another query: in-batch negatives already, not mined",
    "re-mine from the corpus: sentence-transformers' `mine_hard_negatives` with `corpus=` the full collection",
)


EASY_NOTE = "mostly easy negatives"


def _easy(row: Mapping[str, Any], ctx: Context) -> Finding | None:
    """Mostly easy negatives are a note, not a reason to re-mine: easy negatives waste compute, and
    in the package's own validation (docs/validation.md) sources flagged so did not train worse."""
    reason = (_absolute(row) or {}).get("mostly_easy")
    if reason is None:
        return None
    return Finding(
        f"{EASY_NOTE}: {reason}: little over in-batch negatives; not a defect in the package's validation"
        " (docs/validation.md)"
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
    """What default cleaning removes, by reason."""
    parts = [f"{f.n_copies} copy a positive"]
    if f.n_near_copies is not None:
        parts.append(f"{f.n_near_copies} are near-copies of one (s(p,n) ≥ δ)")
    if f.n_probable is not None:
        parts.append(f"{f.n_probable} have fn_probability ≥ {MIN_PROBABILITY:.2f}")
    return ", ".join(parts)


def _keeps(f: SourceFacts) -> list[str]:
    """How many queries (and, one row per query, rows) default cleaning keeps: every query that keeps a
    negative; a row's emptied slots repeat its own remaining negatives (``clean.fill=repeat``)."""
    if not f.queries:  # facts without the records (a profile row alone)
        return []
    rows = f" and {f.queries_kept} of {f.rows_read} rows" if f.rows_read == f.queries else ""
    return [
        f"cleaning keeps {f.queries_kept} of {f.queries} queries{rows} (those left with a negative); a row's"
        " emptied slots repeat its own remaining negatives"
    ]


def _clean(row: Mapping[str, Any], ctx: Context) -> Finding | None:
    f = ctx.facts
    if not _cleans(row, f):
        return None
    lexical = f.n_near_copies is None and f.n_probable is None
    lines = [f"default cleaning removes them: {_removable(f)}", *_keeps(f)]
    lines += [f"absolute flag: {c}" for c in _copy_flags(row)]
    return Finding(
        f"{_share(f.n_act, f.n_negatives)} are probable false negatives",
        tuple(lines),
        f"run: {clean_command(ctx.settings, ctx.input_path, lexical)}",
    )


def _by_construction(row: Mapping[str, Any], ctx: Context) -> Finding | None:
    m = ctx.facts.margin
    if m is None or ctx.facts.n_positive_aware != 0:
        return None
    return Finding(
        f"mined with a margin under this encoder: every negative ≤ {1 - m.relative:.3f}·s(q,p) (smallest gap"
        f" {m.absolute:.3f}), below the positive-aware bar {m.alpha}·s(q,p), so that rule finds 0 by construction"
    )


def _where(settings: Mapping[str, Any]) -> str:
    """Where the suspects are listed: suspects.csv, or ``.suspects`` when nothing was written."""
    return str(settings.get("_suspects_where") or "suspects.csv lists them")


def _review(row: Mapping[str, Any], ctx: Context) -> Finding | None:
    """The suspects default cleaning leaves in place, when at least :data:`REVIEW_MIN_EXPECTED` of
    them are expected to be false negatives (or the expectation is not scored, as in a lexical
    audit); a genuine source outside the other sources' range (envelope flags)."""
    f = ctx.facts
    cleans = _cleans(row, f)
    rest = f.n_review if cleans else f.n_suspects
    expected = f.expected_review if cleans else f.expected_suspects
    flags = str(row.get("flags") or "") if ctx.mode == "envelope" else ""
    enough = rest > 0 and (expected is None or expected >= REVIEW_MIN_EXPECTED)
    if not enough and not flags:
        return None
    lines = []
    number = f"against the other sources' range (envelope): {row.get('flag_reasons')}"
    if enough:
        left = " default cleaning leaves in place" if cleans else ""
        number = f"{_share(rest, f.n_negatives)} are suspects{left}; " + (
            f"{expected:.1f} expected false at TREC-DL's share (≥ {REVIEW_MIN_EXPECTED:g})"
            if expected is not None
            else "how many are false is not scored here"
        )
        if flags:
            lines.append(f"against the other sources' range (envelope): {row.get('flag_reasons')}")
        if not cleans and f.n_act:
            lines += [f"default cleaning would remove {f.n_act} of them: {_removable(f)}", *_keeps(f)]
    act = f"read them before training ({_where(ctx.settings)}, most probable first)" if enough else ""
    if enough and not cleans and f.n_act:
        act += f"; {clean_command(ctx.settings, ctx.input_path)} removes the {f.n_act}"
    return Finding(number, tuple(lines), act)


# "check" when the detector reads the negatives as often false yet finds no suspect: a mean
# fn_probability (at TREC-DL's share) at least this. Every one of the 42 files mined the way users
# mine read 0.29–0.71 (their judged share 0.11–0.65; experiments/results/fn_mined), the demo's BM25
# and handwritten sources 0.10 and 0.07.
USE_MAX_MEAN = 0.20


def _unseen(row: Mapping[str, Any], ctx: Context) -> Finding | None:
    """No reassurance where the audit cannot see the false negatives: a file that looks filtered by its
    own encoder (:func:`prior_unidentified`), one with no suspect whose negatives the detector reads
    as often false (mean fn_probability ≥ :data:`USE_MAX_MEAN`) — few suspects may be all it can see —
    or one whose miner's scores rank its negatives as this encoder does (Spearman ≥
    :data:`~transferdx.diagnostics.miner.SAME_ENCODER_MIN`) with under :data:`REVIEW_MIN_EXPECTED`
    suspect expected false: mined by this encoder, what it would flag is what the miner saw."""
    f = ctx.facts
    m = mined()
    mean = f.mean_probability
    high = mean is not None and mean >= USE_MAX_MEAN and f.n_suspects == 0
    # mined by this encoder and nothing for review: what it would flag is what the miner saw
    few = f.n_suspects == 0 or (f.expected_suspects is not None and f.expected_suspects < REVIEW_MIN_EXPECTED)
    same = f.miner is not None and f.miner.same_encoder and few
    if not prior_unidentified(row) and not high and not same:
        return None
    if high:
        number = f"{_suspects(f.n_suspects)}, yet mean fn_probability {mean:.2f} (≥ {USE_MAX_MEAN:.2f})"
    elif prior_unidentified(row):
        number = f"{_suspects(f.n_suspects)}; {prior_sentence(row)}"
    else:
        rho = f.miner.agreement if f.miner is not None and f.miner.agreement is not None else math.nan
        number = (
            f"{_suspects(f.n_suspects)}; the miner's scores rank the negatives as this encoder does (Spearman"
            f" {rho:.3f} ≥ {SAME_ENCODER_MIN:.2f})"
        )
    caught = span_text(m["own_margin"]["clean_recall"])
    lines = [
        f"on {m['n_files']} files mined the way users mine ({m['where']}) {span_text(m['share'])} of negatives were"
        f" false by regime; where the audit's encoder mined with a margin, cleaning caught {caught}"
    ]
    if same and not high and not prior_unidentified(row):
        lines.append(
            "as if mined by this encoder, so the audit cannot see what that encoder would flag (a margin under it"
            " removes exactly that)"
        )
    if f.margin is not None:
        lines.append(
            f"its negatives stop at a margin under this encoder (each ≤ {1 - f.margin.relative:.3f}·s(q,p)): the miner"
            " removed what this encoder would flag"
        )
    return Finding(
        number,
        tuple(lines),
        "check: audit it with a second encoder (`backbone=static_minilm` or `backbone=mpnet_base`), score it with"
        f" a cross-encoder, or read the suspects ({_where(ctx.settings)})",
    )


def _use(row: Mapping[str, Any], ctx: Context) -> Finding | None:
    f = ctx.facts
    said = f"{_suspects(f.n_suspects)} in {f.n_negatives} negatives"
    if f.n_suspects and f.expected_suspects is not None:
        said += (
            f"; {below(f.expected_suspects, REVIEW_MIN_EXPECTED)} expected false at TREC-DL's share"
            f" (under {REVIEW_MIN_EXPECTED:g})"
        )
    return Finding(said, lead_only=True)


# action → the advice that finds it, most severe action first (:data:`BOTTOM_LINE_ACTIONS`); the first
# action with a finding is the bottom line, the milder findings are said as evidence
ADVICE: tuple[tuple[str, tuple[Advice, ...]], ...] = (
    ("re-mine", (_remine_inverted, _remine_other_positive)),
    ("clean", (_clean,)),
    ("check with a second encoder", (_unseen,)),
    ("review the listed suspects", (_review,)),
    ("use as is", (_by_construction, _use, _easy)),
)
BOTTOM_LINE_ACTIONS = tuple(action for action, _ in ADVICE)  # most severe first: the order that decides


@dataclass(frozen=True)
class Judgement:
    """A source's one ``action``, its ``number`` (the decision line's fact), ``lines`` (the evidence
    of its action, its instruction first) and ``support`` (the milder findings, facts only)."""

    action: str
    number: str
    lines: tuple[str, ...]
    support: tuple[str, ...]


def judge(row: Mapping[str, Any], ctx: Context) -> Judgement:
    """The first action of :data:`ADVICE` with a finding, its findings, and the milder ones' facts."""
    found = [(action, f) for action, rules in ADVICE for rule in rules if (f := rule(row, ctx)) is not None]
    action = found[0][0]
    lead = [f for a, f in found if a == action]
    lines = [x.act for x in lead if x.act] + [x.number for x in lead[1:]] + [y for x in lead for y in x.lines]
    support = tuple(y for a, f in found if a != action and not f.lead_only for y in (f.number, *f.lines))
    return Judgement(action, lead[0].number, tuple(lines), support)


def bottom_line(row: Mapping[str, Any], ctx: Context) -> tuple[str, list[str]]:
    """(action, what is said with it): :func:`judge`'s action, its number and its lines."""
    j = judge(row, ctx)
    return j.action, [j.number, *j.lines]


def _small(n: int) -> str | None:
    if n >= MIN_RECORDS:
        return None
    few = "1 record is" if n == 1 else f"{n} records are"
    return (
        f"warning: {few} too few for the statistics (under {MIN_RECORDS}): intervals unreliable, not ranked;"
        " read its suspects one by one"
    )


def _fixed_comparison(row: Mapping[str, Any], thresholds: Mapping[str, float]) -> list[str]:
    out = []
    for column, threshold in thresholds.items():
        value = row_number(row, column)
        if not math.isnan(value):
            out.append(f"{DIRECTIONS[column][0]} {value:.3f} (study: {threshold})")
    return out


FIXED = {"rho_mean": 0.870, "eta_mean": 0.443, "psi_mean": 0.529, "inversion_rate": 0.083}  # the study's


def decision_line(name: str, n: int, j: Judgement) -> str:
    """A source's line of the decision: name, records, action, the number behind it."""
    unit = "record" if n == 1 else "records"
    return f"- **{name}** ({n} {unit}) — **bottom line: {j.action}.** {j.number}."


def _evidence(
    row: Mapping[str, Any],
    f: SourceFacts,
    j: Judgement,
    settings: Mapping[str, Any],
    mode: str,
    semantic: bool,
    rows: Sequence[Mapping[str, Any]],
) -> list[str]:
    """A source's evidence, one fact a line: its action's instruction and facts, the milder findings,
    then what the audit counted."""
    name = str(row["source"])
    out = [*j.lines, *j.support]
    if f.miner is not None:  # the miner's scores: their agreement with this encoder, the filters on them
        agree = agreement_line(f.miner) if "Spearman" not in j.number else None
        # what sentence-transformers' filters would drop is the re-mine/clean advice's (report.md: every source)
        remined = j.action in ("re-mine", "clean")
        out += [*([agree] if agree else []), *([filter_line(f.miner)] if remined else [])]
    if (small := _small(int(row_number(row, "n_records")))) is not None:
        out.append(small)
    if (excluded := row_number(row, "n_excluded_records")) > 0:
        out.append(f"excluded on reading: {int(excluded)} records (exclusions.csv lists each with its line and why)")
    if f.cleaned:
        reasons = ", ".join(map(str, f.cleaned.get("reasons") or [])) or "none"
        out.append(
            f"a cleaned copy (action {f.cleaned.get('action')}, reasons {reasons}): what was removed is not counted"
        )
    fn = row_number(row, "fn_suspect_rate")
    if not math.isnan(fn):
        expected = (
            f"; Σ fn_probability {f.expected_suspects:.1f}" if f.n_suspects and f.expected_suspects is not None else ""
        )
        out.append(
            f"suspects: {f.n_suspects} of {f.n_negatives} negatives ({_ci(row, 'fn_suspect_rate', True)}){expected}"
            + (f"; {_where(settings)}, most probable first" if f.n_suspects else "")
        )
    inv = row_number(row, "inversion_rate")
    if not math.isnan(inv):
        out.append(f"inversions: {_ci(row, 'inversion_rate', True)} of records have a negative scoring ≥ the positive")
    if name in _parents(settings) and (ladder := _ladder_line(rows)):
        out.append(ladder)
    if semantic and mode == "fixed" and (compared := _fixed_comparison(row, FIXED)):
        out.append(f"the study's values, fixed on another encoder and data set (reference only): {', '.join(compared)}")
    return out


def verdict_parts(
    rows: Sequence[Mapping[str, Any]],
    catch: Mapping[str, Any],
    settings: Mapping[str, Any] | None = None,
    *,
    facts: Mapping[str, SourceFacts] | None = None,
    written: bool = True,
    input_path: str | None = None,
) -> tuple[list[str], list[str]]:
    """(decision, evidence): the decision's one line per genuine source (:func:`decision_line`), and
    the evidence — per source, its name and its facts one a line; then what holds for every source,
    once (the measured precisions, calibration, cleaning's effect on training, ψ, the controls).
    ``facts``: :func:`source_facts` (without them the counts come from the profile's rates);
    ``written``: whether suspects.csv was written (the Python verdict points to ``.suspects``);
    ``input_path``: the input the audit read, for the command said (None: the name in ``settings``)."""
    settings = dict(settings or {})
    settings["_suspects_where"] = "suspects.csv lists them" if written else "`.suspects` lists them"
    genuine = [r for r in rows if r.get("kind") == "genuine" and row_number(r, "n_records") > 0]
    semantic = any(not math.isnan(row_number(r, "rho_mean")) for r in rows)
    mode = str(settings.get("flags") or "envelope")
    decision: list[str] = []
    evidence: list[str] = []
    actions, scored = set(), False
    for row in genuine:
        name, n = str(row["source"]), int(row_number(row, "n_records"))
        f = (facts or {}).get(name) or _facts_from_row(row)
        j = judge(row, Context(f, mode, settings, input_path))
        actions.add(j.action)
        scored |= f.n_suspects > 0 and (f.n_probable is not None or f.n_near_copies is not None)
        decision.append(decision_line(name, n, j))
        evidence += [f"**{name}**", *(f"- {x}" for x in _evidence(row, f, j, settings, mode, semantic, rows)), ""]
    evidence += [
        "**Every source**",
        *(f"- {x}" for x in _run_lines(rows, genuine, catch, settings, semantic, actions, scored)),
    ]
    return decision, evidence


def _run_lines(
    rows: Sequence[Mapping[str, Any]],
    genuine: Sequence[Mapping[str, Any]],
    catch: Mapping[str, Any],
    settings: Mapping[str, Any],
    semantic: bool,
    actions: set[str],
    scored: bool,
) -> list[str]:
    """What holds for every source, said once: the measured evidence the actions rest on."""
    out = []
    if any(not math.isnan(row_number(r, "fn_suspect_rate")) for r in genuine):
        out += precision_lines("default_rule", "suspicion rule")
    if scored:  # what the suspects' reasons were measured to be worth
        out += precision_lines("near_duplicate_positive", "near-copies of a positive")
        out.append(f"fn_probability ≥ {MIN_PROBABILITY:.2f}: {cut_precision_text()}")
        out.append(f"default cleaning: {mined_precision()}")
    if semantic:
        out += calibration_lines()
    if "clean" in actions:
        out += cleaning_lines()
    out += _ranking_lines(genuine)
    out += _controls_lines(rows, catch, settings)
    return out


def verdict_lines(
    rows: Sequence[Mapping[str, Any]],
    catch: Mapping[str, Any],
    settings: Mapping[str, Any] | None = None,
    *,
    facts: Mapping[str, SourceFacts] | None = None,
    written: bool = True,
    input_path: str | None = None,
) -> list[str]:
    """The verdict section of report.md and ``Audit.verdict()``: ``## Verdict``, the decision, a blank
    line, the evidence (:func:`verdict_parts`)."""
    decision, evidence = verdict_parts(rows, catch, settings, facts=facts, written=written, input_path=input_path)
    return ["## Verdict", "", *decision, "", *evidence, ""]


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
    return "controls made from it: " + (
        f"replacing {smallest}% of its negatives by random passages is already flagged"
        if smallest
        else "no rung of the random-mix ladder is flagged (the diagnostics are blind to that defect here)"
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
            f"controls (known defects) flagged: {catch.get('n_controls_flagged', 0)} of {n_controls}"
            + (f"; not caught: {', '.join(map(str, missed))}" if missed else "")
            + (f"; built empty (not audited): {', '.join(empty)}" if empty else "")
        )
    built = settings.get("self_controls")
    if built:
        whose = " and ".join(f"`{p}`" for p in _parents(settings))
        sample = built.get("sample") or {}
        out.append(
            f"the controls were built from {whose}'s own records and passages"
            + (f", each on a seeded sample of {sample['records']} of its {sample['of']} records" if sample else "")
            + (
                "; not built: " + "; ".join(f"{k} ({v})" for k, v in sorted(built["skipped"].items()))
                if built.get("skipped")
                else ""
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
            "genuine sources by mean ψ (the study found higher went with better transfer): " + " ".join(parts) + legend
        )
        out += psi_lines()
    if small and len(genuine) >= 2:
        out.append(
            f"not ranked (under {MIN_RECORDS} records): "
            + ", ".join(f"{r['source']} ({int(row_number(r, 'n_records'))})" for r in small)
        )
    return out
