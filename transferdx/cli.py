"""Console entry points (Hydra applications). I/O and configuration live here, not in the core."""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
from omegaconf import DictConfig, OmegaConf

from .artifacts import atomic_write_text, safe_join
from .audit import SemanticSettings
from .composite import CompositeSettings
from .controls import CONTROLS
from .diagnostics.semantic import BandCuts
from .embed import EmbeddingCache, EncoderSpec
from .loaders import (
    LOADERS,
    QuerySet,
    load_beir,
    load_beir_corpus_texts,
    load_trec_dl,
    load_trec_dl_query_set,
    read_id_text_tsv,
)
from .records import LoadResult, read_records, write_source_folder
from .report import EXCLUSION_COLUMNS
from .sources import BuildContext, build_sources, demo_query_set, demo_sources
from .text import get_tokenizer


def config_dir() -> str:
    """The ``conf/`` folder: next to the package in a source checkout, or packaged inside it."""
    here = Path(__file__).resolve().parent
    for candidate in (here.parent / "conf", here / "conf"):
        if (candidate / "audit.yaml").is_file():
            return str(candidate)
    raise FileNotFoundError(f"transferdx configuration folder not found next to {here}")


def _demo(on_error: str = "raise", k: int = 8, seed: int = 0, **_: Any) -> LoadResult:
    return demo_sources(k=k, seed=seed, on_error=on_error)


# Inputs the audit can read: the demo plus every loader format.
DATASETS: dict[str, Callable[..., LoadResult]] = {"demo": _demo, **LOADERS}

# External IDF corpora: a format name → a reader returning the collection's passage texts.
EXTERNAL_CORPORA: dict[str, Callable[[str], list[str]]] = {
    "beir": lambda path: load_beir_corpus_texts(path),
    "tsv": lambda path: list(read_id_text_tsv(path).values()),
    "records": lambda path: sorted({p.text for r in read_records(path).records for p in (*r.positives, *r.negatives)}),
}


# Query sets (queries, positives, pool) that sources are built from.
QUERY_SETS: dict[str, Callable[..., QuerySet]] = {
    "beir": lambda root, split="train", **_: load_beir(root, split=split),
    "trec_dl_pool": lambda root, relevant_grade=2, **_: load_trec_dl_query_set(root, relevant_grade=relevant_grade),
    "demo_pool": lambda **_: demo_query_set(),
}


def _data_options(cfg: DictConfig) -> tuple[str, dict[str, Any]]:
    options: dict[str, Any] = dict(OmegaConf.to_container(cfg.data, resolve=True))  # type: ignore[arg-type]
    options.pop("name", None)
    fmt = options.pop("format")
    if "slice" in options:
        options["slice_spec"] = options.pop("slice")
    return fmt, options


def build_inputs(cfg: DictConfig, encoder: EmbeddingCache | None) -> LoadResult:
    """Build ``sources`` and ``controls`` from the query set named by ``data``."""
    fmt, options = _data_options(cfg)
    query_set = QUERY_SETS[fmt](**options)
    controls = list(CONTROLS) if cfg.controls == "all" else list(cfg.controls or [])
    external: dict[str, LoadResult] = {}
    if options.get("include_runs"):
        runs = load_trec_dl(options["root"], on_error=cfg.on_error, k=int(cfg.k), slice_spec=cfg.get("slice"))
        for name in runs.sources:
            part = LoadResult(
                [r for r in runs.records if r.source == name],
                [e for e in runs.exclusions if e.source == name],
                {name: runs.descriptors.get(name, {})},
                {name: runs.false_negatives.get(name, [])},
            )
            external[name] = part
    names = [*cfg.sources, *external]
    ctx = BuildContext(
        query_set, k=int(cfg.k), slice_spec=cfg.get("slice"), seed=int(cfg.seed), encoder=encoder, bm25=dict(cfg.bm25)
    )
    return build_sources(ctx, names, controls, cfg.get("control_parent"), external)


def needs_encoder(cfg: DictConfig) -> bool:
    """Whether a run needs the frozen encoder: semantic diagnostics, or dense/neighbour building."""
    fmt, _ = _data_options(cfg)
    if cfg.diagnostics.semantic:
        return True
    if fmt not in QUERY_SETS or cfg.get("input"):
        return False
    controls = list(CONTROLS) if cfg.controls == "all" else list(cfg.controls or [])
    return "neighbor_positive" in controls or any("dense" in s.split("+") for s in cfg.sources)


def load_inputs(cfg: DictConfig, encoder: EmbeddingCache | None = None) -> LoadResult:
    """Records for the audit: ``input=PATH`` (records JSONL), sources built from a query set, or
    the ``data`` config group's loader."""
    if cfg.get("input"):
        return read_records(cfg.input, cfg.on_error)
    fmt, options = _data_options(cfg)
    if fmt in QUERY_SETS:
        return build_inputs(cfg, encoder)
    if fmt not in DATASETS:
        raise ValueError(f"unknown data format {fmt!r}; valid: {sorted(DATASETS) + sorted(QUERY_SETS)}")
    return DATASETS[fmt](on_error=cfg.on_error, seed=int(cfg.seed), **options)


def external_texts(cfg: DictConfig) -> list[str] | None:
    if cfg.idf.name != "external":
        return None
    fmt = cfg.idf.get("format", "beir")
    if fmt not in EXTERNAL_CORPORA:
        raise ValueError(f"unknown external IDF corpus format {fmt!r}; valid: {sorted(EXTERNAL_CORPORA)}")
    return EXTERNAL_CORPORA[fmt](str(cfg.idf.path))


