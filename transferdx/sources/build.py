"""Building genuine sources (miners, ``a+b`` hybrids, sources loaded from disk) and controls in
one pass, with single-label false-negative counts where judgments are deep (docs/design.md §4)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from transferdx.inputs.reading import RecordBuilder
from transferdx.inputs.records import LoadResult, QuerySet, Record
from transferdx.sources.context import BuildContext, judged
from transferdx.sources.controls import build_control
from transferdx.sources.miners import MINERS


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


def build_from_context(
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


def query_set_from_records(records: Sequence[Record], name: str = "input") -> QuerySet:
    """A query set made of the records themselves: their queries, their positives, and every passage
    they hold (positives and negatives of all sources, first text seen per id) as the pool."""
    queries: dict[str, str] = {}
    positives: dict[str, list[str]] = {}
    pool: dict[str, str] = {}
    for rec in records:
        queries.setdefault(rec.qid, rec.query)
        known = positives.setdefault(rec.qid, [])
        known.extend(p.id for p in rec.positives if p.id not in known)
        for passage in (*rec.positives, *rec.negatives):
            pool.setdefault(passage.id, passage.text)
    return QuerySet(name, queries, positives, pool)


def pooled_parent(loaded: LoadResult, parents: Sequence[str]) -> list[Record]:
    """The records of every source in ``parents`` (in that order), as one parent for the controls: a
    qid that several parents hold becomes ``<qid>@<source>`` in each, so that every control record
    keeps a (source, qid) of its own."""
    chosen = [r for name in parents for r in loaded.records if r.source == name]
    owners: dict[str, set[str]] = {}
    for r in chosen:
        owners.setdefault(r.qid, set()).add(r.source)
    return [dataclasses.replace(r, qid=f"{r.qid}@{r.source}") if len(owners[r.qid]) > 1 else r for r in chosen]


def controls_from_records(
    loaded: LoadResult,
    controls: Sequence[str],
    parent: str | Sequence[str],
    *,
    encoder: Any = None,
    seed: int = 0,
) -> tuple[LoadResult, dict[str, str]]:
    """Controls built from a user's own files: the records of ``parent`` (one source, or several —
    pooled by :func:`pooled_parent`, so with several input files the controls come from all of them)
    are the genuine parent, the passages of every record the pool, K the parents' largest count.
    Returns the controls and, per control not built, why (``neighbor_positive`` needs ``encoder``)."""
    parents = [parent] if isinstance(parent, str) else list(parent)
    base = pooled_parent(loaded, parents)
    k = max((len(r.negatives) for r in base), default=0)
    label = "+".join(parents)
    ctx = BuildContext(query_set_from_records([*base, *loaded.records], label), k=k, seed=seed, encoder=encoder)
    out, skipped = LoadResult(), {}
    for name in controls:
        if name == "neighbor_positive" and encoder is None:
            skipped[name] = "needs an encoder (lexical audit)"
            continue
        try:
            out.extend(build_control(name, ctx, base, "all", label))
        except ValueError as exc:  # too few records or passages for this control: said, not hidden
            skipped[name] = str(exc)
    return out, skipped
