"""Issue 31's experiment (plan: experiments/results/fn_years/PLAN.md): the false-negative detector
fitted on one TREC-DL year and measured on the other, candidate features by forward selection, the
EM prior adjustment and its subsampling test, the cleaning cut. Writes
experiments/results/fn_years/results.json and prints the tables of its README.

    python experiments/fn_years.py [DATA_DIR] [--resamples N]
"""

from __future__ import annotations

import math
import os
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
import pandas as pd

import transferdx as tdx
from transferdx.artifacts import canonical_json
from transferdx.auditing.fn_eval import eval_frame
from transferdx.diagnostics.fn_combined import agreement
from transferdx.diagnostics.other_positive import other_positive
from transferdx.diagnostics.tokens import alnum
from transferdx.inputs.records import passage_key
from transferdx.inputs.trec_dl import load_trec_dl

OUT = Path(__file__).resolve().parent / "results" / "fn_years"
YEARS = ("dl19", "dl21")


def load_year(data_dir: Path, year: str):
    return load_trec_dl(
        data_dir / f"msmarco-{year}",
        labels="single",
        on_error="skip",
        topics=f"topics.{year}-passage.txt",
        qrels=f"qrels.{year}-passage.txt",
        results_name=f"retrieve_results_{year}.json",
    )


def bm25_rel(records, k1: float = 0.9, b: float = 0.4) -> np.ndarray:
    """bm25(q,n)/(bm25(q,n)+bm25(q,p0)) per negative (0.5 when both are 0); IDF over the distinct
    passages of the records (Lucene's log(1 + (N − df + 0.5)/(df + 0.5)))."""
    docs: dict[str, list[str]] = {}
    for r in records:
        for p in (r.positives[0], *r.negatives):
            docs.setdefault(p.text, alnum(p.text))
    df: dict[str, int] = defaultdict(int)
    for toks in docs.values():
        for t in set(toks):
            df[t] += 1
    n = len(docs)
    avgdl = sum(len(t) for t in docs.values()) / n
    tf = {text: pd.Series(toks).value_counts().to_dict() if toks else {} for text, toks in docs.items()}

    def score(q: list[str], text: str) -> float:
        d, length = tf[text], len(docs[text])
        out = 0.0
        for t in set(q):
            f = d.get(t, 0)
            if f:
                idf = math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5))
                out += idf * f * (k1 + 1) / (f + k1 * (1 - b + b * length / avgdl))
        return out

    out = []
    for r in records:
        q = alnum(r.query)
        sp = score(q, r.positives[0].text)
        for neg in r.negatives:
            sn = score(q, neg.text)
            out.append(0.5 if sn + sp == 0 else sn / (sn + sp))
    return np.asarray(out)


def cross_record(records) -> pd.DataFrame:
    """Per negative: the other sources' agreement (``agree_share``, ``agree_best``) and whether the
    passage is another query's positive, computed by the audit's own functions
    (:func:`transferdx.diagnostics.fn_combined.agreement`,
    :func:`transferdx.diagnostics.other_positive.other_positive`), so the features a detector is fitted
    on are the ones the audit gives it."""
    owner = np.repeat(np.arange(len(records)), [len(r.negatives) for r in records])
    keys = np.asarray([passage_key(n.id, n.text) for r in records for n in r.negatives], dtype=object)
    share, best = agreement(
        np.asarray([r.qid for r in records], dtype=object),
        np.asarray([r.source for r in records], dtype=object),
        np.asarray([r.kind == "genuine" for r in records], dtype=bool),
        owner,
        keys,
    )
    hit = other_positive(records).astype(np.float64)
    return pd.DataFrame({"agree_share": share, "agree_best": best, "other_positive": hit})


