"""The library's verbs: load → build_sources → audit → train → evaluate → agree / match →
render_tables, and ``study`` (all of it for one backbone). Typed settings in, results out; every
command-line tool is a thin layer over these (``transferdx.cli``). Definitions: docs/design.md."""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from transferdx.analysis import studies as _studies
from transferdx.analysis.sensitivity import AuditRun, sensitivity
from transferdx.artifacts import atomic_write_bytes, atomic_write_text, canonical_json, csv_text, safe_join
from transferdx.auditing.core import FlagSettings, SemanticSettings
from transferdx.auditing.core import audit as _audit
from transferdx.auditing.result import Audit
from transferdx.diagnostics.tokens import Tokenizer, get_tokenizer
from transferdx.embed import EmbeddingCache, EncoderSpec, model_label, resolve_model
from transferdx.inputs.formats import LOADERS, QuerySet, load_trec_dl
from transferdx.inputs.records import InputError, LoadResult, Record, sample_queries
from transferdx.inputs.registry import DATASETS, QUERY_SETS
from transferdx.inputs.shapes import load_path, load_table
from transferdx.presets import default_cache_dir, preset_names, read_preset
from transferdx.sources.build import build_sources as _build_sources
from transferdx.sources.build import controls_from_records
from transferdx.sources.context import BuildContext
from transferdx.sources.controls import CONTROLS
from transferdx.training import TrainResult, TrainSettings, checkpoint_spec, run_key
from transferdx.training import train as _train

DEFAULT_SOURCES = ("bm25", "dense", "perturb", "bm25+dense", "dense+perturb")
EncoderLike = str | Path | EncoderSpec | EmbeddingCache | Any


# ---------------------------------------------------------------------------------------------
# Settings
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AuditOptions:
    """Everything an audit is configured by except its records and encoder.

    ``tokenizer``: a registered name (``alnum``, ``whitespace``, ``backbone``) or a callable
    text → tokens; ``idf``: ``pooled`` | ``per_source`` | ``external`` (then ``idf_texts``, labelled
    ``idf_label``); ``semantic=None`` runs the lexical audit only; ``flags``: ``envelope`` |
    ``fixed`` or a :class:`FlagSettings`; ``kinds``: source → genuine|control overrides;
    ``sample_fraction``: audit a seeded share of the queries (the same for every source); ``label``:
    what the settings call the data."""

    tokenizer: str | Tokenizer = "alnum"
    tokenizer_options: Mapping[str, Any] = field(default_factory=dict)
    idf: str = "pooled"
    idf_texts: Sequence[str] | None = None
    idf_label: str | None = None
    semantic: SemanticSettings | None = field(default_factory=SemanticSettings)
    flags: str | FlagSettings = "envelope"
    resamples: int = 1000
    confidence: float = 0.95
    kinds: Mapping[str, str] = field(default_factory=dict)
    sample_fraction: float = 1.0
    seed: int = 0
    on_error: str = "raise"
    label: str | None = None

    @property
    def flag_settings(self) -> FlagSettings:
        return self.flags if isinstance(self.flags, FlagSettings) else FlagSettings(self.flags)

    @property
    def tokenizer_name(self) -> str:
        if isinstance(self.tokenizer, str):
            return self.tokenizer
        return str(getattr(self.tokenizer, "__name__", type(self.tokenizer).__name__))


@dataclass(frozen=True)
class BenchmarkDataset:
    name: str
    path: str
    split: str = "test"


@dataclass(frozen=True)
class BenchmarkSettings:
    """BEIR datasets to evaluate on: ``max_queries`` seeded test queries (all when None); with
    ``download`` a missing dataset is fetched from ``download_url`` (needs a network)."""

    datasets: tuple[BenchmarkDataset, ...]
    k_values: tuple[int, ...] = (10, 100)
    max_queries: int | None = None
    download: bool = False
    download_url: str = ""

    @classmethod
    def from_dict(cls, cfg: Mapping[str, Any]) -> BenchmarkSettings:
        options = {k: v for k, v in cfg.items() if k in cls.__dataclass_fields__}
        options["datasets"] = tuple(BenchmarkDataset(**dict(d)) for d in cfg.get("datasets", ()))
        if "k_values" in options:
            options["k_values"] = tuple(int(k) for k in options["k_values"])
        return cls(**options)


