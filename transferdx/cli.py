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

from transferdx.artifacts import atomic_write_text, canonical_json, safe_join
from transferdx.auditing.core import SemanticSettings
from transferdx.auditing.report import EXCLUSION_COLUMNS
from transferdx.diagnostics.composite import CompositeSettings
from transferdx.diagnostics.semantic import BandCuts
from transferdx.diagnostics.tokens import get_tokenizer
from transferdx.embed import EmbeddingCache, EncoderSpec
from transferdx.inputs.formats import (
    load_trec_dl,
)
from transferdx.inputs.records import LoadResult, read_records, sample_queries, write_source_folder
from transferdx.inputs.registry import DATASETS, EXTERNAL_CORPORA, QUERY_SETS
from transferdx.sources.build import build_sources
from transferdx.sources.context import BuildContext
from transferdx.sources.controls import CONTROLS


def config_dir() -> str:
    """The ``conf/`` folder: next to the package in a source checkout, or packaged inside it."""
    here = Path(__file__).resolve().parent
    for candidate in (here.parent / "conf", here / "conf"):
        if (candidate / "audit.yaml").is_file():
            return str(candidate)
    raise FileNotFoundError(f"transferdx configuration folder not found next to {here}")









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
    for name, path in (cfg.get("external_sources") or {}).items():
        part = read_records(str(path), cfg.on_error)
        described = {k: v for d in part.descriptors.values() for k, v in d.items()}
        external[name] = LoadResult(
            [dataclasses.replace(r, source=name) for r in part.records],
            [dataclasses.replace(e, source=name) for e in part.exclusions],
            {name: described},
        )
    names = [*cfg.sources, *(e for e in external if e not in cfg.sources)]
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


def make_tokenizer(cfg: DictConfig) -> Any:
    options = {k: v for k, v in OmegaConf.to_container(cfg.tokenizer).items() if k != "name"}  # type: ignore[union-attr]
    return get_tokenizer(cfg.tokenizer.name, **options)


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
    from transferdx.auditing.core import FlagSettings, audit
    from transferdx.auditing.report import write_audit

    started = time.perf_counter()
    encoder = build_encoder(cfg)
    loaded = load_inputs(cfg, encoder)
    fraction = float(cfg.get("sample_fraction", 1.0))
    loaded, sampled_out = sample_queries(loaded, fraction, int(cfg.seed))
    tokenizer = make_tokenizer(cfg)
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
    if fraction < 1.0:
        settings.update(sample_fraction=fraction, records_sampled_out=sampled_out)
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


def source_records(cfg: DictConfig, encoder: EmbeddingCache | None, source: str) -> LoadResult:
    """The records of one source: from ``input`` (a records file/folder) or built from ``data``."""
    if cfg.get("input"):
        loaded = read_records(cfg.input, cfg.on_error)
    else:
        one = OmegaConf.merge(cfg, {"sources": [source], "controls": []})
        loaded = build_inputs(one, encoder)  # type: ignore[arg-type]
    records = [r for r in loaded.records if r.source == source]
    if not records:
        raise ValueError(f"source {source!r} has no records (available: {loaded.sources})")
    return LoadResult(records, [e for e in loaded.exclusions if e.source == source])


def _spec(cfg: DictConfig) -> EncoderSpec:
    return EncoderSpec.from_config(OmegaConf.to_container(cfg.backbone, resolve=True))  # type: ignore[arg-type]


def train_one(cfg: DictConfig, source: str, records: list, progress: bool = True):
    """Train (or skip when already trained) one (backbone, source, seed) into the artifact store."""
    from transferdx.embed import resolve_model
    from transferdx.training import TrainSettings, run_key, train

    spec = _spec(cfg)
    settings = TrainSettings.from_config(OmegaConf.to_container(cfg.training, resolve=True))  # type: ignore[arg-type]
    cache = Path(str(cfg.paths.cache_dir))
    _, revision = resolve_model(spec, cache)
    key = run_key(spec, revision, records, settings, int(cfg.seed))
    folder = safe_join(Path(str(cfg.paths.artifact_dir)), f"models/{spec.name}/{source}/seed{int(cfg.seed)}-{key}")
    return train(records, spec, settings, folder, seed=int(cfg.seed), cache_dir=cache, source=source, progress=progress)


