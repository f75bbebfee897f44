"""Sources built by the package: the BM25 miner, and the embedded demo set.

A miner turns a :class:`~transferdx.loaders.QuerySet` (queries, positives, passage pool) into
records of one source. Miners exclude every known positive of a query before taking the slice.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from importlib import resources
from typing import Any

import numpy as np

from .controls import random_passages
from .loaders import QuerySet, parse_slice, slice_text
from .records import LoadResult, Passage, RecordBuilder, read_records


def mine_bm25(
    query_set: QuerySet,
    source: str = "bm25",
    k: int = 8,
    slice_spec: str | None = None,
    k1: float = 1.5,
    b: float = 0.75,
    method: str = "lucene",
    stopwords: str | None = "en",
    kind: str = "genuine",
    **_: Any,
) -> LoadResult:
    """BM25 (bm25s) over the pool; negatives = top passages with score > 0 that are not positives.

    Candidates are ranked by score (ties by pool order), positives removed, then ``slice_spec``
    (default ``[0:k]``) is taken. A query left with no negative is a counted exclusion.
    """
    import bm25s

    logging.getLogger("bm25s").setLevel(logging.WARNING)  # bm25s forces DEBUG on import
    window = parse_slice(slice_spec, k)
    pool_ids = list(query_set.pool)
    corpus_tokens = bm25s.tokenize([query_set.pool[p] for p in pool_ids], stopwords=stopwords, show_progress=False)
    retriever = bm25s.BM25(k1=k1, b=b, method=method)
    retriever.index(corpus_tokens, show_progress=False)
    qids = list(query_set.queries)
    query_tokens = bm25s.tokenize(
        [query_set.queries[q] for q in qids], stopwords=stopwords, return_ids=False, show_progress=False
    )
    max_pos = max((len(v) for v in query_set.positives.values()), default=0)
    depth = min(len(pool_ids), (window.stop if window.stop is not None else len(pool_ids)) + max_pos)
    builder = RecordBuilder(f"<bm25 over {query_set.name}>", "skip")
    docs, scores = retriever.retrieve(query_tokens, k=depth, show_progress=False, n_threads=1)
    for row, qid in enumerate(qids):
        positives = set(query_set.positives[qid])
        order = np.lexsort((docs[row], -scores[row]))  # score desc, then pool order
        ranked = [(int(docs[row][j]), float(scores[row][j])) for j in order if scores[row][j] > 0]
        candidates = [
            Passage(pool_ids[d], query_set.pool[pool_ids[d]], "bm25", rank=r + 1)
            for r, (d, _s) in enumerate(ranked)
            if pool_ids[d] not in positives
        ]
        builder.add(
            None,
            qid=qid,
            query=query_set.queries[qid],
            positives=[Passage(p, query_set.pool[p]) for p in query_set.positives[qid]],
            negatives=candidates[window],
            source=source,
            kind=kind,
            empty_reason=f"BM25 found no non-positive passage with score > 0 in {slice_text(window)}",
            empty_is_error=False,
        )
    builder.result.describe(
        source,
        mining_method=f"bm25 (bm25s {method}, k1={k1}, b={b}, stopwords={stopwords}, no stemmer)",
        candidate_pool=f"{query_set.name} passage pool ({len(pool_ids)} passages)",
        ranking_rule="BM25 score desc (ties: pool order), score > 0, every known positive removed",
        slice=slice_text(window),
        reference_positive="first listed positive",
    )
    return builder.result


MINERS: dict[str, Callable[..., LoadResult]] = {"bm25": mine_bm25}


def mine(name: str, query_set: QuerySet, **options: Any) -> LoadResult:
    """Build the source registered under ``name``; unknown names raise ``ValueError``."""
    try:
        miner = MINERS[name]
    except KeyError:
        raise ValueError(f"unknown miner {name!r}; valid: {sorted(MINERS)}") from None
    return miner(query_set, **options)


# ---------------------------------------------------------------------------------------------
# The embedded demo set (package data, written for this package)
# ---------------------------------------------------------------------------------------------

DEMO_FOLDER = "demo"  # inside the transferdx package


def demo_query_set() -> QuerySet:
    """The demo's queries, positives and passage pool."""
    folder = resources.files("transferdx").joinpath(DEMO_FOLDER)
    pool: dict[str, str] = {}
    for line in folder.joinpath("passages.jsonl").read_text(encoding="utf-8").splitlines():
        if line.strip():
            obj = json.loads(line)
            pool[obj["id"]] = obj["text"]
    queries: dict[str, str] = {}
    positives: dict[str, list[str]] = {}
    for line in folder.joinpath("queries.jsonl").read_text(encoding="utf-8").splitlines():
        if line.strip():
            obj = json.loads(line)
            queries[obj["qid"]] = obj["query"]
            positives[obj["qid"]] = list(obj["positives"])
    return QuerySet("demo", queries, positives, pool)


def demo_handwritten(on_error: str = "raise") -> LoadResult:
    """The demo's hand-written (LLM-style) negatives, as shipped records."""
    with resources.as_file(resources.files("transferdx").joinpath(DEMO_FOLDER, "handwritten.jsonl")) as path:
        result = read_records(path, on_error)
    result.describe("handwritten", mining_method="hand-written LLM-style paraphrased negatives (demo)")
    return result


def demo_sources(k: int = 8, seed: int = 0, on_error: str = "raise") -> LoadResult:
    """The demo's sources: ``bm25`` (mined now with bm25s), ``handwritten``, ``random_passages``."""
    query_set = demo_query_set()
    result = mine_bm25(query_set, k=k)
    result.extend(demo_handwritten(on_error))
    result.extend(random_passages(query_set, k=k, seed=seed))
    return result
