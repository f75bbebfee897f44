"""Writing an audit to disk: profile CSV/JSON, per-record and per-negative tables, exclusions,
``report.md`` and its plots. All files are written atomically inside the given output folder."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from transferdx.artifacts import (
    atomic_write_bytes,
    atomic_write_csv,
    atomic_write_text,
    canonical_json,
    csv_text,
    safe_join,
    write_meta,
)
from transferdx.auditing.audit import AuditResult
from transferdx.auditing.facts import SourceFacts, audit_facts, mined, span_text
from transferdx.auditing.html import write_html
from transferdx.auditing.legend import legend_lines
from transferdx.auditing.plots import plot_bands, plot_fn_evaluation, plot_margins, plot_profile, plot_psi
from transferdx.auditing.profiles import MEAN_STATS
from transferdx.auditing.verdict import verdict_lines
from transferdx.diagnostics.fn_combined import cleaning_cut
from transferdx.diagnostics.miner import SAME_ENCODER_MIN
from transferdx.diagnostics.semantic import BANDS
from transferdx.diagnostics.suspicion import MIN_PROBABILITY
from transferdx.inputs.records import Exclusion

EXCLUSION_COLUMNS = [f.name for f in fields(Exclusion)]
AUDIT_FILES = {
    "profile_csv": "profile.csv",
    "profile_json": "profile.json",
    "records": "records.csv",
    "negatives": "negatives.csv",
    "exclusions": "exclusions.csv",
    "suspects": "suspects.csv",
    "control_suspects": "control_suspects.csv",
    "report": "report.md",
    "report_html": "report.html",  # report.md as one self-contained page (auditing/html.py)
    "plot": "psi.png",
    "plot_profile": "profile.png",
    "plot_margins": "margins.png",
    "plot_bands": "bands.png",
    "plot_fn": "fn_pr.png",
}
MARGIN_STATS = [  # quantiles of the record margins and the shares by sign, each with its CI
    ("margin_median", "margin_median", "margin_median"),
    ("margin_p05", "margin_p05", "margin_p05"),
    ("margin_p10", "margin_p10", "margin_p10"),
    ("margin_lt0", "margin_lt0", "margin_lt0"),
    ("margin_eq0", "margin_eq0", "margin_eq0"),
    ("margin_gt0", "margin_gt0", "margin_gt0"),
]
SUSPICION_REPORT_STATS = [  # §3.9 shares of negatives, each with its CI
    ("fn_suspect_rate", "fn_suspect_rate", "fn_suspect_rate"),
    ("duplicate_positive_rate", "duplicate_positive_rate", "duplicate_positive"),
    ("duplicate_negative_rate", "duplicate_negative_rate", "duplicate_negative"),
    ("positive_aware_rate", "positive_aware_rate", "positive_aware"),
    ("combined_rate", "combined_rate", "combined"),
    ("near_duplicate_positive_rate", "near_duplicate_positive_rate", "near_duplicate_positive"),
    ("other_positive_rate", "other_positive_rate", "other_positive"),  # not a reason: §3.5's absolute flag
]
SUSPECTS_SHOWN = 10  # per source in report.md; the suspects files have them all
# kind of source → the file of its suspects (AUDIT_FILES key): the user's own in suspects.csv, the
# controls' apart, so suspects.csv and Audit.suspects are the same rows
SUSPECT_FILES = {"genuine": "suspects", "control": "control_suspects"}
TEXT_WIDTH = 120
COMPOSITE_STATS = [
    ("composite_logdet", "composite_logdet", "composite_logdet"),
    ("composite_trace", "composite_trace", "composite_trace"),
]


def _json_safe(value: Any) -> Any:
    """NaN/inf → None so that profile.json is strict JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        return _json_safe(value.item())
    return value


def exclusions_frame(exclusions: tuple[Exclusion, ...]) -> pd.DataFrame:
    return pd.DataFrame([asdict(e) for e in exclusions], columns=EXCLUSION_COLUMNS)