def run_train(cfg: DictConfig) -> Path:
    """``transferdx-train``: one retriever for ``source`` with ``backbone``."""
    started = time.perf_counter()
    encoder = EmbeddingCache(_spec(cfg), Path(str(cfg.paths.cache_dir))) if needs_encoder(cfg) else None
    loaded = source_records(cfg, encoder, str(cfg.source))
    result = train_one(cfg, str(cfg.source), loaded.records)
    out = Path(cfg.output_dir)
    summary = {
        "backbone": cfg.backbone.name,
        "source": cfg.source,
        "seed": int(cfg.seed),
        "model_dir": str(result.model_dir.resolve()),
        "skipped_already_trained": result.skipped,
        "n_examples": result.n_examples,
        "n_left_out": result.n_left_out,
    }
    atomic_write_text(safe_join(out, "train.json"), canonical_json(summary))
    verb = "already trained" if result.skipped else "trained"
    print(
        f"{verb}: {result.model_dir}  ({result.n_examples} examples, {result.n_left_out} records with too few"
        f" negatives left out; {time.perf_counter() - started:.1f}s)"
    )
    return out


def _datasets(cfg: DictConfig):
    from transferdx.evaluation import load_beir_split

    bench = cfg.benchmark
    for entry in bench.datasets:
        path = Path(str(entry.path))
        if not path.is_dir() and bench.get("download"):
            from beir import util

            util.download_and_unzip(str(bench.download_url).format(name=entry.name), str(path.parent))
        yield load_beir_split(path, str(entry.split), bench.get("max_queries"), int(cfg.seed))


def evaluate_model(cfg: DictConfig, spec: EncoderSpec, out: Path) -> list[dict[str, Any]]:
    """Evaluate one encoder on every benchmark dataset; writes metrics.json, per_query.csv, run.trec."""
    from transferdx.evaluation import evaluate

    encoder = EmbeddingCache(spec, Path(str(cfg.paths.cache_dir)))
    rows = []
    for data in _datasets(cfg):
        result = evaluate(encoder, data, tuple(cfg.benchmark.k_values))
        folder = safe_join(out, data.name)
        metrics = result.to_dict()
        atomic_write_text(folder / "metrics.json", canonical_json(metrics))
        atomic_write_text(folder / "per_query.csv", result.per_query.to_csv(index=False, lineterminator="\n"))
        atomic_write_text(folder / "run.trec", result.trec_run(spec.name))
        rows.append(
            {
                "dataset": data.name,
                "n_queries": metrics["n_queries"],
                **{k: metrics[k] for k in ("ndcg@10", "recall@100", "map@100") if k in metrics},
            }
        )
    return rows


def run_evaluate(cfg: DictConfig) -> Path:
    """``transferdx-evaluate``: a checkpoint (``model=PATH``) or the frozen backbone on the benchmark."""
    from transferdx.training import checkpoint_spec

    started = time.perf_counter()
    spec = checkpoint_spec(str(cfg.model)) if cfg.get("model") else _spec(cfg)
    out = Path(cfg.output_dir)
    rows = evaluate_model(cfg, spec, out)
    print(pd.DataFrame(rows).to_string(index=False, float_format=lambda v: f"{v:.4f}"))
    print(f"{time.perf_counter() - started:.1f}s; metrics: {out.resolve()}/<dataset>/metrics.json")
    return out


