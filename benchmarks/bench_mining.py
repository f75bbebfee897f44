"""Benchmarks for building sources.

1. BM25 mining on SciFact (train queries over the corpus): bm25s (what transferdx uses) against
   rank_bm25's BM25Okapi, both on the same tokens, index + top-k for every query; queries/s and the
   speed-up (goal ≥ 20×).
2. Dense mining memory as the pool doubles: peak traced memory of ``topk_chunked`` (the dense
   miner's top-k) over pools of 10k…80k unit vectors (d = 384, as all-MiniLM-L6-v2) for 2,000
   queries, against the size of the embeddings and of the full query × pool matrix it never holds.
   (Random vectors stand in for encoded passages: encoding 80k passages is hours on this CPU, and
   the memory behaviour of the top-k does not depend on the values.)

    python benchmarks/bench_mining.py [--data-dir ../shared/data]
"""

from __future__ import annotations

import argparse
import logging
import time
import tracemalloc
from pathlib import Path

import numpy as np

from transferdx.embed import topk_chunked
from transferdx.inputs.beir import load_beir


def bench_bm25(data_dir: Path, k: int = 10) -> None:
    """Both sides get the same tokens in their native form (bm25s: token ids + vocabulary, as the
    miner indexes; rank_bm25: token lists); tokenisation is timed once, outside both."""
    import bm25s
    from rank_bm25 import BM25Okapi

    logging.getLogger("bm25s").setLevel(logging.WARNING)
    qs = load_beir(data_dir / "beir" / "scifact", split="train")
    ids = list(qs.pool)
    texts = [qs.pool[i] for i in ids]
    t0 = time.perf_counter()
    corpus_ids = bm25s.tokenize(texts, stopwords="en", show_progress=False)
    t_tok = time.perf_counter() - t0
    inverse = {v: t for t, v in corpus_ids.vocab.items()}
    corpus_lists = [[inverse[i] for i in doc] for doc in corpus_ids.ids]
    query_tokens = bm25s.tokenize(list(qs.queries.values()), stopwords="en", return_ids=False, show_progress=False)
    n_q = len(query_tokens)
    print(f"SciFact train: {n_q} queries over {len(ids)} passages, top-{k} (shared tokenisation: {t_tok:.2f} s)")

    t0 = time.perf_counter()
    okapi = BM25Okapi(corpus_lists)
    tops = [np.argsort(-okapi.get_scores(q), kind="stable")[:k] for q in query_tokens]
    t_rank = time.perf_counter() - t0
    print(f"rank_bm25 BM25Okapi          : {t_rank:8.2f} s  {n_q / t_rank:10.1f} queries/s")

    for threads in (1, -1):
        t0 = time.perf_counter()
        retriever = bm25s.BM25(method="lucene")
        retriever.index(corpus_ids, show_progress=False)
        docs, _ = retriever.retrieve(query_tokens, k=k, show_progress=False, n_threads=threads)
        t_bm25s = time.perf_counter() - t0
        label = "1 thread" if threads == 1 else "all cores"
        print(
            f"bm25s (transferdx), {label:<9}: {t_bm25s:8.2f} s  {n_q / t_bm25s:10.1f} queries/s"
            f"   speed-up {t_rank / t_bm25s:5.1f}x   (goal >= 20x)"
        )

    overlap = np.mean([len(set(a.tolist()) & set(b.tolist())) / k for a, b in zip(docs, tops, strict=True)])
    print(f"top-{k} overlap between the two (variants differ: Lucene vs Okapi idf): {overlap:.2f}")


def bench_dense_memory(n_queries: int = 2000, dim: int = 384) -> None:
    rng = np.random.default_rng(0)
    queries = rng.normal(size=(n_queries, dim)).astype(np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    print(f"\ndense top-20 for {n_queries} queries, d = {dim} (float32)")
    print(f"{'pool':>8} {'embeddings MB':>14} {'peak extra MB':>14} {'full matrix MB':>15} {'time s':>7}")
    for n_pool in (10_000, 20_000, 40_000, 80_000):
        pool = rng.normal(size=(n_pool, dim)).astype(np.float32)
        pool /= np.linalg.norm(pool, axis=1, keepdims=True)
        tracemalloc.start()
        t0 = time.perf_counter()
        topk_chunked(queries, pool, 20)
        elapsed = time.perf_counter() - t0
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        emb = pool.nbytes / 2**20
        full = n_queries * n_pool * 4 / 2**20
        print(f"{n_pool:>8} {emb:>14.1f} {peak / 2**20:>14.1f} {full:>15.1f} {elapsed:>7.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default="../shared/data")
    parser.add_argument("--skip-dense", action="store_true")
    args = parser.parse_args()
    bench_bm25(Path(args.data_dir))
    if not args.skip_dense:
        bench_dense_memory()


if __name__ == "__main__":
    main()