def semantic_settings(cfg: DictConfig) -> SemanticSettings:
    d = cfg.diagnostics
    return SemanticSettings(
        tau=float(d.tau),
        cuts=BandCuts(hard=float(d.bands.hard), medium=float(d.bands.medium)),
        background_size=int(d.background_size),
        in_batch=bool(d.in_batch),
        batch_size=int(d.batch_size),
        composite=CompositeSettings(**{k: float(v) for k, v in d.composite.items()}),
    )


def build_encoder(cfg: DictConfig) -> EmbeddingCache | None:
    """The frozen encoder with its embedding cache, or None when the run needs none."""
    if not needs_encoder(cfg):
        return None
    spec = EncoderSpec.from_config(OmegaConf.to_container(cfg.backbone, resolve=True))  # type: ignore[arg-type]
    return EmbeddingCache(spec, Path(str(cfg.paths.cache_dir)))


def run_audit(cfg: DictConfig) -> Path:
    """Load, audit, write artifacts, print the profile. Returns the output folder."""
    from .audit import FlagSettings, audit
    from .report import write_audit

    started = time.perf_counter()
    encoder = build_encoder(cfg)
    loaded = load_inputs(cfg, encoder)
    tokenizer_options = {k: v for k, v in OmegaConf.to_container(cfg.tokenizer).items() if k != "name"}
    tokenizer = get_tokenizer(cfg.tokenizer.name, **tokenizer_options)
    semantic = semantic_settings(cfg)
    settings: dict[str, Any] = {
        "data": cfg.input if cfg.get("input") else cfg.data.name,
        "tokenizer": cfg.tokenizer.name,
        "idf_corpus": cfg.idf.name,
        "on_error": cfg.on_error,
        "seed": int(cfg.seed),
        "bootstrap_resamples": int(cfg.bootstrap.resamples),
        "bootstrap_confidence": float(cfg.bootstrap.confidence),
        "flags": cfg.flags.mode,
    }
    if cfg.idf.name == "external":
        settings["idf_external"] = f"{cfg.idf.format}:{Path(str(cfg.idf.path)).name}"
    if cfg.diagnostics.semantic:
        settings.update(
            backbone=cfg.backbone.name,
            tau=semantic.tau,
            in_batch=semantic.in_batch,
            background_size=semantic.background_size,
            composite_eps=semantic.composite.eps,
        )
    result = audit(
        loaded,
        tokenizer,
        encoder=encoder if cfg.diagnostics.semantic else None,
        semantic=semantic,
        idf_corpus=cfg.idf.name,
        external_texts=external_texts(cfg),
        seed=int(cfg.seed),
        resamples=int(cfg.bootstrap.resamples),
        confidence=float(cfg.bootstrap.confidence),
        flags=FlagSettings(cfg.flags.mode, dict(cfg.flags.fixed)),
        kinds=dict(cfg.kinds),
        settings=settings,
    )
    out = Path(cfg.output_dir)
    write_audit(result, out, settings)
    print(result.summary())
    catch = result.profile.catch_rate
    if catch.get("n_controls"):
        print(
            f"controls flagged: {catch['n_controls_flagged']}/{catch['n_controls']}; "
            f"genuine flagged: {catch['genuine_flagged'] or 'none'}"
        )
    flagged = [r for r in result.profile.rows if r.get("flags")]
    for row in flagged:
        print(f"flag {row['source']}: {row['flag_reasons']}")
    print(
        f"\n{len(result.records)} records from {len(result.profile.rows)} sources; "
        f"{len(result.exclusions)} exclusions (see exclusions.csv); {len(flagged)} flagged; "
        f"{time.perf_counter() - started:.1f}s"
    )
    print(f"artifacts: {out.resolve()}")
    return out


def run_build(cfg: DictConfig) -> Path:
    """Build sources and controls from a query set and write them as records JSONL + sidecars."""
    started = time.perf_counter()
    fmt, _ = _data_options(cfg)
    if fmt not in QUERY_SETS:
        raise ValueError(f"transferdx-build needs a query-set data config ({sorted(QUERY_SETS)}), got {fmt!r}")
    loaded = build_inputs(cfg, build_encoder(cfg))
    out = Path(cfg.output_dir)
    written = write_source_folder(loaded, out)
    exclusions = pd.DataFrame([dataclasses.asdict(e) for e in loaded.exclusions], columns=EXCLUSION_COLUMNS)
    atomic_write_text(safe_join(out, "exclusions.csv"), exclusions.to_csv(index=False, lineterminator="\n"))
    for path in written:
        n = sum(1 for r in loaded.records if f"{r.source}.jsonl" == path.name)
        print(f"{path.name}: {n} records")
    print(f"{len(loaded.exclusions)} exclusions (exclusions.csv); {time.perf_counter() - started:.1f}s")
    print(f"sources: {out.resolve()}  (audit them with: transferdx-audit input={out.resolve()})")
    return out


def _hydra_entry(config_name: str, run: Callable[[DictConfig], Path]) -> None:
    import hydra

    from .records import InputError

    @hydra.main(config_path=config_dir(), config_name=config_name, version_base="1.3")
    def _main(cfg: DictConfig) -> None:
        try:
            run(cfg)
        except (InputError, ValueError, FileNotFoundError) as exc:
            print(f"transferdx: error: {exc}", file=sys.stderr)
            sys.exit(2)

    _main()


def build_main() -> None:
    """``transferdx-build``: build sources and controls, write them as records JSONL."""
    _hydra_entry("build", run_build)


def audit_main() -> None:
    """``transferdx-audit``: a Hydra application (``--help`` lists the config groups)."""
    _hydra_entry("audit", run_audit)


if __name__ == "__main__":
    audit_main()
