"""BEIR evaluation with per-query metrics (docs/design.md §5).

Follows beir's conventions: corpus text = (title + " " + text).strip() (the BEIR reader of
:mod:`transferdx.inputs.beir`, which the audit reads BEIR through too); exact dense search by
cosine similarity; a retrieved document whose id equals the query id is dropped
(``ignore_identical_ids``); metrics from pytrec_eval with beir's measure strings
(``ndcg_cut``, ``recall``, ``map_cut``). Aggregates are plain means over the evaluated queries;
beir prints the same means rounded to 5 decimals (kept alongside as ``beir``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from transferdx.embed import topk_chunked

METRICS = {"ndcg": "ndcg_cut", "recall": "recall", "map": "map_cut"}


@dataclass(frozen=True)
class BeirData:
    """A retrieval benchmark: corpus, queries and graded qrels. ``relevance_level``: the least grade
    that counts as relevant for the binary measures (recall, MAP; nDCG uses the grades as gains);
    ``ignore_identical_ids``: drop a retrieved passage whose id equals the query's (beir's rule, for
    BEIR sets whose queries are also documents; off where ids are separate number spaces)."""

    name: str
    corpus: dict[str, str]  # id → title + " " + text, stripped
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]
    relevance_level: int = 1
    ignore_identical_ids: bool = True


def benchmark_queries(qids: Sequence[str], max_queries: int | None = None, seed: int = 0) -> list[str]:
    """``qids``, or a seeded subset of ``max_queries`` of them in their order (every benchmark
    loader's rule: ``default_rng(seed).choice`` without replacement, picks sorted)."""
    qids = list(qids)
    if max_queries is None or max_queries >= len(qids):
        return qids
    picks = np.random.default_rng(seed).choice(len(qids), size=max_queries, replace=False)
    return [qids[i] for i in sorted(picks)]


def load_beir_split(folder: str | Path, split: str = "test", max_queries: int | None = None, seed: int = 0) -> BeirData:
    """A BEIR folder read by :func:`transferdx.inputs.beir.read_beir_split` (the audit's reader and
    text rule), its judged queries in id order; optionally a seeded subset (:func:`benchmark_queries`)."""
    from transferdx.inputs.beir import read_beir_split
    from transferdx.inputs.reading import require_path

    folder = require_path(folder, "folder")
    corpus, queries, qrels = read_beir_split(folder, split)
    qids = benchmark_queries(sorted(q for q in queries if q in qrels), max_queries, seed)
    return BeirData(folder.name, corpus, {q: queries[q] for q in qids}, {q: qrels[q] for q in qids})


def load_trec_dl_benchmark(
    folder: str | Path,
    split: str = "test",
    max_queries: int | None = None,
    seed: int = 0,
    relevant_grade: int = 2,
    topics: str = "topics.dl19-passage.txt",
    qrels: str = "qrels.dl19-passage.txt",
    results_name: str = "retrieve_results_dl19.json",
) -> BeirData:
    """TREC-DL passage retrieval (e.g. the 2019 track) as a benchmark: queries = the judged topics
    with at least one passage of grade ≥ ``relevant_grade`` among the runs' texts, corpus = every
    passage in any run of the layout (``runs/<system>/retrieve_results_*.json``), qrels = the deep
    graded judgments (nDCG@10 with grades as gains; recall and MAP count grade ≥ ``relevant_grade``,
    the track's rule for passages). ``split`` is ignored (the track has one). ``topics``, ``qrels`` and
    ``results_name``: the layout's files, as :func:`~transferdx.inputs.trec_dl.load_trec_dl` takes them
    (DL19's by default; DL21's for that year)."""
    from transferdx.inputs.reading import require_path
    from transferdx.inputs.trec_dl import load_trec_dl_query_set

    folder = require_path(folder, "folder")
    qs = load_trec_dl_query_set(
        folder, relevant_grade=relevant_grade, topics=topics, qrels=qrels, results_name=results_name
    )
    qids = benchmark_queries(list(qs.queries), max_queries, seed)
    judgments = qs.judgments or {}
    return BeirData(
        folder.name,
        dict(qs.pool),
        {q: qs.queries[q] for q in qids},
        {q: dict(judgments[q]) for q in qids},
        relevance_level=relevant_grade,
        ignore_identical_ids=False,
    )


# Benchmark layouts (``benchmark.datasets[].format``): folder → BeirData.
BENCHMARK_FORMATS = {"beir": load_beir_split, "trec_dl": load_trec_dl_benchmark}


def dense_search(
    query_vectors: np.ndarray, corpus_vectors: np.ndarray, qids: Sequence[str], pids: Sequence[str], top_k: int
) -> dict[str, dict[str, float]]:
    """Exact top-``top_k`` by inner product (cosine on unit vectors), skipping pid == qid as beir does."""
    idx, val = topk_chunked(query_vectors, corpus_vectors, top_k + 1)
    results: dict[str, dict[str, float]] = {}
    for row, qid in enumerate(qids):
        hits: dict[str, float] = {}
        for j, score in zip(idx[row], val[row], strict=True):
            pid = pids[j]
            if pid != qid and len(hits) < top_k:
                hits[pid] = float(score)
        results[qid] = hits
    return results


def per_query_metrics(
    qrels: Mapping[str, Mapping[str, int]],
    results: Mapping[str, Mapping[str, float]],
    k_values: Sequence[int],
    *,
    relevance_level: int = 1,
    ignore_identical_ids: bool = True,
) -> pd.DataFrame:
    """pytrec_eval per query: columns ``ndcg@k``, ``recall@k``, ``map@k`` for each k (binary
    measures count grade ≥ ``relevance_level`` as relevant)."""
    import pytrec_eval

    cleaned = {q: {p: s for p, s in hits.items() if p != q or not ignore_identical_ids} for q, hits in results.items()}
    measures = {f"{m}." + ",".join(str(k) for k in k_values) for m in METRICS.values()}
    scores = pytrec_eval.RelevanceEvaluator(
        {q: dict(v) for q, v in qrels.items()}, measures, relevance_level=relevance_level
    ).evaluate(cleaned)
    rows = []
    for qid in sorted(scores):
        row: dict[str, Any] = {"qid": qid}
        for name, measure in METRICS.items():
            for k in k_values:
                row[f"{name}@{k}"] = scores[qid][f"{measure}_{k}"]
        rows.append(row)
    return pd.DataFrame(rows)


@dataclass(frozen=True)
class Evaluation:
    """Aggregated and per-query metrics of one model on one dataset, and its run."""

    dataset: str
    model: Mapping[str, Any]
    per_query: pd.DataFrame
    run: Mapping[str, Mapping[str, float]]
    k_values: tuple[int, ...] = (10, 100)
    extra: Mapping[str, Any] = field(default_factory=dict)

    def aggregate(self) -> dict[str, float]:
        cols = [c for c in self.per_query.columns if c != "qid"]
        return {c: float(self.per_query[c].mean()) for c in cols}

    def to_dict(self) -> dict[str, Any]:
        agg = self.aggregate()
        return {
            "dataset": self.dataset,
            "model": dict(self.model),
            "n_queries": len(self.per_query),
            **agg,
            "beir": {k: round(v, 5) for k, v in agg.items()},
            **dict(self.extra),
        }

    def trec_run(self, tag: str = "transferdx") -> str:
        lines = []
        for qid in sorted(self.run):
            ranked = sorted(self.run[qid].items(), key=lambda kv: (-kv[1], kv[0]))
            lines += [f"{qid} Q0 {pid} {rank} {score:.6f} {tag}" for rank, (pid, score) in enumerate(ranked, 1)]
        return "\n".join(lines) + "\n"


def evaluate_dataset(
    encoder: Any, data: BeirData, k_values: Sequence[int] = (10, 100), top_k: int | None = None
) -> Evaluation:
    """Embed corpus and queries through ``encoder`` (an :class:`~transferdx.embed.EmbeddingCache`,
    so a frozen model's corpus is encoded once), search exactly, and score every query."""
    top_k = top_k or max(k_values)
    pids = list(data.corpus)
    qids = list(data.queries)
    corpus_vectors = encoder.embed([data.corpus[p] for p in pids], "passage")
    query_vectors = encoder.embed([data.queries[q] for q in qids], "query")
    run = dense_search(query_vectors, corpus_vectors, qids, pids, top_k)
    per_query = per_query_metrics(
        data.qrels,
        run,
        k_values,
        relevance_level=data.relevance_level,
        ignore_identical_ids=data.ignore_identical_ids,
    )
    return Evaluation(data.name, encoder.scorer(), per_query, run, tuple(k_values))