def year_frame(data_dir: Path, year: str) -> pd.DataFrame:
    loaded = load_year(data_dir, year)
    loaded.relevant_grade = None
    records = sorted(loaded.records, key=lambda r: (r.source, r.qid))
    frames = {}
    for enc in ("minilm_l6", "static_minilm"):
        res = tdx.audit(load_year(data_dir, year), encoder=enc, controls="none", resamples=1).result
        frames[enc] = eval_frame(res.negatives, res.records).assign(neg_id=res.negatives["neg_id"].to_numpy())
    f = frames["minilm_l6"]
    s = frames["static_minilm"]
    assert (s["neg_id"].to_numpy() == f["neg_id"].to_numpy()).all()
    ids = [n.id for r in records for n in r.negatives]
    assert ids == f["neg_id"].tolist(), "records and audit rows out of step"
    f = f.assign(
        year=year,
        group=[f"{year}:{q}" for q in f["qid"]],
        static_gap=s["s_qn"].to_numpy() - s["s_qp"].to_numpy(),
        static_pn=s["s_pn"].to_numpy(),
        bm25_rel=bm25_rel(records),
    )
    return pd.concat([f.reset_index(drop=True), cross_record(records)], axis=1)


# ---------------------------------------------------------------------------------------------
# Fitting and measuring (generic over the model form)
# ---------------------------------------------------------------------------------------------

BASE = ("gap", "s_qn", "s_pn", "coverage", "log_position")
CANDIDATES = (
    ("agreement", ("agree_share", "agree_best")),
    ("bm25", ("bm25_rel",)),
    ("static", ("static_gap", "static_pn")),
    ("other_positive", ("other_positive",)),
)


def columns(frame: pd.DataFrame, names) -> np.ndarray:
    derived = {
        "gap": frame["s_qn"] - frame["s_qp"],
        "coverage": frame["coverage"].fillna(0.0),
        "log_position": np.log1p(frame["position"]),
    }
    return np.column_stack([np.asarray(derived.get(n, frame.get(n)), dtype=np.float64) for n in names])


class Logistic:
    def fit(self, x, y):
        from sklearn.linear_model import LogisticRegression

        self.mean = x.mean(axis=0)
        sd = x.std(axis=0)
        self.scale = np.where(sd > 0, sd, 1.0)
        self.m = LogisticRegression(C=1.0, max_iter=1000).fit((x - self.mean) / self.scale, y)
        return self

    def logit(self, x):
        return self.m.decision_function((x - self.mean) / self.scale)


class Boosted:
    def fit(self, x, y):
        from sklearn.ensemble import HistGradientBoostingClassifier

        self.m = HistGradientBoostingClassifier(random_state=0).fit(x, y)
        return self

    def logit(self, x):
        return self.m.decision_function(x)


def best_threshold(p, y):
    from transferdx.diagnostics.fn_combined import best_threshold as bt

    return bt(p, y)


def platt(z, y):
    from transferdx.diagnostics.fn_combined import platt as pl

    return pl(z, y)


def sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


def oof_logits(form, x, y, groups, folds=5):
    from sklearn.model_selection import GroupKFold

    z = np.zeros(len(y))
    for tr, te in GroupKFold(n_splits=folds).split(x, y, groups):
        z[te] = form().fit(x[tr], y[tr]).logit(x[te])
    return z


def fit(form, x, y, groups):
    """Model on all rows, Platt (a, b) on out-of-fold logits, the own cut (F1-max on the out-of-fold
    calibrated probabilities), the training prior."""
    z = oof_logits(form, x, y, groups)
    a, b = platt(z, y)
    cut = best_threshold(sigmoid(a * z + b), y)
    return {"model": form().fit(x, y), "a": a, "b": b, "cut": cut, "prior": float(y.mean())}


def predict(det, x):
    return sigmoid(det["a"] * det["model"].logit(x) + det["b"])


def judged(frame):
    j = pd.to_numeric(frame["judgment"], errors="coerce")
    return j.notna().to_numpy(), (j.fillna(-1) >= 2).to_numpy()


