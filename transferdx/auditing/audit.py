"""The audit: records → per-row values (:mod:`~transferdx.auditing.values`) → each source pooled
(:mod:`~transferdx.auditing.pooling`) → :class:`AuditResult` (per-negative and per-record frames,
the profile with its flags, the negative-set descriptors, the suspects). One path, whatever ran the
encoder: a sharded audit's maps only fill the embedding cache this reads (:mod:`transferdx.shards`)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from transferdx.artifacts import content_hash
from transferdx.auditing.pooling import (
    SUSPECT_COLUMNS,
    SUSPECT_TEXT_COLUMNS,
    FlagSettings,
    Pooling,
    add_other_positive,
    composites,
    descriptor_kinds,
    judged_evaluation,
    recorded_suspicion_settings,
    suspicion,
)
from transferdx.auditing.profiles import (
    AuditProfile,
    apply_flags,
    catch_rate,
    false_negative_rates,
    flag_thresholds,
    profile_sources,
)
from transferdx.auditing.values import (
    RecordTexts,
    SemanticSettings,
    row_values,
    sorted_records,
    suspicion_inputs,
)
from transferdx.diagnostics.other_positive import other_positive
from transferdx.diagnostics.suspicion import SuspicionInputs
from transferdx.diagnostics.tokens import Tokenizer
from transferdx.embed.cache import EmbeddingCache, text_key
from transferdx.inputs.records import Exclusion, LoadResult, Record


@dataclass(frozen=True)
class AuditResult:
    """Everything an audit computed: per-negative and per-record frames, the profile, exclusions,
    the suspects. ``suspect_values`` is the suspects' table without their texts: ``texts`` reads
    them on request, for each suspect's record (``suspect_records``: rows of ``records``) and its
    ``neg_index`` — a heavily defective source has a suspect for every other negative, and three
    copied texts a suspect would be the audit's largest holder. :attr:`suspects` and
    :meth:`suspect_rows` give them with their texts (``texts`` None: without)."""

    negatives: pd.DataFrame
    records: pd.DataFrame
    profile: AuditProfile
    exclusions: tuple[Exclusion, ...]
    # §3.9: one row per suspected false negative of every source, those default cleaning removes first,
    # then most probable first
    suspect_values: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=SUSPECT_COLUMNS))
    # the reasons checked and α, δ (α, δ are "not_measured" in a lexical-only audit)
    suspicion: Mapping[str, Any] = field(default_factory=dict)
    # the suspicion scored against deep judgments (a TREC-DL layout with labels=single), or why not
    fn_evaluation: Mapping[str, Any] = field(default_factory=dict)
    texts: RecordTexts | None = field(default=None, repr=False)
    suspect_records: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64), repr=False)

    @property
    def suspects(self) -> pd.DataFrame:
        """Every suspect with its texts (:data:`SUSPECT_COLUMNS`), those default cleaning removes first,
        then most probable first."""
        return self.suspect_rows()

    def suspect_rows(self, rows: np.ndarray | None = None) -> pd.DataFrame:
        """The suspects at positions ``rows`` of :attr:`suspect_values` (default all), in that order,
        renumbered, with their texts (read for those rows only)."""
        table = self.suspect_values
        at = np.arange(len(table), dtype=np.int64) if rows is None else np.asarray(rows, dtype=np.int64)
        frame = table.iloc[at].reset_index(drop=True)
        if self.texts is None:
            return frame
        texts = (
            self.texts.of_negatives(self.suspect_records[at], frame["neg_index"].to_numpy())
            if len(at)
            else ((), (), ())
        )
        for name, column in zip(SUSPECT_TEXT_COLUMNS, texts, strict=True):
            frame[name] = _held(column)
        return frame[SUSPECT_COLUMNS]

    def summary(self) -> str:
        return self.profile.summary()


def _held(texts: Sequence[str]) -> pd.Series:
    """A column of the records' own text objects (object dtype): pandas ≥ 3 would copy each text
    into a new string array (about 1 kB a suspect measured at 2·10⁵ negatives; the suspects table was
    the audit's largest holder after the values)."""
    return pd.Series(texts, dtype=object)


def audit_records(
    loaded: LoadResult,
    tokenizer: Tokenizer,
    *,
    encoder: EmbeddingCache | None = None,
    semantic: SemanticSettings = SemanticSettings(),
    idf_corpus: str = "pooled",
    external_texts: Sequence[str] | None = None,
    seed: int = 0,
    resamples: int = 1000,
    confidence: float = 0.95,
    flags: FlagSettings = FlagSettings(),
    kinds: Mapping[str, str] | None = None,
    settings: Mapping[str, Any] | None = None,
) -> AuditResult:
    """Audit every source in ``loaded``: ψ always; the frozen-encoder statistics when ``encoder`` is
    given (vectors its cache holds are read, the rest encoded). ``kinds`` overrides the kind
    (genuine/control) of named sources."""
    records = sorted_records(loaded.records, kinds)
    negatives, per_record, vectors = row_values(records, tokenizer, encoder, semantic, seed, idf_corpus, external_texts)
    extra: dict[str, dict[str, Any]] = {}
    if vectors is not None:
        extra = composites(negatives, per_record, vectors, semantic, seed, resamples, confidence)
    del vectors  # before the probabilities: not held beside their working set
    inputs, calibrated = suspicion_inputs(records, negatives, per_record)
    hit = other_positive(records)
    p = Pooling(semantic, seed, resamples, confidence, flags, kinds, settings)
    descriptors = describe(records, loaded, encoder, semantic if encoder else None, idf_corpus, seed)
    return _pooled(loaded, negatives, per_record, inputs, calibrated, hit, extra, p, descriptors, RecordTexts(records))


def _pooled(
    loaded: LoadResult,
    negatives: pd.DataFrame,
    per_record: pd.DataFrame,
    inputs: SuspicionInputs,
    calibrated: np.ndarray | None,
    hit: np.ndarray,
    extra: dict[str, dict[str, Any]],
    p: Pooling,
    descriptors: dict[str, dict[str, Any]],
    texts: RecordTexts,
) -> AuditResult:
    """What the audit does after the per-row values (in the audit's order; ``inputs`` and
    ``calibrated``: :func:`~transferdx.auditing.values.suspicion_inputs`; ``hit``: each negative's
    other_positive; ``extra``: the composites): π̂ and the flags, other_positive, the judged rates,
    the profile and its flags, the descriptors (:func:`describe`, given), the judged evaluation. Of
    ``loaded`` it reads its exclusions, descriptors as loaded, judged false negatives and relevance
    grade."""
    scored = "s_qn" in negatives
    bootstrap: dict[str, Any] = {"seed": p.seed, "resamples": p.resamples, "confidence": p.confidence}
    suspects, suspect_records, priors = suspicion(
        negatives, per_record, inputs, p.semantic.suspicion, scored, calibrated, **bootstrap
    )
    for name, prior in priors.items():
        extra.setdefault(name, {}).update(prior)
    add_other_positive(negatives, per_record, hit)
    # every source the input names: those with records, and those whose every item was excluded
    sources = sorted(set(per_record["source"].astype(str)) | {e.source for e in loaded.exclusions if e.source})
    if loaded.false_negatives:
        for name, rates in false_negative_rates(loaded.false_negatives, sources, **bootstrap).items():
            extra.setdefault(name, {}).update(rates)
    profile = profile_sources(
        per_record,
        loaded.exclusions,
        **bootstrap,
        settings=p.settings,
        sources=sources,
        extra=extra,
        kinds={**descriptor_kinds(loaded.descriptors), **(p.kinds or {})},
    )
    thresholds = flag_thresholds(profile.rows, p.flags.mode, p.flags.fixed)
    rows = apply_flags(profile.rows, thresholds)
    recorded = recorded_suspicion_settings(p.semantic.suspicion, scored)
    for desc in descriptors.values():
        desc["fn_suspicion"] = recorded
    profile = replace(
        profile, rows=tuple(rows), thresholds=thresholds, descriptors=descriptors, catch_rate=catch_rate(rows)
    )
    evaluation = judged_evaluation(negatives, per_record, loaded.relevant_grade, p.semantic.suspicion, **bootstrap)
    exclusions = tuple(loaded.exclusions)
    return AuditResult(
        negatives, per_record, profile, exclusions, suspects, recorded, evaluation, texts, suspect_records
    )


def describe(
    records: Sequence[Record],
    loaded: LoadResult,
    encoder: EmbeddingCache | None,
    semantic: SemanticSettings | None,
    idf_corpus: str,
    seed: int,
) -> dict[str, dict[str, Any]]:
    """The negative-set descriptor of every source: how its negatives were made and what scored them."""
    distinct = dict.fromkeys(p.text for r in records for p in (*r.positives, *r.negatives))  # hash each text once
    corpus = sorted({text_key(t).hex() for t in distinct})
    corpus_hash = content_hash(corpus)
    by_source: dict[str, list[Record]] = {}
    for r in records:
        by_source.setdefault(r.source, []).append(r)
    excl: dict[str, Counter[str]] = {}
    for e in loaded.exclusions:
        excl.setdefault(e.source, Counter())[f"{e.unit}: {e.reason}"] += 1
    out = {}
    for name in sorted(set(by_source) | set(loaded.descriptors)):
        recs = by_source.get(name, [])
        ks = [len(r.negatives) for r in recs]
        base = dict(loaded.descriptors.get(name, {}))
        methods = Counter(n.method or "unknown" for r in recs for n in r.negatives)
        desc: dict[str, Any] = {
            "source": name,
            "corpus_hash": corpus_hash,
            "query_set": content_hash(sorted((r.qid, r.query) for r in recs))[:16],
            "n_queries": len(recs),
            "reference_positive": base.pop("reference_positive", "positives[0]"),
            "scorer": (
                {**encoder.scorer(), "tau": semantic.tau if semantic else None}
                if encoder is not None
                else "not_measured (lexical audit only)"
            ),
            "lexical_scorer": {"statistic": "psi", "idf_corpus": idf_corpus},
            "mining_method": base.pop("mining_method", "not recorded"),
            "negative_methods": dict(sorted(methods.items())),
            "candidate_pool": base.pop("candidate_pool", "not recorded"),
            "ranking_rule": base.pop("ranking_rule", "not recorded"),
            "slice": base.pop("slice", "as given"),
            "count_per_query": {
                "fixed": len(set(ks)) <= 1,
                "min": min(ks) if ks else 0,
                "max": max(ks) if ks else 0,
                "mean": float(np.mean(ks)) if ks else 0.0,
            },
            "exclusions": dict(sorted(excl.get(name, Counter()).items())),
            "seed": base.pop("seed", seed),
            "label_quality": label_quality(recs),
        }
        desc.update(base)
        out[name] = desc
    return out


def label_quality(records: Sequence[Record]) -> Any:
    """Shares of negatives by relevance judgment, or ``not_measured`` when none is judged."""
    judgments = [n.judgment for r in records for n in r.negatives]
    if not any(j is not None for j in judgments):
        return "not_measured"
    counts = Counter("unjudged" if j is None else f"judged_{j}" for j in judgments)
    total = len(judgments)
    return {"n_negatives": total, **{k: counts[k] / total for k in sorted(counts)}}
