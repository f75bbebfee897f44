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
from transferdx.cleaning import checked_reasons, clean_records
from transferdx.diagnostics import fn_combined
from transferdx.diagnostics.suspicion import MIN_PROBABILITY
from transferdx.embed.models import set_max_seq_length
from transferdx.inputs.records import LoadResult, Passage, Record
from transferdx.inputs.trec_dl import load_trec_dl_query_set, read_retrieve_results

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
    from transferdx.evaluation import BeirData, load_beir_split

    out: dict[str, Any] = {}
    for year, (folder, topics, qrels, results_name) in YEARS.items():
        qs = load_trec_dl_query_set(
            data_dir / folder, relevant_grade=RELEVANT, topics=topics, qrels=qrels, results_name=results_name
        )
        judgments = qs.judgments or {}
        out[year] = BeirData(
            year,
            dict(qs.pool),
            {f"{year}:{q}": t for q, t in qs.queries.items()},
            {f"{year}:{q}": dict(judgments[q]) for q in qs.queries},
            relevance_level=RELEVANT,
            ignore_identical_ids=False,
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


def main(argv: list[str]) -> int:
    args = [a for a in argv if not a.startswith("--")]
    data_dir = Path(args[0] if args else os.environ.get("TRANSFERDX_DATA_DIR", "../shared/data"))
    out = Path(next((a.split("=", 1)[1] for a in argv if a.startswith("--out=")), "outputs/validation-cleaning"))
    design = Design()
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