def ece(p, y, bins=10):
    from transferdx.auditing.fn_eval import expected_calibration_error

    return expected_calibration_error(p, y, bins)


def reliability(p, y, bins=10):
    edges = np.linspace(0, 1, bins + 1)
    idx = np.minimum((p * bins).astype(int), bins - 1)
    return [
        {
            "bin": f"[{edges[k]:.1f}, {edges[k + 1]:.1f})",
            "n": int((idx == k).sum()),
            "mean_p": float(p[idx == k].mean()) if (idx == k).any() else None,
            "observed": float(y[idx == k].mean()) if (idx == k).any() else None,
        }
        for k in range(bins)
    ]


def prf(pred, y, groups, resamples, seed=0):
    from transferdx.auditing.fn_eval import evaluate_predictions

    (row,) = evaluate_predictions([pred], y, list(groups), seed=seed, resamples=resamples)
    return row


def average_precision(p, y):
    from sklearn.metrics import average_precision_score

    return float(average_precision_score(y, p))


def measure(p, y, groups, cut, resamples):
    row = prf(p >= cut, y, groups, resamples)
    keep = (
        "precision",
        "precision_ci_low",
        "precision_ci_high",
        "recall",
        "recall_ci_low",
        "recall_ci_high",
        "f1",
        "f1_ci_low",
        "f1_ci_high",
        "tp",
        "fp",
        "fn",
    )
    return {
        **{k: row[k] for k in keep},
        "n_suspected": int((p >= cut).sum()),
        "ap": average_precision(p, y),
        "ece": ece(p, y),
        "reliability": reliability(p, y),
    }


def direction(frame, train_year, test_year, names, form, resamples):
    from transferdx.diagnostics.prior import adjust, em_prior

    tr = frame[frame["year"] == train_year]
    te = frame[frame["year"] == test_year]
    ok_tr, y_tr = judged(tr)
    det = fit(form, columns(tr, names)[ok_tr], y_tr[ok_tr], tr["group"].to_numpy()[ok_tr])
    p_all = predict(det, columns(te, names))
    prior = em_prior(p_all, det["prior"])  # over every negative of the file, judged or not, as a user has it
    adj_all = adjust(p_all, det["prior"], prior)
    ok, y = judged(te)
    g = te["group"].to_numpy()[ok]
    return {
        "train": train_year,
        "test": test_year,
        "features": list(names),
        "form": form.__name__,
        "train_prior": det["prior"],
        "cut": det["cut"],
        "platt": [det["a"], det["b"]],
        "test_base_rate": float(y[ok].mean()),
        "em_prior": prior,
        "n_judged": int(ok.sum()),
        "n_unjudged": int((~ok).sum()),
        "unjudged_mean_p": float(adj_all[~ok].mean()) if (~ok).any() else None,
        "raw": measure(p_all[ok], y[ok], g, det["cut"], resamples),
        "adjusted": measure(adj_all[ok], y[ok], g, det["cut"], resamples),
        "_p": adj_all[ok],
        "_y": y[ok],
        "_g": g,
        "_raw_p": p_all[ok],
        "_cut": det["cut"],
    }


def in_year(frame, year, names, form):
    """Out-of-fold F1 within one year: each query's prediction from a detector (model, Platt and cut)
    fitted without it (5 folds grouped by query)."""
    from sklearn.model_selection import GroupKFold

    f = frame[frame["year"] == year]
    ok, y = judged(f)
    x, y, g = columns(f, names)[ok], y[ok], f["group"].to_numpy()[ok]
    pred = np.zeros(len(y), dtype=bool)
    for tr, te in GroupKFold(n_splits=5).split(x, y, g):
        det = fit(form, x[tr], y[tr], g[tr])
        pred[te] = predict(det, x[te]) >= det["cut"]
    row = prf(pred, y, g, 200)
    return {k: row[k] for k in ("precision", "recall", "f1")}