def _cell(value: Any, floatfmt: str) -> str:
    if isinstance(value, float):
        return "—" if math.isnan(value) else format(value, floatfmt)
    return str(value)


def _markdown_table(frame: pd.DataFrame, floatfmt: str = ".4f") -> str:
    cols = list(frame.columns)
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for _, row in frame.iterrows():
        lines.append("| " + " | ".join(_cell(row[c], floatfmt) for c in cols) + " |")
    return "\n".join(lines)


def _with_ci(frame: pd.DataFrame, stats: list[tuple[str, str, str]], fmt: str = ".3f") -> pd.DataFrame:
    """A table of ``value [low, high]`` cells for the stats present in ``frame``."""
    out = pd.DataFrame({"source": frame["source"], "kind": frame["kind"]})
    for col, prefix, label in stats:
        if col not in frame:
            continue
        out[label] = [
            "—"
            if math.isnan(v)
            else f"{v:{fmt}}" + ("" if math.isnan(lo) and math.isnan(hi) else f" [{lo:{fmt}}, {hi:{fmt}}]")
            for v, lo, hi in zip(frame[col], frame[f"{prefix}_ci_low"], frame[f"{prefix}_ci_high"], strict=True)
        ]  # a value without a CI (no resamples, e.g. diagnostics.composite.resamples=0) shows alone
    return out


def _composite_ci_note(frame: pd.DataFrame, settings: Mapping[str, Any]) -> list[str]:
    """Which sources' composites show without a CI because they are too large for its bootstrap
    (``diagnostics.composite.max_negatives``), and how to ask for it anyway."""
    if "composite_ci_resamples" not in frame or not settings.get("bootstrap_resamples"):
        return []
    skipped = frame[(frame["composite_ci_resamples"] == 0) & (frame["n_negatives"] > 0)]
    limit = settings.get("composite_ci_max_negatives")
    if not len(skipped) or limit is None:
        return []
    names = ", ".join(f"{s} ({n:,} negatives)" for s, n in zip(skipped["source"], skipped["n_negatives"], strict=True))
    return [
        "",
        f"No composite CI for {names}: more than diagnostics.composite.max_negatives = {int(limit):,} negatives,"
        " where its bootstrap takes about resamples × negatives × 3.3e-6 s on 2 cores. Set"
        " diagnostics.composite.resamples to compute it anyway.",
    ]


