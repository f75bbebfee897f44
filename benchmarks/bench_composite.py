"""Benchmark: what the composite's bootstrap CI costs as a source grows (issue 35, item 3).

One source of n negatives, K = 8 per record, d = 384 (MiniLM's width), random unit vectors and
weights in [0, 1] (the cost does not depend on the values), the audit's record resamples
(``resample_counts``). For each n: the wall time of the composite value alone (one pass of the
scatter), of ``composite_bootstrap`` with R resamples (the audit's route choice, ``auto``), the
seconds per (resample × negative), and the traced peak of the bootstrap's working set. The last
lines extrapolate, linearly in n and R (the primal route is R × records × d² multiply-adds; the
dual one runs only while a resample's drawn negatives are fewer than d, i.e. small sources), to
10⁷ and 10⁸ negatives at R = 1,000 on this machine, to decide whether the CI can stay on at scale.

    python benchmarks/bench_composite.py [--negatives 4096,16384,65536] [--resamples 50]
"""

from __future__ import annotations

import argparse
import platform
import time
import tracemalloc

import numpy as np

from transferdx.diagnostics.composite import CompositeSettings, composite, composite_bootstrap
from transferdx.resampling import bootstrap_rng, resample_counts

D, K = 384, 8


def cpu_name() -> str:
    try:
        for line in open("/proc/cpuinfo", encoding="utf-8"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def unit(rng: np.random.Generator, n: int) -> np.ndarray:
    x = rng.standard_normal((n, D))
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def measure(n: int, resamples: int) -> dict[str, float]:
    rng = np.random.default_rng(n)
    records = n // K
    e_q, e_p, e_n = unit(rng, n), unit(rng, n), unit(rng, n)
    w = rng.random(n)
    owner = np.repeat(np.arange(records), K)
    s = CompositeSettings()
    t0 = time.perf_counter()
    composite(e_q, e_p, e_n, w, s)
    value_s = time.perf_counter() - t0
    counts = resample_counts(records, bootstrap_rng(0, [f"q{i}" for i in range(records)]), resamples)
    tracemalloc.start()
    t0 = time.perf_counter()
    composite_bootstrap(e_q, e_p, e_n, w, owner, counts, s)
    boot_s = time.perf_counter() - t0
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return {"n": n, "value_s": value_s, "boot_s": boot_s, "per_unit": boot_s / (resamples * n), "peak_mb": peak / 2**20}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--negatives", default="4096,16384,65536")
    parser.add_argument("--resamples", type=int, default=50)
    args = parser.parse_args()
    print(f"CPU: {cpu_name()}; d = {D}, K = {K}, R = {args.resamples}")
    print(f"{'negatives':>10} {'value':>8} {'bootstrap':>10} {'s / (R·n)':>11} {'boot peak':>10}")
    rows = [measure(int(x), args.resamples) for x in args.negatives.split(",")]
    for r in rows:
        print(
            f"{r['n']:>10,} {r['value_s']:>6.2f} s {r['boot_s']:>8.2f} s {r['per_unit']:>11.3e} {r['peak_mb']:>7.0f} MB"
        )
    unit_cost = rows[-1]["per_unit"]  # the largest n: the primal route, as at scale
    value_cost = rows[-1]["value_s"] / rows[-1]["n"]
    for n in (10**7, 10**8):
        boot_h = unit_cost * 1000 * n / 3600
        print(
            f"extrapolated {n:.0e} negatives, R = 1,000: bootstrap {boot_h:,.1f} h on this machine "
            f"(value alone {value_cost * n / 60:,.1f} min); bootstrap / value = {unit_cost * 1000 / value_cost:,.0f}×"
        )


if __name__ == "__main__":
    main()
