"""Benchmark: memory and time of loading one mined collection from each form a user saves it in.

The same records — ``bench_scale.write_semantic``'s 4 sources × K = 8 negatives over
``negatives / 5`` distinct passages — are written as transferdx records JSONL (one file per source),
as the tables ``sentence_transformers.util.mine_hard_negatives`` writes — a **triplet** Parquet file
(one row per negative: query, positive, negative) and an **n-tuple** Parquet file (query, positive,
negative_1 … negative_7; records with fewer negatives are left out of it) — and the triplet table
``datasets.save_to_disk``-ed; and as the published shapes of issue 57 — **Tevatron / RLHN** rows
(JSONL: ``query_id, query, positive_passages, negative_passages, subset``, one row per record, the
source in ``subset``) and an **id-and-score** Parquet list (``query_id, pos_id, neg_ids, pos_score,
neg_scores``) resolved through ``corpus`` and ``queries`` Parquet lookup tables. Each is loaded by
the public ``transferdx.load`` in a fresh subprocess: peak RSS (``VmHWM``), wall and CPU seconds,
records and negatives read, and the peak's ratio to the records JSONL of the same content, side by side in one run.

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


def write_forms(folder: Path, n_negatives: int) -> dict[str, Path | tuple[Path, dict[str, str]]]:
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
    forms: dict[str, Path | tuple[Path, dict[str, str]]] = {"records JSONL": records}
    forms["triplet Parquet"] = folder / "triplet.parquet"
    pq.write_table(pa.table(trip), forms["triplet Parquet"])
    forms["n-tuple Parquet"] = folder / "ntuple.parquet"
    pq.write_table(pa.table(ntup), forms["n-tuple Parquet"])
    forms.update(published_forms(folder, records))
    try:
        import datasets
    except ImportError:
        return forms
    forms["triplet save_to_disk"] = folder / "triplet_dataset"
    datasets.Dataset(pa.table(trip)).save_to_disk(str(forms["triplet save_to_disk"]))
    return forms


def published_forms(folder: Path, records: Path) -> dict[str, Path | tuple[Path, dict[str, str]]]:
    """The same records as Tevatron rows (JSONL) and as an id-and-score Parquet list with its corpus and
    queries lookups (a query id is ``<source>/<qid>``, so each source's records stay apart; the miner's
    scores are made up, decreasing with the rank)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    tevatron = folder / "tevatron.jsonl"
    ids: dict[str, list] = {"query_id": [], "pos_id": [], "neg_ids": [], "pos_score": [], "neg_scores": []}
    corpus: dict[str, str] = {}
    queries: dict[str, str] = {}
    with open(tevatron, "w", encoding="utf-8") as out:
        for path in sorted(records.glob("*.jsonl")):
            with open(path, encoding="utf-8") as lines:
                for line in lines:
                    r = json.loads(line)
                    qid = f"{r['source']}/{r['qid']}"

                    def passages(items: list[dict[str, str]]) -> list[dict[str, str]]:
                        return [{"docid": p["id"], "title": "", "text": p["text"]} for p in items]

                    row = {
                        "query_id": qid,
                        "query": r["query"],
                        "positive_passages": passages(r["positives"]),
                        "negative_passages": passages(r["negatives"]),
                        "subset": r["source"],
                    }
                    out.write(json.dumps(row) + "\n")
                    queries[qid] = r["query"]
                    for p in (*r["positives"], *r["negatives"]):
                        corpus[p["id"]] = p["text"]
                    ids["query_id"].append(qid)
                    ids["pos_id"].append(r["positives"][0]["id"])
                    ids["neg_ids"].append([n["id"] for n in r["negatives"]])
                    ids["pos_score"].append(0.9)
                    ids["neg_scores"].append([round(0.8 - 0.01 * i, 4) for i in range(len(r["negatives"]))])
    idlist = folder / "ids.parquet"
    pq.write_table(pa.table(ids), idlist)
    lookups = {"corpus": str(folder / "corpus.parquet"), "queries": str(folder / "queries.parquet")}
    pq.write_table(pa.table({"id": list(corpus), "text": list(corpus.values())}), lookups["corpus"])
    pq.write_table(pa.table({"id": list(queries), "text": list(queries.values())}), lookups["queries"])
    return {"Tevatron JSONL": tevatron, "id-and-score Parquet": (idlist, lookups)}


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


def child(path: str, options: dict[str, str] | None = None) -> None:
    """Runs in the measured subprocess: ``transferdx.load(path, **options)``."""
    import transferdx as tdx

    t0, c0 = time.perf_counter(), time.process_time()
    loaded = tdx.load(path, **(options or {}))
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


def measure(form: Path | tuple[Path, dict[str, str]], checkout: str | None) -> dict[str, float] | None:
    """One load in a fresh process; None when a compared checkout cannot read the form (an older one,
    for the shapes it did not know)."""
    path, options = form if isinstance(form, tuple) else (form, {})
    here = str(Path(__file__).resolve().parent)
    first = [checkout] if checkout else []
    code = (
        f"import sys; sys.path[:0] = {first!r}; sys.path.append({here!r}); "
        f"import bench_load; bench_load.child({str(path)!r}, {options!r})"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        print(proc.stderr[-3000:], file=sys.stderr)
        if checkout:
            return None
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
                if m is None:
                    print(f"{name:<22} {label:<14} (not read by that checkout)", flush=True)
                    continue
                if name == "records JSONL":
                    base[checkout] = m["peak_mb"]
                ours = measured["this checkout"]
                assert ours is not None  # this checkout's failure stops the run
                versus = f"{ours['peak_mb'] / m['peak_mb']:.2f}x" if label == "compare" else ""
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
