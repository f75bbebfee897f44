"""Benchmark: memory and time of loading one mined collection from each form a user saves it in.

The same records — ``bench_scale.write_semantic``'s 4 sources × K = 8 negatives over
``negatives / 5`` distinct passages — are written as transferdx records JSONL (one file per source),
as the tables ``sentence_transformers.util.mine_hard_negatives`` writes — a **triplet** Parquet file
(one row per negative: query, positive, negative) and an **n-tuple** Parquet file (query, positive,
negative_1 … negative_7; records with fewer negatives are left out of it) — and the triplet table
``datasets.save_to_disk``-ed. Each is loaded by the public ``transferdx.load`` in a fresh
subprocess: peak RSS (``VmHWM``), wall and CPU seconds, records and negatives read, and the
peak's ratio to the records JSONL of the same content, side by side in one run.

``--compare DIR`` also loads every form with the transferdx checkout in DIR (e.g. a
``git worktree`` of an older commit), so that a change is measured against its parent in one run.

    python benchmarks/bench_load.py [--negatives 1000000] [--compare /tmp/old-checkout] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_cli import cpu_model
from bench_scale import write_semantic

NTUPLE_K = 7


def write_forms(folder: Path, n_negatives: int) -> dict[str, Path]:
    """The collection as records JSONL (a folder), triplet and n-tuple Parquet, and save_to_disk."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    records = folder / "records"
    records.mkdir()
    write_semantic(records, n_negatives)
    trip: dict[str, list[str]] = {"query": [], "positive": [], "negative": []}
    ntup: dict[str, list[str]] = {"query": [], "positive": [], **{f"negative_{i}": [] for i in range(1, NTUPLE_K + 1)}}
    for path in sorted(records.glob("*.jsonl")):
        with open(path, encoding="utf-8") as lines:
            for line in lines:
                r = json.loads(line)
                query, positive = r["query"], r["positives"][0]["text"]
                negatives = [n["text"] for n in r["negatives"]]
                for text in negatives:
                    trip["query"].append(query)
                    trip["positive"].append(positive)
                    trip["negative"].append(text)
                if len(negatives) >= NTUPLE_K:
                    ntup["query"].append(query)
                    ntup["positive"].append(positive)
                    for i, text in enumerate(negatives[:NTUPLE_K], 1):
                        ntup[f"negative_{i}"].append(text)
    forms = {"records JSONL": records}
    forms["triplet Parquet"] = folder / "triplet.parquet"
    pq.write_table(pa.table(trip), forms["triplet Parquet"])
    forms["n-tuple Parquet"] = folder / "ntuple.parquet"
    pq.write_table(pa.table(ntup), forms["n-tuple Parquet"])
    try:
        import datasets
    except ImportError:
        return forms
    forms["triplet save_to_disk"] = folder / "triplet_dataset"
    datasets.Dataset(pa.table(trip)).save_to_disk(str(forms["triplet save_to_disk"]))
    return forms


def peak_mb() -> float:
    """This process's peak RSS: ``VmHWM`` (Linux; ``ru_maxrss`` survives ``exec``, so a child would
    report the benchmark's own peak from writing the files), else ``ru_maxrss``."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def child(path: str) -> None:
    """Runs in the measured subprocess: ``transferdx.load(path)``."""
    import transferdx as tdx

    t0, c0 = time.perf_counter(), time.process_time()
    loaded = tdx.load(path)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    out = {
        "records": len(loaded.records),
        "negatives": sum(len(r.negatives) for r in loaded.records),
        "excluded": len(loaded.exclusions),
        "wall_s": wall,
        "cpu_s": cpu,
        "peak_mb": peak_mb(),
        "transferdx": str(Path(tdx.__file__).parent),
    }
    print(json.dumps(out))


def measure(path: Path, checkout: str | None) -> dict[str, float]:
    here = str(Path(__file__).resolve().parent)
    first = [checkout] if checkout else []
    code = (
        f"import sys; sys.path[:0] = {first!r}; sys.path.append({here!r}); "
        f"import bench_load; bench_load.child({str(path)!r})"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        print(proc.stderr[-3000:], file=sys.stderr)
        raise SystemExit(f"loading {path} failed (exit {proc.returncode})")
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--negatives", type=int, default=1_000_000)
    parser.add_argument("--compare", help="another transferdx checkout to load every form with too")
    parser.add_argument("--json", help="write the rows here")
    args = parser.parse_args()
    print(f"CPU: {cpu_model()}; python {platform.python_version()}")
    runs = [("this checkout", None)] + ([("compare", str(Path(args.compare).resolve()))] if args.compare else [])
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench_load_") as tmp:
        forms = write_forms(Path(tmp), args.negatives)
        print(
            f"{'form':<22} {'checkout':<14} {'records':>8} {'negatives':>10} {'peak RSS':>9} {'wall':>8} {'cpu':>8}"
            f" {'vs JSONL':>9} {'vs compare':>10}"
        )
        base: dict[str | None, float] = {}
        for name, path in forms.items():
            measured = {label: measure(path, checkout) for label, checkout in runs}
            for label, checkout in runs:
                m = measured[label]
                if name == "records JSONL":
                    base[checkout] = m["peak_mb"]
                versus = f"{measured['this checkout']['peak_mb'] / m['peak_mb']:.2f}x" if label == "compare" else ""
                print(
                    f"{name:<22} {label:<14} {m['records']:>8,} {m['negatives']:>10,} {m['peak_mb'] / 1024:>6.2f} GB"
                    f" {m['wall_s']:>6.1f} s {m['cpu_s']:>6.1f} s {m['peak_mb'] / base[checkout]:>8.2f}x {versus:>10}",
                    flush=True,
                )
                rows.append({"form": name, "checkout": label, **m})
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
