"""Score the validation plan's predictions (experiments/results/validation/PLAN.md) against the results.

    python experiments/score_predictions.py RESULTS_DIR [--backbone static_minilm]

Reads the exported results (``RESULTS_DIR/analysis/<backbone>/*.csv`` and ``profile.csv``) and applies
PLAN.md's decision rules mechanically, so no prediction is scored by hand:

- a predicted difference **held** if established in the predicted direction (direction-only: the point
  estimate has the predicted sign); **failed** if the opposite direction is established, or it is not
  established and |diff| < MDD/2; otherwise **not determinable at this power**;
- a predicted null **held** if not established and |diff| < MDD; **failed** if established; otherwise
  not determinable.

Writes ``RESULTS_DIR/scores.md`` (one row per prediction: outcome and the numbers behind it) and prints
the counts.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from transferdx.artifacts import atomic_write_text

HELD, FAILED, OPEN = "held", "failed", "not determinable at this power"
GENUINE_OTHERS = ("bm25", "dense", "bm25+dense")


class Results:
    """The frames a score reads."""

    def __init__(self, folder: Path, backbone: str) -> None:
        base = folder / "analysis" / backbone
        self.pairs = pd.read_csv(base / "pairs.csv")
        self.flags = pd.read_csv(base / "flags.csv")
        self.agreement = pd.read_csv(base / "agreement.csv")
        self.trend = pd.read_csv(base / "ladder_trend.csv")
        self.by_dataset = pd.read_csv(base / "by_dataset.csv")
        self.transfer = pd.read_csv(base / "transfer.csv")
        self.profile = pd.read_csv(folder / "profile.csv").set_index("source")

    def pair(self, a: str, b: str) -> dict[str, float | bool]:
        """T_a − T_b with its MDD and whether the difference is established (either way round)."""
        hit = self.pairs[(self.pairs["a"] == a) & (self.pairs["b"] == b)]
        sign = 1.0
        if not len(hit):
            hit, sign = self.pairs[(self.pairs["a"] == b) & (self.pairs["b"] == a)], -1.0
        row = hit.iloc[0]
        return {"diff": sign * float(row["diff"]), "mdd": float(row["mdd"]), "established": bool(row["established"])}


def _describe(a: str, b: str, p: dict[str, float | bool]) -> str:
    state = "established" if p["established"] else "not established"
    return f"{a} − {b} = {p['diff']:+.4f} (MDD {p['mdd']:.4f}, {state})"


def worse(r: Results, a: str, b: str) -> tuple[str, str]:
    """Prediction "a trains worse than b" (established predicted)."""
    p = r.pair(a, b)
    text = (
        f"{a} − {b} = {p['diff']:+.4f} (MDD {p['mdd']:.4f}, {'established' if p['established'] else 'not established'})"
    )
    if p["established"]:
        return (HELD if p["diff"] < 0 else FAILED), text
    return (FAILED if abs(p["diff"]) < p["mdd"] / 2 else OPEN), text


def null(r: Results, a: str, b: str) -> tuple[str, str]:
    """Prediction "no established difference between a and b"."""
    p = r.pair(a, b)
    text = (
        f"{a} − {b} = {p['diff']:+.4f} (MDD {p['mdd']:.4f}, {'established' if p['established'] else 'not established'})"
    )
    if p["established"]:
        return FAILED, text
    return (HELD if abs(p["diff"]) < p["mdd"] else OPEN), text


def combine(parts: list[tuple[str, str]]) -> tuple[str, str]:
    outcomes = [o for o, _ in parts]
    outcome = FAILED if FAILED in outcomes else (HELD if all(o == HELD for o in outcomes) else OPEN)
    return outcome, "; ".join(t for _, t in parts)


def flagged(r: Results, rule: str) -> set[str]:
    column = "absolute_flags" if rule in ABSOLUTE else "flags"
    values = r.profile[column].fillna("") if column in r.profile.columns else pd.Series(dtype=str)
    return {s for s, v in values.items() if rule in str(v).split(";")}


ABSOLUTE = ("copies_positive", "near_copies_positive", "mostly_inverted", "mostly_easy")


def p1(r: Results) -> tuple[str, str]:
    return combine([worse(r, "own_positive_mix", g) for g in GENUINE_OTHERS])


def p2(r: Results) -> tuple[str, str]:
    parts = []
    for g in ("bm25", "bm25+dense"):
        p = r.pair("neighbor_positive", g)
        ok = p["diff"] < 0
        text = f"neighbor_positive − {g} = {p['diff']:+.4f}{' (established)' if p['established'] else ''}"
        parts.append((HELD if ok else FAILED, text))
    return combine(parts)


def p3(r: Results) -> tuple[str, str]:
    return null(r, "random_passages", "bm25")


def p4(r: Results) -> tuple[str, str]:
    return null(r, "easy_shuffled", "bm25")


def p5(r: Results) -> tuple[str, str]:
    row = r.trend[r.trend["measure"] == "transfer (nDCG@10)"].iloc[0]
    slope, low, high = float(row["slope"]), float(row["slope_ci_low"]), float(row["slope_ci_high"])
    text = f"slope {slope:+.4f} per unit dose [{low:+.4f}, {high:+.4f}] over {int(row['n_rungs'])} rungs"
    return (HELD if slope <= 0 and low <= 0 <= high else FAILED), text


def p6(r: Results) -> tuple[str, str]:
    trained = r.by_dataset[r.by_dataset["kind"] != "frozen"]
    ranges = trained.groupby("dataset")["ndcg10"].agg(lambda x: float(x.max() - x.min()))
    dl, sf = ranges.get("trec-dl19", float("nan")), ranges.get("scifact", float("nan"))
    return (HELD if dl < sf else FAILED), f"range of nDCG@10 over trained sources: TREC-DL19 {dl:.4f}, SciFact {sf:.4f}"


def p7(r: Results) -> tuple[str, str]:
    sf = r.by_dataset[(r.by_dataset["dataset"] == "scifact") & (r.by_dataset["kind"] != "frozen")]
    below = sf[~(sf["delta_ci_low"] > 0)]
    text = f"Δ frozen on SciFact from {sf['delta_frozen'].min():+.4f} to {sf['delta_frozen'].max():+.4f}; "
    text += f"interval not above 0: {', '.join(below['source']) or 'none'}"
    return (HELD if below.empty else FAILED), text


def p8(r: Results) -> tuple[str, str]:
    return combine([worse(r, "perturb", g) for g in ("bm25", "bm25+dense")])


def p9(r: Results) -> tuple[str, str]:
    got = {rule: flagged(r, rule) for rule in ABSOLUTE}
    genuine = set(r.profile.index[r.profile["kind"] == "genuine"])
    envelope_on_genuine = {s for s in genuine if str(r.profile.loc[s, "flags"] or "") not in ("", "nan")}
    checks = [
        got["copies_positive"] == {"own_positive_mix"},
        {"own_positive_mix", "perturb"} <= got["near_copies_positive"],
        {"random_passages", "easy_shuffled"} <= got["mostly_easy"],
        not envelope_on_genuine,
    ]
    text = "; ".join(f"{k}: {', '.join(sorted(v)) or 'none'}" for k, v in got.items())
    text += f"; envelope flags on genuine sources: {', '.join(sorted(envelope_on_genuine)) or 'none'}"
    return (HELD if all(checks) else FAILED), text


def _flag_rows(r: Results, rule: str) -> pd.DataFrame:
    rows = r.flags[r.flags["flag"] == rule]
    return rows[rows["source"].fillna("").astype(bool)]


def p10(r: Results) -> tuple[str, str]:
    parts = []
    for rule in ("copies_positive", "near_copies_positive"):
        rows = _flag_rows(r, rule)
        if rows.empty:
            parts.append((FAILED, f"{rule} flags no trained source"))
            continue
        below = rows["worse_than_all"].eq(True).all()
        margins = ", ".join(f"{s} margin {m:+.4f}" for s, m in zip(rows["source"], rows["margin"], strict=True))
        parts.append((HELD if below else FAILED, f"{rule}: {margins}"))
    opm = r.flags[(r.flags["flag"] == "copies_positive") & (r.flags["source"] == "own_positive_mix")]
    est = bool(len(opm)) and bool(opm["established_vs_all"].iloc[0])
    parts.append((HELD if est else OPEN, f"own_positive_mix established worse than every unflagged genuine: {est}"))
    return combine(parts)


def p11(r: Results) -> tuple[str, str]:
    rows = _flag_rows(r, "mostly_easy")
    if rows.empty:
        return FAILED, "mostly_easy flags no trained source"
    established = rows["established_vs_all"].eq(True)
    text = ", ".join(
        f"{s} (margin {m:+.4f}{', established' if e else ''})"
        for s, m, e in zip(rows["source"], rows["margin"], established, strict=True)
    )
    return (FAILED if established.any() else HELD), "flagged: " + text


def p12(r: Results) -> tuple[str, str]:
    a = r.agreement[r.agreement["subset"] == "all"].set_index("diagnostic")
    parts = []
    for d in ("duplicate_positive_rate", "near_duplicate_positive_rate", "fn_suspect_rate"):
        if d not in a.index or pd.isna(a.loc[d, "spearman"]):
            parts.append((OPEN, f"{d}: no value (constant or absent)"))
            continue
        s = float(a.loc[d, "spearman"])
        parts.append((HELD if s > 0 else FAILED, f"{d} Spearman {s:+.3f}"))
    for d in ("psi_mean", "rho_mean", "eta_mean", "inversion_rate"):
        lo, hi = float(a.loc[d, "spearman_both_ci_low"]), float(a.loc[d, "spearman_both_ci_high"])
        parts.append(
            (
                HELD if lo <= 0 <= hi else FAILED,
                f"{d} Spearman {float(a.loc[d, 'spearman']):+.3f} [{lo:+.3f}, {hi:+.3f}]",
            )
        )
    return combine(parts)


PREDICTIONS: dict[str, tuple[str, Callable[[Results], tuple[str, str]]]] = {
    "P1": ("own_positive_mix trains established-worse than bm25, dense, bm25+dense", p1),
    "P2": ("neighbor_positive below bm25 and bm25+dense (direction)", p2),
    "P3": ("random_passages: no established difference from bm25", p3),
    "P4": ("easy_shuffled: no established difference from bm25", p4),
    "P5": ("ladder slope ≤ 0, interval contains 0", p5),
    "P6": ("sources differ less on TREC-DL19 than on SciFact", p6),
    "P7": ("every trained source beats the frozen model on SciFact", p7),
    "P8": ("perturb trains established-worse than bm25 and bm25+dense", p8),
    "P9": (
        "absolute flags: copies → own_positive_mix; near-copies ⊇ {own_positive_mix, perturb}; "
        "mostly_easy ⊇ {random_passages, easy_shuffled}; no envelope flag on a genuine source",
        p9,
    ),
    "P10": ("copy / near-copy flags ⇒ below every unflagged genuine source; own_positive_mix established", p10),
    "P11": ("mostly_easy ⇒ not established-worse", p11),
    "P12": ("copy/near-copy/suspect rates agree (> 0); ψ̄, ρ̄, η̄, inversion intervals (both) contain 0", p12),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path)
    parser.add_argument("--backbone", default="static_minilm")
    args = parser.parse_args()
    r = Results(args.results, args.backbone)
    lines = ["| Prediction | What was predicted | Outcome | Evidence |", "|---|---|---|---|"]
    counts: dict[str, int] = {}
    for name, (what, score) in PREDICTIONS.items():
        outcome, evidence = score(r)
        counts[outcome] = counts.get(outcome, 0) + 1
        lines.append(f"| {name} | {what} | **{outcome}** | {evidence} |")
    atomic_write_text(args.results / "scores.md", "\n".join(lines) + "\n")
    print(json.dumps(counts))


if __name__ == "__main__":
    main()
