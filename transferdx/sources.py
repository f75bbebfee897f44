"""Genuine sources the package builds (DESIGN §4), and the embedded demo set.

A miner ranks the pool for every query of a :class:`~transferdx.loaders.QuerySet`; negatives are
the ranking minus every known positive, then a slice (``[0:K]``, ``[2:7]``, …). When the query set
has deep judgments, the same ranking also gives the *single-label* variant (only p0 known, as in
MS MARCO training): the share of its negatives judged relevant is the measured false-negative rate.

Registries: ``MINERS`` (``bm25``, ``dense``, ``perturb``); hybrids are named ``a+b``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import numpy as np

from .loaders import QuerySet, parse_slice, slice_text
from .perturb import PERTURBATIONS, perturb
from .records import LoadResult, Passage, Record, RecordBuilder, read_records

KNOWN = ("all", "p0")


@dataclass
class BuildContext:
    """What source builders share: the query set, the encoder (for dense/neighbour), K and slice,
    the seed, and memoised rankings."""

    query_set: QuerySet
    k: int = 8
    slice_spec: str | None = None
    seed: int = 0
    encoder: Any = None
    bm25: Mapping[str, Any] = field(default_factory=dict)
    rankings: dict[str, dict[str, list[str]]] = field(default_factory=dict)

    @property
    def window(self) -> slice:
        return parse_slice(self.slice_spec, self.k)

    def depth(self) -> int:
        """How deep to rank so that the slice survives removing every known positive."""
        stop = self.window.stop if self.window.stop is not None else len(self.query_set.pool)
        max_pos = max((len(v) for v in self.query_set.positives.values()), default=0)
        return min(len(self.query_set.pool), stop + max_pos)


def known_positives(query_set: QuerySet, qid: str, known: str) -> set[str]:
    """The positive ids a miner must exclude: every known positive (``all``) or only p0 (``p0``)."""
    if known not in KNOWN:
        raise ValueError(f"known must be one of {KNOWN}, got {known!r}")
    positives = query_set.positives[qid]
    return set(positives) if known == "all" else {positives[0]}


def positive_passages(query_set: QuerySet, qid: str, known: str = "all") -> list[Passage]:
    """The record's positives: all known ones, or only p0 in the single-label variant."""
    grades = (query_set.judgments or {}).get(qid, {})
    ids = query_set.positives[qid] if known == "all" else query_set.positives[qid][:1]
    return [Passage(p, query_set.pool[p], judgment=grades.get(p)) for p in ids]


def judged(query_set: QuerySet, qid: str, pid: str) -> int | None:
    return (query_set.judgments or {}).get(qid, {}).get(pid)


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