@dataclass(frozen=True)
class AnalysisSettings:
    """Rank agreement, ψ matching, sensitivity and tables (``conf/analysis/default.yaml``).

    ``blocks``: setting → its sources; ``diagnostics``: profile column → direction (+1: higher
    predicts better transfer); ``statistics``: record-level columns re-computed on ψ-matched
    samples; ``sensitivity_base``: the run every sensitivity audit is compared with;
    ``validation``: for a study that trained controls too, the extra diagnostics (with directions;
    ``n_flags`` = flags a source carries), the random-mix ladder (source → share of random slots;
    its parent is dose 0) and the two-level bootstrap's resamples."""

    blocks: Mapping[str, Sequence[str]] = field(
        default_factory=lambda: {
            "non-hybrid": ["bm25", "dense", "perturb", "llm"],
            "hybrid": ["bm25+dense", "bm25+perturb", "dense+perturb", "bm25+llm", "dense+llm"],
        }
    )
    diagnostics: Mapping[str, int] = field(
        default_factory=lambda: {
            "psi_mean": 1,
            "rho_mean": 1,
            "eta_mean": 1,
            "inversion_rate": 1,
            "composite_logdet": 1,
            "composite_trace": 1,
        }
    )
    resamples: int = 1000
    alpha: float = 0.05
    statistics: Mapping[str, int] = field(default_factory=lambda: {"rho": 1, "eta": 1, "inversion": 1})
    resolutions: Sequence[int] = (5, 10, 20)
    repetitions: int = 100
    seed: int = 0
    sensitivity_base: Mapping[str, Any] = field(
        default_factory=lambda: {"tokenizer": "alnum", "idf_corpus": "pooled", "sample_fraction": 1.0}
    )
    in_family: str | None = None
    stability_diagnostic: str = "composite_logdet"
    tables: Sequence[str] = (
        *(f"table{i}" for i in range(1, 11)),
        "sensitivity",
        "uncertainty",
        "matching",
        "validation_transfer",
        "validation_pairs",
        "validation_audit",
        "validation_ladder",
    )
    formats: Sequence[str] = ("md", "tex", "csv")
    figures: bool = True
    validation: Mapping[str, Any] = field(
        default_factory=lambda: {
            "diagnostics": {"fn_suspect_rate": -1, "duplicate_positive_rate": -1, "n_flags": -1},
            "ladder": {
                "random_mix_25": 0.25,
                "random_mix_50": 0.5,
                "random_mix_75": 0.75,
                "random_mix_100": 1.0,
                "random_passages": 1.0,
            },
            "resamples": 10000,
        }
    )
    labels: Mapping[str, str] = field(
        default_factory=lambda: {
            "minilm_l6": "MiniLM-L6",
            "mpnet_base": "MPNet-base",
            "distilbert": "DistilBERT",
            "e5_base": "E5-base",
            "contriever": "Contriever",
        }
    )

    @classmethod
    def from_dict(cls, cfg: Mapping[str, Any]) -> AnalysisSettings:
        """From a plain mapping (e.g. the ``analysis`` config); keys that are not settings (folders)
        are ignored."""
        return cls(**{k: v for k, v in cfg.items() if k in cls.__dataclass_fields__})


# ---------------------------------------------------------------------------------------------
# Inputs
# ---------------------------------------------------------------------------------------------


def load(
    data: Any,
    *,
    format: str = "records",
    source: str | None = None,
    on_error: str = "raise",
    **options: Any,
) -> LoadResult:
    """Records to audit, from a path, the name ``"demo"``, a ``pandas.DataFrame``, a
    ``datasets.Dataset`` (or ``DatasetDict``: ``split=``, default ``train``), or records already in
    memory. ``on_error``: ``raise`` | ``skip`` (exclude and count).

    A path (the default ``format="records"``) is recognised by its shape
    (:mod:`transferdx.inputs.shapes`): a file or folder in JSONL, JSON, CSV, TSV, Parquet, Arrow, a
    ``save_to_disk`` folder, or ``.gz`` of the text forms, holding records (``qid``, ``query``,
    ``positives``, ``negatives``, ``source``), sentence-transformers ``mine_hard_negatives`` output
    (triplet, n-tuple, labeled-list, labeled-pair, with or without scores), FlagEmbedding
    ``{query, pos, neg}`` or an n-tuple table; the source is named after the file (``source=``
    overrides). DataFrames and Datasets go through the same shapes. Other ``format`` values name a
    registered reader: ``ntuple``, ``msmarco_triples``, ``flagembedding``, ``st_hard_negatives``,
    ``trec_dl``."""
    if isinstance(data, LoadResult):
        return data
    if isinstance(data, pd.DataFrame) or (hasattr(data, "column_names") and hasattr(data, "map")):
        return load_table(data, on_error=on_error, source=source, split=options.get("split"))
    if isinstance(data, list | tuple) and all(isinstance(r, Record) for r in data):
        return LoadResult(list(data))
    if str(data) == "demo" and not Path(str(data)).exists():
        return DATASETS["demo"](on_error=on_error, **options)
    if format == "records":
        return load_path(data, on_error=on_error, source=source, split=options.get("split"))
    if format not in LOADERS:
        raise ValueError(f"unknown input format {format!r}; valid: {sorted(LOADERS)}")
    extra = {"source": source} if source else {}
    return LOADERS[format](path=data, on_error=on_error, **extra, **options)


