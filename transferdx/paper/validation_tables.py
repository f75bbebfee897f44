"""The known-truth validation tables (a study that trained controls as well as genuine sources).

Built, like every table, from artifacts already computed (``tables/validation/<backbone>/*.csv``,
:func:`transferdx.pipeline.validate`): transfer with its intervals, which pairwise differences are
established, the audit against that truth — (a) flagged ⇒ worse, (b) rank agreement — and (c)
the random-mix ladder.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pandas as pd

from transferdx.auditing.profiles import ALL_FLAG_RULES
from transferdx.paper.tables import Cell, PaperTable, TableInputs, source_label

RULE_OF = {rule.column: rule.name for rule in ALL_FLAG_RULES}
SHORT = {
    "psi_mean": "ψ̄",
    "rho_mean": "ρ̄",
    "eta_mean": "η̄",
    "inversion_rate": "inversion",
    "composite_logdet": "composite (logdet)",
    "composite_trace": "composite (trace)",
    "fn_suspect_rate": "FN-suspect rate",
    "duplicate_positive_rate": "duplicate-positive rate",
    "near_duplicate_positive_rate": "near-duplicate-positive rate",
    "n_flags": "number of flags",
}
NO_VALIDATION = "needs a study that trained controls too (transferdx-study +experiment=validation)"


def _frames(a: TableInputs) -> Mapping[str, Mapping[str, pd.DataFrame]]:
    if not a.validation:
        raise ValueError(NO_VALIDATION)
    return a.validation


def _cell(a: TableInputs, backbone: str, name: str, locator: str, value: Any, **kw: Any) -> Cell:
    if isinstance(value, float) or hasattr(value, "dtype"):
        value = value.item() if hasattr(value, "item") else value
    return Cell(value, f"{a.validation_folder}/{backbone}/{name}.csv", locator, **kw)


def _interval(low: float, high: float) -> str:
    return f"[{low:.3f}, {high:.3f}]"


def _evidence(hit: Mapping[str, Any]) -> str:
    """``Source (margin [interval])``: the weakest unflagged genuine source's nDCG@10 minus the flagged
    source's (> 0: the flagged source trains worse), with its two-level interval."""
    label = source_label(str(hit["source"]))
    if pd.isna(hit.get("margin")):
        return label
    return f"{label} ({hit['margin']:+.3f} {_interval(hit['margin_ci_low'], hit['margin_ci_high'])})"


def transfer_table(a: TableInputs) -> PaperTable:
    """Transfer per trained source: nDCG@10 (mean over seeds), its interval over queries and seeds,
    the seed spread, and the change from the frozen backbone."""
    rows = []
    for backbone, frames in _frames(a).items():
        for r in frames["transfer"].to_dict("records"):
            where = f"source={r['source']}"
            if r["kind"] == "frozen":
                cell = _cell(a, backbone, "transfer", f"{where}; column=ndcg10", float(r["ndcg10"]))
                ci = _interval(r["ci_low"], r["ci_high"])
                rows.append([a.label(backbone), r["source"], "frozen", cell, ci, ci, "", "", "", ""])
                continue
            rows.append(
                [
                    a.label(backbone),
                    source_label(r["source"]),
                    r["kind"],
                    _cell(a, backbone, "transfer", f"{where}; column=ndcg10", float(r["ndcg10"])),
                    _interval(r["ci_low"], r["ci_high"]),
                    _interval(r["query_ci_low"], r["query_ci_high"]),
                    _cell(a, backbone, "transfer", f"{where}; column=seed_sd", float(r["seed_sd"]), digits=4),
                    str(r["seeds"]),
                    _cell(a, backbone, "transfer", f"{where}; column=delta_frozen", float(r["delta_frozen"])),
                    _interval(r["delta_ci_low"], r["delta_ci_high"]),
                ]
            )
    return PaperTable(
        "Validation: transfer",
        "Transfer of every trained source: nDCG@10 (mean over the benchmark datasets) averaged over seeds; 95% "
        "intervals from a "
        "two-level bootstrap (queries, paired across sources, and each source's seeds), and from queries "
        "alone; seed-to-seed SD and per-seed values; Δ = change from the frozen backbone.",
        (
            "Backbone",
            "Source",
            "Kind",
            "nDCG@10",
            "CI (queries+seeds)",
            "CI (queries)",
            "Seed SD",
            "Per seed",
            "Δ frozen",
            "Δ CI",
        ),
        tuple(tuple(r) for r in rows),
        groups=1,
    )


