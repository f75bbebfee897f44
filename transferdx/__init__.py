"""transferdx: audit hard-negative sources for dense-retriever training before training on them.

    import transferdx as tdx
    records = tdx.load("mined.jsonl")                 # or [paths], a DataFrame / datasets.Dataset / "demo"
    result = tdx.audit(records)                       # lexical ψ + frozen-encoder diagnostics
    result                                            # in a notebook: the verdict and a compact profile
    result.profile, result.flags, result.suspects     # DataFrames (suspects, negatives: your own sources';
    result.suspects_of("control")                     #   the controls' on request)
    result.save("out/audit")                          # report.md, CSVs (every source), plots
    tdx.clean("mined.jsonl", result, out="out/clean")  # suspected false negatives removed

Definitions: docs/design.md. The command-line tools (``transferdx-audit`` …) call these verbs.
"""

from transferdx.auditing.core import FlagSettings, SemanticSettings
from transferdx.auditing.result import Audit
from transferdx.cleaning import CleanResult
from transferdx.diagnostics.suspicion import SuspicionSettings
from transferdx.embed import CacheWarning, EmbeddingCache, EncoderSpec
from transferdx.inputs.records import Exclusion, InputError, LoadResult, Passage, QuerySet, Record
from transferdx.pipeline import (
    AnalysisSettings,
    AuditOptions,
    BenchmarkDataset,
    BenchmarkSettings,
    StudyResult,
    agree,
    audit,
    build_sources,
    clean,
    encoder_spec,
    evaluate,
    load,
    load_query_set,
    match,
    render_tables,
    study,
    train,
    validate,
)
from transferdx.training import TrainResult, TrainSettings

__version__ = "0.1.0"

__all__ = [
    "AnalysisSettings",
    "Audit",
    "AuditOptions",
    "BenchmarkDataset",
    "BenchmarkSettings",
    "CacheWarning",
    "CleanResult",
    "EmbeddingCache",
    "EncoderSpec",
    "Exclusion",
    "FlagSettings",
    "InputError",
    "LoadResult",
    "Passage",
    "QuerySet",
    "Record",
    "SemanticSettings",
    "StudyResult",
    "SuspicionSettings",
    "TrainResult",
    "TrainSettings",
    "__version__",
    "agree",
    "audit",
    "build_sources",
    "clean",
    "encoder_spec",
    "evaluate",
    "load",
    "load_query_set",
    "match",
    "render_tables",
    "study",
    "train",
    "validate",
]