def load_query_set(data: str | Path = "demo", *, format: str | None = None, **options: Any) -> QuerySet:
    """Queries, their positives and a passage pool to build sources from: ``"demo"``, a BEIR folder
    (``format="beir"``, ``split=`` train/test) or a TREC-DL folder (``format="trec_dl_pool"``,
    ``relevant_grade=2``). Without ``format`` the folder's contents decide."""
    if format is None:
        root = Path(str(data))
        if str(data) in ("demo", "demo_pool") and not root.exists():
            format = "demo_pool"
        elif (root / "corpus.jsonl").is_file():
            format = "beir"
        elif any(root.glob("topics*")):
            format = "trec_dl_pool"
        else:
            raise ValueError(f"cannot tell the query-set format of {data!r}; give format= one of {sorted(QUERY_SETS)}")
    if format not in QUERY_SETS:
        raise ValueError(f"unknown query-set format {format!r}; valid: {sorted(QUERY_SETS)}")
    return QUERY_SETS[format](root=str(data), **options)


def encoder_spec(encoder: str | Path | EncoderSpec) -> EncoderSpec:
    """A named encoder preset (``minilm_l6``, ``mpnet_base``, ``e5_base``, …), a local model folder,
    or a hub id ``org/name`` (loaded without remote code)."""
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


def make_encoder(encoder: EncoderLike | None, cache_dir: str | Path | None = None) -> EmbeddingCache | None:
    """The frozen encoder with its embedding cache: from a preset name, folder, hub id, spec, a
    loaded ``SentenceTransformer``, or an existing cache (returned as is); ``None`` stays None."""
    if encoder is None or isinstance(encoder, EmbeddingCache):
        return encoder
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    if hasattr(encoder, "encode") and hasattr(encoder, "state_dict"):
        return EmbeddingCache.from_model(encoder, cache)
    return EmbeddingCache(encoder_spec(encoder), cache)


def make_tokenizer(tokenizer: str | Tokenizer, **options: Any) -> Tokenizer:
    """A registered tokenizer by name (with its options), or the callable itself."""
    return tokenizer if callable(tokenizer) else get_tokenizer(tokenizer, **options)


def trec_dl_runs(
    root: str | Path, *, k: int = 8, slice: str | Sequence[str] | None = None, on_error: str = "raise"
) -> dict[str, LoadResult]:
    """The TREC-DL runs under ``root`` as sources to build alongside (name → its records)."""
    runs = load_trec_dl(root, on_error=on_error, k=k, slice_spec=slice)
    first = runs.sources[0] if runs.sources else None
    return {  # exclusions of no run (a judged query missing from the topics, ...) go with the first run, once
        name: LoadResult(
            [r for r in runs.records if r.source == name],
            [e for e in runs.exclusions if e.source == name or (not e.source and name == first)],
            {name: runs.descriptors.get(name, {})},
            {name: runs.false_negatives.get(name, [])},
        )
        for name in runs.sources
    }


def records_as_source(path: str | Path, name: str, on_error: str = "raise") -> LoadResult:
    """A records file or folder (e.g. LLM-written negatives for the same queries) as source ``name``."""
    part = LOADERS["records"](path=path, on_error=on_error)
    described = {k: v for d in part.descriptors.values() for k, v in d.items()}
    return LoadResult(
        [dataclasses.replace(r, source=name) for r in part.records],
        [dataclasses.replace(e, source=name) for e in part.exclusions],
        {name: described},
    )


def build_sources(
    query_set: QuerySet,
    sources: Sequence[str] = DEFAULT_SOURCES,
    controls: Sequence[str] | str = (),
    *,
    encoder: EncoderLike | None = None,
    k: int = 8,
    slice: str | Sequence[str] | None = None,
    seed: int = 0,
    bm25: Mapping[str, Any] | None = None,
    control_parent: str | None = None,
    external: Mapping[str, LoadResult] | None = None,
    cache_dir: str | Path | None = None,
) -> LoadResult:
    """Genuine sources (``bm25``, ``dense``, ``perturb``, hybrids ``a+b``, or ``external`` ones loaded
    from disk) and controls (``"all"`` or names) for ``query_set``; ``encoder`` is needed for
    ``dense`` and ``neighbor_positive``. ``slice``: which ranks to keep, e.g. ``"[2:10]"``."""
    external = dict(external or {})
    wanted = list(CONTROLS) if controls == "all" else list(controls)
    names = [*sources, *(e for e in external if e not in sources)]
    ctx = BuildContext(
        query_set, k=k, slice_spec=slice, seed=seed, encoder=make_encoder(encoder, cache_dir), bm25=dict(bm25 or {})
    )
    return _build_sources(ctx, names, wanted, control_parent, external)


