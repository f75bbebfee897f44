"""Inference backends for the frozen encoder: torch (fp32, bf16/fp16 autocast) and OpenVINO (fp32,
bf16, static int8), with sentence-transformers' own tokenisation and pooling in every case.

A :class:`Runtime` is a resolved (backend, precision) pair. :func:`resolve_runtime` turns a spec's
``backend``/``precision`` (either may be ``auto``) into one, checking what this machine can run:

- ``auto`` on a GPU → torch fp32; on a CPU → OpenVINO fp32 when the ``openvino`` package is
  installed, else torch fp32. An encoder then keeps OpenVINO only where it was measured faster on
  this machine with the same vectors (:func:`measure_choice`, once per model and machine, the
  record beside the exports): 1.3× on 2 AVX2 cores, 1.5× on 2 AVX-512 cores with AMX, 0.95–1.18× on
  2 AVX-512 cores without
  (``benchmarks/bench_backends.py``). Evaluation and training always use torch fp32 (:func:`torch_fp32`).
- ``bf16`` needs native support (a CUDA device that has it, or a CPU with ``avx512_bf16``/``amx_bf16``):
  emulated bf16 was measured 7.9× *slower* than fp32 on an AVX2 CPU, so it is refused there.
- ``fp16`` is torch on CUDA only; ``int8`` is OpenVINO's post-training static quantisation (NNCF),
  calibrated on the package's own demo texts, and changes the statistics (see the benchmark).

:func:`prepare` applies a runtime to a loaded ``SentenceTransformer``: torch keeps the model and
encodes under ``torch.autocast`` for bf16/fp16; OpenVINO converts the transformer module once
(``openvino.convert_model``, offline, from the loaded weights), caches the export content-addressed
under ``<models dir>/openvino-<key>/`` (written atomically, re-used, re-exported when damaged) and
swaps it in for the module's inner model while encoding. The embedding cache keys its folders by the
runtime, so vectors of different backends never mix.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import json
import os
import shutil
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from transferdx.artifacts import atomic_folder, atomic_write_text, content_hash, file_hash
from transferdx.embed.models import resolve_device
from transferdx.embed.pool import is_multi_process

BACKENDS = ("torch", "openvino")
PRECISIONS = {"torch": ("fp32", "bf16", "fp16"), "openvino": ("fp32", "bf16", "int8")}
# Bump when what an export writes changes (graph conversion, quantisation recipe).
EXPORT_RECIPE = "ov-export-v1"
INT8_CALIBRATION_SIZE = 300  # demo texts used to calibrate OpenVINO's static int8 quantisation


class BackendUnavailable(ValueError):
    """A requested backend or precision cannot run here (a missing package, no native bf16)."""


@dataclass(frozen=True)
class Runtime:
    """A resolved encoder runtime: ``backend`` ∈ {torch, openvino}, ``precision`` ∈ its precisions."""

    backend: str = "torch"
    precision: str = "fp32"

    @property
    def is_reference(self) -> bool:
        """torch fp32: the reference every other runtime is measured against (and the cache's old key)."""
        return self.backend == "torch" and self.precision == "fp32"

    def __str__(self) -> str:
        return f"{self.backend}/{self.precision}"


# ---------------------------------------------------------------------------------------------
# What this machine supports
# ---------------------------------------------------------------------------------------------


@functools.cache
def _cpuinfo() -> dict[str, str]:
    """The first value of each field of Linux ``/proc/cpuinfo`` (read once); empty where there is none."""
    fields: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                key, sep, value = line.partition(":")
                if sep:
                    fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    return fields


def cpu_flags() -> set[str]:
    """The CPU's feature flags (Linux ``/proc/cpuinfo``); empty where unknown."""
    return set(_cpuinfo().get("flags", "").split())


def cpu_has_native_bf16() -> bool:
    """Whether the CPU computes bf16 natively (``avx512_bf16`` or ``amx_bf16``); on a system without
    ``/proc/cpuinfo``, Apple silicon (arm64 macOS) counts as native, everything else does not."""
    flags = cpu_flags()
    if flags:
        return bool(flags & {"avx512_bf16", "amx_bf16"})
    import platform

    return sys.platform == "darwin" and platform.machine() == "arm64"


def openvino_installed() -> bool:
    return importlib.util.find_spec("openvino") is not None


def resolve_runtime(backend: str, precision: str, device: str) -> Runtime:
    """The runtime a spec's ``backend``/``precision`` (``auto`` allowed) gives on ``device``;
    :class:`BackendUnavailable` when it cannot run here, with one line saying what to do."""
    if backend not in (*BACKENDS, "auto"):
        raise ValueError(f"backbone.backend must be one of {['auto', *BACKENDS]}, got {backend!r}")
    all_precisions = sorted({p for ps in PRECISIONS.values() for p in ps})
    if precision not in (*all_precisions, "auto"):
        raise ValueError(f"backbone.precision must be one of {['auto', *all_precisions]}, got {precision!r}")
    on_gpu = resolve_device(device).startswith("cuda")
    if backend == "auto":  # OpenVINO on a CPU where it is installed and offers the precision asked for
        offered = precision == "auto" or precision in PRECISIONS["openvino"]
        backend = "openvino" if not on_gpu and openvino_installed() and offered else "torch"
        if precision == "int8":
            backend = "openvino"  # only OpenVINO offers it (an error below says what to install)
    if precision == "auto":
        precision = "fp32"
    if precision not in PRECISIONS[backend]:
        raise BackendUnavailable(
            f"backbone.precision={precision} is not offered by backend {backend} (it offers {PRECISIONS[backend]})"
        )
    if backend == "openvino":
        if on_gpu:
            raise BackendUnavailable("backbone.backend=openvino runs on the CPU: set backbone.device=cpu")
        if not openvino_installed():
            raise BackendUnavailable(
                "backbone.backend=openvino needs the openvino package: pip install 'transferdx[openvino]'"
            )
        if precision == "int8" and importlib.util.find_spec("nncf") is None:
            raise BackendUnavailable(
                "backbone.precision=int8 needs NNCF to quantise: pip install 'transferdx[openvino]'"
            )
    if precision == "fp16" and not on_gpu:
        raise BackendUnavailable("backbone.precision=fp16 runs on a CUDA device only; on a CPU use fp32 (or bf16)")
    if precision == "bf16":
        if on_gpu:
            import torch

            if not torch.cuda.is_bf16_supported():
                raise BackendUnavailable("this GPU has no bf16: use backbone.precision=fp16 or fp32")
        elif not cpu_has_native_bf16():
            raise BackendUnavailable(
                "this CPU has no native bf16 (avx512_bf16 / amx_bf16), so bf16 would be emulated and slower than"
                " fp32: use backbone.precision=fp32"
            )
    return Runtime(backend, precision)


def multi_process_runtime(backend: str, precision: str) -> tuple[str, str]:
    """(backend, precision) for several encoding processes (:mod:`transferdx.embed.pool`): torch fp32
    (``auto`` resolves to it; the workers get the torch model, no export or autocast context);
    anything else is :class:`BackendUnavailable` with what to change."""
    if backend not in ("auto", "torch") or precision not in ("auto", "fp32"):
        raise BackendUnavailable(
            f"multi-process encoding (backbone.devices / backbone.processes) runs torch fp32, not "
            f"backend={backend} precision={precision}: set backbone.backend=torch backbone.precision=fp32, "
            "or encode in one process"
        )
    return "torch", "fp32"


def runtime_of(spec: Any) -> Runtime:
    """:func:`resolve_runtime` of an :class:`~transferdx.embed.models.EncoderSpec`; several encoding
    processes run torch fp32 (:func:`multi_process_runtime`)."""
    if is_multi_process(spec):
        return resolve_runtime(*multi_process_runtime(spec.backend, spec.precision), spec.device)
    return resolve_runtime(spec.backend, spec.precision, spec.device)


def torch_fp32(spec: Any) -> Any:
    """``spec`` pinned to torch fp32 where it says ``auto`` (evaluation and training measure the
    model itself; an explicit backend is kept)."""
    import dataclasses

    if spec.backend == "auto" or spec.precision == "auto":
        backend = "torch" if spec.backend == "auto" else spec.backend
        precision = "fp32" if spec.precision == "auto" else spec.precision
        return dataclasses.replace(spec, backend=backend, precision=precision)
    return spec


# ---------------------------------------------------------------------------------------------
# Applying a runtime to a loaded model
# ---------------------------------------------------------------------------------------------


EncodeContext = Callable[[], contextlib.AbstractContextManager[Any]]


def _autocast(dtype_name: str, device: str) -> EncodeContext:
    def context() -> contextlib.AbstractContextManager[Any]:
        import torch

        kind = "cuda" if device.startswith("cuda") else "cpu"
        return torch.autocast(device_type=kind, dtype=getattr(torch, dtype_name))

    return context


def is_transformer(model: Any) -> bool:
    """Whether ``model`` is a sentence-transformers model over a Hugging Face transformer."""
    try:
        _transformer_module(model)
    except (BackendUnavailable, TypeError, IndexError, KeyError):
        return False
    return True


def folder_is_transformer(location: str) -> bool:
    """Whether the sentence-transformers model at ``location`` starts with a ``Transformer`` module
    (its ``modules.json``); a location that is not a folder (a hub id) is assumed to."""
    path = Path(location) / "modules.json" if location else None
    if path is None or not path.is_file():
        return not (location and Path(location).is_dir())
    try:
        modules = json.loads(path.read_text(encoding="utf-8"))
        return str(modules[0].get("type", "")).rsplit(".", 1)[-1] == "Transformer"
    except (OSError, ValueError, IndexError, KeyError, AttributeError, TypeError):
        return False


def _transformer_module(model: Any) -> Any:
    """The sentence-transformers ``Transformer`` module (first module, holding ``.model``)."""
    first = model[0] if len(model) else None
    if first is None or not hasattr(first, "model") or not hasattr(first.model, "config"):
        raise BackendUnavailable(
            f"backbone.backend=openvino converts a transformer encoder; {type(first).__name__} is not one"
            " (use backbone.backend=torch)"
        )
    return first


def prepare(model: Any, runtime: Runtime, identity: str, models_dir: Path, threads: int | None = None) -> EncodeContext:
    """Prepare ``runtime`` for a loaded ``SentenceTransformer`` and return the context each ``encode``
    runs under (autocast for torch bf16/fp16; for OpenVINO, the compiled model swapped in for the
    transformer's inner model during the encode and swapped back after, so the caller's model is
    never changed). ``identity`` names the weights (model id and revision): with the runtime,
    the OpenVINO version and :data:`EXPORT_RECIPE` it keys the cached export in ``models_dir``."""
    device = str(getattr(model, "device", "cpu"))
    if runtime.backend == "torch":
        if runtime.precision == "fp32":
            return contextlib.nullcontext
        return _autocast("bfloat16" if runtime.precision == "bf16" else "float16", device)
    module = _transformer_module(model)
    compiled = openvino_model(load_openvino(module, runtime, identity, models_dir, threads), module.model.config)

    @contextlib.contextmanager
    def swapped() -> Iterator[None]:  # the caller's model is left as it was between encodes
        original = module.model
        module.model = compiled
        try:
            yield
        finally:
            module.model = original

    return swapped


def export_key(identity: str, runtime: Runtime) -> str:
    import openvino

    parts: list[Any] = [EXPORT_RECIPE, identity, runtime.precision, openvino.__version__]
    if runtime.precision == "int8":
        import nncf

        parts += [nncf.__version__, INT8_CALIBRATION_SIZE]
    return content_hash(*parts)[:16]


def export_folder(identity: str, runtime: Runtime, models_dir: Path) -> Path:
    """Where the OpenVINO export of ``identity`` at ``runtime`` is cached."""
    return models_dir / f"openvino-{export_key(identity, runtime)}"


def _example_inputs(module: Any) -> dict[str, Any]:
    """Tokenised example texts for tracing, restricted to the inputs the model's forward takes."""
    import inspect

    features = _tokenize(module, ["an example passage to trace the encoder", "a query"])
    accepted = set(inspect.signature(module.model.forward).parameters)
    return {k: v for k, v in features.items() if k in accepted and hasattr(v, "dtype")}


def _tokenize(module: Any, texts: list[str]) -> dict[str, Any]:
    """The module's features for ``texts`` (``preprocess`` in sentence-transformers ≥ 5, else ``tokenize``)."""
    return dict((getattr(module, "preprocess", None) or module.tokenize)(texts))


def _calibration_texts(n: int = INT8_CALIBRATION_SIZE) -> list[str]:
    """The demo set's first ``n`` queries and passages, in file order: a fixed, shipped sample."""
    folder = Path(__file__).resolve().parents[1] / "demo"
    texts: list[str] = []
    for name in ("queries.jsonl", "passages.jsonl"):
        with open(folder / name, encoding="utf-8") as handle:
            rows = [json.loads(line) for line in handle if line.strip()]
            texts += [row["query"] if "query" in row else row["text"] for row in rows]
    return texts[:n]


def _export(module: Any, runtime: Runtime, target: Path) -> None:
    """Convert the module's transformer to OpenVINO (quantised for int8) and save it atomically."""
    import warnings

    import openvino as ov
    import torch

    inputs = _example_inputs(module)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tracing warnings about Python control flow in the model's code
        graph = ov.convert_model(module.model.eval(), example_input=inputs)
    if runtime.precision == "int8":
        import nncf

        names = [i.get_any_name() for i in graph.inputs]

        def features(text: str) -> dict[str, Any]:
            encoded = _tokenize(module, [text])
            return {k: encoded[k].numpy() for k in names}

        texts = _calibration_texts()
        graph = nncf.quantize(
            graph, nncf.Dataset(texts, features), model_type=nncf.ModelType.TRANSFORMER, subset_size=len(texts)
        )
    try:
        with atomic_folder(target, keep=_verified) as work:
            ov.save_model(graph, str(work / "model.xml"), compress_to_fp16=False)  # fp16 storage would change fp32
            sums = {name: file_hash(work / name) for name in ("model.xml", "model.bin")}
            record = json.dumps({"runtime": str(runtime), "sha256": sums}, sort_keys=True)
            atomic_write_text(work / "export.json", record)
    except OSError:  # another run put its export there first: keep it if it verifies
        if not _verified(target):
            raise
    except RuntimeError as exc:  # OpenVINO's own write errors ("basic_ios::clear: iostream error")
        raise export_error(exc, target) from None


# Below this much free space, a failed OpenVINO write is reported as a full disk.
LOW_SPACE = 256 << 20


def export_error(exc: RuntimeError, target: Path) -> OSError:
    """An OSError naming the export folder for OpenVINO's RuntimeError while saving: ENOSPC when the
    disk has less than :data:`LOW_SPACE` free, else EIO with OpenVINO's first line."""
    import errno

    try:
        free = shutil.disk_usage(next(p for p in (target, *target.parents) if p.exists())).free
    except (OSError, StopIteration):
        free = None
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    if free is not None and free < LOW_SPACE:
        return OSError(errno.ENOSPC, f"no space left on the device ({free >> 20} MB free)", str(target))
    return OSError(errno.EIO, f"OpenVINO could not save the export: {first}", str(target))


def _verified(target: Path) -> bool:
    """Whether a cached export is complete and its files match their recorded sha256."""
    try:
        sums = json.loads((target / "export.json").read_text(encoding="utf-8"))["sha256"]
        return all(file_hash(target / name) == digest for name, digest in sums.items()) and len(sums) == 2
    except (OSError, ValueError, KeyError, TypeError):
        return False


def load_openvino(module: Any, runtime: Runtime, identity: str, models_dir: Path, threads: int | None = None) -> Any:
    """The compiled OpenVINO model of ``module``'s transformer at ``runtime``: the cached export
    when it verifies, else a fresh export (a damaged one is replaced)."""
    import openvino as ov

    target = export_folder(identity, runtime, models_dir)
    if not _verified(target):
        _export(module, runtime, target)
    import torch

    config = {
        "PERFORMANCE_HINT": "LATENCY",
        "INFERENCE_NUM_THREADS": int(threads or torch.get_num_threads()),
        # OpenVINO would run fp32 graphs in bf16 on CPUs that have it: say the precision explicitly
        "INFERENCE_PRECISION_HINT": "bf16" if runtime.precision == "bf16" else "f32",
    }
    core = ov.Core()
    return core.compile_model(core.read_model(str(target / "model.xml")), "CPU", config)


_MODEL_CLASS: type | None = None


def openvino_model(compiled: Any, config: Any) -> Any:
    """A ``torch.nn.Module`` standing in for the Hugging Face model inside sentence-transformers'
    ``Transformer`` module: the same tensor inputs, ``{"last_hidden_state": tensor}`` out, computed by
    the compiled OpenVINO model (the class is made on first use, so importing this module needs no torch)."""
    global _MODEL_CLASS
    if _MODEL_CLASS is None:
        import torch

        class OpenVINOModel(torch.nn.Module):
            def __init__(self, compiled: Any, config: Any):
                super().__init__()
                self.compiled, self.config = compiled, config
                self.input_names = [i.get_any_name() for i in compiled.inputs]
                outputs = [o.get_any_name() for o in compiled.outputs]
                self.output = next((i for i, n in enumerate(outputs) if "last_hidden_state" in n), 0)

            def forward(self, **features: Any) -> dict[str, Any]:
                missing = [n for n in self.input_names if n not in features]
                if missing:
                    raise ValueError(f"OpenVINO encoder: inputs {missing} missing from the tokenised batch")
                result = self.compiled({n: features[n].detach().cpu().numpy() for n in self.input_names})
                return {"last_hidden_state": torch.from_numpy(result[self.output].copy())}

        _MODEL_CLASS = OpenVINOModel
    return _MODEL_CLASS(compiled, config)


# ---------------------------------------------------------------------------------------------
# backend=auto on a CPU: the runtime measured faster on this machine
# ---------------------------------------------------------------------------------------------

# Texts timed per runtime (the package's demo passages), and the largest difference between the two
# runtimes' normalised vectors that counts as the same vectors (fp32 export: measured ~1e-7).
CHOICE_TEXTS = 192
CHOICE_PARITY = 1e-4
CHOICE_RECIPE = "runtime-choice-v1"


def cpu_signature() -> str:
    """What makes one CPU faster on one runtime than another: model name, feature flags, cores."""
    import platform

    name = _cpuinfo().get("model name") or platform.processor() or platform.machine()
    return f"{name}|{' '.join(sorted(cpu_flags()))}|{os.cpu_count()}"


def choice_path(identity: str, models_dir: Path, batch_size: int, threads: int | None = None) -> Path:
    """Where the measured choice for this model, machine, thread count and batch size is kept. Read
    on every encoder's start without importing torch or OpenVINO (a warm re-audit loads neither):
    their versions come from the installed packages' metadata, the threads from ``threads`` or
    ``OMP_NUM_THREADS`` (torch's default follows the core count, which the CPU signature holds)."""
    from importlib.metadata import version

    key = content_hash(
        CHOICE_RECIPE,
        identity,
        cpu_signature(),
        str(threads or os.environ.get("OMP_NUM_THREADS") or "default"),
        batch_size,
        version("torch"),
        version("openvino"),
        EXPORT_RECIPE,
    )
    return models_dir / f"runtime-choice-{key[:24]}.json"


def read_choice(path: Path) -> Runtime | None:
    """The runtime a choice file names, or None when it is missing or does not read back."""
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        backend = record["choice"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return Runtime(backend, "fp32") if backend in ("torch", "openvino") else None


def faster_backend(torch_seconds: float, openvino_seconds: float, max_difference: float) -> str:
    """``openvino`` when it took less time and its vectors equal torch's within :data:`CHOICE_PARITY`
    (largest difference of normalised components), else ``torch`` (the reference runtime)."""
    same = max_difference <= CHOICE_PARITY
    return "openvino" if same and openvino_seconds < torch_seconds else "torch"


def measure_choice(
    model: Any, identity: str, models_dir: Path, batch_size: int, threads: int | None = None
) -> tuple[Runtime, dict[str, Any]]:
    """Time torch fp32 and OpenVINO fp32 on the same :data:`CHOICE_TEXTS` texts (one batch of
    warm-up each, then the best of two passes) and pick the faster, OpenVINO only when its vectors
    equal torch's within :data:`CHOICE_PARITY`; the record is kept in :func:`choice_path`
    (atomically) so it is measured once per model and machine."""
    import time

    import numpy as np

    texts = _calibration_texts(CHOICE_TEXTS)

    def timed(context: EncodeContext) -> tuple[float, np.ndarray]:
        best, vectors = float("inf"), None
        with context():
            model.encode(texts[:batch_size], batch_size=batch_size, show_progress_bar=False)
            for _ in range(2):
                start = time.perf_counter()
                vectors = model.encode(texts, batch_size=batch_size, convert_to_numpy=True, show_progress_bar=False)
                best = min(best, time.perf_counter() - start)
        v = np.asarray(vectors, dtype=np.float64)
        return best, v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)

    torch_s, torch_v = timed(contextlib.nullcontext)
    ov_s, ov_v = timed(prepare(model, Runtime("openvino", "fp32"), identity, models_dir, threads))
    diff = float(np.abs(torch_v - ov_v).max())
    backend = faster_backend(torch_s, ov_s, diff)
    record = {
        "choice": backend,
        "torch_seconds": round(torch_s, 4),
        "openvino_seconds": round(ov_s, 4),
        "openvino_speedup": round(torch_s / ov_s, 3) if ov_s > 0 else None,
        "max_abs_difference": diff,
        "texts": len(texts),
        "batch_size": batch_size,
        "cpu": cpu_signature().split("|")[0],
    }
    path = choice_path(identity, models_dir, batch_size, threads)
    atomic_write_text(path, json.dumps(record, indent=2, sort_keys=True) + "\n")
    return Runtime(backend, "fp32"), record
