"""The verbs' typed settings: :class:`AuditOptions` (an audit), :class:`BenchmarkSettings` (the
evaluation benchmark), :class:`AnalysisSettings` (agreement, matching, validation, tables) and
:class:`InputSettings` (what a command-line run reads or builds). Plain Python, no Hydra:
``transferdx.config`` translates a config into these."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from transferdx.auditing.pooling import FlagSettings
from transferdx.auditing.values import SemanticSettings
from transferdx.diagnostics.tokens import Tokenizer

DEFAULT_SOURCES = ("bm25", "dense", "perturb", "bm25+dense", "dense+perturb")


@dataclass(frozen=True)
class AuditOptions:
    """Everything an audit is configured by except its records and encoder.

    ``tokenizer``: a registered name (``alnum``, ``whitespace``, ``backbone``) or a callable
    text → tokens; ``idf``: ``pooled`` | ``per_source`` | ``external`` (then ``idf_texts``, labelled
    ``idf_label``); ``semantic=None`` runs the lexical audit only; ``flags``: ``envelope`` |
    ``fixed`` or a :class:`FlagSettings`; ``kinds``: source → genuine|control overrides;
    ``sample_fraction``: audit a seeded share of the queries (the same for every source); ``label``:
    what the settings call the data; ``command``: the command-line settings a later command
    (``transferdx-clean``) needs to read the same input as this audit did, key → value (``input``
    as an absolute path, or ``data`` with its ``data.*`` overrides; ``diagnostics``), filled by the
    command line (:func:`transferdx.config.read_with`) and recorded with the audit's settings
    (:func:`transferdx.pipeline.auditing.command_settings`)."""

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
    command: Mapping[str, Any] = field(default_factory=dict)

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
    """One benchmark set: its folder and layout (``format``: a key of
    :data:`transferdx.evaluation.BENCHMARK_FORMATS`, ``beir`` or ``trec_dl``)."""

    name: str
    path: str
    split: str = "test"
    format: str = "beir"


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
        "validation_datasets",
        "validation_pairs",
        "validation_flags",
        "validation_audit",
        "validation_ladder",
    )
    formats: Sequence[str] = ("md", "tex", "csv")
    figures: bool = True
    validation: Mapping[str, Any] = field(
        default_factory=lambda: {
            "diagnostics": {
                "fn_suspect_rate": -1,
                "duplicate_positive_rate": -1,
                "near_duplicate_positive_rate": -1,
                "n_flags": -1,
            },
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


@dataclass(frozen=True)
class InputSettings:
    """What a run reads (:func:`transferdx.pipeline.load_inputs`): ``path``, one records file or
    folder (the command line's ``input=``), which replaces the rest; else the ``data`` group's reader
    ``format`` with its ``options``. A query-set format (``beir``, ``trec_dl_pool``, ``demo_pool``)
    builds ``sources`` and ``controls`` from it (:func:`transferdx.pipeline.build_sources`: ``k``
    negatives per query, ``slice`` of the ranks, ``seed``, ``bm25`` options, ``control_parent``,
    ``external_sources``: source → records file, plus the TREC-DL runs with ``options["include_runs"]``);
    any other names a reader of records (``seed`` for the ones that sample). ``on_error``: ``raise`` |
    ``skip`` (exclude and count)."""

    path: str | None = None
    format: str = "demo"
    options: Mapping[str, Any] = field(default_factory=dict)
    sources: Sequence[str] = DEFAULT_SOURCES
    controls: Sequence[str] = ()
    k: int = 8
    slice: str | Sequence[str] | None = None
    seed: int = 0
    bm25: Mapping[str, Any] = field(default_factory=dict)
    control_parent: str | None = None
    external_sources: Mapping[str, str] = field(default_factory=dict)
    on_error: str = "raise"