def pooled(dirs):
    return (
        np.concatenate([d["_p"] >= d["_cut"] for d in dirs]),
        np.concatenate([d["_y"] for d in dirs]),
        np.concatenate([d["_g"] for d in dirs]),
    )


def delta_f1(with_dirs, without_dirs, resamples, seed=0):
    """ΔF1 = F1(with) − F1(without) on the pooled out-of-year predictions, paired percentile bootstrap
    over queries, each year's queries resampled within the year."""
    pw, y, g = pooled(with_dirs)
    po, y2, g2 = pooled(without_dirs)
    assert (y == y2).all() and (g == g2).all()
    names, q = np.unique(g, return_inverse=True)
    counts = []
    for pred in (pw, po):
        counts.append(
            np.stack(
                [
                    np.bincount(q, pred & y, len(names)),
                    np.bincount(q, pred & ~y, len(names)),
                    np.bincount(q, ~pred & y, len(names)),
                ],
                axis=1,
            )
        )
    year_of = np.asarray([n.split(":")[0] for n in names])
    rng = np.random.default_rng([seed, 0xD1])

    def f1(c):
        return 2 * c[..., 0] / (2 * c[..., 0] + c[..., 1] + c[..., 2])

    point = float(f1(counts[0].sum(0)) - f1(counts[1].sum(0)))
    w = np.zeros((resamples, len(names)))
    for yr in np.unique(year_of):
        members = np.flatnonzero(year_of == yr)
        draws = members[rng.integers(0, len(members), (resamples, len(members)))]
        for b in range(resamples):
            w[b] += np.bincount(draws[b], minlength=len(names))
    diff = f1(w @ counts[0]) - f1(w @ counts[1])
    return {
        "delta_f1": point,
        "ci_low": float(np.quantile(diff, 0.025)),
        "ci_high": float(np.quantile(diff, 0.975)),
        "f1_with": float(f1(counts[0].sum(0))),
        "f1_without": float(f1(counts[1].sum(0))),
    }


def prior_test(d, rates=(0.05, 0.15, 0.30, 0.575), draws=20, resamples=200, seed=0):
    """Subsample the judged negatives of the evaluated year to each base rate; EM π̂ with its CI on the
    raw (unadjusted) probabilities, and the ECE of the adjusted ones."""
    from transferdx.diagnostics.prior import adjust, em_prior_ci

    p, y, g = d["_raw_p"], d["_y"], d["_g"]
    pos, neg = np.flatnonzero(y), np.flatnonzero(~y)
    out = []
    for rate in rates:
        rng = np.random.default_rng([seed, int(rate * 1000)])
        covered, eces, priors, raw, widths = [], [], [], [], []
        for _ in range(draws):
            if len(pos) / (len(pos) + len(neg)) > rate:  # too many positives: sample them
                k = round(rate * len(neg) / (1 - rate))
                rows = np.concatenate([neg, rng.choice(pos, k, replace=False)])
            else:
                k = round(len(pos) * (1 - rate) / rate)
                rows = np.concatenate([pos, rng.choice(neg, k, replace=False)])
            rows.sort()
            _, owner = np.unique(g[rows], return_inverse=True)
            est = em_prior_ci(p[rows], owner, d["train_prior"], rng, resamples)
            true = float(y[rows].mean())
            covered.append(est.low <= true <= est.high)
            priors.append(est.prior)
            eces.append(ece(adjust(p[rows], d["train_prior"], est.prior), y[rows]))
            raw.append(ece(p[rows], y[rows]))
            widths.append(est.high - est.low)
        out.append(
            {
                "rate": rate,
                "n": len(rows),
                "coverage": float(np.mean(covered)),
                "mean_estimate": float(np.mean(priors)),
                "mean_ci_width": float(np.mean(widths)),
                "mean_ece": float(np.mean(eces)),
                "max_ece": float(np.max(eces)),
                "mean_ece_unadjusted": float(np.mean(raw)),
            }
        )
    return out