# ---------------------------------------------------------------------------------------------
# Audit
# ---------------------------------------------------------------------------------------------


def no_records_message(loaded: LoadResult, where: object) -> str:
    """Why an input gives nothing to audit: how many items were excluded, and the first of them."""
    ex = [f"{e.file}:{e.line}: field '{e.field}': {e.reason}" for e in loaded.exclusions[:1]]
    why = f"{len(loaded.exclusions)} excluded, first {ex[0]}" if ex else "empty"
    return f"no records to audit in {where}: {why}"


def portable_label(label: str | Path) -> str:
    """An input as artifacts name it: a path by its last component (file or folder name), so the
    same data gives the same bytes wherever it lives; anything else (a dataset name) as it is."""
    text = str(label)
    return Path(text).name or text if ("/" in text or "\\" in text or Path(text).exists()) else text


def recorded_settings(options: AuditOptions, encoder: EmbeddingCache | None, sampled_out: int) -> dict[str, Any]:
    """The settings an audit records in profile.json, report.md and every .meta.json (paths by their
    name only, :func:`portable_label`)."""
    settings: dict[str, Any] = {
        "data": portable_label(options.label) if options.label is not None else "(in memory)",
        "tokenizer": options.tokenizer_name,
        "idf_corpus": options.idf,
        "on_error": options.on_error,
        "seed": options.seed,
        "bootstrap_resamples": options.resamples,
        "bootstrap_confidence": options.confidence,
        "flags": options.flag_settings.mode,
    }
    if options.sample_fraction < 1.0:
        settings.update(sample_fraction=options.sample_fraction, records_sampled_out=sampled_out)
    if options.idf == "external":
        settings["idf_external"] = portable_label(options.idf_label) if options.idf_label else "texts"
    if options.semantic is not None and encoder is not None:
        semantic = options.semantic
        settings.update(
            backbone=encoder.spec.name,
            tau=semantic.tau,
            in_batch=semantic.in_batch,
            background_size=semantic.background_size,
            composite_eps=semantic.composite.eps,
        )
    return settings


def with_self_controls(
    loaded: LoadResult, controls: str | Sequence[str], options: AuditOptions, encoder: EmbeddingCache | None
) -> tuple[LoadResult, dict[str, Any]]:
    """``loaded`` plus the controls :func:`audit` builds from it (see there), and what to record."""
    kind = {r.source: options.kinds.get(r.source, r.kind) for r in loaded.records}
    genuine = sorted(s for s, k in kind.items() if k == "genuine")
    wanted: list[str]
    if controls in ("none", None) or not genuine:
        wanted = []
    elif controls == "auto":
        wanted = list(CONTROLS) if len(genuine) < 2 or "control" not in kind.values() else []
    elif controls == "all":
        wanted = list(CONTROLS)
    else:
        wanted = [str(c) for c in controls]
    wanted = [c for c in wanted if c not in kind]
    if not wanted:
        return loaded, {}
    built, skipped = controls_from_records(loaded, wanted, genuine[0], encoder=encoder, seed=options.seed)
    record = {"self_controls": {"parent": genuine[0], "built": sorted(built.sources), "skipped": skipped}}
    merged = LoadResult(list(loaded.records), list(loaded.exclusions), dict(loaded.descriptors))
    merged.false_negatives.update(loaded.false_negatives)
    merged.relevant_grade = loaded.relevant_grade
    return merged.extend(built), record


def audit(
    records: str | Path | LoadResult | Sequence[Record] | Any,
    options: AuditOptions | None = None,
    *,
    encoder: EncoderLike | None = "minilm_l6",
    cache_dir: str | Path | None = None,
    controls: str | Sequence[str] = "auto",
    **overrides: Any,
) -> Audit:
    """Audit every source in ``records`` (anything :func:`load` takes): ψ always, the frozen-encoder
    statistics when ``encoder`` is given (a preset name, folder, hub id or loaded
    ``SentenceTransformer``; ``None`` for lexical only). Keyword ``overrides`` set
    :class:`AuditOptions` fields, e.g. ``audit(path, tokenizer="whitespace", seed=1)``.

    ``controls``: sources with known defects built from the input's own passages and audited
    alongside, so that even one file gets a verdict: ``"auto"`` (all eight when there are fewer than
    two genuine sources or no control), ``"all"``, a list of names, or ``"none"``."""
    options = dataclasses.replace(options or AuditOptions(), **overrides)
    if options.label is None and isinstance(records, (str, Path)):
        options = dataclasses.replace(options, label=str(records))
    loaded = load(records, on_error=options.on_error)
    if not loaded.records:  # nothing to audit: an error, not an empty profile
        raise ValueError(no_records_message(loaded, options.label or "the input"))
    loaded, sampled_out = sample_queries(loaded, options.sample_fraction, options.seed)
    cache = make_encoder(encoder, cache_dir) if options.semantic is not None else None
    loaded, built = with_self_controls(loaded, controls, options, cache)
    settings = recorded_settings(options, cache, sampled_out) | built
    result = _audit(
        loaded,
        make_tokenizer(options.tokenizer, **options.tokenizer_options),
        encoder=cache,
        semantic=options.semantic or SemanticSettings(),
        idf_corpus=options.idf,
        external_texts=options.idf_texts,
        seed=options.seed,
        resamples=options.resamples,
        confidence=options.confidence,
        flags=options.flag_settings,
        kinds=dict(options.kinds),
        settings=settings,
    )
    texts = {(r.source, r.qid): r for r in loaded.records}
    return Audit(result, settings, texts)


