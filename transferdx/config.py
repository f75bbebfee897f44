"""Hydra config → the library's typed settings and inputs. The only module that reads a
``DictConfig``; everything it returns is plain Python that :mod:`transferdx.pipeline` takes."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from transferdx.auditing.core import FlagSettings, SemanticSettings
from transferdx.diagnostics.composite import CompositeSettings
from transferdx.diagnostics.semantic import BandCuts
from transferdx.diagnostics.suspicion import TEXT_REASONS, SuspicionSettings
from transferdx.embed import EmbeddingCache, EncoderSpec, with_inferred_source
from transferdx.inputs.records import LoadResult
from transferdx.inputs.registry import DATASETS, EXTERNAL_CORPORA, QUERY_SETS
from transferdx.pipeline import (
    AnalysisSettings,
    AuditOptions,
    BenchmarkSettings,
    build_sources,
    load,
    load_query_set,
    records_as_source,
    trec_dl_runs,
)
from transferdx.presets import config_dir
from transferdx.sources.controls import CONTROLS
from transferdx.training import TrainSettings

__all__ = ["config_dir"]


def plain(node: Any) -> Any:
    """A config node as plain dicts and lists, interpolations resolved."""
    return OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else node


def data_options(cfg: DictConfig) -> tuple[str, dict[str, Any]]:
    """(format, options) of the ``data`` group, ``slice`` renamed to the readers' ``slice_spec``."""
    options: dict[str, Any] = dict(plain(cfg.data))
    options.pop("name", None)
    fmt = options.pop("format")
    if "slice" in options:
        options["slice_spec"] = options.pop("slice")
    return fmt, options


def controls(cfg: DictConfig) -> list[str]:
    """``controls``: ``all``, ``none`` or a list of names."""
    if cfg.controls in ("all", "none", None):
        return list(CONTROLS) if cfg.controls == "all" else []
    return [str(c) for c in cfg.controls]


def self_controls(cfg: DictConfig) -> str | list[str]:
    """Controls the audit builds from an ``input=`` file itself: ``auto`` by default (``controls: all``),
    ``none`` with ``controls=none`` or ``[]``, else the listed ones; never for other ``data``."""
    if not cfg.get("input"):
        return "none"
    if cfg.get("controls", "all") == "all":
        return "auto"
    return controls(cfg) or "none"


def encoder_spec(cfg: DictConfig) -> EncoderSpec:
    """The ``backbone`` group as a spec; ``backbone.model=<folder or org/name>`` alone infers the source."""
    return with_inferred_source(EncoderSpec.from_config(plain(cfg.backbone)))


def needs_encoder(cfg: DictConfig) -> bool:
    """Whether a run needs the frozen encoder: semantic diagnostics, or dense/neighbour building."""
    fmt, _ = data_options(cfg)
    if cfg.diagnostics.semantic:
        return True
    if fmt not in QUERY_SETS or cfg.get("input"):
        return False
    return "neighbor_positive" in controls(cfg) or any("dense" in s.split("+") for s in cfg.sources)


def build_encoder(cfg: DictConfig) -> EmbeddingCache | None:
    """The frozen encoder with its embedding cache, or None when the run needs none."""
    return EmbeddingCache(encoder_spec(cfg), Path(str(cfg.paths.cache_dir))) if needs_encoder(cfg) else None


def build_inputs(cfg: DictConfig, encoder: EmbeddingCache | None) -> LoadResult:
    """Sources and controls built from the query set named by ``data`` (plus the TREC-DL runs with
    ``data.include_runs`` and files named in ``external_sources``)."""
    fmt, options = data_options(cfg)
    query_set = load_query_set(options.pop("root", "demo"), format=fmt, **options)
    external: dict[str, LoadResult] = {}
    if options.get("include_runs"):
        external.update(
            trec_dl_runs(plain(cfg.data)["root"], k=int(cfg.k), slice=plain(cfg.get("slice")), on_error=cfg.on_error)
        )
    for name, path in (cfg.get("external_sources") or {}).items():
        external[name] = records_as_source(str(path), name, cfg.on_error)
    return build_sources(
        query_set,
        list(cfg.sources),
        controls(cfg),
        encoder=encoder,
        k=int(cfg.k),
        slice=plain(cfg.get("slice")),
        seed=int(cfg.seed),
        bm25=dict(cfg.bm25),
        control_parent=cfg.get("control_parent"),
        external=external,
    )


def load_inputs(cfg: DictConfig, encoder: EmbeddingCache | None = None) -> LoadResult:
    """Records for a run: ``input=PATH`` (records JSONL), sources built from a query set, or the
    ``data`` config group's reader."""
    if cfg.get("input"):
        return load(cfg.input, on_error=cfg.on_error)
    fmt, options = data_options(cfg)
    if fmt in QUERY_SETS:
        return build_inputs(cfg, encoder)
    if fmt not in DATASETS:
        raise ValueError(f"unknown data format {fmt!r}; valid: {sorted(DATASETS) + sorted(QUERY_SETS)}")
    return DATASETS[fmt](on_error=cfg.on_error, seed=int(cfg.seed), **options)