def public(d):
    return {k: v for k, v in d.items() if not k.startswith("_")}


def both(frame, names, form, resamples):
    return [direction(frame, a, b, names, form, resamples) for a, b in (("dl19", "dl21"), ("dl21", "dl19"))]


def run(frame: pd.DataFrame, resamples: int = 1000) -> dict:
    out: dict = {"n": {y: int((frame["year"] == y).sum()) for y in YEARS}}
    base = both(frame, BASE, Logistic, resamples)
    out["base"] = [public(d) for d in base]
    out["in_year"] = {y: in_year(frame, y, BASE, Logistic) for y in YEARS}
    kept, current, steps = list(BASE), base, []
    for name, cols in CANDIDATES:
        trial = both(frame, kept + list(cols), Logistic, resamples)
        test = delta_f1(trial, current, resamples)
        keep = test["ci_low"] > 0
        steps.append(
            {"candidate": name, "columns": list(cols), **test, "kept": keep, "directions": [public(d) for d in trial]}
        )
        if keep:
            kept, current = kept + list(cols), trial
    boosted = both(frame, kept, Boosted, resamples)
    test = delta_f1(boosted, current, resamples)
    steps.append(
        {
            "candidate": "gradient_boosting",
            "columns": kept,
            **test,
            "kept": test["ci_low"] > 0,
            "directions": [public(d) for d in boosted],
        }
    )
    if test["ci_low"] > 0:
        current = boosted
    out["selection"] = steps
    out["kept"] = kept
    out["final"] = [public(d) for d in current]
    out["prior_test"] = {f"{d['train']}->{d['test']}": prior_test(d) for d in current}
    out["cleaning"] = {"single": cleaning_cuts(base, resamples), "multi": cleaning_cuts(current, resamples)}
    return out


def cleaning_cuts(dirs, resamples) -> dict:
    """Pooled out-of-year precision of adjusted p ≥ c for c = 0.50, 0.55, …, 0.95; the cut = the lowest
    whose precision is ≥ 0.80."""
    pred_p = np.concatenate([d["_p"] for d in dirs])
    y = np.concatenate([d["_y"] for d in dirs])
    g = np.concatenate([d["_g"] for d in dirs])
    cuts = []
    for c in np.round(np.arange(0.50, 0.951, 0.05), 2):
        row = prf(pred_p >= c, y, g, resamples)
        cuts.append(
            {
                "cut": float(c),
                "n": int((pred_p >= c).sum()),
                **{k: row[k] for k in ("precision", "precision_ci_low", "precision_ci_high", "recall")},
            }
        )
    ok = [c for c in cuts if c["precision"] >= 0.80]
    return {"cuts": cuts, "cut": ok[0] if ok else None, "n_judged": len(y), "base_rate": float(y.mean())}


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    data_dir = Path(args[0] if args else os.environ.get("TRANSFERDX_DATA_DIR", "../shared/data"))
    frame = pd.concat([year_frame(data_dir, y) for y in YEARS], ignore_index=True)
    result = run(frame)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "results.json").write_text(canonical_json(result), encoding="utf-8")
    print(f"wrote {OUT / 'results.json'}")


def _pr(m: dict) -> str:
    return (
        f"{m['precision']:.3f} [{m['precision_ci_low']:.3f}, {m['precision_ci_high']:.3f}] | "
        f"{m['recall']:.3f} [{m['recall_ci_low']:.3f}, {m['recall_ci_high']:.3f}] | "
        f"{m['f1']:.3f} [{m['f1_ci_low']:.3f}, {m['f1_ci_high']:.3f}] | {m['ap']:.3f} | {m['ece']:.3f}"
    )


