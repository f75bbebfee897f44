"""Benchmark: where the sharded audit's reduce holds its memory, step by step, beside another checkout.

bench_scale's synthetic semantic file (4 sources × 8 negatives, HashEncoder) is planned, mapped and
its stat tasks run as ``audit.stage=all`` launches them (bench_scale's children, this checkout's
code); then the reduce runs in a fresh subprocess per checkout — this one, and ``--base`` when given —
each reading the same stat tasks' values. In the reduce, each pooled step (the values read and
merged, the composites, the suspicion, the profile, the descriptors, writing the artifacts) is
wrapped: the resident set before it, its peak (the kernel's high-water mark, reset when the step
begins: ``/proc/self/clear_refs``) and after it. Prints one row per step for each checkout, the
reduce's peak (the largest step peak) and their ratio, and checks that both wrote the same bytes.
Linux only (``/proc``).

    python benchmarks/bench_reduce_steps.py [--negatives 1000000] [--shards 4] [--base /path/to/checkout]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_cache_index import reset_peak, status_mb

# (module, class or "", function): what the reduce calls, wrapped where the checkout has it
STEPS = (
    ("transferdx.pipeline.sharding", "", "read_values"),
    ("transferdx.pipeline.sharding", "", "merge_values"),
    ("transferdx.pipeline.sharding", "", "input_facts"),
    ("transferdx.pipeline.stat_tasks", "ValueStore", "texts"),
    ("transferdx.pipeline.sharding", "", "source_composites"),  # before the composites were read per source
    ("transferdx.pipeline.sharding", "", "source_composite"),  # one source's (store_composites: not wrapped,
    ("transferdx.auditing.core", "", "source_composites"),  # its merges are: a step resets the peak)
    ("transferdx.auditing.core", "", "_suspicion_inputs"),
    ("transferdx.auditing.core", "", "_suspicion"),
    ("transferdx.auditing.core", "", "profile_sources"),
    ("transferdx.auditing.core", "", "describe"),
    ("transferdx.auditing.result", "Audit", "save"),
)
COMPARED = ("profile.csv", "records.csv", "negatives.csv", "suspects.csv", "control_suspects.csv", "report.md")


def _measured(label: str, call: Callable[[], Any], rows: list[dict[str, Any]]) -> Any:
    """``call()``, with a row in ``rows``: the resident set before it, at its peak and after it (MB)
    and its wall seconds."""
    before = status_mb("VmRSS")
    reset_peak()
    started = time.perf_counter()
    out = call()
    row = {"before_mb": before, "peak_mb": status_mb("VmHWM"), "after_mb": status_mb("VmRSS")}
    calls = sum(1 for r in rows if r["step"].split(" (call ")[0] == label)
    step = label if not calls else f"{label} (call {calls + 1})"  # a step the reduce runs again
    rows.append({"step": step, **row, "s": time.perf_counter() - started})
    return out


def _wrap(owner: Any, name: str, rows: list[dict[str, Any]]) -> None:
    """Replace ``owner.name`` by itself under :func:`_measured`."""
    inner = getattr(owner, name)

    @functools.wraps(inner)
    def step(*args: Any, **kwargs: Any) -> Any:
        return _measured(name, lambda: inner(*args, **kwargs), rows)

    setattr(owner, name, step)


def reduce_child(folder: str, shards: int, label: str, steps: bool = True) -> None:
    """In the measured subprocess: the reduce of ``folder``'s stat tasks, each step wrapped; the
    artifacts to ``folder/out-<label>``; the rows as one JSON line. ``steps`` false: nothing
    wrapped (no peak reset), the whole process's peak — what ``bench_scale`` reports for the reduce
    stage — as the one row ``whole reduce``."""
    import dataclasses
    import importlib

    import bench_scale

    rows: list[dict[str, Any]] = []
    imported = status_mb("VmRSS")
    import transferdx  # noqa: F401  (imports before the first step)
    from transferdx.auditing.core import SemanticSettings
    from transferdx.diagnostics.composite import CompositeSettings
    from transferdx.embed import EmbeddingCache, EncoderSpec
    from transferdx.pipeline import prepare_audit
    from transferdx.pipeline.sharding import ShardSettings, run_stage

    started = time.perf_counter()
    for module, cls, name in STEPS if steps else ():
        owner: Any = importlib.import_module(module)
        owner = getattr(owner, cls) if cls else owner
        if hasattr(owner, name):
            _wrap(owner, name, rows)
    spec = EncoderSpec(name="hash384", model="memory:hash384", source="memory", revision="hash384")
    model = bench_scale.HashEncoder()
    cache = Path(folder) / "cache-sharded"
    encoder = EmbeddingCache(spec, cache, progress=False, model_factory=lambda _l, _s: model)
    semantic = SemanticSettings(composite=dataclasses.replace(CompositeSettings(), resamples=0))
    imports = status_mb("VmRSS")
    load = functools.partial(prepare_audit, folder, encoder=encoder, controls="none", semantic=semantic)
    prepared = _measured("prepare_audit (the input)", load, rows)
    own = {"let_go": True} if "let_go" in {f.name for f in dataclasses.fields(ShardSettings)} else {}
    result = run_stage(prepared, ShardSettings(shards=shards, stage="reduce", cache_dir=cache, **own))
    result.save(Path(folder) / f"out-{label}")
    if not steps:
        rows.append(
            {
                "step": "whole reduce",
                "before_mb": imported,
                "peak_mb": status_mb("VmHWM"),
                "after_mb": status_mb("VmRSS"),
                "s": time.perf_counter() - started,
            }
        )
    print(json.dumps({"python_start_mb": imported, "imports_mb": imports, "steps": rows}))


def run_reduce(folder: str, shards: int, label: str, checkout: Path) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(checkout), str(Path(__file__).resolve().parent)])}
    args = [sys.executable, __file__, "--reduce-child", folder, "--shards", str(shards), "--label", label]
    proc = subprocess.run(args, capture_output=True, text=True, check=False, env=env)
    if proc.returncode != 0:
        print(proc.stderr[-3000:], file=sys.stderr)
        raise SystemExit(f"the reduce of {checkout} failed (exit {proc.returncode})")
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--negatives", type=int, default=1_000_000)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--base", help="another checkout whose reduce runs beside this one's")
    parser.add_argument("--json", help="also write the rows here")
    parser.add_argument("--reduce-child", help=argparse.SUPPRESS)
    parser.add_argument("--label", default="this", help=argparse.SUPPRESS)
    parser.add_argument("--whole", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.reduce_child:
        reduce_child(args.reduce_child, args.shards, args.label, steps=not args.whole)
        return

    import bench_scale
    from bench_cli import cpu_model

    here = Path(__file__).resolve().parent.parent
    checkouts = {"this": here} | ({"base": Path(args.base).resolve()} if args.base else {})
    print(f"CPU: {cpu_model()}; {args.negatives:,} negatives in {args.shards} shards")
    with tempfile.TemporaryDirectory() as tmp:
        counts = bench_scale.write_semantic(Path(tmp), args.negatives)
        print(f"{counts['records']:,} records, {counts['negatives']:,} negatives, {counts['passages']:,} passages")
        bench_scale.run_child(["--semantic-child", tmp, "--shard", f"plan/{args.shards}"])
        for i in range(args.shards):
            bench_scale.run_child(["--semantic-child", tmp, "--shard", f"{i}/{args.shards}"])
        for i in range(args.shards):
            bench_scale.run_child(["--semantic-child", tmp, "--shard", f"stats-{i}/{args.shards}"])
        got = {label: run_reduce(tmp, args.shards, label, path) for label, path in checkouts.items()}
        if len(got) == 2:
            for name in COMPARED:
                same = (Path(tmp) / "out-this" / name).read_bytes() == (Path(tmp) / "out-base" / name).read_bytes()
                print(f"{name}: {'same bytes' if same else 'DIFFERS'}")
    print(f"{'step':28s}" + "".join(f"{label + ' before/peak/after MB, s':>40s}" for label in got))
    names = list(dict.fromkeys(row["step"] for run in got.values() for row in run["steps"]))
    for name in names:
        cells = []
        for run in got.values():
            row = next((r for r in run["steps"] if r["step"] == name), None)
            mb = "—" if row is None else "/".join(f"{row[k]:.0f}" for k in ("before_mb", "peak_mb", "after_mb"))
            cells.append(mb if row is None else f"{mb}, {row['s']:.1f}")
        print(f"{name:28s}" + "".join(f"{c:>40s}" for c in cells))
    peaks = {label: max(r["peak_mb"] for r in run["steps"]) for label, run in got.items()}
    print("reduce peak: " + ", ".join(f"{label} {mb:.0f} MB" for label, mb in peaks.items()))
    if "base" in peaks:
        print(f"this / base: {peaks['this'] / peaks['base']:.2f}")
    if args.json:
        rows = {"negatives": args.negatives, "shards": args.shards, "cpu": cpu_model(), "runs": got}
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
