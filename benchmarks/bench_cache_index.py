"""Benchmark: what one request costs a fresh process on a large shared embedding cache (issue 35).

A sharded audit's tasks (maps, stat tasks, the reduce) each open the cache the maps filled and ask
it for a part of its texts. This builds a cache of ``--texts`` passage texts (d = 384, chunks of
256; vectors from a seeded in-process encoder, so it measures the cache, not a model), then, each in
a fresh subprocess, asks it for ``--share`` of them drawn at random (a shard's share, spread over
the chunks as text hashes spread them), all cached:

- **this code**: ``EmbeddingCache.embed`` — the index holds the request's keys, built from each
  chunk's keys member; each chunk the request touches is read and verified once, when its vectors
  are gathered;
- **whole index** (the reference, kept here): the index as it was at 93de5b7 — every chunk read
  and verified in full, a dict of every key of the cache, the request's texts ordered into
  encoding units even though none is missing; then the same gather.

Printed side by side: wall seconds of the call, peak RSS beyond the process's RSS before the call
(``VmHWM`` reset just before, − ``VmRSS``), the ratio, and whether both returned the same vectors (SHA-256 of the
array).

    python benchmarks/bench_cache_index.py [--texts 1000000] [--share 0.125] [--keep FOLDER]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

import numpy as np

DIM, BUCKETS = 384, 1 << 16


class TableEncoder:
    """A text's vector is a row of a seeded random table picked by the text's CRC-32: fast,
    deterministic, ``SentenceTransformer.encode``'s interface. Not a model; a benchmark aid."""

    def __init__(self) -> None:
        self.table = np.random.default_rng(0).standard_normal((BUCKETS, DIM)).astype(np.float32)
        self.max_seq_length = 256

    def encode(self, texts: list[str], **_kwargs: object) -> np.ndarray:
        rows = [zlib.crc32(t.encode("utf-8")) % BUCKETS for t in texts]
        return self.table[rows]


def corpus(n: int) -> list[str]:
    return [f"passage {i}: text number {i * 7919 % 1000003} of the benchmark's corpus" for i in range(n)]


def make_cache(folder: Path, whole: bool = False):
    from transferdx.embed import EmbeddingCache, EncoderSpec

    spec = EncoderSpec(name="table384", model="memory:table384", source="memory", revision="table384")
    model = TableEncoder()
    cls = whole_index_cache() if whole else EmbeddingCache
    return cls(spec, folder, progress=False, model_factory=lambda _l, _s: model)


def whole_index_cache() -> type:
    """``EmbeddingCache`` with the index as it was at 93de5b7 (the reference)."""
    from transferdx.embed import EmbeddingCache

    class WholeIndex(EmbeddingCache):
        def _refresh(self, folder: Path, index) -> None:
            with os.scandir(folder) as found:
                entries = [(e.name, e.inode()) for e in found if e.name.startswith("chunk-")]
            for name, inode in sorted(entries):
                if not name.endswith(".npz") or index.seen.get(name) == inode:
                    continue
                index.seen[name] = inode
                path = folder / name
                st = path.stat()
                known = self._keys.get(path)
                if known is not None and known[0] == (st.st_ino, st.st_size, st.st_mtime_ns):
                    keys = known[1]
                else:
                    loaded = self._load_chunk(path)  # keys and vectors, verified
                    if loaded is None:
                        continue
                    keys = loaded[0]
                    self._keys[path] = (loaded[2], keys)
                for row, key in enumerate(keys):  # every key of the cache
                    index.rows.setdefault(key.tobytes(), (path, row))

        def _fill(self, folder, first, index, prompt, role) -> None:
            self._units(first)  # ordered into units whether or not any is missing
            super()._fill(folder, first, index, prompt, role)

    return WholeIndex


def status_mb(field: str) -> float:
    """``VmRSS`` or ``VmHWM`` (the peak since the last reset) of this process, in MB."""
    with open("/proc/self/status", encoding="utf-8") as status:
        for line in status:
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def reset_peak() -> None:
    """Start ``VmHWM`` afresh from the current RSS (Linux: ``5`` into ``/proc/self/clear_refs``)."""
    with open("/proc/self/clear_refs", "w", encoding="ascii") as refs:
        refs.write("5")


def child(folder: str, texts: int, share: float, whole: bool) -> None:
    """Runs in the measured subprocess: one request of ``share`` of the texts, all cached."""
    pool = corpus(texts)
    picks = np.random.default_rng(1).choice(texts, size=int(texts * share), replace=False)
    request = [pool[i] for i in picks]
    del pool
    cache = make_cache(Path(folder), whole)
    reset_peak()
    before = status_mb("VmRSS")
    t0 = time.perf_counter()
    vectors = cache.embed(request, "passage")
    wall = time.perf_counter() - t0
    peak = status_mb("VmHWM")
    assert cache.encoded_texts == 0, "the request should have been served from the cache"
    digest = hashlib.sha256(np.ascontiguousarray(vectors).tobytes()).hexdigest()
    print(json.dumps({"wall_s": wall, "beyond_mb": peak - before, "sha256": digest, "n": len(request)}))


def run_child(folder: Path, texts: int, share: float, whole: bool) -> dict[str, float | str]:
    args = [sys.executable, __file__, "--child", str(folder), "--texts", str(texts), "--share", str(share)]
    proc = subprocess.run([*args, *(["--whole"] if whole else [])], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"child failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def cpu_name() -> str:
    with open("/proc/cpuinfo", encoding="utf-8") as info:
        for line in info:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "unknown CPU"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=1_000_000, help="texts in the cache")
    parser.add_argument("--share", type=float, default=0.125, help="share of them one request asks for")
    parser.add_argument("--keep", help="build (or reuse) the cache in this folder instead of a temporary one")
    parser.add_argument("--repeats", type=int, default=2, help="measurements of each, alternating")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--whole", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.texts, args.share, args.whole)
        return
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(args.keep) if args.keep else Path(tmp)
        t0 = time.perf_counter()
        cache = make_cache(folder)
        cache.embed(corpus(args.texts), "passage")
        chunks = len(list(cache.folder("passage").glob("chunk-*.npz")))
        print(f"CPU: {cpu_name()}, {os.cpu_count()} cores")
        print(f"cache: {args.texts:,} texts in {chunks:,} chunks (ready in {time.perf_counter() - t0:.1f} s)")
        runs: dict[bool, list[dict[str, float | str]]] = {False: [], True: []}
        for _ in range(args.repeats):
            for whole in (False, True):
                runs[whole].append(run_child(folder, args.texts, args.share, whole))
        new, old = runs[False], runs[True]
        n = new[0]["n"]
        print(f"one request of {n:,} texts ({args.share:.3f} of the cache), fresh process, best of {args.repeats}:")
        print(f"{'':14}{'this code':>12}{'whole index':>14}{'ratio':>8}")
        for key, label in (("wall_s", "wall (s)"), ("beyond_mb", "peak + (MB)")):
            a, b = min(float(r[key]) for r in new), min(float(r[key]) for r in old)
            print(f"{label:14}{a:12.2f}{b:14.2f}{a / b:8.2f}")
        same = {r["sha256"] for r in new} == {r["sha256"] for r in old} and len({r["sha256"] for r in new}) == 1
        print(f"same vectors: {'yes' if same else 'NO'}")
        if not same:
            raise SystemExit(1)


if __name__ == "__main__":
    main()
