"""The audit verb: :func:`audit` composes load → sample the queries → the frozen encoder →
the controls built from the input itself (:func:`transferdx.pipeline.with_self_controls`) → the
audit (:mod:`transferdx.auditing`) and records its settings (:func:`recorded_settings`). An input
with nothing to audit is an error (:func:`no_records_message`, :func:`require_records`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from transferdx.artifacts import atomic_write_text, csv_text, safe_join
from transferdx.auditing.core import (
    AuditResult,
    Pooling,
    SemanticSettings,
    ShardValues,
    audit_records,
    audit_values,
    record_negative_texts,
)
from transferdx.auditing.report import exclusions_frame
from transferdx.auditing.result import Audit
from transferdx.embed import EmbeddingCache
from transferdx.inputs.records import LoadResult, Record, sample_queries
from transferdx.inputs.texts import sweep
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
    audit (:mod:`transferdx.pipeline.sharding`) prepares once per task and shares the rest."""

    loaded: LoadResult
    options: AuditOptions
    encoder: EmbeddingCache | None
    settings: dict[str, Any]

    def let_go(self) -> None:
        """Drop the records (and what the loader kept beside them): this prepared audit is spent —
        its ``loaded`` keeps the exclusions, the descriptors as loaded, the judged false negatives
        and the relevance grade. For a sharded audit's reduce that owns it: everything it still
        reads of the records it has read (digests, descriptors), the rows' texts come from the stat
        tasks' files, and whoever else holds this object no longer keeps the records alive."""
        spent = dataclasses.replace(self.loaded, records=[], tables=[], unwritable=[], origins={})
        object.__setattr__(self, "loaded", spent)
        sweep()  # the loaders' pools of distinct texts and passages would keep them alive


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
    if not loaded.records:  # nothing to audit: an error, not an empty profile
        raise ValueError(no_records_message(loaded, options.label or "the input"))
    loaded, sampled_out = sample_queries(loaded, options.sample_fraction, options.seed)
    cache = make_encoder(encoder, cache_dir) if options.semantic is not None else None
    loaded, built = with_self_controls(loaded, controls, kinds=options.kinds, encoder=cache, seed=options.seed)
    return PreparedAudit(loaded, options, cache, recorded_settings(options, cache, sampled_out) | built)


def pooling(prepared: PreparedAudit) -> Pooling:
    """The settings of the steps that pool each source, from ``prepared``'s options."""
    options = prepared.options
    return Pooling(
        encoder=prepared.encoder,
        semantic=options.semantic or SemanticSettings(),
        idf_corpus=options.idf,
        seed=options.seed,
        resamples=options.resamples,
        confidence=options.confidence,
        flags=options.flag_settings,
        kinds=dict(options.kinds),
        settings=prepared.settings,
    )


def audit_prepared(prepared: PreparedAudit) -> Audit:
    """The audit of a :class:`PreparedAudit`: ψ always, the frozen-encoder statistics when it has an
    encoder (vectors the cache holds are read, the rest encoded)."""
    loaded, options, p = prepared.loaded, prepared.options, pooling(prepared)
    result = audit_records(
        loaded,
        make_tokenizer(options.tokenizer, **options.tokenizer_options),
        encoder=p.encoder,
        semantic=p.semantic,
        idf_corpus=p.idf_corpus,
        external_texts=options.idf_texts,
        seed=p.seed,
        resamples=p.resamples,
        confidence=p.confidence,
        flags=p.flags,
        kinds=p.kinds,
        settings=p.settings,
    )
    return _audit(prepared, result)


def audit_prepared_values(
    prepared: PreparedAudit, values: ShardValues, composites: Mapping[str, Mapping[str, Any]] | None = None
) -> Audit:
    """The audit of a :class:`PreparedAudit` from its per-row values (query shards' values merged:
    :func:`~transferdx.auditing.core.merge_values`) — :func:`audit_prepared`'s result, bit for bit,
    without recomputing them (:func:`~transferdx.auditing.core.audit_values`; ``composites``: its
    :func:`~transferdx.auditing.core.values_composites` when computed before)."""
    return _audit(prepared, audit_values(prepared.loaded, values, pooling(prepared), composites))


def _audit(prepared: PreparedAudit, result: AuditResult) -> Audit:
    records = sorted(prepared.loaded.records, key=lambda r: (r.source, r.qid))  # the result's order
    return Audit(result, prepared.settings, record_negative_texts(records), input_path=prepared.options.label)


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

    Too big for one machine: :func:`transferdx.pipeline.sharding.audit_sharded` (the same bytes)."""
    prepared = prepare_audit(records, options, encoder=encoder, cache_dir=cache_dir, controls=controls, **overrides)
    return audit_prepared(prepared)