# ---------------------------------------------------------------------------------------------
# Training and evaluation
# ---------------------------------------------------------------------------------------------


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
    return _train(rows, spec, settings, folder, seed=seed, cache_dir=cache, source=source, progress=progress)


def benchmark_datasets(benchmark: BenchmarkSettings, seed: int = 0) -> Iterator[Any]:
    """Each benchmark dataset loaded (downloaded first when allowed and missing)."""
    from transferdx.evaluation import load_beir_split

    for entry in benchmark.datasets:
        path = Path(entry.path)
        if not path.is_dir() and benchmark.download:
            from beir import util

            util.download_and_unzip(benchmark.download_url.format(name=entry.name), str(path.parent))
        yield load_beir_split(path, entry.split, benchmark.max_queries, seed)


def evaluate(
    model: EncoderLike,
    benchmark: BenchmarkSettings,
    *,
    out: str | Path | None = None,
    cache_dir: str | Path | None = None,
    seed: int = 0,
) -> pd.DataFrame:
    """nDCG@10, Recall@100, MAP@100 of ``model`` (a checkpoint folder, preset, spec or loaded model)
    on every benchmark dataset, one row each; with ``out``, per dataset ``metrics.json``,
    ``per_query.csv`` and ``run.trec`` under ``out/<dataset>/``."""
    from transferdx.evaluation import evaluate as _evaluate

    if isinstance(model, str | Path) and (Path(model) / "modules.json").is_file():
        model = checkpoint_spec(str(model))
    encoder = make_encoder(model, cache_dir)
    if encoder is None:
        raise ValueError("evaluate needs a model (a checkpoint folder, preset name, spec or loaded model)")
    rows: list[dict[str, Any]] = []
    for data in benchmark_datasets(benchmark, seed):
        result = _evaluate(encoder, data, benchmark.k_values)
        metrics = result.to_dict()
        if out is not None:
            folder = safe_join(Path(out), data.name)
            atomic_write_text(folder / "metrics.json", canonical_json(metrics))
            atomic_write_text(folder / "per_query.csv", csv_text(result.per_query))
            atomic_write_text(folder / "run.trec", result.trec_run(encoder.spec.name))
        rows.append(
            {
                "dataset": data.name,
                "n_queries": metrics["n_queries"],
                **{k: metrics[k] for k in ("ndcg@10", "recall@100", "map@100") if k in metrics},
            }
        )
    return pd.DataFrame(rows)


def training_seeds(kind: str, seeds: Sequence[int] | Mapping[str, Sequence[int]] | None, default: int) -> list[int]:
    """The training seeds of a source of ``kind`` (``seeds`` per kind, one list, or ``[default]``)."""
    if seeds is None:
        return [default]
    if isinstance(seeds, Mapping):
        if kind not in seeds:
            raise ValueError(f"seeds name no list for kind {kind!r}; given: {sorted(seeds)}")
        chosen = seeds[kind]
    else:
        chosen = seeds
    out = [int(k) for k in chosen]
    if not out or len(set(out)) != len(out):
        raise ValueError(f"training seeds must be a non-empty list without repeats, got {out}")
    return out


def training_plan(
    sources: Sequence[str],
    kinds: Mapping[str, str],
    seeds: Sequence[int] | Mapping[str, Sequence[int]] | None,
    default: int = 0,
) -> list[tuple[str, int]]:
    """(source, seed) runs in the order they are trained: every source's first seed, then every
    source's second, … — so an interrupted run has already seen each source once."""
    per = {s: training_seeds(kinds.get(s, "genuine"), seeds, default) for s in sources}
    rounds = max((len(v) for v in per.values()), default=0)
    return [(s, per[s][i]) for i in range(rounds) for s in sources if i < len(per[s])]


