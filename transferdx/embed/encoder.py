"""The encoder runtime: one model, its runtime, and the vectors it gives for a list of texts.

:class:`Encoder` owns an :class:`EncoderSpec`: where its model lies and under which revision
(:func:`resolve_model`), which runtime encodes (:mod:`transferdx.embed.backends`: torch or an
OpenVINO export, prepared when the model is first loaded), and, when the spec asks for several
processes, the multi-process pool (:mod:`transferdx.embed.pool`). It knows nothing of storage: the
embedding cache decides which texts to encode, in which units, and keeps the vectors.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import transferdx.embed.backends as backends
from transferdx.embed.models import EncoderSpec, load_sentence_transformer, resolve_model
from transferdx.embed.pool import EncodePool, encode_devices

log = logging.getLogger(__name__)


class Encoder:
    """The spec's model on its runtime, loaded on first use; ``model_factory(location, spec)``
    replaces :func:`load_sentence_transformer` (its runtime then stays torch fp32)."""

    def __init__(
        self,
        spec: EncoderSpec,
        cache_dir: str | Path,
        model_factory: Callable[[str, EncoderSpec], Any] | None = None,
    ):
        self.spec = spec
        self.cache_dir = Path(cache_dir)
        self._model_factory = model_factory or load_sentence_transformer
        self._model: Any = None
        self._context: backends.EncodeContext | None = None
        self._pool: EncodePool | None = None
        self.location, self.revision = resolve_model(spec, self.cache_dir)
        known = model_factory is None and backends.folder_is_transformer(self.location)
        self.runtime = self._resolve_runtime(spec, known)
        self.choice: dict[str, Any] | None = None  # the measurement behind backend=auto, when one was made
        if known:
            self._choose_faster()

    @classmethod
    def from_model(
        cls, model: Any, cache_dir: str | Path, name: str | None = None, auto_runtime: bool = True
    ) -> Encoder:
        """Wrap an already-loaded ``SentenceTransformer``. Its revision is the sha256 of its weights
        (every state-dict tensor, in key order), so a fine-tuned copy never passes for the original.
        ``auto_runtime``: a transformer model may run on the faster CPU runtime
        (:func:`backends.resolve_runtime`); False keeps torch fp32."""
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
            device=str(getattr(model, "device", "cpu")),
        )
        encoder = cls(spec, cache_dir, model_factory=lambda _location, _spec: model)
        encoder._model = model
        if auto_runtime and backends.is_transformer(model):  # ``auto`` may pick a faster runtime for a transformer
            encoder.runtime = cls._resolve_runtime(spec, True)
            encoder._choose_faster()
        return encoder

    def _choose_faster(self) -> None:
        """``backend=auto`` resolved to OpenVINO fp32 on a CPU: keep the runtime measured faster on this
        machine for this model (:func:`backends.measure_choice`, once, kept beside the exports; a later
        run reads the choice without loading the model)."""
        auto = self.spec.backend == "auto" and self.spec.precision in ("auto", "fp32")
        if not (auto and self.runtime == backends.Runtime("openvino", "fp32")):
            return
        identity = f"{self.spec.model}@{self.revision}"
        path = backends.choice_path(identity, self.models_dir, self.spec.batch_size)
        chosen = backends.read_choice(path)
        if chosen is None:
            if self._model is None:
                self._model = self._model_factory(self.location, self.spec)
            chosen, self.choice = backends.measure_choice(self._model, identity, self.models_dir, self.spec.batch_size)
            log.info(
                "backbone.backend=auto: %s on this CPU (OpenVINO %.2f× torch's speed, measured once, kept in %s)",
                chosen.backend,
                self.choice["openvino_speedup"] or 0.0,
                path,
            )
        self.runtime = chosen

    @staticmethod
    def _resolve_runtime(spec: EncoderSpec, known_model: bool) -> backends.Runtime:
        """The spec's runtime. ``auto`` stays torch fp32 for a model that is not a transformer (a
        static one) and for a model made by a caller's factory (nothing is known of it); otherwise
        :func:`backends.runtime_of`."""
        if not known_model or spec.source == "static":
            spec = backends.torch_fp32(spec)
        return backends.runtime_of(spec)

    @property
    def models_dir(self) -> Path:
        """Where exported models are cached: ``$TRANSFERDX_MODEL_DIR``, else ``<cache_dir>/models``."""
        return Path(os.environ.get("TRANSFERDX_MODEL_DIR") or self.cache_dir / "models")

    def scorer(self) -> dict[str, Any]:
        """What identifies the embedding space: model id, revision, prompts, metric, runtime."""
        return {
            "encoder": self.spec.name,
            "model": self.spec.model,
            "revision": self.revision,
            "query_prompt": self.spec.query_prompt,
            "passage_prompt": self.spec.passage_prompt,
            "max_seq_length": self.spec.max_seq_length,
            "metric": "cosine",
            "backend": self.runtime.backend,
            "precision": self.runtime.precision,
        }

    def prompt(self, role: str) -> str:
        """The prompt put before a text of ``role`` (``query`` or ``passage``); "" for none."""
        return self.spec.prompt(role)

    @property
    def model(self) -> Any:
        """The loaded model, with the runtime applied (an OpenVINO export is made or re-used here)."""
        if self._model is None:
            self._model = self._model_factory(self.location, self.spec)
        if self._context is None:
            identity = f"{self.spec.model}@{self.revision}"
            self._context = backends.prepare(self._model, self.runtime, identity, self.models_dir)
        return self._model

    def encode(self, texts: list[str], prompt: str) -> np.ndarray:
        """The model's float32 vectors of ``texts`` (n × d, not normalised: see :func:`normalise`),
        in this process, under the runtime's context, in batches of ``spec.batch_size``."""
        model = self.model
        assert self._context is not None
        with self._context():
            vectors = model.encode(
                texts,
                prompt=prompt or None,
                batch_size=self.spec.batch_size,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
        return np.asarray(vectors, dtype=np.float32)

    def pool(self) -> EncodePool | None:
        """The started multi-process pool when the spec asks for several processes (kept until
        :meth:`close`), else None."""
        devices = encode_devices(self.spec)
        if len(devices) < 2:
            return None
        if self._pool is None:
            self._pool = EncodePool(self.model, devices)
        return self._pool

    def close(self) -> None:
        """Stop the encoding processes, if any were started (a later encode starts them again)."""
        if self._pool is not None:
            self._pool.close()
            self._pool = None


# rows normalised at a time: ``np.linalg.norm`` squares its whole input first, so one call on every
# vector would hold a second n × d array (1.5 GB for 10⁶ passages at d = 384)
NORMALISE_ROWS = 65_536


def normalise(vectors: np.ndarray) -> np.ndarray:
    """e = f / ‖f‖ row-wise, in place (a zero vector stays zero), :data:`NORMALISE_ROWS` rows at a
    time: no second n × d copy. Each row's norm is its own reduction, so the blocks give the bytes
    of one call."""
    for start in range(0, len(vectors), NORMALISE_ROWS):
        block = vectors[start : start + NORMALISE_ROWS]
        norms = np.linalg.norm(block, axis=1, keepdims=True)
        np.divide(block, norms, out=block, where=norms > 0)
        block[~(norms[:, 0] > 0)] = 0.0  # zero (or non-finite) rows become zero
    return vectors