def pairs_table(a: TableInputs) -> PaperTable:
    """Every pairwise difference: its interval, Holm-corrected p, seed consistency, established."""
    rows = []
    for backbone, frames in _frames(a).items():
        for r in frames["pairs"].to_dict("records"):
            where = f"a={r['a']}; b={r['b']}"
            rows.append(
                [
                    a.label(backbone),
                    f"{source_label(r['a'])} > {source_label(r['b'])}",
                    _cell(a, backbone, "pairs", f"{where}; column=diff", float(r["diff"]), digits=4),
                    _interval(r["ci_low"], r["ci_high"]),
                    _cell(a, backbone, "pairs", f"{where}; column=mdd", float(r.get("mdd", float("nan"))), digits=4),
                    _cell(a, backbone, "pairs", f"{where}; column=p_holm", float(r["p_holm"]), digits=4),
                    _cell(a, backbone, "pairs", f"{where}; column=seed_consistent", bool(r["seed_consistent"])),
                    _cell(
                        a,
                        backbone,
                        "pairs",
                        f"{where}; column=established",
                        bool(r["established"]),
                        bold=bool(r["established"]),
                    ),
                ]
            )
    return PaperTable(
        "Validation: pairwise differences",
        "T_a − T_b for every pair of trained sources (a the better), 95% two-level bootstrap interval, two-sided "
        "bootstrap p Holm-corrected over all pairs, whether every seed of a beats every seed of b; established = "
        "p_holm < α and seed-consistent. MDD: the difference this design detects with 80% power at α = 0.05, "
        "2.80 × the bootstrap SD of the paired difference (seed and query variance as measured): a difference "
        "not established and below MDD/2 is absent at this resolution, one above it too small to establish.",
        ("Backbone", "Pair", "Difference", "CI", "MDD", "p (Holm)", "Seed-consistent", "Established"),
        tuple(tuple(r) for r in rows),
        groups=1,
    )


