"""The audit pipeline: records → per-negative → per-record → per-source profile (+ flags and
negative-set descriptors). Pure apart from the encoder, which reads and fills its embedding cache."""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from transferdx.artifacts import content_hash
from transferdx.auditing.fn_eval import eval_frame, fn_evaluation, labels
from transferdx.auditing.profiles import (
    AuditProfile,
    apply_flags,
    catch_rate,
    false_negative_rates,
    flag_thresholds,
    profile_sources,
)
from transferdx.diagnostics.composite import CompositeSettings, ci_resamples, composite_with_ci, weights
from transferdx.diagnostics.fn_combined import agreement, load_combined
from transferdx.diagnostics.lexical import PROGRESS_MIN, IdfTables, coverage_bucket, idf_tables, negative_residuality
from transferdx.diagnostics.other_positive import PositiveOwners, other_positive, positive_owners
from transferdx.diagnostics.prior import em_prior_ci, identified
from transferdx.diagnostics.rows import IndexedRows
from transferdx.diagnostics.semantic import BANDS, BandCuts, buckets, in_batch_scores, record_scores
from transferdx.diagnostics.suspicion import (
    SuspicionInputs,
    SuspicionSettings,
    acted_on,
    checkable_reasons,
    margin_mining,
    probabilities,
    record_counts,
    suspect_negatives,
    suspect_order,
    suspicion_score,
    text_reasons,
)
from transferdx.diagnostics.tokens import Tokenizer
from transferdx.embed.cache import EmbeddingCache, text_key
from transferdx.inputs.records import Exclusion, LoadResult, Record, passage_key
from transferdx.resampling import bootstrap_rng, resample_counts


@dataclass(frozen=True)
class SemanticSettings:
    """Frozen-encoder settings: τ, band cut-offs, background sample, in-batch loss, composite."""

    tau: float = 0.05
    cuts: BandCuts = field(default_factory=BandCuts)
    background_size: int = 1000
    in_batch: bool = False
    batch_size: int = 32
    composite: CompositeSettings = field(default_factory=CompositeSettings)
    suspicion: SuspicionSettings = field(default_factory=SuspicionSettings)
    # negatives scored per chunk: bounds the working set beyond the vectors (values do not depend on it)
    chunk_negatives: int = 32_768

    def __post_init__(self) -> None:
        if self.chunk_negatives < 1:
            raise ValueError(f"chunk_negatives must be ≥ 1, got {self.chunk_negatives}")


@dataclass(frozen=True)
class FlagSettings:
    mode: str = "envelope"
    fixed: Mapping[str, float] = field(
        default_factory=lambda: {"rho": 0.870, "eta": 0.443, "psi": 0.529, "inversion": 0.083}
    )


SUSPECT_COLUMNS = [
    "source",
    "kind",
    "qid",
    "neg_index",
    "neg_id",
    "query",
    "positive",
    "negative",
    "s_qp",
    "s_qn",
    "s_pn",
    "fn_probability",
    "score",
    "reasons",
]


# Low-cardinality text columns held as categories (codes into their sorted distinct values): a row
# costs a byte instead of an Arrow string's ~15 (pandas 3's ``str``) or a pointer to a Python string.
# The one rule wherever a frame is built or put together (the one-process audit, a stat task, the
# reduce's merge), so every path gives equal frames; the CSV artifacts are the same bytes.
CATEGORY_COLUMNS = ("source", "kind", "method", "relation", "band", "fn_reasons", "reasons")


def as_categories(frame: pd.DataFrame, columns: Sequence[str] = CATEGORY_COLUMNS) -> pd.DataFrame:
    """Each of ``columns`` that ``frame`` has, as a categorical whose categories are its distinct
    values, sorted (missing values stay missing), in place; returns ``frame``."""
    for col in columns:
        if col in frame:
            frame[col] = pd.Categorical(frame[col].astype("str"))
    return frame


# the suspects' three texts, one per suspect
SUSPECT_TEXT_COLUMNS = ("query", "positive", "negative")


@dataclass(frozen=True)
class AuditResult:
    """Everything an audit computed: per-negative and per-record frames, the profile, exclusions,
    the suspects. ``suspect_values`` is the suspects' table without their texts, which
    ``suspect_texts`` reads on request (rows of that table → query, positive, negative): a heavily
    defective source has a suspect for every other negative, and a reduce that no longer holds the
    records would otherwise hold three decoded texts a suspect (0.8 GB at 5·10⁶ negatives); None:
    the table holds its text columns itself. :attr:`suspects` and :meth:`suspect_rows` give them
    with their texts."""

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
    suspect_texts: SuspectRowTexts | None = field(default=None, repr=False)

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
        if self.suspect_texts is None:
            return frame
        texts = self.suspect_texts(at) if len(at) else ((), (), ())
        for name, column in zip(SUSPECT_TEXT_COLUMNS, texts, strict=True):
            frame[name] = _held(column)
        return frame[SUSPECT_COLUMNS]

    def summary(self) -> str:
        return self.profile.summary()