def _block_topk(block: np.ndarray, offset: int, depth: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-``depth`` of each row of ``block`` (score desc, ties by column), as global indices.

    ``argpartition`` finds each row's depth-th score t in linear time; every entry ≥ t is a
    candidate (ties at t included), and only those few are sorted.
    """
    depth = min(depth, block.shape[1])
    kth = -np.partition(-block, depth - 1, axis=1)[:, depth - 1]
    rows, cols = np.nonzero(block >= kth[:, None])
    vals = block[rows, cols]
    order = np.lexsort((cols, -vals, rows))
    rows, cols, vals = rows[order], cols[order], vals[order]
    starts = np.searchsorted(rows, np.arange(block.shape[0]))
    rank = np.arange(len(rows)) - starts[rows]
    keep = rank < depth
    idx = np.empty((block.shape[0], depth), dtype=np.int64)
    val = np.empty((block.shape[0], depth), dtype=block.dtype)
    idx[rows[keep], rank[keep]] = cols[keep] + offset
    val[rows[keep], rank[keep]] = vals[keep]
    return idx, val


def topk_chunked(
    queries: np.ndarray, pool: np.ndarray, depth: int, q_chunk: int = 256, p_chunk: int = 8192
) -> tuple[np.ndarray, np.ndarray]:
    """Top-``depth`` pool rows by inner product for each query row, (indices, scores), score desc
    with ties by pool index. Holds one q_chunk × p_chunk block of scores at a time (plus the running
    q_chunk × depth best), never the full query × pool matrix."""
    n_q, n_p = len(queries), len(pool)
    depth = min(depth, n_p)
    best_idx = np.zeros((n_q, depth), dtype=np.int64)
    best_val = np.zeros((n_q, depth), dtype=np.float32)
    for qs in range(0, n_q, q_chunk):
        q = queries[qs : qs + q_chunk]
        run_idx = np.zeros((len(q), 0), dtype=np.int64)
        run_val = np.zeros((len(q), 0), dtype=np.float32)
        for ps in range(0, n_p, p_chunk):
            block_idx, block_val = _block_topk((q @ pool[ps : ps + p_chunk].T).astype(np.float32), ps, depth)
            idx = np.concatenate([run_idx, block_idx], axis=1)
            val = np.concatenate([run_val, block_val], axis=1)
            order = np.lexsort((idx, -val), axis=1)[:, :depth]
            run_idx = np.take_along_axis(idx, order, axis=1)
            run_val = np.take_along_axis(val, order, axis=1)
        best_idx[qs : qs + len(q)] = run_idx
        best_val[qs : qs + len(q)] = run_val
    return best_idx, best_val


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


def hybrid(a: Sequence[Record], b: Sequence[Record], source: str, seed: int = 0) -> LoadResult:
    """Per record, ⌈K/2⌉ negatives drawn from parent ``a`` and ⌊K/2⌋ from ``b`` (seeded, without
    repeating a text), K = the larger parent's count; queries missing from either parent are counted."""
    rng = np.random.default_rng([seed, 0x4B])
    by_b = {r.qid: r for r in b}
    builder = RecordBuilder(f"<hybrid {source}>", "skip")
    for rec in a:
        other = by_b.get(rec.qid)
        if other is None:
            builder.exclude(None, "qid", "query missing from the second parent", source=source, qid=rec.qid)
            continue
        k = max(len(rec.negatives), len(other.negatives))
        take_a = rng.permutation(len(rec.negatives))[: (k + 1) // 2]
        chosen = [rec.negatives[i] for i in sorted(take_a)]
        texts = {n.text for n in chosen}
        for i in rng.permutation(len(other.negatives)):
            if len(chosen) >= k:
                break
            if other.negatives[i].text not in texts:
                chosen.append(other.negatives[i])
                texts.add(other.negatives[i].text)
        builder.add(None, qid=rec.qid, query=rec.query, positives=rec.positives, negatives=chosen, source=source)
    seen = {r.qid for r in a}
    for rec in b:
        if rec.qid not in seen:
            builder.exclude(None, "qid", "query missing from the first parent", source=source, qid=rec.qid)
    return builder.result


def false_negative_counts(records: Sequence[Record], query_set: QuerySet) -> list[tuple[str, int, int]] | None:
    """[(qid, negatives judged ≥ relevant_grade, negatives)] per record, or None when not measurable
    (no judgments, or negatives that are not pool passages, e.g. perturbations)."""
    if query_set.judgments is None:
        return None
    if any(n.id not in query_set.pool for r in records for n in r.negatives):
        return None
    out = []
    for r in records:
        grades = [judged(query_set, r.qid, n.id) for n in r.negatives]
        out.append((r.qid, sum(g is not None and g >= query_set.relevant_grade for g in grades), len(grades)))
    return out


def _build_one(
    ctx: BuildContext,
    name: str,
    known: str,
    built: dict[tuple[str, str], LoadResult],
    external: Mapping[str, LoadResult],
) -> LoadResult:
    key = (name, known)
    if key not in built:
        if name in external:
            built[key] = external[name]
        elif "+" in name:
            left, right = name.split("+", 1)
            a = _build_one(ctx, left, known, built, external)
            b = _build_one(ctx, right, known, built, external)
            result = hybrid(a.records, b.records, name, ctx.seed)
            result.describe(
                name,
                mining_method=f"hybrid: half of each record's negatives from {left} and {right}",
                parents=[left, right],
                seed=ctx.seed,
                reference_positive="first listed positive",
            )
            built[key] = result
        elif name in MINERS:
            built[key] = MINERS[name](ctx, source=name, known=known)
        else:
            raise ValueError(f"unknown source {name!r}; valid: {sorted(MINERS)}, 'a+b' hybrids, or {sorted(external)}")
    return built[key]


def build_sources(
    ctx: BuildContext,
    names: Sequence[str],
    controls: Sequence[str] = (),
    control_parent: str | None = None,
    external: Mapping[str, LoadResult] | None = None,
) -> LoadResult:
    """Build genuine sources (miners, ``a+b`` hybrids, or ``external`` loaded ones) and controls.

    With deep judgments every source is also built in its single-label variant (only p0 known) to
    measure its false-negative counts; the returned records are the all-positives-known variant.
    """
    from .controls import build_control

    external = external or {}
    built: dict[tuple[str, str], LoadResult] = {}
    variants = ("all", "p0") if ctx.query_set.judgments is not None else ("all",)
    out = LoadResult()
    for name in names:
        for known in variants:
            _build_one(ctx, name, known, built, external)
    if controls:
        parent = control_parent or next((n for n in names if n in ("bm25", "dense")), names[0] if names else None)
        if parent is None:
            raise ValueError("controls need a genuine parent source")
        for control in controls:
            for known in variants:
                base = _build_one(ctx, parent, known, built, external)
                built[(control, known)] = build_control(control, ctx, base.records, known, parent)
    for name in [*names, *controls]:
        full = built[(name, "all")]
        out.records.extend(r for r in full.records if r.source == name)
        out.exclusions.extend(e for e in full.exclusions if e.source in (name, ""))
        out.descriptors[name] = dict(full.descriptors.get(name, {}))
        if name in external:
            if name in full.false_negatives:
                out.false_negatives[name] = full.false_negatives[name]
            continue
        if "p0" in variants:
            counts = false_negative_counts([r for r in built[(name, "p0")].records if r.source == name], ctx.query_set)
            if counts is not None:
                out.false_negatives[name] = counts
    return out


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
    from .controls import random_passages

    ctx = BuildContext(demo_query_set(), k=k, seed=seed)
    result = mine_bm25(ctx)
    result.extend(demo_handwritten(on_error))
    result.extend(random_passages(ctx))
    return result
