"""The audit verb: :func:`audit` composes load → sample the queries → the frozen encoder →
the controls built from the input itself (:func:`transferdx.pipeline.with_self_controls`) → the
audit (:mod:`transferdx.auditing`) and records its settings (:func:`recorded_settings`). An input
with nothing to audit is an error (:func:`no_records_message`, :func:`require_records`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from transferdx.artifacts import atomic_write_text, csv_text, safe_join
from transferdx.auditing.audit import audit_records
from transferdx.auditing.report import exclusions_frame
from transferdx.auditing.result import Audit
from transferdx.auditing.values import SemanticSettings
from transferdx.embed import EmbeddingCache
from transferdx.inputs.hub import hub_label, is_hub_spec
from transferdx.inputs.records import LoadResult, Record, sample_queries
from transferdx.inputs.registry import as_cleaned_copy, cleaned_copy_facts, cleaned_label
from transferdx.pipeline.encoders import EncoderLike, make_encoder, make_tokenizer
from transferdx.pipeline.loading import load, with_self_controls
from transferdx.pipeline.settings import AuditOptions


def no_records_message(loaded: LoadResult, where: object) -> str:
    """Why an input gives nothing to audit: how many items were excluded, and the first of them."""
    ex = [f"{e.file}:{e.line}: field '{e.field}': {e.reason}" for e in loaded.exclusions[:1]]
    why = f"{len(loaded.exclusions)} excluded, first {ex[0]}" if ex else "empty"
    return f"no records to audit in {where}: {why}"


def require_records(loaded: LoadResult, label: str | None, out: Path) -> None:
    """An input with nothing left to audit is an error (exit 2); what was excluded is written to
    ``out/exclusions.csv`` first, so the user can see why."""
    if loaded.records or not loaded.exclusions:
        return
    atomic_write_text(safe_join(out, "exclusions.csv"), csv_text(exclusions_frame(tuple(loaded.exclusions))))
    raise ValueError(f"{no_records_message(loaded, label)}; all in {out.resolve() / 'exclusions.csv'}")


def portable_label(label: str | Path) -> str:
    """An input as artifacts name it: a path by its last component (file or folder name), so the
    same data gives the same bytes wherever it lives, a ``transferdx-clean`` copy as
    ``cleaned/<name>`` (told apart from the original it was cleaned from), a Hub dataset
    (``hf:OWNER/NAME…``) as given (a local repository folder by its name: :func:`hub_label`); anything
    else (a dataset name) as it is."""
    text = str(label)
    if is_hub_spec(text):
        return hub_label(text)
    if "/" in text or "\\" in text or Path(text).exists():
        return cleaned_label(text) or Path(text).name or text
    return text


def command_settings(options: AuditOptions) -> dict[str, Any]:
    """What the settings of a command-line audit add for the commands it prints
    (:func:`transferdx.auditing.commands.clean_command`) and for report.md: ``input``, the input read
    as an absolute path, and ``read_with``, the other settings the input was read with (``data`` and
    its ``data.*`` overrides, ``diagnostics``). Empty for an audit called from Python; never in
    profile.json (which names the input by its name only, :func:`portable_label`)."""
    rest = {str(k): v for k, v in options.command.items() if k != "input"}
    out: dict[str, Any] = {"input": str(options.command["input"])} if "input" in options.command else {}
    return out | ({"read_with": rest} if rest else {})


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
            encoder_runtime=str(encoder.runtime),
            tau=semantic.tau,
            in_batch=semantic.in_batch,
            background_size=semantic.background_size,
            composite_eps=semantic.composite.eps,
        )
        if semantic.composite.resamples is None:  # the audit's resamples, up to a size (None: any)
            settings["composite_ci_max_negatives"] = semantic.composite.max_negatives
        else:
            settings["composite_resamples"] = semantic.composite.resamples
    return settings


@dataclasses.dataclass(frozen=True)
class PreparedAudit:
    """What an audit runs on, after loading and before any statistic: the records (sampled, with the
    controls built from the input), the options, the frozen encoder's cache and the settings the
    artifacts record. :func:`audit` is :func:`prepare_audit` then :func:`audit_prepared`; a sharded
    audit (:mod:`transferdx.shards`) prepares once per task."""

    loaded: LoadResult
    options: AuditOptions
    encoder: EmbeddingCache | None
    settings: dict[str, Any]


def prepare_audit(
    records: str | Path | LoadResult | Sequence[Record] | Any,
    options: AuditOptions | None = None,
    *,
    encoder: EncoderLike | None = "minilm_l6",
    cache_dir: str | Path | None = None,
    controls: str | Sequence[str] = "auto",
    **overrides: Any,
) -> PreparedAudit:
    """Load ``records``, sample the queries, build the controls: everything :func:`audit` does
    before the statistics (arguments as :func:`audit`'s)."""
    options = dataclasses.replace(options or AuditOptions(), **overrides)
    if options.label is None and isinstance(records, (str, Path)):
        options = dataclasses.replace(options, label=str(records))
    loaded = load(records, on_error=options.on_error)
    if isinstance(records, (str, Path)) and (cleaned := cleaned_copy_facts(records)) is not None:
        loaded = as_cleaned_copy(loaded, cleaned)
    if not loaded.records:  # nothing to audit: an error, not an empty profile
        raise ValueError(no_records_message(loaded, options.label or "the input"))
    loaded, sampled_out = sample_queries(loaded, options.sample_fraction, options.seed)
    cache = make_encoder(encoder, cache_dir) if options.semantic is not None else None
    loaded, built = with_self_controls(loaded, controls, kinds=options.kinds, encoder=cache, seed=options.seed)
    return PreparedAudit(loaded, options, cache, recorded_settings(options, cache, sampled_out) | built)


def audit_prepared(prepared: PreparedAudit) -> Audit:
    """The audit of a :class:`PreparedAudit`: ψ always, the frozen-encoder statistics when it has an
    encoder (vectors the cache holds are read, the rest encoded)."""
    loaded, options = prepared.loaded, prepared.options
    result = audit_records(
        loaded,
        make_tokenizer(options.tokenizer, **options.tokenizer_options),
        encoder=prepared.encoder,
        semantic=options.semantic or SemanticSettings(),
        idf_corpus=options.idf,
        external_texts=options.idf_texts,
        seed=options.seed,
        resamples=options.resamples,
        confidence=options.confidence,
        flags=options.flag_settings,
        kinds=dict(options.kinds),
        settings=prepared.settings,
    )
    return Audit(result, prepared.settings | command_settings(options), input_path=options.label)


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
    two genuine sources or no control), ``"all"``, a list of names, or ``"none"``.

    Too big for one machine: :func:`transferdx.shards.audit_sharded` (the same bytes)."""
    prepared = prepare_audit(records, options, encoder=encoder, cache_dir=cache_dir, controls=controls, **overrides)
    return audit_prepared(prepared)