def run_study(cfg: DictConfig) -> Path:
    """``transferdx-study``: build sources, audit them, train one retriever per source, evaluate."""
    from transferdx.auditing.core import FlagSettings, audit
    from transferdx.auditing.report import write_audit
    from transferdx.training import checkpoint_spec

    started = time.perf_counter()
    out = Path(cfg.output_dir)
    encoder = build_encoder(cfg)
    loaded = load_inputs(cfg, encoder)
    tokenizer = make_tokenizer(cfg)
    settings = {"data": cfg.data.name, "backbone": cfg.backbone.name, "sources": list(cfg.sources)}
    result = audit(
        loaded,
        tokenizer,
        encoder=encoder if cfg.diagnostics.semantic else None,
        semantic=semantic_settings(cfg),
        idf_corpus=cfg.idf.name,
        seed=int(cfg.seed),
        resamples=int(cfg.bootstrap.resamples),
        confidence=float(cfg.bootstrap.confidence),
        flags=FlagSettings(cfg.flags.mode, dict(cfg.flags.fixed)),
        settings=settings,
    )
    write_audit(result, safe_join(out, "audit"), settings)
    profile = result.profile.to_frame().set_index("source")
    rows = []
    if cfg.get("evaluate_frozen"):
        for row in evaluate_model(cfg, _spec(cfg), safe_join(out, "evaluate/frozen")):
            rows.append({"backbone": cfg.backbone.name, "source": "(frozen)", **row})
    for source in cfg.sources:
        records = [r for r in loaded.records if r.source == source]
        trained = train_one(cfg, source, records, progress=False)
        spec = checkpoint_spec(trained.model_dir, f"{cfg.backbone.name}-{source}")
        for row in evaluate_model(cfg, spec, safe_join(out, f"evaluate/{source}")):
            diag = {
                c: profile.loc[source, c]
                for c in ("psi_mean", "rho_mean", "eta_mean", "inversion_rate")
                if c in profile.columns
            }
            rows.append(
                {"backbone": cfg.backbone.name, "source": source, **diag, **row, "model_dir": str(trained.model_dir)}
            )
    table = pd.DataFrame(rows)
    atomic_write_text(safe_join(out, "study.csv"), table.to_csv(index=False, lineterminator="\n"))
    print(table.drop(columns=["model_dir"], errors="ignore").to_string(index=False, float_format=lambda v: f"{v:.4f}"))
    if cfg.get("tables_after"):
        options = OmegaConf.merge(cfg.analysis, {"study_dirs": [str(out)]})
        rendered = write_tables(options, safe_join(out, "tables"))  # type: ignore[arg-type]
        for name in ("table4", "uncertainty", "matching"):
            table = rendered.get(name)
            print(table if isinstance(table, str) else table.to_markdown())
    print(f"{time.perf_counter() - started:.1f}s; study table: {out.resolve()}/study.csv")
    return out


def _csv_text(frame: pd.DataFrame, index: bool = False) -> str:
    return frame.to_csv(index=index, lineterminator="\n")


def write_agreement(out: dict[str, Any], folder: Path) -> None:
    atomic_write_text(safe_join(folder, "agreement.csv"), _csv_text(out["agreement"]))
    atomic_write_text(safe_join(folder, "blocks_recovered.csv"), _csv_text(out["blocks_recovered"], index=True))
    atomic_write_text(safe_join(folder, "paired_tests.csv"), _csv_text(out["paired_tests"]))
    atomic_write_text(safe_join(folder, "transfer_uncertainty.json"), canonical_json(out["uncertainty"]))


def write_matching(out: dict[str, pd.DataFrame], folder: Path) -> None:
    atomic_write_text(safe_join(folder, "matched.csv"), _csv_text(out["matched"]))
    atomic_write_text(safe_join(folder, "balance.csv"), _csv_text(out["balance"]))


def _agree(cfg: DictConfig, studies: list[dict[str, Any]]) -> dict[str, Any]:
    from transferdx.analysis.studies import agree

    blocks = OmegaConf.to_container(cfg.blocks)
    return agree(studies, blocks, dict(cfg.diagnostics), int(cfg.resamples), int(cfg.seed), float(cfg.alpha))  # type: ignore[arg-type]


def _match(cfg: DictConfig, studies: list[dict[str, Any]]) -> dict[str, pd.DataFrame]:
    from transferdx.analysis.studies import match_studies

    blocks = OmegaConf.to_container(cfg.blocks)
    statistics = dict(cfg.statistics)
    return match_studies(studies, blocks, statistics, list(cfg.resolutions), int(cfg.repetitions), int(cfg.seed))  # type: ignore[arg-type]


def _studies(cfg: DictConfig) -> list[dict[str, Any]]:
    from transferdx.analysis.studies import expand, read_study

    return [read_study(d) for d in expand(list(cfg.study_dirs), "study.csv")]