def tables(r: dict) -> str:
    """The Markdown tables of experiments/results/fn_years/README.md from results.json."""
    out = ["### Per direction (judged negatives of the evaluated year)", ""]
    out.append(
        "| features | fitted → measured | probability | cut | precision [CI] | recall [CI] | F1 [CI] | AP | ECE |"
    )
    out.append("|---|---|---|---|---|---|---|---|---|")
    for label, dirs in (("base (5)", r["base"]), ("kept: " + ", ".join(r["kept"][5:]) or "base", r["final"])):
        for d in dirs:
            for form in ("raw", "adjusted"):
                adjusted = f"prior-adjusted (π̂ {d['em_prior']:.3f}, true {d['test_base_rate']:.3f})"
                name = "calibrated" if form == "raw" else adjusted
                out.append(f"| {label} | {d['train']} → {d['test']} | {name} | {d['cut']:.3f} | {_pr(d[form])} |")
    out += ["", "In-year out of fold (5 folds grouped by query, cut chosen on the training folds), base features:", ""]
    for y, m in r["in_year"].items():
        out.append(f"- {y}: precision {m['precision']:.3f}, recall {m['recall']:.3f}, F1 {m['f1']:.3f}")
    out += ["", "### Forward selection (pooled out-of-year F1, prior-adjusted)", ""]
    out.append("| candidate | F1 without | F1 with | ΔF1 [95% CI] | kept |")
    out.append("|---|---|---|---|---|")
    for s in r["selection"]:
        out.append(
            f"| {s['candidate']} | {s['f1_without']:.4f} | {s['f1_with']:.4f} | "
            f"{s['delta_f1']:+.4f} [{s['ci_low']:+.4f}, {s['ci_high']:+.4f}] | {'yes' if s['kept'] else 'no'} |"
        )
    out += ["", "### Reliability (kept features, prior-adjusted; 10 equal-width bins: n, mean p, observed)", ""]
    for d in r["final"]:
        bins = [b for b in d["adjusted"]["reliability"] if b["n"]]
        cells = [f"{b['bin']}: {b['n']}, {b['mean_p']:.2f}, {b['observed']:.2f}" for b in bins]
        out.append(f"- {d['train']} → {d['test']}: " + "; ".join(cells))
        mean_p = d["unjudged_mean_p"] if d["unjudged_mean_p"] is not None else float("nan")
        out.append(f"  unjudged negatives: {d['n_unjudged']} (mean adjusted p {mean_p:.3f})")
    out += ["", "### Prior test (20 draws per base rate; kept features)", ""]
    out.append(
        "| fitted → measured | base rate | n | π̂ (mean) | CI width (mean) | truth in CI"
        " | ECE adjusted (mean / max) | ECE unadjusted |"
    )
    out.append("|---|---|---|---|---|---|---|---|")
    for k, rows in r["prior_test"].items():
        for x in rows:
            out.append(
                f"| {k} | {x['rate']} | {x['n']} | {x['mean_estimate']:.3f} | {x['mean_ci_width']:.3f} | "
                f"{x['coverage']:.2f} | {x['mean_ece']:.3f} / {x['max_ece']:.3f} | {x['mean_ece_unadjusted']:.3f} |"
            )
    out += ["", "### Cleaning cuts (pooled out of year, prior-adjusted, judged negatives)", ""]
    for name, c in r["cleaning"].items():
        out.append(f"{name} detector (base rate {c['base_rate']:.3f} over {c['n_judged']} judged negatives):")
        out.append("")
        out.append("| cut | suspected | precision [CI] | recall |")
        out.append("|---|---|---|---|")
        for row in c["cuts"]:
            out.append(
                f"| {row['cut']:.2f} | {row['n']} | {row['precision']:.3f} [{row['precision_ci_low']:.3f},"
                f" {row['precision_ci_high']:.3f}] | {row['recall']:.3f} |"
            )
        out.append("")
        out.append(f"Chosen: {c['cut']['cut'] if c['cut'] else 'none'}")
        out.append("")
    return "\n".join(out)
