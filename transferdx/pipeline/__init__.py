"""The library's verbs: load → build_sources → audit → train → evaluate → agree / match →
render_tables, and ``study`` (all of it for one backbone). Typed settings in, results out; every
command-line tool is a thin layer over these (``transferdx.cli``). Definitions: docs/design.md.

One module per verb, named for what it does (``auditing`` holds :func:`audit`), so that no module
is shadowed by the function it defines once this package re-exports it:

- ``settings``: AuditOptions, BenchmarkSettings, AnalysisSettings, InputSettings
- ``encoders``: encoder and tokenizer arguments → the objects the verbs use
- ``loading``: load, load_query_set, build_sources (trec_dl_runs, records_as_source), the controls
  an audit builds from its own input, and what a command-line run reads (load_inputs, build_inputs,
  source_records)
- ``auditing``: audit (and its recorded settings; an input with nothing to audit is an error)
- ``cleaning``: clean
- ``training``: train
- ``evaluating``: evaluate
- ``analysing``: agree, match, validate and their writers
- ``rendering``: render_tables
- ``studying``: study (audit → train → evaluate → agree → match → tables for one backbone)
"""

from transferdx.analysis.study import StudyData
from transferdx.auditing.pooling import FlagSettings
from transferdx.auditing.result import Audit
from transferdx.auditing.values import SemanticSettings
from transferdx.inputs.records import InputError
from transferdx.pipeline.analysing import (
    agree,
    as_studies,
    match,
    read_studies,
    validate,
    write_agreement,
    write_matching,
    write_validation,
)
from transferdx.pipeline.auditing import (
    PreparedAudit,
    audit,
    audit_prepared,
    no_records_message,
    portable_label,
    prepare_audit,
    recorded_settings,
    require_records,
)
from transferdx.pipeline.cleaning import CleanResult, clean
from transferdx.pipeline.encoders import EncoderLike, encoder_spec, make_encoder, make_tokenizer
from transferdx.pipeline.evaluating import benchmark_datasets, evaluate
from transferdx.pipeline.loading import (
    build_inputs,
    build_sources,
    load,
    load_inputs,
    load_query_set,
    records_as_source,
    source_records,
    trec_dl_runs,
    with_self_controls,
)
from transferdx.pipeline.rendering import render_tables
from transferdx.pipeline.settings import (
    DEFAULT_SOURCES,
    AnalysisSettings,
    AuditOptions,
    BenchmarkDataset,
    BenchmarkSettings,
    InputSettings,
)
from transferdx.pipeline.studying import StudyResult, study, training_plan, training_seeds
from transferdx.pipeline.training import train
from transferdx.training import TrainSettings

__all__ = [
    "DEFAULT_SOURCES",
    "AnalysisSettings",
    "Audit",
    "AuditOptions",
    "BenchmarkDataset",
    "BenchmarkSettings",
    "CleanResult",
    "EncoderLike",
    "FlagSettings",
    "InputError",
    "InputSettings",
    "PreparedAudit",
    "SemanticSettings",
    "StudyData",
    "StudyResult",
    "TrainSettings",
    "agree",
    "as_studies",
    "audit",
    "audit_prepared",
    "benchmark_datasets",
    "build_inputs",
    "build_sources",
    "clean",
    "encoder_spec",
    "evaluate",
    "load",
    "load_inputs",
    "load_query_set",
    "make_encoder",
    "make_tokenizer",
    "match",
    "no_records_message",
    "portable_label",
    "prepare_audit",
    "read_studies",
    "recorded_settings",
    "records_as_source",
    "render_tables",
    "require_records",
    "source_records",
    "study",
    "train",
    "training_plan",
    "training_seeds",
    "trec_dl_runs",
    "validate",
    "with_self_controls",
    "write_agreement",
    "write_matching",
    "write_validation",
]
