"""The train verb: one retriever per (records, encoder, settings, seed), stored content-addressed
(:mod:`transferdx.training` holds the trainer and the run store)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from transferdx.artifacts import safe_join
from transferdx.embed import EncoderSpec, resolve_model
from transferdx.inputs.records import LoadResult, Record
from transferdx.pipeline.encoders import encoder_spec
from transferdx.presets import default_cache_dir
from transferdx.training import TrainResult, TrainSettings, run_key, train_model


def train(
    records: LoadResult | Sequence[Record],
    *,
    encoder: str | Path | EncoderSpec = "minilm_l6",
    source: str | None = None,
    settings: TrainSettings | None = None,
    seed: int = 0,
    artifact_dir: str | Path = "outputs/artifacts",
    cache_dir: str | Path | None = None,
    progress: bool = True,
) -> TrainResult:
    """Train one retriever (MNRL) on ``records`` from ``encoder`` into the content-addressed store
    ``artifact_dir/models/<encoder>/<source>/seed<k>-<hash>``; a finished run is skipped, an
    interrupted one resumes."""
    rows = records.records if isinstance(records, LoadResult) else list(records)
    if not rows:
        raise ValueError("train needs at least one record")
    source = source or rows[0].source
    spec = encoder_spec(encoder)
    settings = settings or TrainSettings()
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    _, revision = resolve_model(spec, cache)
    key = run_key(spec, revision, rows, settings, seed)
    folder = safe_join(Path(artifact_dir), f"models/{spec.name}/{source}/seed{seed}-{key}")
    return train_model(rows, spec, settings, folder, seed=seed, cache_dir=cache, source=source, progress=progress)
