"""Benchmark: what the false-negative suspicion pass (design §3.9) adds to a warm audit of the
TREC-DL19 pool (five genuine sources and eight controls built from the pool, MiniLM-L6, every
embedding cached).

The audit runs ``repeats`` times warm; the time spent inside the suspicion pass
(``auditing.pooling.suspicion``, plus the judged evaluation, which only runs on ``labels=single``
inputs) is measured in the same runs with a timing wrapper. Goal: suspicion / (audit − suspicion)
< 5%. A second part times the judged evaluation (the α, δ grid, bootstrap CIs and the grouped
cross-validation of the combined detector) on DL19 ``labels=single`` next to its audit.

    python benchmarks/bench_suspicion.py [--data-dir ../shared/data] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import transferdx as tdx
import transferdx.auditing.audit as core
from transferdx.inputs.trec_dl import load_trec_dl


def timed_audits(data, cache: Path, repeats: int) -> list[tuple[float, float]]:
    """(total, inside suspicion + judged evaluation) seconds per warm audit."""
    spent = [0.0]
    originals = {name: getattr(core, name) for name in ("suspicion", "judged_evaluation")}

    def wrap(fn):
        def inner(*a, **kw):
            t0 = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                spent[0] += time.perf_counter() - t0

        return inner

    tdx.audit(data, encoder="minilm_l6", cache_dir=cache, controls="none")  # warm the cache
    out = []
    try:
        for name, fn in originals.items():
            setattr(core, name, wrap(fn))
        for _ in range(repeats):
            spent[0] = 0.0
            t0 = time.perf_counter()
            tdx.audit(data, encoder="minilm_l6", cache_dir=cache, controls="none")
            out.append((time.perf_counter() - t0, spent[0]))
    finally:
        for name, fn in originals.items():
            setattr(core, name, fn)
    return out


def report(label: str, runs: list[tuple[float, float]], goal: float | None) -> None:
    total = statistics.median(t for t, _ in runs)
    inside = statistics.median(s for _, s in runs)
    ratio = inside / (total - inside)
    verdict = "" if goal is None else (" PASS" if ratio < goal else " FAIL") + f" (goal < {goal:.0%})"
    print(f"{label}: warm audit {total:.2f} s, suspicion pass {inside:.3f} s, adds {ratio:.1%}{verdict}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default="../shared/data")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    root = Path(args.data_dir) / "msmarco-dl19"
    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp) / "cache"
        query_set = tdx.load_query_set(root, format="trec_dl_pool")
        pool = tdx.build_sources(query_set, controls="all", encoder="minilm_l6", cache_dir=cache)
        n = sum(len(r.negatives) for r in pool.records)
        print(f"DL19 pool: {len(pool.records)} records, {n} negatives, {len(pool.sources)} sources")
        report("DL19 pool", timed_audits(pool, cache, args.repeats), 0.05)
        single = load_trec_dl(root, labels="single")
        n = sum(len(r.negatives) for r in single.records)
        print(f"DL19 labels=single: {len(single.records)} records, {n} negatives (with the judged evaluation)")
        report("DL19 labels=single", timed_audits(single, cache, args.repeats), None)


if __name__ == "__main__":
    main()