def source_records(cfg: DictConfig, encoder: EmbeddingCache | None, source: str) -> LoadResult:
    """The records of one source: from ``input`` (a records file/folder) or built from ``data``."""
    if cfg.get("input"):
        loaded = load(cfg.input, on_error=cfg.on_error)
    else:
        loaded = build_inputs(OmegaConf.merge(cfg, {"sources": [source], "controls": []}), encoder)  # type: ignore[arg-type]
    records = [r for r in loaded.records if r.source == source]
    if not records:
        raise ValueError(f"source {source!r} has no records (available: {loaded.sources})")
    return LoadResult(records, [e for e in loaded.exclusions if e.source == source])


def semantic_settings(cfg: DictConfig) -> SemanticSettings:
    d = cfg.diagnostics
    return SemanticSettings(
        tau=float(d.tau),
        cuts=BandCuts(hard=float(d.bands.hard), medium=float(d.bands.medium)),
        background_size=int(d.background_size),
        in_batch=bool(d.in_batch),
        batch_size=int(d.batch_size),
        composite=CompositeSettings(**{str(k): float(v) for k, v in d.composite.items()}),  # type: ignore[arg-type]
        suspicion=SuspicionSettings(**{str(k): float(v) for k, v in (d.get("suspicion") or {}).items()}),
    )


def audit_options(cfg: DictConfig) -> AuditOptions:
    """Tokenizer, IDF corpus, frozen-encoder settings, flags, bootstrap, kinds, sample fraction."""
    idf_texts, idf_label = None, None
    if cfg.idf.name == "external":
        fmt = cfg.idf.get("format", "beir")
        if fmt not in EXTERNAL_CORPORA:
            raise ValueError(f"unknown external IDF corpus format {fmt!r}; valid: {sorted(EXTERNAL_CORPORA)}")
        idf_texts = EXTERNAL_CORPORA[fmt](str(cfg.idf.path))
        idf_label = f"{fmt}:{Path(str(cfg.idf.path)).name}"
    return AuditOptions(
        tokenizer=str(cfg.tokenizer.name),
        tokenizer_options={k: v for k, v in plain(cfg.tokenizer).items() if k != "name"},
        idf=str(cfg.idf.name),
        idf_texts=idf_texts,
        idf_label=idf_label,
        semantic=semantic_settings(cfg) if cfg.diagnostics.semantic else None,
        flags=FlagSettings(cfg.flags.mode, dict(cfg.flags.fixed)),
        resamples=int(cfg.bootstrap.resamples),
        confidence=float(cfg.bootstrap.confidence),
        kinds=dict(cfg.get("kinds") or {}),
        sample_fraction=float(cfg.get("sample_fraction", 1.0)),
        seed=int(cfg.seed),
        on_error=str(cfg.on_error),
        label=str(cfg.input) if cfg.get("input") else str(cfg.data.name),
    )


def clean_call(cfg: DictConfig) -> dict[str, Any]:
    """Arguments of :func:`transferdx.clean` for ``transferdx-clean``: ``input`` (a path, so the
    copy keeps its format) or the records ``data`` loads; ``clean.action``, ``clean.reasons``; no
    encoder when every reason asked for is a text reason."""
    reasons = [str(r) for r in cfg.clean.reasons] if cfg.clean.get("reasons") is not None else None
    options = audit_options(cfg)
    if reasons is not None and set(reasons) <= set(TEXT_REASONS):
        options = dataclasses.replace(options, semantic=None)
    encoder = encoder_spec(cfg) if options.semantic is not None else None
    data = str(cfg.input) if cfg.get("input") else load_inputs(cfg, build_encoder(cfg))
    return {
        "records": data,
        "reasons": reasons,
        "action": str(cfg.clean.action),
        "out": Path(cfg.output_dir),
        "options": options,
        "encoder": encoder,
        "cache_dir": str(cfg.paths.cache_dir),
    }


def train_settings(cfg: DictConfig) -> TrainSettings:
    return TrainSettings.from_config(plain(cfg.training))


def benchmark_settings(cfg: DictConfig) -> BenchmarkSettings:
    return BenchmarkSettings.from_dict(plain(cfg.benchmark))


def analysis_settings(cfg: DictConfig) -> AnalysisSettings:
    return AnalysisSettings.from_dict(plain(cfg))


def train_call(cfg: DictConfig) -> dict[str, Any]:
    """Keyword arguments of :func:`transferdx.train` for ``transferdx-train`` and the study."""
    return {
        "encoder": encoder_spec(cfg),
        "source": str(cfg.source),
        "settings": train_settings(cfg),
        "seed": int(cfg.seed),
        "artifact_dir": str(cfg.paths.artifact_dir),
        "cache_dir": str(cfg.paths.cache_dir),
    }


def study_call(cfg: DictConfig) -> dict[str, Any]:
    """Keyword arguments of :func:`transferdx.study`. ``sensitivity_dirs`` is read at the top level,
    as in ``transferdx-tables`` (``analysis.sensitivity_dirs`` is still accepted)."""
    return {
        "sources": list(cfg.sources),
        "out": Path(cfg.output_dir),
        "encoder": encoder_spec(cfg),
        "options": audit_options(cfg),
        "training": train_settings(cfg),
        "benchmark": benchmark_settings(cfg),
        "analysis": analysis_settings(cfg.analysis),
        "sensitivity_dirs": list(cfg.get("sensitivity_dirs") or cfg.analysis.get("sensitivity_dirs") or []),
        "evaluate_frozen": bool(cfg.get("evaluate_frozen")),
        "tables": bool(cfg.get("tables_after")),
        "artifact_dir": str(cfg.paths.artifact_dir),
        "cache_dir": str(cfg.paths.cache_dir),
    }