def render_report(result: AuditResult, settings: Mapping[str, Any]) -> str:
    """report.md: settings, profile tables, flags with reasons, descriptors, exclusions, plots."""
    profile = result.profile
    frame = profile.to_frame()
    semantic = "rho_mean" in frame
    facts = audit_facts(result)
    counts = ["source", "kind", "n_records", "n_negatives", "n_psi_undefined", "n_excluded_records"]
    if semantic:
        counts.append("n_h_undefined")
    parts = [
        "# transferdx audit",
        "",
        *verdict_lines(profile.rows, profile.catch_rate, settings, facts=facts),
        *legend_lines(profile.rows),
        "## Settings",
        "",
        *(f"- **{k}**: `{v}`" for k, v in settings.items()),
        "",
        "## Audit profile",
        "",
        "Means over records and rates, each with its 95% percentile bootstrap CI over records.",
        "ψ: IDF-weighted share of query tokens a negative does not contain, [0, 1], higher = less lexical",
        "overlap. ρ = σ((s(q,p) − s(q,n))/τ) ∈ (0, 1), higher = positive ranked above the negative.",
        "η = max(0, s(q,n)) ∈ [0, 1], higher = negative closer to the query. inversion = share of",
        "records whose best negative scores ≥ the positive. margin = s(q,p) − max_k s(q,n_k) ∈ [−2, 2].",
        "h = (s(q,n) − b(q))/(s(q,p) − b(q)): 1 = as close as the positive, 0 = as close as a random",
        "passage. loss = MNRL on the explicit negatives; energy = Σ_k ‖(π_k/τ)(e_n − e_p)‖².",
        "",
        _markdown_table(frame[[c for c in counts if c in frame]]),
        "",
        *(
            [
                f"{profile.n_excluded_unattributed} excluded records of no known source (not in"
                " `n_excluded_records`; see Exclusions).",
                "",
            ]
            if profile.n_excluded_unattributed
            else []
        ),
        _markdown_table(_with_ci(frame, MEAN_STATS)),
        "",
        "![ρ, η, ψ per source](profile.png)" if semantic else "![ψ per source with bootstrap CI](psi.png)",
        "",
    ]
    if semantic:
        band_cols = [
            "source",
            *(f"band_{b}" for b in BANDS),
            "bucket_rho_lt_05",
            "bucket_eta_le_025",
            "bucket_c_ge_05",
        ]
        parts += [
            "### Margins",
            "",
            "Median, 5th and 10th percentile of the record margins and the shares of records with margin"
            " < 0, = 0, > 0, each with its percentile bootstrap CI over records.",
            "",
            _markdown_table(_with_ci(frame, MARGIN_STATS)),
            "",
            "![margin distribution per source](margins.png)",
            "",
            "### InfoNCE bands, failure buckets and composites",
            "",
            "Bands (shares of negatives) from w = exp((s(q,n) − s(q,p))/τ): inverted s(q,n) ≥ s(q,p);"
            " hard w ≥ 0.5; medium 0.1 ≤ w < 0.5; easy otherwise. Buckets: ρ < 0.5; η ≤ 0.25; C = 1 − ψ ≥ 0.5."
            " Composites: (1/d) log det(I + M/ε) and tr(M)/ε of the weighted residual scatter M, with"
            " percentile bootstrap CIs over records (a resampled record brings all its negatives).",
            "",
            _markdown_table(frame[band_cols]),
            "",
            _markdown_table(_with_ci(frame, COMPOSITE_STATS, ".4f")),
            *_composite_ci_note(frame, settings),
            "",
            "![band shares per source](bands.png)",
            "",
        ]
    if "false_negative_rate" in frame:
        parts += _false_negative_section(frame)
    if "fn_suspect_rate" in frame:
        parts += _suspects_section(frame, result)
    parts += _miner_section(frame, facts)
    if result.fn_evaluation.get("status") == "measured":
        parts += _fn_evaluation_section(result.fn_evaluation)
    parts += _flags_section(frame, profile.thresholds)
    parts += _catch_rate_section(profile.catch_rate)
    parts += _descriptor_section(profile.descriptors)
    parts += ["## Exclusions", ""]
    excl = exclusions_frame(result.exclusions)
    if len(excl):
        table = (
            excl.assign(source=excl["source"].replace("", "(all sources)"))
            .groupby(["source", "unit", "reason"], sort=True)
            .size()
            .reset_index(name="count")
        )
        parts += [f"{len(excl)} items excluded; every one is listed in `exclusions.csv`.", "", _markdown_table(table)]
    else:
        parts.append("No input item was excluded.")
    return "\n".join(parts) + "\n"


def _flags_section(frame: pd.DataFrame, thresholds: Mapping[str, Any]) -> list[str]:
    mode = thresholds.get("mode", "envelope")
    how = (
        "thresholds = the envelope of the genuine sources (strict, so no genuine source is flagged)"
        if mode == "envelope"
        else "fixed thresholds from the config"
    )
    lines = ["## Flags", "", f"Mode `{mode}`: {how}.", ""]
    lines += [f"- `{k}`: {v:.4f}" for k, v in thresholds.items() if k != "mode"]
    lines.append("")
    flagged = frame[frame["flags"] != ""] if "flags" in frame else frame.iloc[:0]
    if len(flagged):
        lines += [f"- **{r.source}** ({r.kind}): {r.flag_reasons}" for r in flagged.itertuples()]
    else:
        lines.append("No source is flagged.")
    return [*lines, ""]