def audit_table(a: TableInputs) -> PaperTable:
    """(a) flagged ⇒ worse than every unflagged genuine source, and (b) rank agreement, per diagnostic."""
    rows = []
    for backbone, frames in _frames(a).items():
        flags, agreement = frames["flags"], frames["agreement"]
        for name in dict.fromkeys(agreement["diagnostic"]):
            rule = "any" if name == "n_flags" else RULE_OF.get(name, "")
            row: list[Any] = [a.label(backbone), SHORT.get(name, name), rule or "—"]
            hits = flags[(flags["flag"] == rule) & flags["source"].fillna("").astype(bool)] if rule else flags[:0]
            row.append("; ".join(_evidence(h) for h in hits.to_dict("records")) or ("none" if rule else "—"))
            if len(hits):
                where = f"flag={rule}"
                row.append(
                    _cell(
                        a,
                        backbone,
                        "flags",
                        f"{where}; count of worse_than_all",
                        f"{int(hits['worse_than_all'].eq(True).sum())}/{len(hits)}",
                    )
                )
                row.append(
                    _cell(
                        a,
                        backbone,
                        "flags",
                        f"{where}; count of established_vs_all",
                        f"{int(hits['established_vs_all'].eq(True).sum())}/{len(hits)}",
                    )
                )
            else:
                row += ["—", "—"]
            for subset in ("all", "genuine"):
                hit = agreement[(agreement["diagnostic"] == name) & (agreement["subset"] == subset)].iloc[0]
                where = f"diagnostic={name}; subset={subset}"
                row.append(_cell(a, backbone, "agreement", f"{where}; column=spearman", float(hit["spearman"])))
                row.append(
                    "—"
                    if pd.isna(hit["spearman_ci_low"])
                    else _interval(hit["spearman_ci_low"], hit["spearman_ci_high"])
                )
                both = hit.get("spearman_both_ci_low", float("nan"))
                row.append("—" if pd.isna(both) else _interval(both, hit["spearman_both_ci_high"]))
                row.append(_cell(a, backbone, "agreement", f"{where}; column=kendall", float(hit["kendall"])))
            rows.append(row)
    missed = [
        f"{a.label(b)}: {', '.join(source_label(s) for s in f['missed']['source'])}"
        for b, f in _frames(a).items()
        if len(f["missed"])
    ]
    notes = (
        "Flagged (trained): each flagged source with the weakest unflagged genuine source's nDCG@10 minus its own "
        "(> 0: it trains worse) and that difference's interval. Flagged ⇒ worse: flagged trained sources whose "
        "nDCG@10 is below every unflagged genuine source (point estimate) / with every such difference "
        "established. Spearman CI: over the transfer resamples (queries and seeds), the diagnostic held at its "
        "audited value; CI both: the diagnostic also drawn from its audit interval (records resampled).",
        "Controls no flag marks although they train established-worse than every genuine source: "
        + ("; ".join(missed) if missed else "none."),
    )
    return PaperTable(
        "Validation: audit against known truth",
        "Per diagnostic (direction from the analysis config): the sources its flag marks and whether each "
        "trains worse than every unflagged genuine source (a); rank agreement with transfer over all trained "
        "sources and over genuine sources only (b).",
        (
            "Backbone",
            "Diagnostic",
            "Flag",
            "Flagged (trained)",
            "Flagged ⇒ worse",
            "Established",
            "Spearman (all)",
            "CI (all)",
            "CI both (all)",
            "Kendall (all)",
            "Spearman (genuine)",
            "CI (genuine)",
            "CI both (genuine)",
            "Kendall (genuine)",
        ),
        tuple(tuple(r) for r in rows),
        groups=1,
        notes=notes,
    )


def ladder_table(a: TableInputs) -> PaperTable:
    """(c) The random-mix ladder: transfer and each diagnostic by dose, and their rank correlation with it."""
    rows = []
    columns: list[str] = []
    for backbone, frames in _frames(a).items():
        rungs, trend = frames["ladder_rungs"], frames["ladder_trend"]
        if len(rungs) < 2:
            continue
        measures = [m for m in trend["measure"] if m in rungs.columns]
        columns = columns or measures
        for r in rungs.to_dict("records"):
            where = f"source={r['source']}"
            row: list[Any] = [
                a.label(backbone),
                source_label(r["source"]),
                _cell(a, backbone, "ladder_rungs", f"{where}; column=dose", float(r["dose"]), digits=2),
                _cell(a, backbone, "ladder_rungs", f"{where}; column=ndcg10", float(r["ndcg10"])),
                _interval(r["ci_low"], r["ci_high"]),
            ]
            row += [
                _cell(a, backbone, "ladder_rungs", f"{where}; column={m}", float(r.get(m, float("nan"))))
                for m in columns
            ]
            rows.append(row)
        by = trend.set_index("measure")
        first = by.iloc[0]
        row = [
            a.label(backbone),
            "Spearman with dose",
            "",
            _cell(
                a,
                backbone,
                "ladder_trend",
                f"measure={by.index[0]}; column=spearman_dose",
                float(first["spearman_dose"]),
            ),
            f"slope {first['slope']:.3f} {_interval(first['slope_ci_low'], first['slope_ci_high'])}",
        ]
        row += [
            _cell(a, backbone, "ladder_trend", f"measure={m}; column=spearman_dose", float(by.loc[m, "spearman_dose"]))
            for m in columns
        ]
        rows.append(row)
    if not rows:
        raise ValueError("the ladder table needs at least two trained rungs of the random-mix ladder")
    return PaperTable(
        "Validation: random-mix ladder",
        "Dose = share of the parent's negative slots replaced by random passages (the parent at 0). nDCG@10 "
        "with its two-level interval; each diagnostic as audited; last row: Spearman ρ of each column with the "
        "dose, and the OLS slope of nDCG@10 on dose with its interval.",
        ("Backbone", "Source", "Dose", "nDCG@10", "CI", *(SHORT.get(m, m) for m in columns)),
        tuple(tuple(r) for r in rows),
        groups=1,
    )


