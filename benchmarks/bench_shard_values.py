"""Benchmark: the per-row values of a collection split into query shards (issue 35) against the
whole collection's — exactness at scale, and what one shard costs.

bench_scale's synthetic file (4 sources × 8 negatives; HashEncoder, its cache warmed first): the
whole collection's ``record_values``, ``audit_context`` once, then ``shard_values`` of each query
shard (records split by ``shard_of(qid, N)``). Each step under ``tracemalloc`` (Python and numpy
allocations: its traced peak beyond what was held before it) and timed; then the shards' frames,
probabilities and other_positive flags, merged in (source, qid) order, compared with the whole's
exactly.

    python benchmarks/bench_shard_values.py [--negatives 1000000] [--shards 8] [--json out.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_cli import cpu_model
from bench_scale import HashEncoder, write_semantic


def traced(step: Callable[[], Any]) -> tuple[Any, float, float]:
    """(result, wall seconds, traced peak in MB beyond what was held when the step began)."""
    tracemalloc.start()
    before, _ = tracemalloc.get_traced_memory()
    tracemalloc.reset_peak()
    t0 = time.perf_counter()
    out = step()
    wall = time.perf_counter() - t0
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return out, wall, (peak - before) / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--negatives", type=int, default=1_000_000)
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--json", help="also write the rows here")
    args = parser.parse_args()

    import transferdx as tdx
    from transferdx.auditing.core import SemanticSettings, audit_context, merge_values, record_values, shard_values
    from transferdx.diagnostics.composite import CompositeSettings
    from transferdx.diagnostics.tokens import alnum
    from transferdx.embed import EmbeddingCache, EncoderSpec
    from transferdx.pipeline.sharding import shard_of

    print(f"CPU: {cpu_model()}")
    with tempfile.TemporaryDirectory() as tmp:
        counts = write_semantic(Path(tmp), args.negatives)
        records = tdx.load(tmp).records
        spec = EncoderSpec(name="hash384", model="memory:hash384", source="memory", revision="hash384")
        model = HashEncoder()
        cache = EmbeddingCache(spec, Path(tmp) / "cache", progress=False, model_factory=lambda _l, _s: model)
        semantic = SemanticSettings(composite=dataclasses.replace(CompositeSettings(), resamples=0))
        record_values(records, alnum, encoder=cache, semantic=semantic)  # warms the cache: every step reads it
        whole, whole_wall, whole_peak = traced(lambda: record_values(records, alnum, encoder=cache, semantic=semantic))
        context, ctx_wall, ctx_peak = traced(lambda: audit_context(records, alnum, semantic=semantic))
        parts: list[list[Any]] = [[] for _ in range(args.shards)]
        for r in records:
            parts[shard_of(r.qid, args.shards)].append(r)
        rows, values = [], []
        for i, part in enumerate(parts):
            got, wall, peak = traced(
                lambda part=part: shard_values(part, alnum, context, encoder=cache, semantic=semantic)
            )
            values.append(got)
            rows.append(
                {"shard": i, "records": len(part), "negatives": len(got.negatives), "wall_s": wall, "peak_mb": peak}
            )
            print(
                f"shard {i}: {len(part):,} records, {len(got.negatives):,} negatives, {wall:.1f} s, "
                f"traced peak {peak:.0f} MB"
            )
        got = merge_values(values)
        pd.testing.assert_frame_equal(got.negatives, whole.negatives, check_exact=True)
        pd.testing.assert_frame_equal(got.records, whole.records, check_exact=True)
        assert whole.probability is not None and got.probability is not None
        np.testing.assert_array_equal(got.probability, whole.probability)
        np.testing.assert_array_equal(got.other_positive, whole.other_positive)
    summed = sum(r["wall_s"] for r in rows)
    largest = max(r["peak_mb"] for r in rows)
    print(f"{counts['negatives']:,} negatives, {counts['records']:,} records, {counts['passages']:,} passages")
    print(f"whole collection's values: {whole_wall:.1f} s, traced peak {whole_peak:.0f} MB")
    print(f"context (ψ's IDF tables, background, positives' owners): {ctx_wall:.1f} s, traced peak {ctx_peak:.0f} MB")
    print(
        f"{args.shards} shards: summed wall {summed:.1f} s ({summed / whole_wall:.2f}× the whole), largest traced peak "
        f"{largest:.0f} MB ({largest / whole_peak:.2f}× the whole)"
    )
    print("merged shards equal the whole exactly: True")
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "cpu": cpu_model(),
                    **counts,
                    "shards": args.shards,
                    "whole_wall_s": whole_wall,
                    "whole_peak_mb": whole_peak,
                    "context_wall_s": ctx_wall,
                    "context_peak_mb": ctx_peak,
                    "shard_rows": rows,
                    "exact": True,
                },
                indent=1,
            )
        )


if __name__ == "__main__":
    main()
