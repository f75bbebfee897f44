"""Control sources (DESIGN §4): sources with a known defect, built from a query set and its pool.

Controls sanity-check the diagnostics: a sound diagnostic ranks them apart from genuine sources.
Each control is seeded and marked ``kind = "control"``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .loaders import QuerySet
from .records import LoadResult, Passage, RecordBuilder


def random_passages(
    query_set: QuerySet, source: str = "random_passages", k: int = 8, seed: int = 0, **_: Any
) -> LoadResult:
    """Control: K passages drawn uniformly without replacement from the pool, positives excluded."""
    rng = np.random.default_rng(seed)
    pool_ids = sorted(query_set.pool)
    builder = RecordBuilder(f"<random_passages over {query_set.name}>", "skip")
    for qid in query_set.queries:
        positives = set(query_set.positives[qid])
        allowed = [p for p in pool_ids if p not in positives]
        picks = rng.choice(len(allowed), size=min(k, len(allowed)), replace=False)
        builder.add(
            None,
            qid=qid,
            query=query_set.queries[qid],
            positives=[Passage(p, query_set.pool[p]) for p in query_set.positives[qid]],
            negatives=[Passage(allowed[i], query_set.pool[allowed[i]], "random") for i in picks],
            source=source,
            kind="control",
        )
    builder.result.describe(
        source,
        mining_method="control: uniform random passages",
        candidate_pool=f"{query_set.name} passage pool ({len(pool_ids)} passages)",
        ranking_rule="none (random draw without replacement, positives excluded)",
        slice=f"[0:{k}]",
        reference_positive="first listed positive",
        seed=seed,
    )
    return builder.result


CONTROLS: dict[str, Callable[..., LoadResult]] = {"random_passages": random_passages}


def build_control(name: str, query_set: QuerySet, **options: Any) -> LoadResult:
    """Build the control registered under ``name``; unknown names raise ``ValueError``."""
    try:
        control = CONTROLS[name]
    except KeyError:
        raise ValueError(f"unknown control {name!r}; valid: {sorted(CONTROLS)}") from None
    return control(query_set, **options)
