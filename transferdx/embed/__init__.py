"""Frozen encoders: model specs and loading, the on-disk embedding cache, exact top-k search.

Six modules, one job each (none imports this package's ``__init__``):

- :mod:`transferdx.embed.models` — :class:`EncoderSpec`, the registry of model sources
  (:data:`MODEL_SOURCES`), :func:`resolve_model` and :func:`load_sentence_transformer`.
- :mod:`transferdx.embed.encoder` — :class:`Encoder`: one spec's model on its runtime, loaded on
  first use, with its prompts, its identity (:meth:`Encoder.scorer`), the optional multi-process
  pool, and the float32 vectors of a list of texts (:func:`normalise` makes them unit length).
- :mod:`transferdx.embed.cache` — :class:`EmbeddingCache`: storage only; each text embedded once per
  (model id, revision, prompt) by the :class:`Encoder` it holds, in content-addressed, verified
  chunk files, with claims between runs sharing a cache and healing of damaged chunks
  (:class:`CacheWarning`).
- :mod:`transferdx.embed.backends` — the encoder's runtime (:class:`Runtime`: torch fp32/bf16/fp16,
  OpenVINO fp32/bf16/int8), :func:`resolve_runtime` (``auto``: on a CPU, the faster of torch and
  OpenVINO fp32 as measured once on this machine) and the cached OpenVINO export.
- :mod:`transferdx.embed.pool` — :class:`~transferdx.embed.pool.EncodePool`: several encoding
  processes (``backbone.devices`` / ``backbone.processes``) through sentence-transformers' own
  multi-process pool, each unit one model batch, so the vectors are the same bytes as one process's.
- :mod:`transferdx.embed.topk` — :func:`topk_chunked`, blocked exact top-k by inner product.
"""

from transferdx.embed.backends import BackendUnavailable, Runtime, resolve_runtime
from transferdx.embed.cache import CHUNK_NAME, CacheWarning, EmbeddingCache, chunk_digest, text_key
from transferdx.embed.encoder import Encoder
from transferdx.embed.models import (
    MODEL_SOURCES,
    ROLES,
    EncoderSpec,
    assemble_parts,
    infer_source,
    load_sentence_transformer,
    model_label,
    resolve_model,
    with_inferred_source,
)
from transferdx.embed.topk import topk_chunked

__all__ = [
    "CHUNK_NAME",
    "MODEL_SOURCES",
    "ROLES",
    "BackendUnavailable",
    "CacheWarning",
    "EmbeddingCache",
    "Encoder",
    "EncoderSpec",
    "Runtime",
    "assemble_parts",
    "chunk_digest",
    "infer_source",
    "load_sentence_transformer",
    "model_label",
    "resolve_model",
    "resolve_runtime",
    "text_key",
    "topk_chunked",
    "with_inferred_source",
]