def flags_table(a: TableInputs) -> PaperTable:
    """(a) per flag rule — envelope and absolute — the trained sources it flags and whether each
    trains worse than every unflagged genuine source."""
    from transferdx.auditing.profiles import ABSOLUTE_FLAG_RULES

    absolute = {r.name for r in ABSOLUTE_FLAG_RULES} | {"any_absolute"}
    rows = []
    for backbone, frames in _frames(a).items():
        flags = frames["flags"]
        for rule in dict.fromkeys(flags["flag"]):
            hits = flags[(flags["flag"] == rule) & flags["source"].fillna("").astype(bool)]
            where = f"flag={rule}"
            row: list[Any] = [a.label(backbone), rule, "absolute" if rule in absolute else "envelope"]
            row.append("; ".join(_evidence(h) for h in hits.to_dict("records")) or "none")
            if len(hits):
                worse = f"{int(hits['worse_than_all'].eq(True).sum())}/{len(hits)}"
                est = f"{int(hits['established_vs_all'].eq(True).sum())}/{len(hits)}"
                row.append(_cell(a, backbone, "flags", f"{where}; count of worse_than_all", worse))
                row.append(_cell(a, backbone, "flags", f"{where}; count of established_vs_all", est))
            else:
                row += ["—", "—"]
            rows.append(row)
    return PaperTable(
        "Validation: flags against known truth",
        "Per flag rule (envelope: thresholds from the genuine sources, which it cannot flag; absolute: fixed "
        "principles, which can): each flagged trained source with the weakest unflagged genuine source's nDCG@10 "
        "minus its own (> 0: it trains worse) and that difference's interval; how many flagged sources train "
        "below every unflagged genuine source, and with every such difference established.",
        ("Backbone", "Rule", "Kind", "Flagged (trained)", "Flagged ⇒ worse", "Established"),
        tuple(tuple(r) for r in rows),
        groups=1,
    )


def datasets_table(a: TableInputs) -> PaperTable:
    """Transfer on each benchmark set on its own: nDCG@10 with its two-level interval, Δ frozen."""
    rows = []
    for backbone, frames in _frames(a).items():
        table = frames.get("by_dataset")
        if table is None or not len(table):
            continue
        for r in table.to_dict("records"):
            where = f"dataset={r['dataset']}; source={r['source']}"
            delta = r.get("delta_frozen", float("nan"))
            rows.append(
                [
                    a.label(backbone),
                    str(r["dataset"]),
                    source_label(str(r["source"])),
                    str(r["kind"]),
                    _cell(a, backbone, "by_dataset", f"{where}; column=ndcg10", float(r["ndcg10"])),
                    _interval(r["ci_low"], r["ci_high"]),
                    "" if pd.isna(r.get("seed_sd", float("nan"))) else f"{r['seed_sd']:.4f}",
                    "" if pd.isna(delta) else f"{delta:+.3f}",
                    ""
                    if pd.isna(r.get("delta_ci_low", float("nan")))
                    else _interval(r["delta_ci_low"], r["delta_ci_high"]),
                ]
            )
    return PaperTable(
        "Validation: transfer per benchmark set",
        "nDCG@10 on each benchmark set on its own (mean over seeds), its 95% two-level interval (queries of that "
        "set, seeds), seed-to-seed SD and Δ from the frozen backbone with its interval.",
        ("Backbone", "Set", "Source", "Kind", "nDCG@10", "CI", "Seed SD", "Δ frozen", "Δ CI"),
        tuple(tuple(r) for r in rows),
        groups=2,
    )


VALIDATION_TABLES: dict[str, Callable[[TableInputs], PaperTable]] = {
    "validation_datasets": datasets_table,
    "validation_flags": flags_table,
    "validation_transfer": transfer_table,
    "validation_pairs": pairs_table,
    "validation_audit": audit_table,
    "validation_ladder": ladder_table,
}
