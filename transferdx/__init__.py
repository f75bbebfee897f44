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

The names below are imported on first use (PEP 562), so that ``import transferdx`` and the command
line's ``--help`` and error exits do not pay for pandas, scipy or torch before they need them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from transferdx.auditing.pooling import FlagSettings
    from transferdx.auditing.result import Audit
    from transferdx.auditing.values import SemanticSettings
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
    from transferdx.pipeline.cleaning import CleanResult
    from transferdx.training import TrainResult, TrainSettings

__version__ = "0.1.0"

# The module each public name is imported from on first use.
_HOMES: dict[str, tuple[str, ...]] = {
    "transferdx.auditing.pooling": ("FlagSettings",),
    "transferdx.auditing.values": ("SemanticSettings",),
    "transferdx.auditing.result": ("Audit",),
    "transferdx.pipeline.cleaning": ("CleanResult",),
    "transferdx.diagnostics.suspicion": ("SuspicionSettings",),
    "transferdx.embed": ("CacheWarning", "EmbeddingCache", "EncoderSpec"),
    "transferdx.inputs.records": ("Exclusion", "InputError", "LoadResult", "Passage", "QuerySet", "Record"),
    "transferdx.pipeline": (
        "AnalysisSettings",
        "AuditOptions",
        "BenchmarkDataset",
        "BenchmarkSettings",
        "StudyResult",
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
    ),
    "transferdx.training": ("TrainResult", "TrainSettings"),
}
_HOME_OF: dict[str, str] = {name: module for module, names in _HOMES.items() for name in names}

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


def __getattr__(name: str) -> Any:
    """A public name, imported from its module on first use and kept (PEP 562)."""
    home = _HOME_OF.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
