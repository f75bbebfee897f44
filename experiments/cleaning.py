"""Issue 34's experiment (plan and predictions: experiments/results/cleaning/PLAN.md): does cleaning a
single-label training file with transferdx train a better retriever than not cleaning it, or than the
filters users already have, on queries the model did not train on?

Records: every (query, judged-relevant passage with text) pair of TREC-DL19 and DL21, at most ``cap``
per query (grade desc, then id), the passage its only known positive; its pool is a run's ranked
candidates less that passage (the top ``depth``). Each arm takes K distinct negatives from the same
ranked pool (:func:`select`), skipping what its rule says. The transferdx arms act on an audit of the
records with all-MiniLM-L6-v2 whose false-negative detector was fitted on the *other* year (the
shipped detector was fitted on both years, which would be in-sample here). Models: the static
MiniLM-token model (``static_minilm``), trained with the package's :func:`transferdx.training.train_model`,
one per (run, arm, fold, seed); folds split the queries of both years (every query held out once);
each model is scored on its held-out queries (nDCG@10, graded gains, grade >= 2 relevant; corpus =
every passage of that year's runs) and on SciFact test.

    python experiments/cleaning.py [DATA_DIR] [--out DIR] [--pilot] [--score]

A finished model's scores are cached under ``--out`` (keyed by what it trained on, its settings and
seed), so a re-run only scores; the trained folder is removed once scored. ``--score`` writes
experiments/results/cleaning/ from the cached runs.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import json
import os
import shutil
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))

import transferdx as tdx
from transferdx.artifacts import atomic_write_text, canonical_json
from transferdx.diagnostics import fn_combined
from transferdx.diagnostics.suspicion import MIN_PROBABILITY
from transferdx.embed.models import set_max_seq_length
from transferdx.inputs.records import LoadResult, Passage, Record
from transferdx.inputs.trec_dl import load_trec_dl_query_set, read_retrieve_results
from transferdx.pipeline.cleaning.core import checked_reasons, clean_records

RESULTS = Path(__file__).resolve().parent / "results" / "cleaning"
YEARS = {
    "dl19": ("msmarco-dl19", "topics.dl19-passage.txt", "qrels.dl19-passage.txt", "retrieve_results_dl19.json"),
    "dl21": ("msmarco-dl21", "topics.dl21-passage.txt", "qrels.dl21-passage.txt", "retrieve_results_dl21.json"),
}
RELEVANT = 2


@dataclasses.dataclass(frozen=True)
class Design:
    """Everything that shapes the run (hashed into each model's key)."""

    runs: tuple[str, ...] = ("BM25", "SPLADE_P_P_ENSEMBLE_DISTIL")
    k: int = 8  # negatives per record, distinct, from the ranked pool
    depth: int = 60  # how deep in the run's ranking an arm may reach for its K
    cap: int = 4  # positives (records) per query
    folds: int = 5
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    learning_rate: float = 0.005
    steps: int = 40
    batch_size: int = 32
    warmup_ratio: float = 0.1
    relative_margin: float = 0.05  # sentence-transformers' relative_margin (NV-Retriever TopK-PercPos 95%)
    absolute_margin: float = 0.1  # sentence-transformers' absolute_margin
    # the second run trains fewer arms (the budget): the oracle, the default cleaning, the most used
    # peer filter and the random control
    second_arms: tuple[str, ...] = ("raw", "oracle", "tdx_default", "relative_margin", "random_skip")
    arms: tuple[str, ...] = (
        "raw",
        "oracle",
        "oracle_relabel",
        "tdx_default",
        "tdx_all",
        "tdx_relabel",
        "tdx_both",
        "relative_margin",
        "absolute_margin",
        "random_skip",
    )


# ---------------------------------------------------------------------------------------------
# Records and pools
# ---------------------------------------------------------------------------------------------


def year_records(data_dir: Path, year: str, run: str, design: Design) -> list[Record]:
    """One record per (query, relevant passage) pair of ``year``, at most ``design.cap`` per query;
    negatives = ``run``'s candidates in rank order less that passage, the first ``design.depth``,
    each with its judgment (None when unjudged). qid = ``year:qid:pid``."""
    folder, topics, qrels, results_name = YEARS[year]
    root = data_dir / folder
    qs = load_trec_dl_query_set(root, relevant_grade=RELEVANT, topics=topics, qrels=qrels, results_name=results_name)
    ranking = read_retrieve_results(root / "runs" / run / results_name)
    judgments = qs.judgments or {}
    out = []
    for qid, positives in qs.positives.items():
        if qid not in ranking:
            continue
        grades = judgments[qid]
        hits = [docid for docid, _rank, _text in sorted(ranking[qid][1], key=lambda h: h[1])]
        for pid in positives[: design.cap]:
            pool = [d for d in hits if d != pid][: design.depth]
            out.append(
                Record(
                    qid=f"{year}:{qid}:{pid}",
                    query=qs.queries[qid],
                    positives=(Passage(pid, qs.pool[pid], judgment=grades[pid]),),
                    negatives=tuple(
                        Passage(d, qs.pool[d], run, rank=r + 1, judgment=grades.get(d)) for r, d in enumerate(pool)
                    ),
                    source=run,
                )
            )
    return out


def base_query(record_qid: str) -> str:
    """``year:qid`` of a record's qid ``year:qid:pid``."""
    year, qid, _pid = record_qid.split(":", 2)
    return f"{year}:{qid}"


def fold_of(queries: Sequence[str], folds: int) -> dict[str, int]:
    """Each query → a fold in 0..folds-1: queries sorted by sha256, dealt round-robin (balanced,
    independent of the arms and seeds)."""
    order = sorted(set(queries), key=lambda q: hashlib.sha256(q.encode()).hexdigest())
    return {q: i % folds for i, q in enumerate(order)}


# ---------------------------------------------------------------------------------------------
# Arms: which K negatives (and which extra positives) each record trains on
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Selection:
    """One record's arm: indices into its pool of the negatives taken (K at most, distinct, in rank
    order), of the candidates skipped before the last one taken, and of those relabelled as positives."""

    taken: tuple[int, ...]
    skipped: tuple[int, ...]
    relabelled: tuple[int, ...] = ()


def take(n_pool: int, skip: Sequence[bool], k: int) -> Selection:
    """The first ``k`` candidates not skipped, in rank order; the skipped ones passed on the way."""
    taken: list[int] = []
    skipped: list[int] = []
    for i in range(n_pool):
        if len(taken) == k:
            break
        (skipped if skip[i] else taken).append(i)
    return Selection(tuple(taken), tuple(skipped))


def margin_skips(s_qp: float, s_qn: np.ndarray, relative: float | None, absolute: float | None) -> np.ndarray:
    """sentence-transformers ``mine_hard_negatives``' margin rules, one positive: skip a candidate when
    s(q,n) + absolute > s(q,p) or s(q,n) > s(q,p) − |s(q,p)|·relative."""
    s_qn = np.asarray(s_qn, dtype=np.float64)
    skip = np.zeros(len(s_qn), dtype=bool)
    if absolute is not None:
        skip |= s_qn + absolute > s_qp
    if relative is not None:
        skip |= s_qn > s_qp - abs(s_qp) * relative
    return skip


def random_skips(n_pool: int, n_skip: int, k: int, seed: int) -> np.ndarray:
    """``n_skip`` positions among the first ``k + n_skip`` of the pool, uniformly at random."""
    rng = np.random.default_rng(seed)
    skip = np.zeros(n_pool, dtype=bool)
    reach = min(n_pool, k + n_skip)
    skip[rng.choice(reach, size=min(n_skip, reach), replace=False)] = True
    return skip


def record_seed(qid: str) -> int:
    return int(hashlib.sha256(qid.encode()).hexdigest()[:8], 16)


def cleaned_skips(records: Sequence[Record], frame: pd.DataFrame, **how: Any) -> dict[str, tuple[set[int], set[int]]]:
    """Per record: (pool indices the package's cleaner takes out, of them those it relabels)."""
    queries, removed, _ = clean_records(records, frame, **how)
    out: dict[str, tuple[set[int], set[int]]] = {r.qid: (set(), set()) for r in records}
    for qid, k, action in zip(removed["qid"], removed["neg_index"], removed["action"], strict=True):
        out[str(qid)][0].add(int(k))
        if action == "relabeled":
            out[str(qid)][1].add(int(k))
    assert len(queries) == len(records)
    return out


def select(records: Sequence[Record], frame: pd.DataFrame, design: Design) -> dict[str, dict[str, Selection]]:
    """arm → record qid → :class:`Selection`. ``frame``: the audit's per-negative frame of ``records``
    (``qid``, ``neg_index``, ``s_qp``, ``s_qn``, ``fn_reasons``, ``fn_probability``)."""
    k = design.k
    by_rec = {q: g.sort_values("neg_index") for q, g in frame.groupby("qid", sort=False)}
    every = checked_reasons(frame)
    tdx_rules = {
        "tdx_default": cleaned_skips(records, frame, action="remove", min_probability=MIN_PROBABILITY),
        "tdx_all": cleaned_skips(records, frame, action="remove", reasons=every, min_probability=MIN_PROBABILITY),
        "tdx_relabel": cleaned_skips(records, frame, action="relabel", min_probability=MIN_PROBABILITY),
        "tdx_both": cleaned_skips(records, frame, action="both", min_probability=MIN_PROBABILITY),
    }
    out: dict[str, dict[str, Selection]] = {arm: {} for arm in design.arms}
    for rec in records:
        n = len(rec.negatives)
        g = by_rec[rec.qid]
        s_qp = float(g["s_qp"].iloc[0])
        s_qn = g["s_qn"].to_numpy(dtype=np.float64)
        relevant = np.array([(p.judgment or 0) >= RELEVANT for p in rec.negatives])
        skips: dict[str, tuple[np.ndarray, set[int]]] = {
            "raw": (np.zeros(n, dtype=bool), set()),
            "oracle": (relevant, set()),
            "oracle_relabel": (relevant, set(np.flatnonzero(relevant).tolist())),
            "relative_margin": (margin_skips(s_qp, s_qn, design.relative_margin, None), set()),
            "absolute_margin": (margin_skips(s_qp, s_qn, None, design.absolute_margin), set()),
        }
        for arm, per_record in tdx_rules.items():
            out_idx, moved = per_record[rec.qid]
            skips[arm] = (np.isin(np.arange(n), sorted(out_idx)), moved)
        for arm in design.arms:
            if arm == "random_skip":
                n_skip = len(take(n, skips["tdx_default"][0], k).skipped)
                sel = take(n, random_skips(n, n_skip, k, record_seed(rec.qid)), k)
            else:
                skip, moved = skips[arm]
                sel = take(n, skip, k)
                sel = dataclasses.replace(sel, relabelled=tuple(i for i in sel.skipped if i in moved))
            out[arm][rec.qid] = sel
    return out


def training_records(records: Sequence[Record], chosen: Mapping[str, Selection]) -> list[Record]:
    """The records an arm trains on: each with its taken negatives; a relabelled candidate adds a
    record of its own (the same query and negatives, that passage as the positive), as the cleaner's
    n-tuple rows do."""
    out = []
    for rec in records:
        sel = chosen[rec.qid]
        negatives = tuple(rec.negatives[i] for i in sel.taken)
        out.append(dataclasses.replace(rec, negatives=negatives))
        for i in sel.relabelled:
            extra = rec.negatives[i]
            out.append(dataclasses.replace(rec, qid=f"{rec.qid}+{extra.id}", positives=(extra,), negatives=negatives))
    return out


# ---------------------------------------------------------------------------------------------
# The audit, with the detector fitted on the other year
# ---------------------------------------------------------------------------------------------


def other_year_detectors(data_dir: Path) -> dict[str, dict[str, Any]]:
    """year → the ``single`` detector fitted (the shipped recipe) on the *other* year's top-8
    single-label audit (fn_years.year_frame), as a ``fn_combined.json`` entry."""
    import fn_years

    frames = {y: fn_years.year_frame(data_dir, y) for y in YEARS}
    out = {}
    for year in YEARS:
        (other,) = [y for y in YEARS if y != year]
        f = frames[other]
        ok, y = fn_years.judged(f)
        x = fn_combined.feature_matrix(f[ok], fn_combined.SINGLE)
        det = fn_combined.fit_detector(x, y[ok], f["group"].to_numpy()[ok], fn_combined.SINGLE, f"TREC-{other}")
        out[year] = det.to_dict()
    return out


def audit_frame(records: Sequence[Record], detector: Mapping[str, Any]) -> pd.DataFrame:
    """The package's audit of ``records`` (all-MiniLM-L6-v2, one source) with ``detector`` in place of
    the shipped one."""
    shipped = fn_combined.shipped()
    patched = {**shipped, "detectors": {"single": dict(detector), "multi": shipped["detectors"]["multi"]}}
    with mock.patch.object(fn_combined, "shipped", lambda: patched):
        result = tdx.audit(LoadResult(records=list(records)), encoder="minilm_l6", controls="none", resamples=1)
    negatives, per_record = result.result.negatives, result.result.records
    s_qp = dict(zip(per_record["qid"].astype(str), per_record["s_qp"].astype(float), strict=True))
    return negatives.assign(s_qp=negatives["qid"].astype(str).map(s_qp))


# ---------------------------------------------------------------------------------------------
# Training and scoring one model
# ---------------------------------------------------------------------------------------------


def benchmarks(data_dir: Path) -> dict[str, Any]:
    """The corpora and judged queries each model is scored on: each TREC-DL year (corpus = every
    passage of its runs) and SciFact test."""
    from transferdx.evaluation import load_beir_split, load_trec_dl_benchmark

    out: dict[str, Any] = {}
    for year, (folder, topics, qrels, results_name) in YEARS.items():
        d = load_trec_dl_benchmark(
            data_dir / folder, relevant_grade=RELEVANT, topics=topics, qrels=qrels, results_name=results_name
        )
        # query ids prefixed with the year: the two years' ids could meet in one fold
        out[year] = dataclasses.replace(
            d,
            name=year,
            queries={f"{year}:{q}": t for q, t in d.queries.items()},
            qrels={f"{year}:{q}": j for q, j in d.qrels.items()},
        )
    out["scifact"] = load_beir_split(data_dir / "beir" / "scifact", "test")
    return out


def score_model(
    model: Any, data: Mapping[str, Any], queries: Mapping[str, Sequence[str]]
) -> dict[str, dict[str, float]]:
    """dataset → query → nDCG@10 of ``model`` (a SentenceTransformer) on ``queries[dataset]``."""
    from transferdx.evaluation import dense_search, per_query_metrics

    out = {}
    for name, qids in queries.items():
        d = data[name]
        pids = list(d.corpus)
        cv = model.encode([d.corpus[p] for p in pids], batch_size=256, normalize_embeddings=True, convert_to_numpy=True)
        qv = model.encode(
            [d.queries[q] for q in qids], batch_size=256, normalize_embeddings=True, convert_to_numpy=True
        )
        run = dense_search(qv, cv, list(qids), pids, 10)
        pq = per_query_metrics(
            {q: d.qrels[q] for q in qids},
            run,
            (10,),
            relevance_level=d.relevance_level,
            ignore_identical_ids=d.ignore_identical_ids,
        )
        out[name] = {str(q): round(float(v), 6) for q, v in zip(pq["qid"], pq["ndcg@10"], strict=True)}
    return out


def run_key(records: Sequence[Record], design: Design, seed: int) -> str:
    """What a model is: the texts it trains on (in order), the training settings and the seed."""
    rows = [(r.query, r.positives[0].text, [n.text for n in r.negatives]) for r in records]
    settings = {f: getattr(design, f) for f in ("k", "learning_rate", "steps", "batch_size", "warmup_ratio")}
    blob = canonical_json({"rows": rows, "settings": settings, "seed": seed, "backbone": "static_minilm"})
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


def train_and_score(
    records: Sequence[Record],
    design: Design,
    seed: int,
    out: Path,
    data: Mapping[str, Any],
    queries: Mapping[str, Sequence[str]],
) -> dict[str, Any]:
    """Train one static model on ``records`` (or read its cached scores) and score it."""
    from sentence_transformers import SentenceTransformer

    from transferdx.pipeline.encoders import encoder_spec
    from transferdx.training import TrainSettings, train_model

    key = run_key(records, design, seed)
    cached = out / "scores" / f"{key}.json"
    if cached.is_file():
        return dict(json.loads(cached.read_text("utf-8")))
    settings = TrainSettings(
        learning_rate=design.learning_rate,
        batch_size=design.batch_size,
        max_steps=design.steps,
        warmup_ratio=design.warmup_ratio,
        max_seq_length=128,
        negatives=design.k,
        save_steps=10**6,
        logging_steps=10**6,
    )
    folder = out / "models" / key
    started = time.perf_counter()
    trained = train_model(
        records,
        encoder_spec("static_minilm", max_seq_length=128),
        settings,
        folder,
        seed=seed,
        cache_dir=tdx.presets.default_cache_dir(),
        source="cleaning",
        progress=False,
    )
    took = time.perf_counter() - started
    model = SentenceTransformer(str(trained.model_dir), device="cpu")
    set_max_seq_length(model, 128)
    scores = score_model(model, data, queries)
    result = {
        "key": key,
        "seed": seed,
        "n_examples": trained.n_examples,
        "n_left_out": trained.n_left_out,
        "train_s": round(took, 1),
        "scores": scores,
    }
    atomic_write_text(cached, canonical_json(result))
    shutil.rmtree(folder, ignore_errors=True)
    return result


def frozen_scores(data: Mapping[str, Any], queries: Mapping[str, Sequence[str]], out: Path) -> dict[str, Any]:
    """The untrained static model's scores (the floor training must beat on held-out queries)."""
    from sentence_transformers import SentenceTransformer

    from transferdx.embed import resolve_model
    from transferdx.pipeline.encoders import encoder_spec

    cached = out / "scores" / "frozen.json"
    if cached.is_file():
        return dict(json.loads(cached.read_text("utf-8")))
    location, _ = resolve_model(encoder_spec("static_minilm"), tdx.presets.default_cache_dir())
    model = SentenceTransformer(str(location), device="cpu")
    set_max_seq_length(model, 128)
    result = {"scores": score_model(model, data, queries)}
    atomic_write_text(cached, canonical_json(result))
    return result


# ---------------------------------------------------------------------------------------------
# The run
# ---------------------------------------------------------------------------------------------


def skip_accounting(records: Sequence[Record], chosen: Mapping[str, Selection], k: int) -> dict[str, Any]:
    """The arm's skips against the judgments (unjudged apart): precision = skipped judged >= 2 /
    skipped judged; recall = skipped judged >= 2 / judged >= 2 among the candidates the raw top-K and
    the arm's reach passed; distinct negatives per record."""
    n_skip = n_skip_judged = n_skip_rel = n_rel_reach = 0
    distinct = []
    for rec in records:
        sel = chosen[rec.qid]
        reach = max((*sel.taken, *sel.skipped), default=-1) + 1
        grades = [n.judgment for n in rec.negatives]
        n_rel_reach += sum(1 for g in grades[:reach] if g is not None and g >= RELEVANT)
        for i in sel.skipped:
            n_skip += 1
            if grades[i] is not None:
                n_skip_judged += 1
                n_skip_rel += grades[i] >= RELEVANT
        distinct.append(len({rec.negatives[i].id for i in sel.taken}))
    return {
        "n_records": len(records),
        "n_skipped": n_skip,
        "n_skipped_judged": n_skip_judged,
        "n_skipped_relevant": n_skip_rel,
        "precision": n_skip_rel / n_skip_judged if n_skip_judged else None,
        "recall": n_skip_rel / n_rel_reach if n_rel_reach else None,
        "n_relabelled": sum(len(chosen[r.qid].relabelled) for r in records),
        "distinct_mean": float(np.mean(distinct)),
        "distinct_min": int(min(distinct)),
        "records_short": int(sum(d < k for d in distinct)),
    }


def run(
    data_dir: Path, out: Path, design: Design, arms: Sequence[str] | None = None, folds: Sequence[int] | None = None
) -> pd.DataFrame:
    """Every (run, arm, fold, seed) model trained (or read from cache) and scored; one row per model
    and held-out query (``dataset``, ``query``, ``ndcg``), SciFact rows per model too."""
    from tqdm.auto import tqdm

    out.mkdir(parents=True, exist_ok=True)
    detectors_file = out / "detectors.json"
    if detectors_file.is_file():
        detectors = json.loads(detectors_file.read_text("utf-8"))
    else:
        detectors = other_year_detectors(data_dir)
        atomic_write_text(detectors_file, canonical_json(detectors))
    data = benchmarks(data_dir)
    arms = list(arms or design.arms)
    rows: list[dict[str, Any]] = []
    accounting: dict[str, Any] = {}
    folds_of = fold_of([q for y in YEARS for q in data[y].queries], design.folds)
    frozen = frozen_scores(data, {y: list(data[y].queries) for y in (*YEARS, "scifact")}, out)
    for name, per_query in frozen["scores"].items():
        rows += [
            {"run": "-", "arm": "frozen", "fold": -1, "seed": -1, "dataset": name, "query": q, "ndcg": v}
            for q, v in per_query.items()
        ]
    for run_name in design.runs:
        records: list[Record] = []
        frames = []
        for year in YEARS:
            recs = year_records(data_dir, year, run_name, design)
            frames.append(audit_frame(recs, detectors[year]))
            records += recs
        frame = pd.concat(frames, ignore_index=True)
        chosen = select(records, frame, design)
        accounting[run_name] = {arm: skip_accounting(records, chosen[arm], design.k) for arm in design.arms}
        trained = [a for a in arms if run_name == design.runs[0] or a in design.second_arms]
        jobs = [
            (arm, f, seed)
            for arm in trained
            for f in (folds if folds is not None else range(design.folds))
            for seed in design.seeds
        ]
        for arm, f, seed in tqdm(jobs, desc=f"{run_name} models", unit="model"):
            train = [r for r in records if folds_of[base_query(r.qid)] != f]
            held = {y: [q for q in data[y].queries if folds_of[q] == f] for y in YEARS}
            held["scifact"] = list(data["scifact"].queries)
            result = train_and_score(training_records(train, chosen[arm]), design, seed, out, data, held)
            for name, per_query in result["scores"].items():
                rows += [
                    {"run": run_name, "arm": arm, "fold": f, "seed": seed, "dataset": name, "query": q, "ndcg": v}
                    for q, v in per_query.items()
                ]
    atomic_write_text(out / "accounting.json", canonical_json(accounting))
    frame_out = pd.DataFrame(rows)
    frame_out.to_csv(out / "per_query.csv", index=False)
    return frame_out


# ---------------------------------------------------------------------------------------------
# Scoring (--score): the tables of results/cleaning/README.md and results.json
# ---------------------------------------------------------------------------------------------

DATASETS = ("trec_dl", "dl19", "dl21", "scifact")  # trec_dl: both years' held-out queries pooled


def score_arrays(frame: pd.DataFrame) -> tuple[dict[str, dict[str, dict[str, dict[int, np.ndarray]]]], dict[str, Any]]:
    """(run → arm → dataset → seed → per-query nDCG@10, queries in one fixed order; frozen → dataset →
    per query). A TREC-DL query's score for a seed is its held-out fold's model's; a SciFact query's is
    the mean over the fold models of that seed."""
    frozen_rows = frame[frame["arm"] == "frozen"]
    frozen_by = {d: g.set_index("query")["ndcg"] for d, g in frozen_rows.groupby("dataset")}
    trained = frame[frame["arm"] != "frozen"]
    out: dict[str, dict[str, dict[str, dict[int, np.ndarray]]]] = {}
    order: dict[str, list[str]] = {}
    for (run_name, arm, seed), g in trained.groupby(["run", "arm", "seed"]):
        per = {}
        dl = g[g["dataset"].isin(list(YEARS))]
        per["trec_dl"] = dl.set_index("query")["ndcg"]
        for year in YEARS:
            per[year] = dl[dl["dataset"] == year].set_index("query")["ndcg"]
        per["scifact"] = g[g["dataset"] == "scifact"].groupby("query")["ndcg"].mean()
        for d, series in per.items():
            order.setdefault(d, sorted(series.index))
            values = series.reindex(order[d]).to_numpy(dtype=np.float64)
            assert not np.isnan(values).any(), f"{run_name}/{arm}/{seed}/{d}: a query without a score"
            out.setdefault(str(run_name), {}).setdefault(str(arm), {}).setdefault(d, {})[int(seed)] = values
    frozen = {
        d: (pd.concat([frozen_by[y] for y in YEARS]) if d == "trec_dl" else frozen_by[d])
        .reindex(order[d])
        .to_numpy(dtype=np.float64)
        for d in DATASETS
    }
    return out, frozen


def arm_table(
    scores: Mapping[str, Mapping[str, Mapping[int, np.ndarray]]],
    frozen: Mapping[str, np.ndarray],
    resamples: int = 10000,
) -> list[dict[str, Any]]:
    """Per dataset and arm: nDCG@10, Δ vs frozen and vs raw (95% CI, p, MDD), and the share of the
    oracle's gain, (arm − raw)/(oracle − raw), with its percentile CI; ``p_holm``: p Holm-adjusted over
    the dataset's arms."""
    from statsmodels.stats.multitest import multipletests

    from transferdx.analysis.validation import bootstrap_p, minimum_detectable_difference, resample
    from transferdx.resampling import percentile_bounds

    rows = []
    for d in DATASETS:
        one = {arm: {d: by[d]} for arm, by in scores.items()}
        boot = resample(one, {d: frozen[d]}, resamples, seed=0)
        point = {arm: float(np.mean([v.mean() for v in by[d].values()])) for arm, by in scores.items()}
        raw = boot.of("raw")
        gain = boot.of("oracle") - raw
        gain_low, gain_high = percentile_bounds(gain, 0.95)
        for arm in boot.sources:
            diff = boot.of(arm) - raw
            low, high = percentile_bounds(diff, 0.95)
            f_low, f_high = percentile_bounds(boot.of(arm) - boot.frozen, 0.95)
            row = {
                "dataset": d,
                "arm": arm,
                "n_queries": len(frozen[d]),
                "n_seeds": len(scores[arm][d]),
                "ndcg10": point[arm],
                "vs_frozen": point[arm] - float(frozen[d].mean()),
                "vs_frozen_ci": [f_low, f_high],
                "vs_raw": point[arm] - point["raw"],
                "vs_raw_ci": [low, high],
                "p": bootstrap_p(diff) if arm != "raw" else None,
                "mdd": minimum_detectable_difference(diff) if arm != "raw" else None,
                "share_of_oracle_gain": None,
                "share_ci": None,
            }
            if arm not in ("raw", "oracle") and gain_low > 0:  # estimable only when the oracle's gain is
                share = diff / gain
                row["share_of_oracle_gain"] = (point[arm] - point["raw"]) / (point["oracle"] - point["raw"])
                row["share_ci"] = list(percentile_bounds(share, 0.95))
            rows.append(row)
        tested = [r for r in rows if r["dataset"] == d and r["p"] is not None]
        for r, adjusted in zip(tested, multipletests([r["p"] for r in tested], method="holm")[1], strict=True):
            r["p_holm"] = float(adjusted)  # Holm over this dataset's arms against raw
        rows.append(
            {
                "dataset": d,
                "arm": "frozen",
                "n_queries": len(frozen[d]),
                "ndcg10": float(frozen[d].mean()),
                "oracle_gain_ci": [gain_low, gain_high],
            }
        )
    return rows


def _row(table: Sequence[Mapping[str, Any]], dataset: str, arm: str) -> Mapping[str, Any]:
    return next(r for r in table if r["dataset"] == dataset and r["arm"] == arm)


def _excludes_zero(ci: Sequence[float]) -> bool:
    return bool(ci[0] > 0 or ci[1] < 0)


def predictions(tables: Mapping[str, Sequence[Mapping[str, Any]]], accounting: Mapping[str, Any]) -> list[dict]:
    """PLAN.md's predictions, each scored from the tables (run → rows) and the skip accounting."""
    first = next(iter(tables))
    acc = accounting[first]
    out = []

    def add(n: int, text: str, held: bool, evidence: str) -> None:
        out.append({"n": n, "prediction": text, "held": bool(held), "evidence": evidence})

    def each(test: Any) -> tuple[bool, str]:
        results = {run_name: test(t) for run_name, t in tables.items()}
        return all(h for h, _ in results.values()), "; ".join(f"{r}: {e}" for r, (_h, e) in results.items())

    def fmt(r: Mapping[str, Any], key: str) -> str:
        lo, hi = r[f"{key}_ci"]
        return f"{r[key]:+.3f} [{lo:+.3f}, {hi:+.3f}]"

    held, ev = each(
        lambda t: ((r := _row(t, "trec_dl", "raw"))["vs_frozen_ci"][0] > 0, "raw − frozen " + fmt(r, "vs_frozen"))
    )
    add(1, "raw − frozen on held-out TREC-DL > 0, CI above 0", held, ev)
    held, ev = each(
        lambda t: (
            -0.01 <= (r := _row(t, "trec_dl", "oracle"))["vs_raw"] <= 0.03 and not _excludes_zero(r["vs_raw_ci"]),
            "oracle − raw " + fmt(r, "vs_raw"),
        )
    )
    add(2, "oracle − raw on held-out TREC-DL in [−0.01, +0.03], CI includes 0", held, ev)
    d = acc["tdx_default"]
    add(
        3,
        "tdx_default skip precision ≥ 0.70 and recall ≤ 0.40 (BM25)",
        d["precision"] is not None and d["precision"] >= 0.70 and d["recall"] <= 0.40,
        f"precision {d['precision']:.3f}, recall {d['recall']:.3f} ({d['n_skipped']} skipped)",
    )
    rm = acc["relative_margin"]
    add(
        4,
        "relative_margin's skips less precise than tdx_default's, and more of them (BM25)",
        rm["precision"] < (d["precision"] or 0) and rm["n_skipped"] > d["n_skipped"],
        f"relative_margin {rm['precision']:.3f} ({rm['n_skipped']} skipped) vs tdx_default {d['precision']:.3f}"
        f" ({d['n_skipped']})",
    )
    am = acc["absolute_margin"]
    add(
        5,
        "absolute_margin (0.1) skips more than relative_margin (0.05) (BM25)",
        am["n_skipped"] > rm["n_skipped"],
        f"{am['n_skipped']} vs {rm['n_skipped']}",
    )
    held, ev = each(
        lambda t: (
            abs((r := _row(t, "trec_dl", "random_skip"))["vs_raw"]) <= r["mdd"] and not _excludes_zero(r["vs_raw_ci"]),
            f"random_skip − raw {fmt(r, 'vs_raw')}, MDD {r['mdd']:.3f}",
        )
    )
    add(6, "random_skip − raw within ±MDD, CI includes 0", held, ev)
    t0 = tables[first]
    o, orl = _row(t0, "trec_dl", "oracle"), _row(t0, "trec_dl", "oracle_relabel")
    add(
        7,
        "oracle_relabel − raw ≥ oracle − raw (BM25, held-out TREC-DL)",
        orl["vs_raw"] >= o["vs_raw"],
        f"{orl['vs_raw']:+.3f} vs {o['vs_raw']:+.3f}",
    )
    held, ev = each(
        lambda t: (
            _row(t, "trec_dl", "tdx_default")["share_of_oracle_gain"] is None,
            "oracle gain CI {:+.3f}..{:+.3f}".format(*_row(t, "trec_dl", "frozen")["oracle_gain_ci"]),
        )
    )
    add(8, "share of the oracle's gain recovered by tdx_default not estimable (oracle gain CI includes 0)", held, ev)

    def scifact(t: Sequence[Mapping[str, Any]]) -> tuple[bool, str]:
        rows = [r for r in t if r["dataset"] == "scifact" and r["arm"] != "frozen"]
        worst = max(abs(r["vs_frozen"]) for r in rows)
        established = [r["arm"] for r in rows if r["arm"] != "raw" and _excludes_zero(r["vs_raw_ci"])]
        return (
            worst <= 0.02 and not established,
            f"max abs(arm − frozen) {worst:.3f}; arm − raw CI excludes 0: {established}",
        )

    held, ev = each(scifact)
    add(9, "SciFact: every arm within 0.02 of frozen; no arm − raw established", held, ev)

    def none_beat(t: Sequence[Mapping[str, Any]]) -> tuple[bool, str]:
        above = [
            r["arm"]
            for r in t
            if r["dataset"] == "trec_dl" and r["arm"] not in ("raw", "frozen") and r["vs_raw_ci"][0] > 0
        ]
        return not [a for a in above if not a.startswith("oracle")], f"CI above 0: {above}"

    held, ev = each(none_beat)
    add(10, "no non-oracle arm beats raw on held-out TREC-DL with its CI above 0", held, ev)
    return out


def write_results(out: Path, results: Path, design: Design, resamples: int = 10000) -> dict[str, Any]:
    """results.json and README.md from the cached runs (``out``)."""
    frame = pd.read_csv(out / "per_query.csv", dtype={"query": str})
    accounting = json.loads((out / "accounting.json").read_text("utf-8"))
    detectors = json.loads((out / "detectors.json").read_text("utf-8"))
    scores, frozen = score_arrays(frame)
    tables = {
        run_name: arm_table(scores[run_name], frozen, resamples) for run_name in design.runs if run_name in scores
    }
    scored = predictions(tables, accounting)
    record = {
        "design": dataclasses.asdict(design),
        "detectors_fitted_on": {y: d["fitted_on"] for y, d in detectors.items()},
        "accounting": accounting,
        "arms": tables,
        "predictions": scored,
        "n_models": int(frame[frame["arm"] != "frozen"].groupby(["run", "arm", "fold", "seed"]).ngroups),
    }
    results.mkdir(parents=True, exist_ok=True)
    with gzip.GzipFile(results / "per_query.csv.gz", "wb", mtime=0) as handle:  # every score, same bytes
        handle.write((out / "per_query.csv").read_bytes())
    atomic_write_text(results / "results.json", canonical_json(json.loads(json.dumps(record, default=float))))
    atomic_write_text(results / "README.md", readme(record))
    return record


def readme(record: Mapping[str, Any]) -> str:
    """The results page: per run, the arms on held-out TREC-DL and SciFact, the skips, the predictions."""

    def ci(pair: Sequence[float] | None) -> str:
        return "—" if pair is None else f"[{pair[0]:+.3f}, {pair[1]:+.3f}]"

    def num(value: Any, spec: str) -> str:
        return "—" if value is None else format(value, spec)

    lines = [
        "# Does cleaning with transferdx train a better retriever? — results (issue 34)",
        "",
        "Plan and predictions, committed before the run: [PLAN.md](PLAN.md). Written by "
        "`python experiments/cleaning.py --score` (`make validation-cleaning`) from the cached runs.",
        "",
        f"{record['n_models']} static models trained and scored; nDCG@10 on held-out queries (query-fold CV "
        "over TREC-DL19 + DL21: every query scored by models that never trained on it); 95% intervals from "
        "the two-level bootstrap (queries, paired across arms; seeds).",
        "",
    ]
    head = (
        "| arm | held-out TREC-DL | Δ vs raw [95% CI] | p (Holm) | MDD | share of oracle gain | DL19 | DL21 | SciFact |"
    )
    skip_head = (
        "| arm | skipped | judged | judged ≥ 2 | precision | recall | relabelled | distinct (mean, min) | short |"
    )
    for run_name, table in record["arms"].items():
        lines += [f"## {run_name}", "", head + " Δ SciFact vs raw |", "|---|---|---|---|---|---|---|---|---|---|"]
        by = {(r["dataset"], r["arm"]): r for r in table}
        present = {r["arm"] for r in table if r["dataset"] == "trec_dl"}
        for arm in [a for a in (*record["design"]["arms"], "frozen") if a in present]:  # the plan's order
            r, sf = by[("trec_dl", arm)], by[("scifact", arm)]
            years = [f"{by[(d, arm)]['ndcg10']:.4f}" for d in ("dl19", "dl21", "scifact")]
            if arm == "frozen":
                lines.append("| (frozen) | " + " | ".join([f"{r['ndcg10']:.4f}", "", "", "", "", *years, ""]) + " |")
                continue
            share = (
                "—" if r["share_of_oracle_gain"] is None else f"{r['share_of_oracle_gain']:+.2f} {ci(r['share_ci'])}"
            )
            delta = "" if arm == "raw" else f"{r['vs_raw']:+.4f} {ci(r['vs_raw_ci'])}"
            sf_delta = "" if arm == "raw" else f"{sf['vs_raw']:+.4f} {ci(sf['vs_raw_ci'])} (p Holm {sf['p_holm']:.3f})"
            cells = [
                arm,
                f"{r['ndcg10']:.4f}",
                delta,
                "" if r["p"] is None else f"{r['p']:.3f} ({r['p_holm']:.3f})",
                num(r["mdd"], ".3f"),
                share,
                *years,
                sf_delta,
            ]
            lines.append("| " + " | ".join(cells) + " |")
        raw, f = by[("trec_dl", "raw")], by[("trec_dl", "frozen")]
        lines += [
            "",
            f"Raw − frozen on held-out TREC-DL: {raw['vs_frozen']:+.4f} {ci(raw['vs_frozen_ci'])}; "
            f"oracle − raw interval {ci(f['oracle_gain_ci'])}.",
            "",
            "Skips against the judgments (unjudged apart; recall over the judged-relevant candidates in the "
            "arm's reach; distinct negatives per record; records with fewer than K):",
            "",
            skip_head,
            "|---|---|---|---|---|---|---|---|---|",
        ]
        accounting = record["accounting"][run_name]
        for arm in [a for a in record["design"]["arms"] if a in accounting]:
            a = accounting[arm]
            cells = [arm, str(a["n_skipped"]), str(a["n_skipped_judged"]), str(a["n_skipped_relevant"])]
            cells += [num(a["precision"], ".3f"), num(a["recall"], ".3f"), str(a["n_relabelled"])]
            cells += [f"{a['distinct_mean']:.2f}, {a['distinct_min']}", str(a["records_short"])]
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    lines += ["## Predictions, scored", "", "| # | prediction | held | evidence |", "|---|---|---|---|"]
    for p in record["predictions"]:
        lines.append(f"| {p['n']} | {p['prediction']} | {'yes' if p['held'] else 'no'} | {p['evidence']} |")
    fitted = "; ".join(f"{y}: fitted on {f}" for y, f in record["detectors_fitted_on"].items())
    lines += ["", f"Detectors of the transferdx arms (each year's records scored by the other year's): {fitted}.", ""]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    args = [a for a in argv if not a.startswith("--")]
    data_dir = Path(args[0] if args else os.environ.get("TRANSFERDX_DATA_DIR", "../shared/data"))
    out = Path(next((a.split("=", 1)[1] for a in argv if a.startswith("--out=")), "outputs/validation-cleaning"))
    design = Design()
    if "--score" in argv:
        record = write_results(out, RESULTS, design)
        for p in record["predictions"]:
            print(f"{p['n']:>2} {'held' if p['held'] else 'FAILED'}: {p['prediction']} — {p['evidence']}")
        return 0
    if "--pilot" in argv:
        design = dataclasses.replace(design, runs=("BM25",), seeds=(0,))
        frame = run(data_dir, out, design, arms=("raw", "oracle"), folds=(0,))
    else:
        frame = run(data_dir, out, design)
    summary = frame.groupby(["run", "arm", "dataset"])["ndcg"].mean().unstack("dataset")
    print(summary.round(4).to_string())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
