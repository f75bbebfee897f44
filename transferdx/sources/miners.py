"""Genuine sources the package builds (docs/design.md §4), and the embedded demo set.

A miner ranks the pool for every query of a :class:`~transferdx.inputs.records.QuerySet`; negatives are
the ranking minus every known positive, then a slice (``[0:K]``, ``[2:7]``, …). When the query set
has deep judgments, the same ranking also gives the *single-label* variant (only p0 known, as in
MS MARCO training): the share of its negatives judged relevant is the measured false-negative rate.

Registries: ``MINERS`` (``bm25``, ``dense``, ``perturb``); hybrids are named ``a+b``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from transferdx.embed import topk_chunked
from transferdx.inputs.reading import RecordBuilder, slice_text
from transferdx.inputs.records import LoadResult, Passage, QuerySet
from transferdx.sources.context import BuildContext, judged, known_positives, positive_passages
from transferdx.sources.perturb import PERTURBATIONS, perturb

# ---------------------------------------------------------------------------------------------
# Rankings
# ---------------------------------------------------------------------------------------------


def bm25_ranking(
    query_set: QuerySet,
    depth: int,
    k1: float = 1.5,
    b: float = 0.75,
    method: str = "lucene",
    stopwords: str | None = "en",
    stemmer: str | None = None,
) -> dict[str, list[str]]:
    """BM25 (bm25s) ranking per query: passages with score > 0, score desc, ties by pool order."""
    import bm25s

    logging.getLogger("bm25s").setLevel(logging.WARNING)  # bm25s forces DEBUG on import
    stem = None
    if stemmer:
        import Stemmer  # PyStemmer

        stem = Stemmer.Stemmer(stemmer).stemWords
    pool_ids = list(query_set.pool)
    corpus = bm25s.tokenize(
        [query_set.pool[p] for p in pool_ids], stopwords=stopwords, stemmer=stem, show_progress=False
    )
    retriever = bm25s.BM25(k1=k1, b=b, method=method)
    retriever.index(corpus, show_progress=False)
    qids = list(query_set.queries)
    tokens = bm25s.tokenize(
        [query_set.queries[q] for q in qids], stopwords=stopwords, stemmer=stem, return_ids=False, show_progress=False
    )
    docs, scores = retriever.retrieve(tokens, k=max(1, min(depth, len(pool_ids))), show_progress=False, n_threads=1)
    out = {}
    for row, qid in enumerate(qids):
        order = np.lexsort((docs[row], -scores[row]))
        out[qid] = [pool_ids[int(docs[row][j])] for j in order if scores[row][j] > 0]
    return out


def dense_ranking(query_set: QuerySet, encoder: Any, depth: int) -> dict[str, list[str]]:
    """Frozen-encoder ranking per query (cosine), via the embedding cache and a chunked top-k."""
    if encoder is None:
        raise ValueError("the dense miner needs an encoder (diagnostics.semantic=true / a backbone)")
    pool_ids = list(query_set.pool)
    qids = list(query_set.queries)
    p = encoder.embed([query_set.pool[i] for i in pool_ids], "passage")
    q = encoder.embed([query_set.queries[i] for i in qids], "query")
    idx, _ = topk_chunked(q, p, depth)
    return {qid: [pool_ids[j] for j in idx[row]] for row, qid in enumerate(qids)}


RANKERS: dict[str, Callable[[BuildContext], dict[str, list[str]]]] = {
    "bm25": lambda ctx: bm25_ranking(ctx.query_set, ctx.depth(), **ctx.bm25),
    "dense": lambda ctx: dense_ranking(ctx.query_set, ctx.encoder, ctx.depth()),
}


def ranking(ctx: BuildContext, name: str) -> dict[str, list[str]]:
    if name not in ctx.rankings:
        ctx.rankings[name] = RANKERS[name](ctx)
    return ctx.rankings[name]


def records_from_ranking(
    ctx: BuildContext, ranked: Mapping[str, list[str]], source: str, method: str, known: str = "all"
) -> LoadResult:
    """Negatives = each query's ranking minus the known positives (``all``, or only p0 for the
    single-label variant), then the slice."""
    qs, window = ctx.query_set, ctx.window
    builder = RecordBuilder(f"<{method} over {qs.name}>", "skip")
    for qid in qs.queries:
        exclude = known_positives(qs, qid, known)
        candidates = [
            Passage(pid, qs.pool[pid], method, rank=rank + 1, judgment=judged(qs, qid, pid))
            for rank, pid in enumerate(ranked.get(qid, []))
            if pid not in exclude
        ]
        builder.add(
            None,
            qid=qid,
            query=qs.queries[qid],
            positives=positive_passages(qs, qid, known),
            negatives=candidates[window],
            source=source,
            empty_reason=f"{method} found no candidate in {slice_text(window)} after removing known positives",
            empty_is_error=False,
        )
    return builder.result


def _mined(ctx: BuildContext, ranker: str, source: str, known: str, method: str, rule: str) -> LoadResult:
    """Records from a memoised ranking, with the descriptor every ranking miner shares."""
    result = records_from_ranking(ctx, ranking(ctx, ranker), source, ranker, known)
    result.describe(
        source,
        mining_method=method,
        candidate_pool=f"{ctx.query_set.name} passage pool ({len(ctx.query_set.pool)} passages)",
        ranking_rule=f"{rule}, every known positive removed",
        slice=slice_text(ctx.window),
        reference_positive="first listed positive",
    )
    return result


def mine_bm25(ctx: BuildContext, source: str = "bm25", known: str = "all") -> LoadResult:
    """BM25 negatives (bm25s; variant, k1, b, stopwords and stemmer recorded in the descriptor)."""
    opts = {"method": "lucene", "k1": 1.5, "b": 0.75, "stopwords": "en", "stemmer": None, **ctx.bm25}
    method = (
        "bm25 (bm25s {method}, k1={k1}, b={b}, stopwords={stopwords}, stemmer={stemmer}, "
        "bm25s default tokenizer)".format(**opts)
    )
    rule = "BM25 score desc (ties: pool order), score > 0"
    return _mined(ctx, "bm25", source, known, method, rule)


def mine_dense(ctx: BuildContext, source: str = "dense", known: str = "all") -> LoadResult:
    """Frozen-encoder nearest passages (cosine, chunked top-k)."""
    method = f"dense ({ctx.encoder.spec.name}, cosine, exact chunked top-k)"
    return _mined(ctx, "dense", source, known, method, "cosine desc (ties: pool order)")


def mine_perturb(ctx: BuildContext, source: str = "perturb", known: str = "all") -> LoadResult:
    """Structured edits of p0 (one negative per applicable rule); inapplicable edits are counted."""
    qs = ctx.query_set
    builder = RecordBuilder(f"<perturb over {qs.name}>", "skip")
    for qid in qs.queries:
        p0 = qs.positives[qid][0]
        text = qs.pool[p0]
        negatives = []
        for relation in PERTURBATIONS:
            edit = perturb(text, relation)
            if edit is None:
                builder.exclude(
                    None,
                    "negatives",
                    f"perturbation {relation} does not apply to the positive",
                    source=source,
                    qid=qid,
                    unit="negative",
                    item=f"{p0}~{relation}",
                )
                continue
            negatives.append(Passage(f"{p0}~{relation}", edit[0], "perturb", relation))
        builder.add(
            None,
            qid=qid,
            query=qs.queries[qid],
            positives=positive_passages(qs, qid, known),
            negatives=negatives[ctx.window],
            source=source,
            empty_reason="no perturbation applies to the positive",
            empty_is_error=False,
        )
    builder.result.describe(
        source,
        mining_method=f"rule-based perturbations of p0: {', '.join(PERTURBATIONS)}",
        candidate_pool="edits of the reference positive (not pool passages)",
        ranking_rule="rule order; an edit that cannot apply is skipped and counted",
        slice=slice_text(ctx.window),
        reference_positive="first listed positive",
    )
    return builder.result


MINERS: dict[str, Callable[..., LoadResult]] = {"bm25": mine_bm25, "dense": mine_dense, "perturb": mine_perturb}


# ---------------------------------------------------------------------------------------------
# The embedded demo set (package data, written for this package)
# ---------------------------------------------------------------------------------------------
