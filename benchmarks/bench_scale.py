"""Benchmark: memory and time of a lexical audit as the input grows.

14 sources × N records × 8 negatives, synthetic and seeded: ~9,000 distinct passages (40–80 words)
and 25,000 distinct queries (4–9 words) drawn from a 2,000-word vocabulary; every source asks the
same queries with the same positive and draws its negatives near the positive (a source-specific
window) or at random. Each source is written to ``<source>.jsonl`` in a temporary folder, so the
loader path is exercised, and the public ``transferdx.audit(folder, encoder=None, controls="none")``
runs in a fresh subprocess per scale. One line per scale: records, negatives, peak RSS of that
subprocess (``ru_maxrss``), and wall and CPU seconds of the audit call (load included, import
excluded; CPU time is the steadier figure on a shared machine).

Goal at 25,000 records per source: peak RSS ≤ 2 GB and wall ≤ 60 s on 2 cores.

    python benchmarks/bench_scale.py [--scales 2500,10000,25000] [--sources 14] [--k 8]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

N_PASSAGES = 9_000
N_QUERIES = 25_000
VOCAB = 2_000
GOAL_RECORDS, GOAL_RSS_GB, GOAL_SECONDS = 25_000, 2.0, 60.0


def vocabulary(rng: np.random.Generator, size: int) -> list[str]:
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    words: dict[str, None] = {}
    while len(words) < size:
        words.setdefault("".join(rng.choice(letters, size=int(rng.integers(3, 10)))), None)
    return list(words)


def texts(rng: np.random.Generator, vocab: list[str], n: int, low: int, high: int) -> list[str]:
    """``n`` distinct texts of ``low``..``high`` words, words Zipf-distributed over ``vocab``."""
    weights = 1.0 / np.arange(1, len(vocab) + 1)
    weights /= weights.sum()
    out: dict[str, None] = {}
    while len(out) < n:
        words = rng.choice(len(vocab), size=int(rng.integers(low, high + 1)), p=weights)
        out.setdefault(" ".join(vocab[w] for w in words).capitalize() + ".", None)
    return list(out)


def write_sources(folder: Path, n_records: int, n_sources: int, k: int, seed: int = 0) -> dict[str, int]:
    """One ``<source>.jsonl`` records file per source; returns the counts written."""
    rng = np.random.default_rng(seed)
    vocab = vocabulary(rng, VOCAB)
    passages = texts(rng, vocab, N_PASSAGES, 40, 80)
    queries = texts(rng, vocab, N_QUERIES, 4, 9)
    passage_json = [json.dumps(t) for t in passages]
    positive = rng.integers(0, N_PASSAGES, size=N_QUERIES)
    used: set[int] = set()
    n_neg = 0
    for s in range(n_sources):
        name = f"source{s:02d}"
        src_rng = np.random.default_rng([seed, s])
        window = 20 * (s + 1)
        lines = []
        for i in range(n_records):
            q = i % N_QUERIES
            p0 = int(positive[q])
            near = p0 + src_rng.integers(1, window, size=k)
            far = src_rng.integers(0, N_PASSAGES, size=k)
            pick = np.where(src_rng.random(k) < 0.5, near, far) % N_PASSAGES
            negs = [int(j) for j in dict.fromkeys(pick.tolist()) if j != p0]
            used.update(negs)
            used.add(p0)
            n_neg += len(negs)
            neg_json = ", ".join(
                f'{{"id": "D{j}", "text": {passage_json[j]}, "rank": {r}}}' for r, j in enumerate(negs, 1)
            )
            lines.append(
                f'{{"qid": "q{i}", "query": {json.dumps(queries[q])}, '
                f'"positives": [{{"id": "D{p0}", "text": {passage_json[p0]}}}], '
                f'"negatives": [{neg_json}], "source": "{name}"}}\n'
            )
        (folder / f"{name}.jsonl").write_text("".join(lines), encoding="utf-8")
    return {"records": n_records * n_sources, "negatives": n_neg, "passages": len(used)}


def child(folder: str) -> None:
    """Runs in the measured subprocess: the public lexical audit of ``folder``."""
    import transferdx as tdx

    t0, c0 = time.perf_counter(), time.process_time()
    result = tdx.audit(folder, encoder=None, controls="none")
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # kilobytes on Linux
    negatives = len(result.result.negatives) if hasattr(result, "result") else -1
    print(json.dumps({"wall_s": wall, "cpu_s": cpu, "peak_mb": peak_kb / 1024, "negatives_audited": negatives}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scales", default="2500,10000,25000", help="records per source, comma-separated")
    parser.add_argument("--sources", type=int, default=14)
    parser.add_argument("--k", type=int, default=8, help="negatives drawn per record")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child)
        return

    print(f"{'records':>9} {'negatives':>10} {'passages':>9} {'peak RSS':>10} {'wall':>8} {'cpu':>8}")
    last: dict[str, float] = {}
    for n in (int(x) for x in args.scales.split(",")):
        with tempfile.TemporaryDirectory(prefix="bench_scale_") as tmp:
            counts = write_sources(Path(tmp), n, args.sources, args.k)
            proc = subprocess.run(
                [sys.executable, __file__, "--child", tmp], capture_output=True, text=True, check=False
            )
        if proc.returncode != 0:
            print(proc.stderr[-3000:], file=sys.stderr)
            raise SystemExit(f"audit of {n} records per source failed (exit {proc.returncode})")
        out = json.loads(proc.stdout.strip().splitlines()[-1])
        if out["negatives_audited"] != counts["negatives"]:
            raise SystemExit(f"audited {out['negatives_audited']} negatives, wrote {counts['negatives']}")
        print(
            f"{counts['records']:>9,} {counts['negatives']:>10,} {counts['passages']:>9,} "
            f"{out['peak_mb'] / 1024:>8.2f} GB {out['wall_s']:>6.1f} s {out['cpu_s']:>6.1f} s   "
            f"({args.sources} × {n:,} records)",
            flush=True,
        )
        if n == GOAL_RECORDS:
            last = out
    if last:
        ok = last["peak_mb"] / 1024 <= GOAL_RSS_GB and last["wall_s"] <= GOAL_SECONDS
        print(
            f"{'PASS' if ok else 'FAIL'}: {args.sources} × {GOAL_RECORDS:,} records: peak "
            f"{last['peak_mb'] / 1024:.2f} GB (goal <= {GOAL_RSS_GB} GB), {last['wall_s']:.1f} s "
            f"(goal <= {GOAL_SECONDS:.0f} s)"
        )


if __name__ == "__main__":
    main()