@dataclass(frozen=True)
class StudyResult:
    """``table``: study.csv (one row per backbone × source × dataset); ``tables``: name → rendered
    table (or the reason it was not rendered)."""

    table: pd.DataFrame
    tables: Mapping[str, Any]


def study(
    loaded: LoadResult,
    sources: Sequence[str],
    out: str | Path,
    *,
    encoder: str | Path | EncoderSpec = "minilm_l6",
    options: AuditOptions | None = None,
    training: TrainSettings | None = None,
    benchmark: BenchmarkSettings,
    analysis: AnalysisSettings | None = None,
    sensitivity_dirs: Sequence[str | Path] = (),
    evaluate_frozen: bool = True,
    tables: bool = True,
    artifact_dir: str | Path = "outputs/artifacts",
    cache_dir: str | Path | None = None,
    seeds: Sequence[int] | Mapping[str, Sequence[int]] | None = None,
    train_controls: bool = False,
) -> StudyResult:
    """One backbone's study: audit ``loaded`` (into ``out/audit``), train one retriever per source
    and seed, evaluate each (and the frozen backbone), write ``study.csv`` (diagnostics next to
    nDCG@10, one row per source × seed × dataset), then agree → match → tables into ``out/tables``.

    ``seeds``: training seeds, one list for every source or per kind (``{"genuine": [0, 1, 2],
    "control": [0, 1]}``); default ``[options.seed]``. ``train_controls``: train on the controls in
    ``loaded`` too (known-truth validation; the tables then add the validation tables). With more
    than one seed a source's evaluations go to ``evaluate/<source>/seed<k>/``."""
    out = Path(out)
    options = options or AuditOptions()
    spec = encoder_spec(encoder)
    frozen_encoder = spec if options.semantic is not None else None
    # the study's controls come from its query set (build config), never from the audit itself
    audited = audit(loaded, options, encoder=frozen_encoder, cache_dir=cache_dir, controls="none")
    audited.save(safe_join(out, "audit"))
    profile = audited.profile.set_index("source")
    rows = []
    if evaluate_frozen:
        frozen = evaluate(
            spec, benchmark, out=safe_join(out, "evaluate/frozen"), cache_dir=cache_dir, seed=options.seed
        )
        rows += [
            {"backbone": spec.name, "source": "(frozen)", "kind": "frozen", **r} for r in frozen.to_dict("records")
        ]
    kinds = {r.source: r.kind for r in loaded.records}
    trained = list(sources) + [s for s in dict.fromkeys(kinds) if train_controls and kinds[s] == "control"]
    from tqdm.auto import tqdm

    plan = training_plan(trained, kinds, seeds, options.seed)
    for source, seed in tqdm(plan, desc=f"{spec.name}: train and evaluate", unit="run", disable=len(plan) < 2):
        several = len(training_seeds(kinds.get(source, "genuine"), seeds, options.seed)) > 1
        records = [r for r in loaded.records if r.source == source]
        trained_model = train(
            records,
            encoder=spec,
            source=source,
            settings=training,
            seed=seed,
            artifact_dir=artifact_dir,
            cache_dir=cache_dir,
            progress=False,
        )
        checkpoint = checkpoint_spec(trained_model.model_dir, f"{spec.name}-{source}")
        folder = safe_join(out, f"evaluate/{source}" + (f"/seed{seed}" if several else ""))
        scores = evaluate(checkpoint, benchmark, out=folder, cache_dir=cache_dir, seed=options.seed)
        diag = {
            c: profile.loc[source, c]
            for c in ("psi_mean", "rho_mean", "eta_mean", "inversion_rate")
            if c in profile.columns
        }
        for row in scores.to_dict("records"):
            rows.append(
                {
                    "backbone": spec.name,
                    "source": source,
                    "kind": kinds.get(source, ""),
                    "seed": seed,
                    **diag,
                    **row,
                    "model_dir": str(trained_model.model_dir),
                }
            )
    table = pd.DataFrame(rows)
    atomic_write_text(safe_join(out, "study.csv"), csv_text(table))
    rendered: dict[str, Any] = {}
    if tables:
        rendered = render_tables([out], safe_join(out, "tables"), analysis, sensitivity_dirs=sensitivity_dirs)
    return StudyResult(table, rendered)


# ---------------------------------------------------------------------------------------------
# Analysis and tables
# ---------------------------------------------------------------------------------------------


def read_studies(study_dirs: Sequence[str | Path]) -> list[dict[str, Any]]:
    """Every study folder in ``study_dirs`` (a folder holding ``study.csv``, or a multirun root)."""
    return [_studies.read_study(d) for d in _studies.expand(list(study_dirs), "study.csv")]