def _descriptor_kinds(descriptors: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """The kind each described source has even without records: a control's descriptor says so."""
    return {
        name: "control" for name, d in descriptors.items() if str(d.get("mining_method", "")).startswith("control:")
    }


def _sorted_records(records: Iterable[Record], kinds: Mapping[str, str] | None) -> list[Record]:
    """``records`` in the audit's order, (source, qid), with ``kinds`` overriding their kind."""
    return sorted(
        (dataclasses.replace(r, kind=kinds[r.source]) if kinds and r.source in kinds else r for r in records),
        key=lambda r: (r.source, r.qid),
    )


@dataclass(frozen=True)
class IdfChoice:
    """ψ's IDF corpus by name (``pooled``, ``per_source``, ``external`` with its texts), computed
    from the records audited."""

    corpus: str = "pooled"
    external_texts: Sequence[str] | None = None


@dataclass(frozen=True)
class AuditContext:
    """What the per-negative and per-record statistics of a query need from the whole collection
    (docs/scale.md): ψ's vocabulary and IDF (:class:`~transferdx.diagnostics.lexical.IdfTables`),
    the background sample η is measured against (empty in a lexical audit), and which qids each
    positive passage belongs to (``other_positive``). Given it, a shard of the records split by
    query gets each of its rows' values as the whole collection's audit gives them, bit for bit
    (:func:`shard_values`)."""

    idf: IdfTables
    background: tuple[str, ...]
    positives: PositiveOwners


def audit_context(
    records: Sequence[Record],
    tokenizer: Tokenizer,
    *,
    idf_corpus: str = "pooled",
    external_texts: Sequence[str] | None = None,
    semantic: SemanticSettings | None = SemanticSettings(),
    seed: int = 0,
) -> AuditContext:
    """The :class:`AuditContext` of the whole collection ``records`` (``semantic`` None: a lexical
    audit, no background sample). The records are taken in the audit's order, (source, qid), whatever
    order they come in: ψ's vocabulary is their query tokens in first-seen order, and the order in
    which a query's IDF mass is summed follows it."""
    records = _sorted_records(records, None)
    return AuditContext(
        idf_tables(records, tokenizer, idf_corpus, external_texts),
        tuple(background_texts(records, semantic.background_size, seed)) if semantic is not None else (),
        positive_owners(records),
    )


@dataclass(frozen=True)
class ShardValues:
    """The per-negative and per-record values of some records, before anything that pools a source
    (π̂ and the flags it moves, the composite, the profile): ``negatives`` and ``records`` as the
    audit's frames have them up to that point, ``probability`` (p(false negative) at the detectors'
    training prior, per negative; None without the encoder), ``other_positive`` (per negative) and
    ``text_hits`` (each of the suspicion's text reasons per negative:
    :func:`~transferdx.diagnostics.suspicion.text_reasons`), so that the pooled steps read no text."""

    negatives: pd.DataFrame
    records: pd.DataFrame
    probability: np.ndarray | None
    other_positive: np.ndarray
    text_hits: Mapping[str, np.ndarray]


def audit_order(frame: pd.DataFrame) -> np.ndarray:
    """Row positions of ``frame`` (with ``source`` and ``qid``) in the audit's order, (source, qid)
    as Python orders the strings, stable: a record's negatives keep their order. Sorted on each
    column's ranks (:func:`string_ranks`), not on its strings: no fixed-width copy of every row's
    text (28 bytes a row for a 7-character qid)."""
    return np.lexsort((np.arange(len(frame)), string_ranks(frame["qid"]), string_ranks(frame["source"])))


def string_ranks(column: pd.Series) -> np.ndarray:
    """Each row's rank among the column's distinct values, in Python's order of their ``str``
    (code points); equal values, equal ranks. Range: 0 … distinct − 1."""
    codes, uniques = pd.factorize(column)
    names = np.array([str(u) for u in uniques], dtype=object)
    rank = np.empty(len(names), dtype=np.int64)
    rank[sorted(range(len(names)), key=names.__getitem__)] = np.arange(len(names))
    return rank[codes]


def merge_values(parts: Iterable[ShardValues]) -> ShardValues:
    """The :class:`ShardValues` of query shards (each qid in one of them) as one, in the audit's
    order (source, qid): what :func:`record_values` gives for their union, when each part came from
    :func:`shard_values` under that union's context. Range: the rows of all parts, each once.
    ``parts`` may be a generator (e.g. shards read from disk one by one): the parts are let go once
    concatenated, so at most two copies of the rows are held at once."""
    negs: list[pd.DataFrame] = []
    recs: list[pd.DataFrame] = []
    probs: list[np.ndarray | None] = []
    others: list[np.ndarray] = []
    hits: list[Mapping[str, np.ndarray]] = []
    for p in parts:
        negs.append(p.negatives)
        recs.append(p.records)
        probs.append(p.probability)
        others.append(p.other_positive)
        hits.append(p.text_hits)
    if not negs:
        raise ValueError("no shard values to merge")
    negatives = pd.concat(negs, ignore_index=True)
    records = pd.concat(recs, ignore_index=True)
    negs.clear()
    recs.clear()
    at = audit_order(negatives)
    probability = None
    if all(p is not None for p in probs):
        probability = np.concatenate([p for p in probs if p is not None])[at]
    probs.clear()
    other = np.concatenate(others)[at]
    text_hits = {name: np.concatenate([h[name] for h in hits])[at] for name in hits[0]}
    negatives = negatives.take(at).reset_index(drop=True)
    records = records.take(audit_order(records)).reset_index(drop=True)
    # categories again: shards with other distinct values concatenate to strings
    return ShardValues(as_categories(negatives), as_categories(records), probability, other, text_hits)


def _values(
    records: Sequence[Record],
    tokenizer: Tokenizer,
    encoder: EmbeddingCache | None,
    semantic: SemanticSettings,
    seed: int,
    *,
    idf: IdfChoice | IdfTables,
    background: Sequence[str] | None,
    owners: PositiveOwners | None,
) -> tuple[ShardValues, Vectors | None]:
    """:class:`ShardValues` of ``records`` (sorted as the audit sorts them) without the text reasons
    and the probability, and the embeddings scored (None without the encoder); ``idf``,
    ``background`` and ``owners`` from an :class:`AuditContext`, or computed from these records (an
    :class:`IdfChoice`, None, None). The text reasons and the probability come after
    (:func:`_with_text_values`), once the caller has let go of the vectors: their working set and
    the vectors are not held at once."""
    if isinstance(idf, IdfTables):
        negatives = negative_residuality(records, tokenizer, tables=idf)
    else:
        negatives = negative_residuality(records, tokenizer, idf.corpus, idf.external_texts)
    negatives["coverage"] = 1.0 - negatives["psi"]
    meta = [(n.method, n.relation, n.rank, n.judgment) for r in records for n in r.negatives]
    for i, column in enumerate(("method", "relation", "rank", "judgment")):
        negatives[column] = pd.array([m[i] for m in meta], dtype="Int64" if i >= 2 else object)
    per_record = _lexical_records(records, negatives)
    rows = None
    if encoder is not None and records:
        rows = _semantic(records, negatives, per_record, encoder, semantic, seed, background)
    as_categories(negatives)
    as_categories(per_record)
    return ShardValues(negatives, per_record, None, other_positive(records, owners), {}), rows


def _with_text_values(records: Sequence[Record], values: ShardValues) -> ShardValues:
    """``values`` with what reads the records' texts, from one list of their ids and texts: the text
    reasons (:func:`~transferdx.diagnostics.suspicion.text_reasons`: here, where the texts are — a
    stat task — so that the pooled steps read none) and :func:`_calibrated`'s probabilities (the
    other sources' agreement compares passages by id and text; None when no encoder scored them)."""
    text = _text_inputs(records)
    hits = text_reasons(text)
    inputs = _suspicion_inputs(values.negatives, values.records, "s_qn" in values.negatives, hits)
    inputs = dataclasses.replace(inputs, neg_ids=text.neg_ids, neg_texts=text.neg_texts)
    return dataclasses.replace(values, probability=_calibrated(records, inputs), text_hits=hits)


def record_values(
    records: Iterable[Record],
    tokenizer: Tokenizer,
    *,
    encoder: EmbeddingCache | None = None,
    semantic: SemanticSettings = SemanticSettings(),
    seed: int = 0,
    idf: IdfChoice = IdfChoice(),
    kinds: Mapping[str, str] | None = None,
) -> ShardValues:
    """The per-negative and per-record values of a whole collection, as :func:`audit_records`
    computes them before it pools each source (ψ's IDF, the background sample and the positives'
    owners from these records; records in the audit's order, (source, qid))."""
    records = _sorted_records(records, kinds)
    values = _values(records, tokenizer, encoder, semantic, seed, idf=idf, background=None, owners=None)[0]
    return _with_text_values(records, values)  # the vectors already let go (not held beside its working set)


def shard_values(
    records: Iterable[Record],
    tokenizer: Tokenizer,
    context: AuditContext,
    *,
    encoder: EmbeddingCache | None = None,
    semantic: SemanticSettings = SemanticSettings(),
    seed: int = 0,
    kinds: Mapping[str, str] | None = None,
) -> ShardValues:
    """The per-negative and per-record values of a shard of a collection — every record of each of
    its qids, of every source — given the collection's :func:`audit_context`: its rows are the ones
    :func:`audit_records` computes for them over the whole collection, bit for bit, before π̂, the
    flags, the composite and the profile pool each source (tests: DL19's six runs in 1–4 shards).
    The embeddings are the cache's: the same vectors give the same values."""
    if semantic.in_batch:
        raise ValueError("the in-batch loss mixes queries of every shard: it cannot be computed on a shard")
    records = _sorted_records(records, kinds)
    values = _values(
        records,
        tokenizer,
        encoder,
        semantic,
        seed,
        idf=context.idf,
        background=context.background if encoder is not None else None,
        owners=context.positives,
    )[0]
    return _with_text_values(records, values)


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
    given. ``kinds`` overrides the kind (genuine/control) of named sources."""
    records = _sorted_records(loaded.records, kinds)
    values, vectors = _values(
        records,
        tokenizer,
        encoder,
        semantic,
        seed,
        idf=IdfChoice(idf_corpus, external_texts),
        background=None,
        owners=None,
    )
    extra: dict[str, dict[str, Any]] = {}
    if vectors is not None:
        extra = _composites(values.negatives, values.records, vectors, semantic, seed, resamples, confidence)
    del vectors  # before the probabilities, as before the values were split: not held beside their working set
    values = _with_text_values(records, values)
    pooling = Pooling(encoder, semantic, idf_corpus, seed, resamples, confidence, flags, kinds, settings)
    return _pooled(loaded, values, extra, pooling, _described(records, loaded, pooling), record_texts(records))


@dataclass(frozen=True)
class Pooling:
    """The settings of the steps that pool each source (π̂ and the flags, the composite, the profile,
    the descriptors): :func:`audit_records`' keyword arguments after the per-row values."""

    encoder: EmbeddingCache | None = None
    semantic: SemanticSettings = SemanticSettings()
    idf_corpus: str = "pooled"
    seed: int = 0
    resamples: int = 1000
    confidence: float = 0.95
    flags: FlagSettings = FlagSettings()
    kinds: Mapping[str, str] | None = None
    settings: Mapping[str, Any] | None = None


# the values the composites read (:func:`source_composites`), so a reduce can read only these
# columns of the shards' values before it reads every one (``s_qn``: present in a semantic audit)
COMPOSITE_COLUMNS = {
    "negatives": ("source", "qid", "psi", "rho", "eta", "s_qn"),
    "records": ("source", "qid", "n_negatives"),
}


# a column of texts, one per row: a list of the records' strings, or an object array of them
TextColumn = Sequence[str] | np.ndarray


def audit_values(
    loaded: LoadResult,
    values: ShardValues,
    pooling: Pooling = Pooling(),
    composites: Mapping[str, Mapping[str, Any]] | None = None,
) -> AuditResult:
    """The audit of ``loaded`` from its per-row values — the query shards' :func:`shard_values` put
    together by :func:`merge_values` — and the pooled steps: the same result as :func:`audit_records`
    on those records with the same settings, bit for bit (tests: DL19 in 1–4 query shards). The
    composite reads each source's vectors from ``pooling.encoder``'s cache, one source at a time
    (:func:`source_composites`), so the whole collection's vectors are never held at once;
    ``composites``: computed before (e.g. on the values' composite columns alone), so that the
    vectors and every value are never held together. A reduce that no longer holds the records
    calls :func:`pooled_values` with their texts read elsewhere.
    Raises ValueError when ``values`` are not those of ``loaded``'s records (another input, a shard
    missing)."""
    records = _sorted_records(loaded.records, pooling.kinds)
    check_keys(values, record_keys(records))
    if composites is None:
        composites = source_composites(record_source_texts(records), values, pooling)
    texts, descriptors = record_texts(records), _described(records, loaded, pooling)
    return pooled_values(loaded, values, pooling, composites, descriptors, texts)


def pooled_values(
    loaded: LoadResult,
    values: ShardValues,
    pooling: Pooling,
    composites: Mapping[str, Mapping[str, Any]],
    descriptors: dict[str, dict[str, Any]],
    texts: SuspectTexts,
) -> AuditResult:
    """:func:`audit_values` given what it reads off the records — each source's composite
    (:func:`source_composites`), the descriptors (:func:`describe`) and the suspects' texts — so
    that ``loaded`` needs no record: its exclusions, descriptors as loaded, judged false negatives
    and relevance grade. ``values``: every row, in the audit's order (:func:`merge_values`)."""
    return _pooled(loaded, values, {name: dict(row) for name, row in composites.items()}, pooling, descriptors, texts)


@dataclass(frozen=True)
class RecordKeys:
    """What identifies the records an audit's values belong to, without holding them: how many
    records and negatives, and SHA-256 over each record's (source, qid) in the audit's order."""

    n_records: int
    n_negatives: int
    digest: str


def _keys_digest(sources: Iterable[str], qids: Iterable[str]) -> str:
    import hashlib

    digest = hashlib.sha256()
    for source, qid in zip(sources, qids, strict=True):
        digest.update(f"{source}\x00{qid}\n".encode())
    return digest.hexdigest()


def record_keys(records: Sequence[Record]) -> RecordKeys:
    """:class:`RecordKeys` of ``records`` (in the audit's order)."""
    n_negatives = sum(len(r.negatives) for r in records)
    return RecordKeys(len(records), n_negatives, _keys_digest((r.source for r in records), (r.qid for r in records)))


def check_keys(values: ShardValues, keys: RecordKeys) -> None:
    """ValueError unless ``values`` are the rows of the records ``keys`` names (a shard missing,
    another input's values, or rows out of the audit's order)."""
    check_row_keys(values.records, len(values.negatives), keys)


def check_row_keys(records: pd.DataFrame, n_negatives: int, keys: RecordKeys) -> None:
    """:func:`check_keys` of per-record rows (``source``, ``qid``) and how many negatives they hold."""
    if len(records) != keys.n_records or n_negatives != keys.n_negatives:
        raise ValueError(
            f"the values hold {len(records)} records and {n_negatives} negatives; the input has "
            f"{keys.n_records} records: a shard is missing or the values are another input's"
        )
    if _keys_digest(records["source"].astype(str), records["qid"].astype(str)) != keys.digest:
        raise ValueError("the values' (source, qid) rows are not the input's records: they are another input's")


def input_facts(loaded: LoadResult, pooling: Pooling) -> tuple[RecordKeys, dict[str, dict[str, Any]]]:
    """What :func:`pooled_values` reads of ``loaded``'s records besides their texts: their keys (the
    values are checked against them) and the descriptors (:func:`describe`) — so that a reduce can
    let the records go before it pools."""
    records = _sorted_records(loaded.records, pooling.kinds)
    return record_keys(records), _described(records, loaded, pooling)


# a negative's texts in the audit's result: (rows of its per-negative frame) → their queries and
# their negatives' texts (``Audit.negatives``)
NegativeTexts = Callable[[np.ndarray], tuple[TextColumn, TextColumn]]


def record_negative_texts(records: Sequence[Record]) -> NegativeTexts:
    """:data:`NegativeTexts` read from ``records`` (in the audit's order): their own strings."""
    counts = np.fromiter((len(r.negatives) for r in records), dtype=np.int64, count=len(records))
    starts = np.cumsum(counts) - counts

    def texts(rows: np.ndarray) -> tuple[TextColumn, TextColumn]:
        owner = np.searchsorted(starts, rows, side="right") - 1
        recs = [records[i] for i in owner.tolist()]
        k = (np.asarray(rows) - starts[owner]).tolist()
        return [r.query for r in recs], [r.negatives[j].text for r, j in zip(recs, k, strict=True)]

    return texts


# a source's texts for its composite: (its records, as rows of the audit's per-record frame, in
# order) → per record its query and positives[0], and the texts of those records' negatives in order
SourceTexts = Callable[[np.ndarray], tuple[TextColumn, TextColumn, TextColumn]]


def record_source_texts(records: Sequence[Record]) -> SourceTexts:
    """:data:`SourceTexts` read from ``records`` (in the audit's order): their own strings."""

    def texts(rows: np.ndarray) -> tuple[TextColumn, TextColumn, TextColumn]:
        recs = [records[i] for i in rows.tolist()]
        negatives = [n.text for r in recs for n in r.negatives]
        return [r.query for r in recs], [r.positives[0].text for r in recs], negatives

    return texts


def _gathers(
    records: Sequence[Record], encoder: EmbeddingCache, background: Sequence[str] = ()
) -> tuple[Vectors, np.ndarray]:
    """(e_q, e_p, e_n) of ``records`` — per record, per record, per negative — and the vectors of
    the ``background`` texts: :func:`text_gathers` of the records' own texts."""
    negatives = [n.text for r in records for n in r.negatives]
    queries, positives = [r.query for r in records], [r.positives[0].text for r in records]
    return text_gathers(queries, positives, negatives, encoder, background)


def text_gathers(
    queries: TextColumn,
    positives: TextColumn,
    negatives: TextColumn,
    encoder: EmbeddingCache,
    background: Sequence[str] = (),
) -> tuple[Vectors, np.ndarray]:
    """(e_q, e_p, e_n) of records given per record its query and positives[0] and their negatives'
    texts, and the vectors of the ``background`` texts (rows in its order): one request to the cache
    for the distinct queries, one for the distinct passages — positives[0], the negatives, then the
    background, each in first-seen order — so each distinct text's vector is held once."""
    distinct_queries = list(dict.fromkeys(queries))
    passages = list(dict.fromkeys([*positives, *negatives, *background]))
    q_vec = encoder.embed(distinct_queries, "query")
    p_vec = encoder.embed(passages, "passage")
    q_at = {t: i for i, t in enumerate(distinct_queries)}
    p_at = {t: i for i, t in enumerate(passages)}
    q_rows = np.fromiter((q_at[t] for t in queries), dtype=np.int64, count=len(queries))
    p_rows = np.fromiter((p_at[t] for t in positives), dtype=np.int64, count=len(positives))
    n_rows = np.fromiter((p_at[t] for t in negatives), dtype=np.int64, count=len(negatives))
    bg = p_vec[[p_at[t] for t in background]]
    return (IndexedRows(q_vec, q_rows), IndexedRows(p_vec, p_rows), IndexedRows(p_vec, n_rows)), bg


def source_composites(texts: SourceTexts, values: ShardValues, pooling: Pooling) -> dict[str, dict[str, Any]]:
    """:func:`source_composite` of each source (``values`` in the audit's order; empty for a lexical
    audit or without ``pooling.encoder``), its rows selected from the source column (no str copy of
    each row). Needs only :data:`COMPOSITE_COLUMNS`."""
    if pooling.encoder is None or "s_qn" not in values.negatives:
        return {}
    sources, neg_sources = values.records["source"], values.negatives["source"]
    out: dict[str, dict[str, Any]] = {}
    for name in sorted({str(s) for s in sources.unique()}):
        rec_rows = np.flatnonzero((sources == name).to_numpy(bool))
        neg_rows = np.flatnonzero((neg_sources == name).to_numpy(bool))
        negs, recs = values.negatives.iloc[neg_rows], values.records.iloc[rec_rows]
        out.update(source_composite(texts, rec_rows, negs, recs, pooling))
    return out


def source_composite(
    texts: SourceTexts, rec_rows: np.ndarray, negatives: pd.DataFrame, records: pd.DataFrame, pooling: Pooling
) -> dict[str, dict[str, Any]]:
    """:func:`_composites` of one source — ``negatives`` and ``records`` its rows of the values, in the
    audit's order; ``rec_rows`` those records' rows in the audit's per-record frame, for which
    ``texts`` gives the texts — its vectors read from ``pooling.encoder``'s cache
    (:func:`text_gathers`) and let go on return: a source's composite and CI depend only on its own
    rows, so they are the ones the whole collection's vectors give, and only one source's vectors
    are held at a time (a reduce reads each source's rows alone:
    :func:`~transferdx.pipeline.sharding.store_composites`)."""
    if pooling.encoder is None:
        raise ValueError("a composite needs the encoder")
    vectors = text_gathers(*texts(rec_rows), pooling.encoder)[0]
    return _composites(
        negatives, records, vectors, pooling.semantic, pooling.seed, pooling.resamples, pooling.confidence
    )


# the suspects' three texts: (each suspect's record, as a row of the audit's per-record frame; its
# negative's index in the record) → (queries, positives[0], negatives), one per suspect
SuspectTexts = Callable[[np.ndarray, np.ndarray], tuple[TextColumn, TextColumn, TextColumn]]


# the texts of some rows of a suspects table: (positions in it) → (queries, positives[0], negatives)
SuspectRowTexts = Callable[[np.ndarray], tuple[TextColumn, TextColumn, TextColumn]]


def record_texts(records: Sequence[Record]) -> SuspectTexts:
    """:data:`SuspectTexts` read from ``records`` (in the audit's order): their own string objects,
    not copies."""

    def texts(at: np.ndarray, neg_index: np.ndarray) -> tuple[TextColumn, TextColumn, TextColumn]:
        recs = [records[i] for i in at]
        negs = [r.negatives[int(k)].text for r, k in zip(recs, neg_index, strict=True)]
        return [r.query for r in recs], [r.positives[0].text for r in recs], negs

    return texts


def _described(records: Sequence[Record], loaded: LoadResult, p: Pooling) -> dict[str, dict[str, Any]]:
    """:func:`describe` under ``p``'s settings (what the descriptors count is read off the records)."""
    return describe(records, loaded, p.encoder, p.semantic if p.encoder else None, p.idf_corpus, p.seed)


def _pooled(
    loaded: LoadResult,
    values: ShardValues,
    extra: dict[str, dict[str, Any]],
    p: Pooling,
    descriptors: dict[str, dict[str, Any]],
    texts: SuspectTexts,
) -> AuditResult:
    """What the audit does after the per-row values (``values`` in the audit's order, ``extra`` the
    composites): π̂ and the flags, other_positive, the judged rates, the profile and its flags, the
    descriptors (:func:`describe`, given), the judged evaluation. It reads no record: of ``loaded``
    its exclusions, descriptors as loaded, judged false negatives and relevance grade; the suspects'
    texts from ``texts``."""
    negatives, per_record, hit = values.negatives, values.records, values.other_positive
    scored = "s_qn" in negatives
    # from the values alone: the text reasons came with them, the probabilities too (None: lexical)
    inputs = _suspicion_inputs(negatives, per_record, scored, values.text_hits)
    calibrated = values.probability
    del values
    suspects, suspect_texts, priors = _suspicion(
        texts,
        negatives,
        per_record,
        inputs,
        p.semantic.suspicion,
        scored,
        calibrated,
        seed=p.seed,
        resamples=p.resamples,
        confidence=p.confidence,
    )
    for name, prior in priors.items():
        extra.setdefault(name, {}).update(prior)
    _add_other_positive(negatives, per_record, hit)
    # every source the input names: those with records, and those whose every item was excluded
    sources = sorted(set(per_record["source"].astype(str)) | {e.source for e in loaded.exclusions if e.source})
    if loaded.false_negatives:
        fn = false_negative_rates(
            loaded.false_negatives,
            sources,
            seed=p.seed,
            resamples=p.resamples,
            confidence=p.confidence,
        )
        for name, rates in fn.items():
            extra.setdefault(name, {}).update(rates)
    profile = profile_sources(
        per_record,
        loaded.exclusions,
        seed=p.seed,
        resamples=p.resamples,
        confidence=p.confidence,
        settings=p.settings,
        sources=sources,
        extra=extra,
        kinds={**_descriptor_kinds(loaded.descriptors), **(p.kinds or {})},
    )
    thresholds = flag_thresholds(profile.rows, p.flags.mode, p.flags.fixed)
    rows = apply_flags(profile.rows, thresholds)
    suspicion = recorded_suspicion_settings(p.semantic.suspicion, scored)
    for desc in descriptors.values():
        desc["fn_suspicion"] = suspicion
    profile = dataclasses.replace(
        profile, rows=tuple(rows), thresholds=thresholds, descriptors=descriptors, catch_rate=catch_rate(rows)
    )
    evaluation = judged_evaluation(
        negatives,
        per_record,
        loaded.relevant_grade,
        p.semantic.suspicion,
        seed=p.seed,
        resamples=p.resamples,
        confidence=p.confidence,
    )
    return AuditResult(
        negatives, per_record, profile, tuple(loaded.exclusions), suspects, suspicion, evaluation, suspect_texts
    )


def recorded_suspicion_settings(s: SuspicionSettings, scored: bool) -> dict[str, Any]:
    """What the §3.9 suspicion checked: the reasons, the score rule, and α and δ where an encoder
    scored (α only matters for ``rule=positive_aware``)."""
    return {
        "reasons_checked": list(checkable_reasons(scored, s.rule)),
        "rule": s.rule if scored else "not_measured",
        "alpha": s.alpha if scored else "not_measured",
        "delta": s.delta if scored else "not_measured",
    }


def judged_evaluation(
    negatives: pd.DataFrame,
    per_record: pd.DataFrame,
    relevant_grade: int | None,
    s: SuspicionSettings,
    *,
    seed: int,
    resamples: int,
    confidence: float,
) -> dict[str, Any]:
    """The suspicion scored against deep judgments (:func:`transferdx.auditing.fn_eval.fn_evaluation`)
    where the input has graded judgments, an encoder scored and some negative is judged relevant;
    otherwise ``{"status": "not_measured", "reason": ...}``."""
    if relevant_grade is None or "judgment" not in negatives:
        return {"status": "not_measured", "reason": "the input carries no graded judgments"}
    if "s_qn" not in negatives:
        return {"status": "not_measured", "reason": "lexical-only audit (the rule needs the encoder)"}
    if not (labels(negatives["judgment"], relevant_grade)).any():
        return {
            "status": "not_measured",
            "reason": f"no negative is judged >= {relevant_grade} (load a TREC-DL layout with labels=single)",
        }
    frame = eval_frame(negatives, per_record)
    result = fn_evaluation(
        frame, relevant_grade, alpha=s.alpha, delta=s.delta, seed=seed, resamples=resamples, confidence=confidence
    )
    return {"status": "measured", **result}


def _held(texts: TextColumn) -> pd.Series:
    """A column of the records' own text objects (object dtype): pandas ≥ 3 would copy each text
    into a new string array (about 1 kB a suspect measured at 2·10⁵ negatives; the suspects table was
    the audit's largest holder after the values)."""
    return pd.Series(texts, dtype=object)


def _suspicion(
    texts: SuspectTexts,
    negatives: pd.DataFrame,
    per_record: pd.DataFrame,
    inputs: SuspicionInputs,
    s: SuspicionSettings,
    scored: bool,
    calibrated: np.ndarray | None,
    *,
    seed: int = 0,
    resamples: int = 1000,
    confidence: float = 0.95,
) -> tuple[pd.DataFrame, SuspectRowTexts, dict[str, dict[str, float]]]:
    """Adds the §3.9 columns to ``negatives`` (``fn_<reason>``, ``fn_reasons``, ``fn_suspect``) and
    ``per_record`` (``n_fn_suspect``, ``n_fn_<reason>``) in place; returns the suspects table
    without its texts, the function that reads them (:data:`SuspectRowTexts`; what
    :class:`AuditResult` holds) and each source's π̂. The table: one row per negative with
    ``fn_suspect`` (the one rule of :func:`~transferdx.diagnostics.suspicion.suspect_negatives`),
    every source's (suspects.csv holds the genuine sources' rows, control_suspects.csv the
    controls'), sorted by what default cleaning removes first (a reason of ``ACT_REASONS``), then
    ``fn_probability`` descending (undefined last), then s(q,n) − α·s(q,p) descending (undefined
    last), then source, qid, neg_index. The encoder reasons reuse the audit's embeddings;
    ``inputs``: :func:`_suspicion_inputs`; ``calibrated``: :func:`_calibrated`'s probabilities (None
    without the encoder); ``texts``: the suspects' query, positive and negative texts
    (:data:`SuspectTexts`), read for the suspects only and only when asked (a table written, shown
    or returned with its texts)."""
    owner = inputs.owner
    nan = np.full(len(owner), np.nan)
    s_qp = inputs.s_qp if inputs.s_qp is not None else nan
    s_qn = inputs.s_qn if inputs.s_qn is not None else nan
    s_pn = inputs.s_pn if inputs.s_pn is not None else nan
    priors: dict[str, dict[str, float]] = {}
    if calibrated is not None:
        scores = (s_qp, s_qn, s.alpha) if scored else None
        priors = source_priors(per_record, owner, calibrated, seed, resamples, confidence, scores)
        inputs = dataclasses.replace(inputs, probability=calibrated)
    flags = as_categories(suspect_negatives(inputs, s), ("fn_reasons",))  # converted once, then shared
    for col in flags.columns:
        negatives[col] = flags[col].to_numpy() if col == "fn_suspect" else flags[col].array
    for col, values in record_counts(flags, owner, len(per_record)).items():
        per_record[col] = values

    rows = np.flatnonzero(flags["fn_suspect"].to_numpy(bool))
    prob = flags["fn_probability"].to_numpy(dtype=np.float64)[rows]
    score = suspicion_score(s_qp[rows], s_qn[rows], s.alpha) if scored else nan[rows]
    neg_index = negatives["neg_index"].to_numpy()[rows].astype(np.int64)
    sources, qids = per_record["source"].to_numpy(dtype=object), per_record["qid"].to_numpy(dtype=object)
    # sorted before the table is built (each column gathered once, the table never reordered)
    order = suspect_order(prob, score, sources[owner[rows]], qids[owner[rows]], neg_index, acted_on(flags)[rows])
    rows, prob, score, neg_index = rows[order], prob[order], score[order], neg_index[order]
    at = owner[rows]
    suspects = pd.DataFrame(
        {
            "source": per_record["source"].array.take(at),
            "kind": per_record["kind"].array.take(at),
            "qid": per_record["qid"].array.take(at),
            "neg_index": neg_index,
            "neg_id": negatives["neg_id"].array.take(rows),
            "s_qp": s_qp[rows],
            "s_qn": s_qn[rows],
            "s_pn": s_pn[rows],
            "fn_probability": prob,
            "score": score,
            "reasons": flags["fn_reasons"].to_numpy()[rows],
        },
        columns=[c for c in SUSPECT_COLUMNS if c not in SUSPECT_TEXT_COLUMNS],
    )

    def suspect_texts(positions: np.ndarray) -> tuple[TextColumn, TextColumn, TextColumn]:
        return texts(at[positions], neg_index[positions])

    return as_categories(suspects), suspect_texts, priors


def _text_inputs(records: Sequence[Record]) -> SuspicionInputs:
    """What the §3.9 text reasons read: per negative its record (``owner``), id and text; per record
    its positives' texts (references to the records' own strings)."""
    counts = np.array([len(r.negatives) for r in records], dtype=np.int64)
    return SuspicionInputs(
        owner=np.repeat(np.arange(len(records)), counts),
        neg_ids=[n.id for r in records for n in r.negatives],
        neg_texts=[n.text for r in records for n in r.negatives],
        positives=[[p.text for p in r.positives] for r in records],
    )


def _suspicion_inputs(
    negatives: pd.DataFrame, per_record: pd.DataFrame, scored: bool, text_hits: Mapping[str, np.ndarray]
) -> SuspicionInputs:
    """What the §3.9 reasons read, per negative, from the values alone: the text reasons as computed
    with them (``text_hits``), the encoder's scores when ``scored``; no text."""
    owner = np.repeat(np.arange(len(per_record)), per_record["n_negatives"].to_numpy(dtype=np.int64))
    return SuspicionInputs(
        owner=owner,
        neg_ids=(),
        neg_texts=(),
        positives=(),
        text_hits=text_hits,
        s_qp=per_record["s_qp"].to_numpy(dtype=np.float64)[owner] if scored else None,
        s_qn=negatives["s_qn"].to_numpy(dtype=np.float64) if scored else None,
        s_pn=negatives["s_pn"].to_numpy(dtype=np.float64) if scored else None,
        coverage=negatives["coverage"].to_numpy(dtype=np.float64),
        position=negatives["neg_index"].to_numpy(dtype=np.float64),
    )


def _calibrated(records: Sequence[Record], inputs: SuspicionInputs) -> np.ndarray | None:
    """p(false negative) per negative at the detectors' training prior (what ``fn_probability`` reports:
    it): the other sources' agreement on the query (a query's records of every source are all
    here), then :func:`~transferdx.diagnostics.suspicion.probabilities`. None without the encoder."""
    if inputs.s_qn is None:
        return None
    share, best = agreement(
        np.asarray([r.qid for r in records], dtype=object),
        np.asarray([r.source for r in records], dtype=object),
        np.asarray([r.kind == "genuine" for r in records], dtype=bool),
        inputs.owner,
        np.asarray([passage_key(i, t) for i, t in zip(inputs.neg_ids, inputs.neg_texts, strict=True)], dtype=object),
    )
    return probabilities(dataclasses.replace(inputs, agree_share=share, agree_best=best))


PRIOR_STREAM = 0xF2  # the prior's bootstrap stream key, next to the false-negative rates' 0xF1
# Why fn_probability is never moved to the source's estimated share π̂ (issue 54): on 42 files mined the
# way users mine (sentence-transformers' mine_hard_negatives over TREC-DL19/DL21 with the audit's own
# encoder, a static model and BM25; top-k, windows, score caps, margins) the estimate's interval
# covered the judged share on 15 of the 30 files where it was inside (0, 1), fell on 0 or 1 on the
# other 12, and moving the probabilities to it made them worse calibrated than at the training share in
# 8 of 16 regime × year cells and better in 4 (a BM25 file's judged share 0.33 was estimated 0.000
# [0.000, 0.062]): experiments/results/fn_mined/RESULTS.md. Label shift, the estimate's assumption,
# does not hold between a miner's output and TREC-DL's top-8.
PRIOR_WHY = "experiments/results/fn_mined/RESULTS.md"


def source_priors(
    records: pd.DataFrame,
    owner: np.ndarray,
    p: np.ndarray,
    seed: int,
    resamples: int,
    confidence: float,
    scores: tuple[np.ndarray, np.ndarray, float] | None = None,
) -> dict[str, dict[str, float]]:
    """Per source (``records``: one row per record with ``source``, ``qid``, ``kind``; ``owner``: each
    negative's record; ``p``: the calibrated probabilities): π̂, the EM estimate of its share of false
    negatives with its bootstrap CI over the source's records
    (:func:`~transferdx.diagnostics.prior.em_prior_ci`; genuine sources only, a control's CI is NaN) —
    a diagnostic: nothing is moved to it (:data:`PRIOR_WHY`). The share is **not identified** where π̂
    falls on 1, or on 0 while the source's negatives show a mining margin under the audit's encoder
    (``scores``: per negative s(q,p), s(q,n) and α; :func:`~transferdx.diagnostics.suspicion.margin_mining`):
    no mix of the detectors' false and true negatives explains the file, as when its miner filtered
    under this encoder; then ``fn_prior`` and its CI are NaN and ``fn_prior_boundary`` is the boundary
    (NaN otherwise). π̂ = 0 without a margin (easy negatives) stands. Returns ``{source: {fn_prior,
    fn_prior_ci_low, fn_prior_ci_high, fn_prior_boundary}}``."""
    train_prior = load_combined().prior
    source_of = records["source"].to_numpy(dtype=object)
    qids, kinds = records["qid"].to_numpy(dtype=object), records["kind"].to_numpy(dtype=object)
    out: dict[str, dict[str, float]] = {}
    for name in dict.fromkeys(source_of.tolist()):
        recs = np.flatnonzero(source_of == name)
        rows = np.flatnonzero(np.isin(owner, recs))
        if not len(rows):
            continue
        local = np.searchsorted(recs, owner[rows])
        rng = bootstrap_rng(seed, qids[recs].tolist(), PRIOR_STREAM)
        # the interval only for genuine sources: a control gets the estimate alone
        genuine = kinds[recs[0]] == "genuine"
        est = em_prior_ci(p[rows], local, train_prior, rng, resamples if genuine else 0, confidence)
        margin = scores is not None and margin_mining(scores[0][rows], scores[1][rows], scores[2]) is not None
        if not identified(est.prior) and (est.prior > 0 or margin):
            out[str(name)] = dict.fromkeys(("fn_prior", "fn_prior_ci_low", "fn_prior_ci_high"), math.nan)
            out[str(name)]["fn_prior_boundary"] = est.prior
            continue
        out[str(name)] = {
            "fn_prior": est.prior,
            "fn_prior_ci_low": est.low,
            "fn_prior_ci_high": est.high,
            "fn_prior_boundary": math.nan,
        }
    return out


def _add_other_positive(negatives: pd.DataFrame, per_record: pd.DataFrame, hit: np.ndarray) -> None:
    """Adds ``other_positive`` to ``negatives`` (the negative is a positive of another qid, not of its
    own: :func:`~transferdx.diagnostics.other_positive.other_positive`) and ``n_other_positive`` to
    ``per_record``, in place. Not a suspicion reason; the source rate ``other_positive_rate`` feeds the
    absolute flag ``copies_other_positive``."""
    owner = np.repeat(np.arange(len(per_record)), per_record["n_negatives"].to_numpy(dtype=np.int64))
    negatives["other_positive"] = hit
    per_record["n_other_positive"] = np.bincount(owner, weights=hit, minlength=len(per_record)).astype(np.int64)


def _lexical_records(records: Sequence[Record], negatives: pd.DataFrame) -> pd.DataFrame:
    counts = np.array([len(r.negatives) for r in records], dtype=np.int64)
    owner = np.repeat(np.arange(len(records)), counts)
    psi = negatives["psi"].to_numpy(dtype=np.float64)
    defined = ~np.isnan(psi)
    n_def = np.bincount(owner, weights=defined, minlength=len(records))
    with np.errstate(invalid="ignore", divide="ignore"):
        rec_psi = np.where(
            n_def > 0, np.bincount(owner, weights=np.where(defined, psi, 0), minlength=len(records)) / n_def, np.nan
        )
    frame = pd.DataFrame(
        {
            "source": [r.source for r in records],
            "kind": [r.kind for r in records],
            "qid": [r.qid for r in records],
            "n_negatives": counts,
            "psi": rec_psi,
            "coverage": 1.0 - rec_psi,
        }
    )
    frame["n_psi_defined"] = n_def.astype(np.int64)
    near_copy = coverage_bucket(psi)
    frame["n_bucket_c_ge_05"] = np.bincount(owner, weights=near_copy, minlength=len(records)).astype(np.int64)
    return frame


def background_texts(records: Sequence[Record], size: int, seed: int) -> list[str]:
    """A fixed, seeded sample of ``size`` passages from the pool (unique positive and negative texts,
    in text-hash order so the sample does not depend on input order)."""
    pool = sorted({p.text for r in records for p in (*r.positives, *r.negatives)}, key=text_key)
    if size >= len(pool):
        return pool
    picks = np.random.default_rng([seed, 0xB6]).choice(len(pool), size=size, replace=False)
    return [pool[i] for i in sorted(picks)]


Vectors = tuple[IndexedRows, IndexedRows, IndexedRows]  # (e_q, e_p, e_n): per record, per record, per negative


def _semantic(
    records: Sequence[Record],
    negatives: pd.DataFrame,
    per_record: pd.DataFrame,
    encoder: EmbeddingCache,
    s: SemanticSettings,
    seed: int,
    background: Sequence[str] | None = None,
) -> Vectors:
    """Adds the frozen-encoder columns to ``negatives`` and ``per_record`` (in place); returns the
    embeddings they were scored on, for the composite (:func:`_composites`). ``background``: the
    sample η is measured against (default: :func:`background_texts` of these records; a shard is
    given the whole collection's).

    Memory: each distinct text's vector is held once (queries Q, passages P); the per-negative
    embeddings are gathers of their rows (:class:`IndexedRows`), scored ``s.chunk_negatives`` at
    a time, so the working set beyond the vectors and the output columns is bounded. The values do
    not depend on the chunking (tests: whole and chunked audits give the same bytes)."""
    counts = per_record["n_negatives"].to_numpy()
    owner = np.repeat(np.arange(len(records)), counts)
    if background is None:
        background = background_texts(records, s.background_size, seed)
    (e_q, e_p, e_n), bg_vectors = _gathers(records, encoder, background)
    bg = bg_vectors.mean(axis=0)
    del bg_vectors

    extra = None
    if s.in_batch:
        extra = [np.zeros(0)] * len(records)
        sources = per_record["source"].to_numpy()
        for name in sorted(set(sources)):
            rows = np.flatnonzero(sources == name)
            order = np.random.default_rng([seed, 0x1B]).permutation(len(rows))
            scores = in_batch_scores(e_q.take(rows), e_p.take(rows), s.batch_size, order)
            for i, g in enumerate(rows):
                extra[g] = scores[i]
    neg, rec = _chunked_scores(e_q, e_p, e_n, counts, bg, extra, s)

    negatives["s_qn"] = neg["s_qn"]
    negatives["rho"] = neg["rho"]
    negatives["eta"] = neg["eta"]
    negatives["hardness"] = neg["hardness"]
    negatives["band"] = np.asarray(BANDS, dtype=object)[neg["band"]]
    negatives["pi"] = neg["pi"]
    negatives["energy"] = neg["energy"]
    negatives["s_pn"] = neg["s_pn"]
    for key in ("s_qp", "background", "rho", "eta", "inversion", "margin", "loss", "energy", "hardness"):
        per_record[key] = rec[key]
    margin = rec["margin"]
    per_record["margin_lt0"] = (margin < 0).astype(np.float64)
    per_record["margin_eq0"] = (margin == 0).astype(np.float64)
    per_record["margin_gt0"] = (margin > 0).astype(np.float64)
    n = len(records)
    for i, name in enumerate(BANDS):
        per_record[f"n_band_{name}"] = np.bincount(owner, weights=neg["band"] == i, minlength=n).astype(np.int64)
    for name, hit in buckets(neg["rho"], neg["eta"]).items():
        per_record[f"n_bucket_{name}"] = np.bincount(owner, weights=hit, minlength=n).astype(np.int64)
    return e_q, e_p, e_n


def _composites(
    negatives: pd.DataFrame,
    per_record: pd.DataFrame,
    vectors: Vectors,
    s: SemanticSettings,
    seed: int,
    resamples: int = 1000,
    confidence: float = 0.95,
) -> dict[str, dict[str, Any]]:
    """The per-source composites with their percentile bootstrap CIs over records (``<form>_ci_low``
    / ``<form>_ci_high``; the source's own stream, so the same resamples as its other statistics),
    from the embeddings :func:`_semantic` scored."""
    e_q, e_p, e_n = vectors
    owner = np.repeat(np.arange(len(per_record)), per_record["n_negatives"].to_numpy())
    w = weights(
        negatives["rho"].to_numpy(dtype=np.float64),
        negatives["eta"].to_numpy(dtype=np.float64),
        negatives["psi"].to_numpy(dtype=np.float64),
        s.composite,
    )
    neg_source = negatives["source"].to_numpy()
    rec_source = per_record["source"].to_numpy()
    composites: dict[str, dict[str, Any]] = {}
    for name in sorted(set(neg_source)):
        mask = np.flatnonzero(neg_source == name)
        rec_rows = np.flatnonzero(rec_source == name)  # the source's records, in profile order
        n_resamples = ci_resamples(len(mask), resamples, s.composite)
        estimates = composite_with_ci(
            e_q.take(owner[mask]),
            e_p.take(owner[mask]),
            e_n.take(mask),
            w[mask],
            np.searchsorted(rec_rows, owner[mask]),
            _shown(
                resample_counts(
                    len(rec_rows), bootstrap_rng(seed, per_record["qid"].to_numpy()[rec_rows]), n_resamples
                ),
                n_resamples,
                f"composite CI {name}",
                n_resamples * len(mask) >= COMPOSITE_PROGRESS_MIN,
            ),
            confidence,
            s.composite,
        )
        composites[name] = {}
        for form, est in estimates.items():
            composites[name][f"composite_{form}"] = est.value
            composites[name][f"composite_{form}_ci_low"] = est.ci_low
            composites[name][f"composite_{form}_ci_high"] = est.ci_high
        composites[name]["composite_ci_resamples"] = n_resamples
        composites[name]["embedding_dim"] = int(e_n.shape[1])
    return composites


# the composite CI shows a progress bar from this many resamples × negatives (about 30 s on 2 cores)
COMPOSITE_PROGRESS_MIN = 10_000_000


def _shown(chunks: Iterable[np.ndarray], total: int, desc: str, show: bool) -> Iterator[np.ndarray]:
    """``chunks`` of resamples as they come, with a progress bar of ``total`` resamples when ``show``."""
    with tqdm(total=total, desc=desc, unit="resample", disable=not show, leave=False) as bar:
        for chunk in chunks:
            yield chunk
            bar.update(len(chunk))


def _chunked_scores(
    e_q: IndexedRows,
    e_p: IndexedRows,
    e_n: IndexedRows,
    counts: np.ndarray,
    background: np.ndarray,
    extra: list[np.ndarray] | None,
    s: SemanticSettings,
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """:func:`record_scores` over consecutive chunks of whole records, each with at most
    ``s.chunk_negatives`` negatives (or one record), plus s(p,n) per negative; the chunks' values
    written into full-length arrays. Every value is per negative or per record, so the result is the
    same bytes whatever the chunk size."""
    counts = np.asarray(counts, dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(counts)])
    n_rec, n_neg = len(counts), int(starts[-1])
    neg: dict[str, np.ndarray] = {}
    rec: dict[str, np.ndarray] = {}
    a = 0
    with tqdm(total=n_neg, desc="score negatives", unit="negative", disable=n_neg < PROGRESS_MIN, leave=False) as bar:
        while a < n_rec:
            b = max(a + 1, int(np.searchsorted(starts, starts[a] + s.chunk_negatives, side="right")) - 1)
            b = min(b, n_rec)
            lo, hi = int(starts[a]), int(starts[b])
            q, p, k = e_q[a:b], e_p[a:b], counts[a:b]
            n_c = e_n[lo:hi]
            chunk_neg, chunk_rec = record_scores(
                q, p, n_c, k, s.tau, background, s.cuts, extra[a:b] if extra is not None else None
            )
            chunk_neg["s_pn"] = np.einsum("ij,ij->i", np.repeat(p, k, axis=0), n_c) if hi > lo else np.zeros(0)
            for key, values in chunk_neg.items():
                if key not in neg:
                    neg[key] = np.empty(n_neg, dtype=values.dtype)
                neg[key][lo:hi] = values
            for key, values in chunk_rec.items():
                if key not in rec:
                    rec[key] = np.empty(n_rec, dtype=values.dtype)
                rec[key][a:b] = values
            bar.update(hi - lo)
            a = b
    return neg, rec


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