def _false_negative_section(frame: pd.DataFrame) -> list[str]:
    rows = []
    for r in frame.itertuples():
        rate = r.false_negative_rate
        if isinstance(rate, float) and not math.isnan(rate):
            cell = f"{rate:.3f} [{r.false_negative_rate_ci_low:.3f}, {r.false_negative_rate_ci_high:.3f}]"
        else:
            cell = "not_measured"
        rows.append({"source": r.source, "kind": r.kind, "false_negative_rate": cell})
    return [
        "## Measured false negatives",
        "",
        "Share of a source's negatives that the deep judgments mark relevant when only the reference"
        " positive p0 is known (the single-label situation of MS MARCO training), with its 95% bootstrap CI"
        " over records; `not_measured` where there are no judgments or the negatives are not pool passages.",
        "",
        _markdown_table(pd.DataFrame(rows)),
        "",
    ]


def _prf(row: Mapping[str, Any], key: str) -> str:
    return f"{row[key]:.3f} [{row[key + '_ci_low']:.3f}, {row[key + '_ci_high']:.3f}]"


def _fn_evaluation_section(ev: Mapping[str, Any]) -> list[str]:
    """How well the suspicion finds the negatives the deep judgments mark relevant."""
    grid = pd.DataFrame(ev["grid"])
    table = pd.DataFrame(
        {
            "alpha": [f"{a:g}" for a in grid["alpha"]],
            "delta": grid["delta"].astype(str),
            "precision": [_prf(r, "precision") for r in ev["grid"]],
            "recall": [_prf(r, "recall") for r in ev["grid"]],
            "f1": [_prf(r, "f1") for r in ev["grid"]],
        }
    )
    best, own = ev["best"], ev["audit_setting"]
    oof, shipped = ev["combined_out_of_fold"], ev["combined_shipped"]
    by_source = pd.DataFrame(
        [
            {
                "source": k,
                "negatives": v["n"],
                "base_rate": f"{v['base_rate']:.3f}",
                "precision": _prf(v, "precision"),
                "recall": _prf(v, "recall"),
                "f1": _prf(v, "f1"),
            }
            for k, v in ev["by_source"].items()
        ]
    )
    verdict = (
        "The combined detector beats the rule's best F1 out of fold."
        if ev["combined_beats_best_rule"]
        else "The combined detector does **not** beat the rule's best F1 out of fold."
    )
    return [
        "## How well the suspicion finds real false negatives",
        "",
        f"{ev['n_negatives']} negatives of {ev['n_queries']} queries, scored against the judgments: "
        f"{ev['n_false_negatives']} are judged >= {ev['relevant_grade']} (base rate {ev['base_rate']:.3f}, the"
        f" precision of suspecting every negative, whose F1 is {ev['suspect_all_f1']:.3f}; unjudged counts as not"
        " relevant). Precision, recall and F1"
        " of the rule (positive-aware at α, near-duplicate at δ, or a text reason) with 95% percentile"
        " bootstrap CIs over queries. The grid is in `profile.json` under `fn_evaluation`.",
        "",
        _markdown_table(table),
        "",
        f"- **Best F1** at α = {best['alpha']}, δ = {best['delta']}: F1 {_prf(best, 'f1')}, precision"
        f" {_prf(best, 'precision')}, recall {_prf(best, 'recall')}.",
        f"- **This audit's setting** (α = {own['alpha']}, δ = {own['delta']}): F1 {_prf(own, 'f1')}.",
        f"- **Combined detector**, refitted here with {oof['folds']}-fold cross-validation grouped by query"
        f" (out of fold): precision {_prf(oof, 'precision')}, recall {_prf(oof, 'recall')}, F1 {_prf(oof, 'f1')}."
        f" {verdict}",
        f"- **Shipped combined detector** (fitted on {shipped['fitted_on'] or 'TREC-DL19'}; in-sample where"
        f" this is that data): precision {_prf(shipped, 'precision')}, recall {_prf(shipped, 'recall')},"
        f" F1 {_prf(shipped, 'f1')}.",
        "",
        "Per source at this audit's setting:",
        "",
        _markdown_table(by_source),
        "",
        "![precision–recall of the suspicion rule over α, one curve per δ](fn_pr.png)",
        "",
    ]


