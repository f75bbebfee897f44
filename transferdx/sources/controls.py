"""Control sources (docs/design.md §4): sources with a known defect, built from a genuine parent source and
the passage pool, seeded, ``kind = "control"``. A sound diagnostic ranks them apart from the
genuine sources; the audit reports which controls each flag catches.

1. ``easy_shuffled`` — each record takes the negatives of another record (a derangement).
2. ``random_passages`` — K passages drawn uniformly from the pool, positives excluded.
3. ``neighbor_positive`` — the positives of the K nearest other queries (frozen-encoder
   query–query similarity): false-negative-shaped.
4. ``own_positive_mix`` — a share (default ½) of each record's negative slots replaced by its own
   positive (``relation = own_positive``): maximally false-negative-shaped.
5–8. ``random_mix_{25,50,75,100}`` — that share of slots replaced by random pool passages (never
   the record's positives or its parent negatives).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import numpy as np

from transferdx.embed import topk_chunked
from transferdx.inputs.reading import RecordBuilder
from transferdx.inputs.records import OWN_POSITIVE_RELATION, LoadResult, Passage, Record
from transferdx.sources.context import BuildContext, judged, known_positives, positive_passages


def _slots(share: float, k: int) -> int:
    """round(share · K), halves rounded up."""
    return min(k, math.floor(share * k + 0.5))


def _describe(result: LoadResult, source: str, ctx: BuildContext, method: str, parent: str | None, **extra: Any):
    result.describe(
        source,
        mining_method=f"control: {method}",
        candidate_pool=f"{ctx.query_set.name} passage pool ({len(ctx.query_set.pool)} passages)",
        parent_source=parent,
        reference_positive="first listed positive",
        seed=ctx.seed,
        **extra,
    )
    return result


def _add(
    builder: RecordBuilder,
    source: str,
    qid: str,
    query: str,
    positives: Sequence[Passage],
    negatives: Sequence[Passage],
) -> None:
    builder.add(None, qid=qid, query=query, positives=positives, negatives=negatives, source=source, kind="control")


def _pool_passage(ctx: BuildContext, qid: str, pid: str, method: str, relation: str | None = None) -> Passage:

    return Passage(pid, ctx.query_set.pool[pid], method, relation, judgment=judged(ctx.query_set, qid, pid))


def derangement(n: int, rng: np.random.Generator) -> np.ndarray:
    """A uniformly random cyclic permutation (Sattolo): no element stays in place (n ≥ 2)."""
    if n < 2:
        raise ValueError("a derangement needs at least two records")
    perm = np.arange(n)
    for i in range(n - 1, 0, -1):
        j = int(rng.integers(0, i))
        perm[i], perm[j] = perm[j], perm[i]
    return perm


def easy_shuffled(
    ctx: BuildContext,
    parent: Sequence[Record],
    source: str = "easy_shuffled",
    known: str = "all",
    parent_name: str | None = None,
) -> LoadResult:

    rng = np.random.default_rng([ctx.seed, 0xE5])
    perm = derangement(len(parent), rng)
    builder = RecordBuilder(f"<{source}>", "skip")
    for i, rec in enumerate(parent):
        donor = parent[perm[i]]
        exclude = known_positives(ctx.query_set, rec.qid, known) if rec.qid in ctx.query_set.positives else set()
        own = {p.text for p in rec.positives}
        negatives = []
        for n in donor.negatives:
            if n.id in exclude or n.text in own:
                builder.exclude(
                    None,
                    "negatives",
                    "borrowed negative is a positive of this query",
                    source=source,
                    qid=rec.qid,
                    unit="negative",
                    item=n.id,
                )
                continue
            negatives.append(
                Passage(n.id, n.text, "shuffled", "borrowed", judgment=judged(ctx.query_set, rec.qid, n.id))
            )
        _add(builder, source, rec.qid, rec.query, rec.positives, negatives)
    return _describe(builder.result, source, ctx, "negatives of another record (derangement)", parent_name)


def random_passages(
    ctx: BuildContext,
    parent: Sequence[Record] = (),
    source: str = "random_passages",
    known: str = "all",
    parent_name: str | None = None,
) -> LoadResult:

    rng = np.random.default_rng([ctx.seed, 0x5A])
    pool_ids = sorted(ctx.query_set.pool)
    builder = RecordBuilder(f"<{source}>", "skip")
    for qid in ctx.query_set.queries:
        exclude = known_positives(ctx.query_set, qid, known)
        picks: list[str] = []
        while len(picks) < min(ctx.k, len(pool_ids) - len(exclude)):
            pid = pool_ids[int(rng.integers(len(pool_ids)))]
            if pid not in exclude and pid not in picks:
                picks.append(pid)
        _add(
            builder,
            source,
            qid,
            ctx.query_set.queries[qid],
            positive_passages(ctx.query_set, qid, known),
            [_pool_passage(ctx, qid, p, "random") for p in picks],
        )
    return _describe(builder.result, source, ctx, "uniform random pool passages", None, slice=f"[0:{ctx.k}]")


def neighbor_positive(
    ctx: BuildContext,
    parent: Sequence[Record] = (),
    source: str = "neighbor_positive",
    known: str = "all",
    parent_name: str | None = None,
) -> LoadResult:

    if ctx.encoder is None:
        raise ValueError("the neighbor_positive control needs an encoder")
    qs = ctx.query_set
    qids = list(qs.queries)
    e = ctx.encoder.embed([qs.queries[q] for q in qids], "query")
    idx, _ = topk_chunked(e, e, min(len(qids), 4 * ctx.k + 1))
    builder = RecordBuilder(f"<{source}>", "skip")
    for row, qid in enumerate(qids):
        exclude = known_positives(qs, qid, known)
        picks: list[str] = []
        for j in idx[row]:
            if qids[j] == qid:
                continue
            pid = qs.positives[qids[j]][0]
            if pid not in exclude and pid not in picks:
                picks.append(pid)
            if len(picks) == ctx.k:
                break
        _add(
            builder,
            source,
            qid,
            qs.queries[qid],
            positive_passages(qs, qid, known),
            [_pool_passage(ctx, qid, p, "neighbor_positive") for p in picks],
        )
    return _describe(builder.result, source, ctx, "p0 of the K nearest other queries (frozen encoder)", None)


def _mix(
    ctx: BuildContext,
    parent: Sequence[Record],
    source: str,
    share: float,
    rng: np.random.Generator,
    replace: Callable[[Record, set[str]], Passage],
) -> LoadResult:
    """Copy each parent record with round(share · K) seeded slots filled by ``replace(record, taken)``."""
    builder = RecordBuilder(f"<{source}>", "skip")
    for rec in parent:
        negatives = list(rec.negatives)
        taken: set[str] = set()
        for slot in sorted(rng.permutation(len(negatives))[: _slots(share, len(negatives))]):
            negatives[slot] = replace(rec, taken)
            taken.add(negatives[slot].id)
        _add(builder, source, rec.qid, rec.query, rec.positives, negatives)
    return builder.result


def own_positive_mix(
    ctx: BuildContext,
    parent: Sequence[Record],
    source: str = "own_positive_mix",
    known: str = "all",
    parent_name: str | None = None,
    share: float = 0.5,
) -> LoadResult:
    def own(rec: Record, taken: set[str]) -> Passage:
        p0 = rec.positives[0]
        return Passage(p0.id, p0.text, "own_positive", OWN_POSITIVE_RELATION, judgment=p0.judgment)

    result = _mix(ctx, parent, source, share, np.random.default_rng([ctx.seed, 0x0B]), own)
    return _describe(result, source, ctx, f"{share:.0%} of slots replaced by the own positive", parent_name)


def random_mix(
    ctx: BuildContext,
    parent: Sequence[Record],
    source: str = "random_mix",
    known: str = "all",
    parent_name: str | None = None,
    share: float = 0.5,
) -> LoadResult:

    rng = np.random.default_rng([ctx.seed, 0x3D, round(share * 100)])
    pool_ids = sorted(ctx.query_set.pool)
    pool = set(pool_ids)

    def draw(rec: Record, taken: set[str]) -> Passage:
        exclude = known_positives(ctx.query_set, rec.qid, known) | {n.id for n in rec.negatives}
        exclude |= {p.id for p in rec.positives} | taken
        if sum(1 for pid in exclude if pid in pool) >= len(pool):
            raise ValueError(f"{source}: the pool has no passage left to draw for query {rec.qid!r}")
        while True:
            pid = pool_ids[int(rng.integers(len(pool_ids)))]
            if pid not in exclude:
                return _pool_passage(ctx, rec.qid, pid, "random", "random_mix")

    result = _mix(ctx, parent, source, share, rng, draw)
    return _describe(result, source, ctx, f"{share:.0%} of slots replaced by random pool passages", parent_name)


CONTROLS: dict[str, Callable[..., LoadResult]] = {
    "easy_shuffled": easy_shuffled,
    "random_passages": random_passages,
    "neighbor_positive": neighbor_positive,
    "own_positive_mix": own_positive_mix,
    **{f"random_mix_{p}": partial(random_mix, share=p / 100) for p in (25, 50, 75, 100)},
}


def build_control(
    name: str, ctx: BuildContext, parent: Sequence[Record], known: str = "all", parent_name: str | None = None
) -> LoadResult:
    """Build the control registered under ``name`` from a genuine parent; unknown names raise."""
    try:
        control = CONTROLS[name]
    except KeyError:
        raise ValueError(f"unknown control {name!r}; valid: {sorted(CONTROLS)}") from None
    return control(ctx, parent, source=name, known=known, parent_name=parent_name)
