"""Console entry points (Hydra applications). I/O and configuration live here, not in the core."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from .audit import SemanticSettings
from .composite import CompositeSettings
from .diagnostics.semantic import BandCuts
from .embed import EmbeddingCache, EncoderSpec
from .loaders import LOADERS, load_beir_corpus_texts, read_id_text_tsv
from .records import LoadResult, read_records
from .sources import demo_sources
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


def load_inputs(cfg: DictConfig) -> LoadResult:
    """Records for the audit: ``input=PATH`` (records JSONL) or the ``data`` config group."""
    if cfg.get("input"):
        return read_records(cfg.input, cfg.on_error)
    options: dict[str, Any] = dict(OmegaConf.to_container(cfg.data, resolve=True))  # type: ignore[arg-type]
    options.pop("name", None)
    fmt = options.pop("format")
    if "slice" in options:
        options["slice_spec"] = options.pop("slice")
    if fmt not in DATASETS:
        raise ValueError(f"unknown data format {fmt!r}; valid: {sorted(DATASETS)}")
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
    """The frozen encoder with its embedding cache, or None for a lexical-only audit."""
    if not cfg.diagnostics.semantic:
        return None
    spec = EncoderSpec.from_config(OmegaConf.to_container(cfg.backbone, resolve=True))  # type: ignore[arg-type]
    return EmbeddingCache(spec, Path(str(cfg.paths.cache_dir)))


def run_audit(cfg: DictConfig) -> Path:
    """Load, audit, write artifacts, print the profile. Returns the output folder."""
    from .audit import FlagSettings, audit
    from .report import write_audit

    started = time.perf_counter()
    loaded = load_inputs(cfg)
    tokenizer_options = {k: v for k, v in OmegaConf.to_container(cfg.tokenizer).items() if k != "name"}
    tokenizer = get_tokenizer(cfg.tokenizer.name, **tokenizer_options)
    encoder = build_encoder(cfg)
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
    if encoder is not None:
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
        encoder=encoder,
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


def audit_main() -> None:
    """``transferdx-audit``: a Hydra application (``--help`` lists the config groups)."""
    import hydra

    from .records import InputError

    @hydra.main(config_path=config_dir(), config_name="audit", version_base="1.3")
    def _main(cfg: DictConfig) -> None:
        try:
            run_audit(cfg)
        except (InputError, ValueError, FileNotFoundError) as exc:
            print(f"transferdx-audit: error: {exc}", file=sys.stderr)
            sys.exit(2)

    _main()


if __name__ == "__main__":
    audit_main()