def _as_studies(studies: Sequence[str | Path] | Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    if all(isinstance(s, dict) for s in studies):
        return list(studies)  # type: ignore[arg-type]
    return read_studies(studies)  # type: ignore[arg-type]


def agree(
    studies: Sequence[str | Path] | Sequence[dict[str, Any]], settings: AnalysisSettings | None = None
) -> dict[str, Any]:
    """Rank agreement of each diagnostic with transfer per (backbone, setting) block, blocks
    recovered k/n, transfer-ordering uncertainty and Holm-corrected paired tests."""
    s = settings or AnalysisSettings()
    blocks = {k: list(v) for k, v in s.blocks.items()}
    return _studies.agree(_as_studies(studies), blocks, dict(s.diagnostics), s.resamples, s.seed, s.alpha)


def match(
    studies: Sequence[str | Path] | Sequence[dict[str, Any]], settings: AnalysisSettings | None = None
) -> dict[str, pd.DataFrame]:
    """ψ-matched samples per block: share of repetitions reproducing the transfer ordering, balance."""
    s = settings or AnalysisSettings()
    blocks = {k: list(v) for k, v in s.blocks.items()}
    return _studies.match_studies(
        _as_studies(studies), blocks, dict(s.statistics), list(s.resolutions), s.repetitions, s.seed
    )


def validate(
    studies: Sequence[str | Path] | Sequence[dict[str, Any]], settings: AnalysisSettings | None = None
) -> dict[str, dict[str, pd.DataFrame]]:
    """Known-truth validation of every study that trained controls as well as genuine sources
    (``transferdx-study +experiment=validation``): backbone → transfer with query and seed
    intervals, pairwise differences (Holm, seed-consistent), (a) flag check, (b) diagnostic
    agreement over all and genuine sources, (c) the random-mix ladder. Studies without a trained
    control are left out."""
    s = settings or AnalysisSettings()
    v = {"diagnostics": {}, "ladder": {}, "resamples": 10000, **dict(s.validation)}
    diagnostics = {**dict(s.diagnostics), **dict(v["diagnostics"])}
    out = {}
    for study in _as_studies(studies):
        if "control" in study["kinds"].values() and len(study["per_query_seeds"]) >= 2:
            out[study["backbone"]] = _studies.validate(
                study, diagnostics, dict(v["ladder"]), int(v["resamples"]), alpha=s.alpha, seed=s.seed
            )
    return out


def write_validation(out: Mapping[str, Mapping[str, pd.DataFrame]], folder: Path) -> None:
    for backbone, frames in out.items():
        for name, frame in frames.items():
            atomic_write_text(safe_join(folder, f"{backbone}/{name}.csv"), csv_text(frame))


def write_agreement(out: Mapping[str, Any], folder: Path) -> None:
    atomic_write_text(safe_join(folder, "agreement.csv"), csv_text(out["agreement"]))
    atomic_write_text(safe_join(folder, "blocks_recovered.csv"), csv_text(out["blocks_recovered"], index=True))
    atomic_write_text(safe_join(folder, "paired_tests.csv"), csv_text(out["paired_tests"]))
    atomic_write_text(safe_join(folder, "transfer_uncertainty.json"), canonical_json(out["uncertainty"]))


def write_matching(out: Mapping[str, pd.DataFrame], folder: Path) -> None:
    atomic_write_text(safe_join(folder, "matched.csv"), csv_text(out["matched"]))
    atomic_write_text(safe_join(folder, "balance.csv"), csv_text(out["balance"]))


def _read_optional_csv(path: Path) -> pd.DataFrame | None:
    """A CSV the analysis wrote, or None when it is empty (no block had two sources)."""
    try:
        return pd.read_csv(path)
    except pd.errors.EmptyDataError:
        return None


def render_tables(
    study_dirs: Sequence[str | Path],
    out: str | Path,
    settings: AnalysisSettings | None = None,
    *,
    sensitivity_dirs: Sequence[str | Path] = (),
    agree_dir: str | Path | None = None,
    match_dir: str | Path | None = None,
) -> dict[str, Any]:
    """The study's tables (Markdown, LaTeX, CSV, each with a cell trace) and figures into ``out``,
    from study folders, optional sensitivity audits, and agreement/matching read from
    ``agree_dir``/``match_dir`` or computed and stored under ``out``. Returns name → table (a reason
    string for each table whose inputs are missing)."""
    from transferdx.paper.figures import FIGURES
    from transferdx.paper.tables import TABLES, Study, Table, TableInputs, relative, render
    from transferdx.paper.validation_tables import VALIDATION_TABLES

    s = settings or AnalysisSettings()
    folder = Path(out)
    studies = read_studies(study_dirs)
    agree_path = Path(agree_dir) if agree_dir else safe_join(folder, "agree")
    if not agree_dir:
        write_agreement(agree(studies, s), agree_path)
    match_path = Path(match_dir) if match_dir else safe_join(folder, "match")
    if not match_dir:
        write_matching(match(studies, s), match_path)
    validation = validate(studies, s)
    write_validation(validation, safe_join(folder, "validation"))
    sens_paths = _studies.expand(list(sensitivity_dirs), "profile.json") if sensitivity_dirs else []
    inputs = [Path(st["folder"]) for st in studies] + [*sens_paths]
    inputs += [d for d, given in ((agree_path, agree_dir), (match_path, match_dir)) if given]
    root = Path(os.path.commonpath([str(p.resolve()) for p in inputs]))

    def rel(path: str | Path) -> str:
        """Inputs relative to their common root (manifest.json); the tables folder's own files as <tables>/…"""
        inside = Path(path).resolve().is_relative_to(folder.resolve())
        return "<tables>/" + relative(path, folder.resolve()) if inside else relative(path, root)

    blocks = {k: list(v) for k, v in s.blocks.items()}
    runs = tuple(AuditRun(r.settings, r.profile, rel(r.folder)) for r in map(_studies.read_audit, sens_paths))
    artifacts = TableInputs(
        studies=tuple(
            Study(
                st["backbone"],
                rel(st["folder"]),
                st["study"],
                st["profile"],
                st["profile_json"],
                pd.read_csv(Path(st["folder"]) / "audit/negatives.csv", dtype={"qid": str, "neg_id": str})
                if i == 0
                else None,
            )
            for i, st in enumerate(studies)
        ),
        blocks=blocks,
        diagnostics=dict(s.diagnostics),
        agreement=_read_optional_csv(agree_path / "agreement.csv"),
        agreement_file=rel(agree_path / "agreement.csv"),
        uncertainty=json.loads((agree_path / "transfer_uncertainty.json").read_text(encoding="utf-8")),
        uncertainty_file=rel(agree_path / "transfer_uncertainty.json"),
        matched=_read_optional_csv(match_path / "matched.csv"),
        balance=_read_optional_csv(match_path / "balance.csv"),
        match_folder=rel(match_path),
        runs=runs,
        base=dict(s.sensitivity_base),
        stability_diagnostic=s.stability_diagnostic,
        labels=dict(s.labels),
        validation={b: dict(f) for b, f in validation.items()},
        validation_folder=rel(folder / "validation"),
    )
    sens = None
    if runs:
        sens = sensitivity(runs, artifacts.base, blocks, artifacts.diagnostics, s.in_family)
        atomic_write_text(safe_join(folder, "sensitivity_runs.csv"), csv_text(sens))
    builders = {**TABLES, **VALIDATION_TABLES}
    rendered = render(artifacts, list(s.tables), sens, rel(folder / "sensitivity_runs.csv"), builders)
    writers: dict[str, Callable[[Table], str]] = {"md": Table.to_markdown, "tex": Table.to_latex, "csv": Table.to_csv}
    combined, skipped = [], {}
    for name, table in rendered.items():
        if isinstance(table, str):
            skipped[name] = table
            continue
        for fmt in s.formats:
            if fmt not in writers:
                raise ValueError(f"unknown table format {fmt!r}; valid: {sorted(writers)}")
            atomic_write_text(safe_join(folder, f"{name}.{fmt}"), writers[fmt](table))
        atomic_write_text(safe_join(folder, f"{name}.trace.csv"), csv_text(table.trace()))
        combined.append(table.to_markdown())
    if skipped:
        combined.append("Not rendered:\n\n" + "".join(f"- {k}: {v}\n" for k, v in skipped.items()))
    atomic_write_text(safe_join(folder, "tables.md"), "\n".join(combined))
    if s.figures:
        for name, plot in FIGURES.items():
            image = plot(artifacts)
            if image is not None:  # a figure whose artifacts are missing (the validation ladder)
                atomic_write_bytes(safe_join(folder, f"figures/{name}.png"), image)
    manifest = {"root": str(root), "inputs": sorted(rel(p) for p in inputs), "skipped": skipped}
    atomic_write_text(safe_join(folder, "manifest.json"), canonical_json(manifest))
    return rendered


__all__ = [
    "DEFAULT_SOURCES",
    "AnalysisSettings",
    "Audit",
    "AuditOptions",
    "BenchmarkDataset",
    "BenchmarkSettings",
    "FlagSettings",
    "InputError",
    "SemanticSettings",
    "StudyResult",
    "TrainSettings",
    "agree",
    "audit",
    "build_sources",
    "encoder_spec",
    "evaluate",
    "load",
    "load_query_set",
    "make_encoder",
    "match",
    "records_as_source",
    "render_tables",
    "study",
    "train",
    "trec_dl_runs",
    "validate",
]