def run_agree(cfg: DictConfig) -> Path:
    """``transferdx-agree``: rank agreement of diagnostics with transfer, and its uncertainty."""
    out = _agree(cfg, _studies(cfg))
    folder = Path(cfg.output_dir)
    write_agreement(out, folder)
    print(out["agreement"].to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    print(out["blocks_recovered"].to_string())
    for block, u in out["uncertainty"].items():
        print(f"{block}: transfer ordering {' > '.join(u['ordering'])}, P(full ordering) = {u['p_full_ordering']:.3f}")
    return folder


def run_match(cfg: DictConfig) -> Path:
    """``transferdx-match``: ψ-matched samples per block."""
    out = _match(cfg, _studies(cfg))
    folder = Path(cfg.output_dir)
    write_matching(out, folder)
    if len(out["matched"]):
        shares = out["matched"].groupby(["backbone", "block", "statistic", "resolution"])["share_reproducing"].first()
        print(shares.to_string())
        print(out["balance"].to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    return folder


def _read_optional_csv(path: Path) -> pd.DataFrame | None:
    """A CSV the analysis wrote, or None when it is empty (no block had two sources)."""
    try:
        return pd.read_csv(path)
    except pd.errors.EmptyDataError:
        return None


def write_tables(cfg: DictConfig, folder: Path) -> dict[str, Any]:
    """Agreement and matching (read from ``agree_dir``/``match_dir`` or computed and stored under
    ``folder``), the sensitivity collection, then every table in three formats with its cell trace,
    and the figures. Returns the rendered tables (a reason string for each one that was skipped)."""
    import json
    import os

    from transferdx.analysis.sensitivity import Run, sensitivity
    from transferdx.analysis.studies import expand, read_audit
    from transferdx.paper.figures import FIGURES
    from transferdx.paper.tables import Artifacts, Study, Table, relative, render

    studies = _studies(cfg)
    agree_dir = Path(cfg.agree_dir) if cfg.get("agree_dir") else safe_join(folder, "agree")
    if not cfg.get("agree_dir"):
        write_agreement(_agree(cfg, studies), agree_dir)
    match_dir = Path(cfg.match_dir) if cfg.get("match_dir") else safe_join(folder, "match")
    if not cfg.get("match_dir"):
        write_matching(_match(cfg, studies), match_dir)
    sens_paths = expand(list(cfg.sensitivity_dirs), "profile.json") if cfg.get("sensitivity_dirs") else []
    inputs = [Path(s["folder"]) for s in studies] + [*sens_paths]
    inputs += [d for d, given in ((agree_dir, cfg.get("agree_dir")), (match_dir, cfg.get("match_dir"))) if given]
    root = Path(os.path.commonpath([str(p.resolve()) for p in inputs]))

    def rel(path: str | Path) -> str:
        """Inputs relative to their common root (manifest.json); the tables folder's own files as <tables>/…"""
        inside = Path(path).resolve().is_relative_to(folder.resolve())
        return "<tables>/" + relative(path, folder.resolve()) if inside else relative(path, root)

    blocks = OmegaConf.to_container(cfg.blocks)
    runs = tuple(Run(r.settings, r.profile, rel(r.folder)) for r in map(read_audit, sens_paths))
    agreement = _read_optional_csv(agree_dir / "agreement.csv")
    matched = _read_optional_csv(match_dir / "matched.csv")
    balance = _read_optional_csv(match_dir / "balance.csv")
    artifacts = Artifacts(
        studies=tuple(
            Study(
                s["backbone"],
                rel(s["folder"]),
                s["study"],
                s["profile"],
                s["profile_json"],
                pd.read_csv(Path(s["folder"]) / "audit/negatives.csv", dtype={"qid": str, "neg_id": str})
                if i == 0
                else None,
            )
            for i, s in enumerate(studies)
        ),
        blocks=blocks,  # type: ignore[arg-type]
        diagnostics=dict(cfg.diagnostics),
        agreement=agreement,
        agreement_file=rel(agree_dir / "agreement.csv"),
        uncertainty=json.loads((agree_dir / "transfer_uncertainty.json").read_text(encoding="utf-8")),
        uncertainty_file=rel(agree_dir / "transfer_uncertainty.json"),
        matched=matched,
        balance=balance,
        match_folder=rel(match_dir),
        runs=runs,
        base=dict(cfg.sensitivity_base),
        stability_diagnostic=str(cfg.stability_diagnostic),
        labels=dict(cfg.labels),
    )
    sens = None
    if runs:
        sens = sensitivity(runs, artifacts.base, blocks, artifacts.diagnostics, cfg.get("in_family"))  # type: ignore[arg-type]
        atomic_write_text(safe_join(folder, "sensitivity_runs.csv"), _csv_text(sens))
    rendered = render(artifacts, list(cfg.tables), sens, rel(folder / "sensitivity_runs.csv"))
    writers = {"md": Table.to_markdown, "tex": Table.to_latex, "csv": Table.to_csv}
    combined, skipped = [], {}
    for name, table in rendered.items():
        if isinstance(table, str):
            skipped[name] = table
            continue
        for fmt in cfg.formats:
            if fmt not in writers:
                raise ValueError(f"unknown table format {fmt!r}; valid: {sorted(writers)}")
            atomic_write_text(safe_join(folder, f"{name}.{fmt}"), writers[fmt](table))
        atomic_write_text(safe_join(folder, f"{name}.trace.csv"), _csv_text(table.trace()))
        combined.append(table.to_markdown())
    if skipped:
        combined.append("Not rendered:\n\n" + "".join(f"- {k}: {v}\n" for k, v in skipped.items()))
    atomic_write_text(safe_join(folder, "tables.md"), "\n".join(combined))
    if cfg.get("figures"):
        from transferdx.artifacts import atomic_write_bytes

        for name, plot in FIGURES.items():
            atomic_write_bytes(safe_join(folder, f"figures/{name}.png"), plot(artifacts))
    manifest = {"root": str(root), "inputs": sorted(rel(p) for p in inputs), "skipped": skipped}
    atomic_write_text(safe_join(folder, "manifest.json"), canonical_json(manifest))
    return rendered


def run_tables(cfg: DictConfig) -> Path:
    """``transferdx-tables``: the study's tables from stored artifacts."""
    started = time.perf_counter()
    folder = Path(cfg.output_dir)
    rendered = write_tables(cfg, folder)
    for name, table in rendered.items():
        print(table.to_markdown() if not isinstance(table, str) else f"{name}: not rendered ({table})\n")
    print(f"{time.perf_counter() - started:.1f}s; tables: {folder.resolve()}")
    return folder


def _hydra_entry(config_name: str, run: Callable[[DictConfig], Path]) -> None:
    import hydra

    from transferdx.inputs.records import InputError

    @hydra.main(config_path=config_dir(), config_name=config_name, version_base="1.3")
    def _main(cfg: DictConfig) -> None:
        try:
            run(cfg)
        except (InputError, ValueError, FileNotFoundError) as exc:
            print(f"transferdx: error: {exc}", file=sys.stderr)
            sys.exit(2)

    _main()


def train_main() -> None:
    """``transferdx-train``: train one retriever per (backbone, source, seed)."""
    _hydra_entry("train", run_train)


def evaluate_main() -> None:
    """``transferdx-evaluate``: BEIR evaluation with per-query metrics."""
    _hydra_entry("evaluate", run_evaluate)


def study_main() -> None:
    """``transferdx-study``: sources → audit → train → evaluate → agree → match → tables."""
    _hydra_entry("study", run_study)


def agree_main() -> None:
    """``transferdx-agree``: rank agreement and transfer-ordering uncertainty."""
    _hydra_entry("agree", run_agree)


def match_main() -> None:
    """``transferdx-match``: ψ-matched samples."""
    _hydra_entry("match", run_match)


def tables_main() -> None:
    """``transferdx-tables``: Tables 1–10 and figures from stored artifacts."""
    _hydra_entry("tables", run_tables)


def build_main() -> None:
    """``transferdx-build``: build sources and controls, write them as records JSONL."""
    _hydra_entry("build", run_build)


def audit_main() -> None:
    """``transferdx-audit``: a Hydra application (``--help`` lists the config groups)."""
    _hydra_entry("audit", run_audit)


if __name__ == "__main__":
    audit_main()
