"""What a user may pass as an encoder or a tokenizer, turned into the object the verbs use: a
named preset, model folder or hub id → :class:`EncoderSpec`; any of those, a loaded
``SentenceTransformer`` or an existing cache → :class:`EmbeddingCache`; a name → a tokenizer."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from transferdx.diagnostics.tokens import Tokenizer, get_tokenizer
from transferdx.embed import EmbeddingCache, EncoderSpec, model_label
from transferdx.embed.backends import torch_fp32
from transferdx.presets import default_cache_dir, preset_names, read_preset

EncoderLike = str | Path | EncoderSpec | EmbeddingCache | Any


def encoder_spec(encoder: str | Path | EncoderSpec, **settings: Any) -> EncoderSpec:
    """A named encoder preset (``minilm_l6``, ``mpnet_base``, ``e5_base``, …), a local model folder,
    or a hub id ``org/name`` (loaded without remote code); ``settings`` replace its fields, e.g.
    ``encoder_spec("minilm_l6", backend="torch", batch_size=16)``."""
    if settings:
        unknown = sorted(set(settings) - set(EncoderSpec.__dataclass_fields__))
        if unknown:
            raise ValueError(f"unknown encoder settings {unknown}; valid: {sorted(EncoderSpec.__dataclass_fields__)}")
        return dataclasses.replace(encoder_spec(encoder), **settings)
    if isinstance(encoder, EncoderSpec):
        return encoder
    text = str(encoder)
    if text in preset_names("backbone"):
        return EncoderSpec.from_config(read_preset("backbone", text))
    if Path(text).is_dir():
        return EncoderSpec(name=model_label(text, "path"), model=text, source="path")
    if "/" in text and not Path(text).is_absolute():
        return EncoderSpec(name=model_label(text, "hub"), model=text, source="hub")
    raise ValueError(
        f"unknown encoder {text!r}: not a preset ({preset_names('backbone')}), a model folder, or a hub id 'org/name'"
    )


def make_encoder(
    encoder: EncoderLike | None, cache_dir: str | Path | None = None, *, reference: bool = False
) -> EmbeddingCache | None:
    """The frozen encoder with its embedding cache: from a preset name, folder, hub id, spec, a
    loaded ``SentenceTransformer``, or an existing cache (returned as is); ``None`` stays None.
    ``reference``: a runtime left ``auto`` becomes torch fp32 (evaluation measures the model itself)."""
    if encoder is None or isinstance(encoder, EmbeddingCache):
        return encoder
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    if hasattr(encoder, "encode") and hasattr(encoder, "state_dict"):
        return EmbeddingCache.from_model(encoder, cache, auto_runtime=not reference)
    spec = encoder_spec(encoder)
    return EmbeddingCache(torch_fp32(spec) if reference else spec, cache)


def make_tokenizer(tokenizer: str | Tokenizer, **options: Any) -> Tokenizer:
    """A registered tokenizer by name (with its options), or the callable itself."""
    return tokenizer if callable(tokenizer) else get_tokenizer(tokenizer, **options)