def _short(text: Any, width: int = TEXT_WIDTH) -> str:
    """One line of at most ``width`` characters (… when cut), safe inside a markdown table cell."""
    flat = " ".join(str(text).split()).replace("|", "\\|")
    return flat if len(flat) <= width else flat[: width - 1].rstrip() + "…"


def _suspects_section(frame: pd.DataFrame, result: AuditResult) -> list[str]:
    info = result.suspicion
    checked = list(info.get("reasons_checked", []))
    encoder = "near_duplicate_positive" in checked
    if not encoder:
        rule = (
            "`positive_aware` and `near_duplicate_positive` **not checked** (lexical audit, no encoder: their"
            " rates are — and `fn_suspect_rate` counts the text reasons only); "
        )
    elif info.get("rule") == "combined":
        rule = (
            "`combined` the shipped logistic detector over s(q,n) − s(q,p), s(q,n), s(p0,n), coverage and"
            f" position says p(false negative) ≥ its fitted threshold; `near_duplicate_positive` cos(p0, n) ≥ δ"
            f" = {info.get('delta')}; "
        )
    else:
        rule = (
            f"`positive_aware` s(q,n) ≥ α·s(q,p) with α = {info.get('alpha')} (s(q,n) ≥ s(q,p) when s(q,p) ≤ 0);"
            f" `near_duplicate_positive` cos(p0, n) ≥ δ = {info.get('delta')}; "
        )
    lines = [
        "## Suspected false negatives",
        "",
        "Negatives suspected to answer the query (design §3.9): "
        + rule
        + "`duplicate_positive` normalised text (NFKC, case-folded, whitespace collapsed) equal to a positive's;"
        " `duplicate_negative` the same passage again among the record's negatives (the first occurrence is not"
        " suspected). Not a suspicion reason: `other_positive`, the passage is a positive of another query of"
        " the file and not of its own (above 0.5, absolute flag `copies_other_positive`). Shares of negatives"
        " with their 95% percentile bootstrap CI over records; every suspect of your sources is"
        " listed in `suspects.csv` (the controls' in `control_suspects.csv`), most probable first:"
        " `fn_probability` is the probability of being a false"
        " negative (detectors fitted on TREC-DL19 + DL21 deep judgments, Platt-calibrated at their training share;"
        " not moved to the source's own share, which is not estimated: `fn_prior` is a diagnostic), and"
        f" fn_probability ≥ {MIN_PROBABILITY:.2f} makes a"
        " negative a suspect by itself (reason `fn_probability`); default cleaning acts on those (precision"
        f" {cleaning_cut()['precision']:.3f} out of year on TREC-DL, each year scored by the detector fitted on"
        " the other) and on copies and near-copies of a positive; the rest is for review.",
        "",
        _markdown_table(_with_ci(frame, SUSPICION_REPORT_STATS)),
        "",
    ]
    source_of = result.suspect_values["source"]
    for name in frame["source"]:
        mine = np.flatnonzero((source_of == name).to_numpy(bool))
        if not len(mine):
            continue
        shown = result.suspect_rows(mine[:SUSPECTS_SHOWN])  # the texts of the rows shown only
        lines += [
            f"### {name}: top {len(shown)} of {len(mine)} suspects",
            "",
            _markdown_table(
                pd.DataFrame(
                    {
                        "qid": shown["qid"].astype(str),
                        "rank": shown["neg_index"].astype(str),
                        "s_qp": shown["s_qp"],
                        "s_qn": shown["s_qn"],
                        "p(FN)": shown["fn_probability"],
                        "reasons": shown["reasons"],
                        "query": [_short(t) for t in shown["query"]],
                        "positive": [_short(t) for t in shown["positive"]],
                        "negative": [_short(t) for t in shown["negative"]],
                    }
                ),
                ".3f",
            ),
            "",
        ]
    return lines


def _sigma(value: float | None) -> str:
    return "not scored" if value is None else f"{value:.2f}"


def _miner_section(frame: pd.DataFrame, facts: Mapping[str, SourceFacts]) -> list[str]:
    """The miner's scores per genuine source (design §3.9): their agreement with the audit's encoder
    and what each of sentence-transformers' filter settings would drop on them, with the Σ
    fn_probability of what it drops and the setting the verdict names."""
    genuine = [str(n) for n, k in zip(frame["source"], frame["kind"], strict=True) if k == "genuine"]
    shown = [(n, m) for n in genuine if (m := facts[n].miner if n in facts else None) is not None]
    if not shown:
        return []
    m0 = mined()
    lines = [
        "## The miner's scores and sentence-transformers' filters",
        "",
        "Where the file carries the miner's scores (`mine_hard_negatives(output_scores=True)`, FlagEmbedding"
        " `pos_scores`/`neg_scores`): **agreement** = Spearman's rank correlation of the miner's s(q,n) with"
        f" this audit's over the source's negatives (≥ {SAME_ENCODER_MIN:.2f}: as if mined by this encoder, whose"
        " flags the miner already saw). **Filters**, with sentence-transformers' own rules, p = the query's"
        " minimum positive score: `absolute_margin` a drops a negative when s_n + a > p, `relative_margin` r when"
        " s_n > p − |p|·r, `max_score` m when s_n > m (tried only on a cosine scale, scores in [−1, 1]). Where the"
        " file has no scores, this encoder's s(q,n) and s(q,p0) stand in. Per setting: negatives dropped,"
        " Σ fn_probability over them (false negatives expected removed), Σ (1 − fn_probability) (hard"
        " negatives expected lost), and queries left with no negative. The verdict names the setting with the"
        " largest Σ (2·fn_probability − 1) over what it drops, ties to the milder; none when no Σ is positive."
        f" The Σ are at fn_probability's calibration: ECE {span_text(m0['ece'])} on {m0['n_files']} mined files.",
        "",
    ]
    for name, m in shown:
        whose = "the file's own scores" if m.scores == "file" else "this encoder's scores (the file has none)"
        agree = f"Spearman {m.agreement:.4f} over {m.n_scored} negatives" if m.agreement is not None else "not measured"
        chosen = f"`{m.chosen.setting.text}`" if m.chosen is not None else "none (no setting's Σ is positive)"
        if not m.scored:
            chosen = "none (fn_probability not scored)"
        table = pd.DataFrame(
            {
                "setting": [f"`{o.setting.text}`" for o in m.outcomes],
                "dropped": [f"{o.dropped} of {m.n_negatives}" for o in m.outcomes],
                "Σ p (false removed)": [_sigma(o.expected_false) for o in m.outcomes],
                "Σ (1 − p) (hard lost)": [_sigma(o.expected_hard) for o in m.outcomes],
                "Σ (2p − 1)": [_sigma(o.gain) for o in m.outcomes],
                "queries left with none": [str(o.emptied) for o in m.outcomes],
            }
        )
        lines += [
            f"### {name}",
            "",
            f"- scores read: {whose}; agreement with this encoder: {agree}; setting named: {chosen}.",
            "",
            _markdown_table(table),
            "",
        ]
    return lines


def _catch_rate_section(catch: Mapping[str, Any]) -> list[str]:
    if not catch.get("n_controls"):
        return []
    lines = [
        "## Control catch-rate",
        "",
        f"**{catch['n_controls_flagged']} of {catch['n_controls']} controls flagged**; genuine sources flagged: "
        f"{', '.join(catch['genuine_flagged']) or 'none'}.",
        "",
        "| flag | controls caught |",
        "|---|---|",
    ]
    lines += [f"| `{rule}` | {', '.join(caught) or '—'} |" for rule, caught in catch["by_flag"].items()]
    if catch["controls_not_flagged"]:
        lines += ["", f"Not caught by any flag: {', '.join(catch['controls_not_flagged'])}."]
    return [*lines, ""]


def _descriptor_section(descriptors: Mapping[str, Any]) -> list[str]:
    lines = ["## Negative-set descriptors", "", "How each source's negatives were made and scored.", ""]
    for name, desc in descriptors.items():
        lines += [f"### {name}", "", "```json", json.dumps(_json_safe(desc), indent=2, sort_keys=True), "```", ""]
    return lines


# ---------------------------------------------------------------------------------------------
# Plots
# ---------------------------------------------------------------------------------------------


def profile_document(result: AuditResult) -> dict[str, Any]:
    """What ``profile.json`` holds: the profile's settings, rows, thresholds, catch rate and
    descriptors (and ``fn_evaluation`` when measured), strict JSON (NaN → None)."""
    profile_dict = result.profile.to_dict()
    if result.fn_evaluation:
        profile_dict = {**profile_dict, "fn_evaluation": dict(result.fn_evaluation)}
    safe: dict[str, Any] = _json_safe(profile_dict)
    return safe


def write_audit(result: AuditResult, out_dir: str | Path, settings: Mapping[str, Any]) -> dict[str, Path]:
    """Write every audit artifact into ``out_dir``; returns name → path."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {key: safe_join(out, name) for key, name in AUDIT_FILES.items()}
    profile = result.profile.to_frame()
    semantic = "rho_mean" in profile
    atomic_write_text(paths["profile_csv"], csv_text(profile))
    atomic_write_text(paths["profile_json"], canonical_json(profile_document(result)))
    atomic_write_csv(paths["records"], result.records)  # streamed: millions of rows at MS MARCO scale
    atomic_write_csv(paths["negatives"], result.negatives)
    atomic_write_text(paths["exclusions"], csv_text(exclusions_frame(result.exclusions)))
    # each kind's rows streamed from the one table: a heavily defective source has as many suspects
    # as negatives, each with three texts, so a copy per kind plus its CSV string was the save's peak
    # and their texts read per chunk (AuditResult.suspect_rows), never held for every suspect at once
    kinds = result.suspect_values["kind"].to_numpy()
    suspects = {key: np.flatnonzero(kinds == kind) for kind, key in SUSPECT_FILES.items()}
    for key, rows in suspects.items():
        atomic_write_csv(paths[key], result.suspect_values, rows=rows, take=result.suspect_rows)
    report = render_report(result, settings)
    atomic_write_text(paths["report"], report)
    atomic_write_bytes(paths["plot"], plot_psi(result))
    if semantic:
        atomic_write_bytes(paths["plot_profile"], plot_profile(result))
        atomic_write_bytes(paths["plot_margins"], plot_margins(result))
        atomic_write_bytes(paths["plot_bands"], plot_bands(result))
    if result.fn_evaluation.get("status") == "measured":
        atomic_write_bytes(paths["plot_fn"], plot_fn_evaluation(result.fn_evaluation))
    plots = {p.name: p.read_bytes() for key, p in paths.items() if key.startswith("plot") and p.exists()}
    write_html(paths["report_html"], report, paths["suspects"], len(suspects["suspects"]), plots)  # rows read back
    config = _json_safe(dict(settings))
    write_meta(paths["profile_json"], config, rows=len(profile))
    write_meta(paths["records"], config, rows=len(result.records))
    write_meta(paths["negatives"], config, rows=len(result.negatives))
    suspicion = {**config, "fn_suspicion": _json_safe(dict(result.suspicion))}
    for key, rows in suspects.items():
        write_meta(paths[key], suspicion, rows=len(rows))
    return {k: p for k, p in paths.items() if p.exists()}
