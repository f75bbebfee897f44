"""The audit's per-row values: per negative and per record, from the records alone (ψ, the
frozen-encoder scores, the §3.9 text reasons and the calibrated probability). Nothing here pools a
source (that is :mod:`transferdx.auditing.pooling`). Pure apart from the encoder, which reads and
fills its embedding cache."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from transferdx.diagnostics.composite import CompositeSettings
from transferdx.diagnostics.fn_combined import agreement
from transferdx.diagnostics.lexical import PROGRESS_MIN, coverage_bucket, negative_residuality
from transferdx.diagnostics.miner import miner_scores
from transferdx.diagnostics.rows import IndexedRows
from transferdx.diagnostics.semantic import BANDS, BandCuts, buckets, in_batch_scores, record_scores
from transferdx.diagnostics.suspicion import SuspicionInputs, SuspicionSettings, probabilities, text_reasons
from transferdx.diagnostics.tokens import Tokenizer
from transferdx.embed.cache import EmbeddingCache, text_key
from transferdx.inputs.records import Record, passage_key


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


# Low-cardinality text columns held as categories (codes into their sorted distinct values): a row
# costs a byte instead of an Arrow string's ~15 (pandas 3's ``str``) or a pointer to a Python string.
CATEGORY_COLUMNS = ("source", "kind", "method", "relation", "band", "fn_reasons", "reasons")


def as_categories(frame: pd.DataFrame, columns: Sequence[str] = CATEGORY_COLUMNS) -> pd.DataFrame:
    """Each of ``columns`` that ``frame`` has, as a categorical whose categories are its distinct
    values, sorted (missing values stay missing), in place; returns ``frame``."""
    for col in columns:
        if col in frame:
            frame[col] = pd.Categorical(frame[col].astype("str"))
    return frame


def sorted_records(records: Iterable[Record], kinds: Mapping[str, str] | None) -> list[Record]:
    """``records`` in the audit's order, (source, qid), with ``kinds`` overriding their kind."""
    return sorted(
        (dataclasses.replace(r, kind=kinds[r.source]) if kinds and r.source in kinds else r for r in records),
        key=lambda r: (r.source, r.qid),
    )


Vectors = tuple[IndexedRows, IndexedRows, IndexedRows]  # (e_q, e_p, e_n): per record, per record, per negative


def row_values(
    records: Sequence[Record],
    tokenizer: Tokenizer,
    encoder: EmbeddingCache | None,
    semantic: SemanticSettings,
    seed: int,
    idf_corpus: str = "pooled",
    external_texts: Sequence[str] | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame, Vectors | None]:
    """The per-negative and per-record frames of ``records`` (in the audit's order:
    :func:`sorted_records`) — ψ under the ``idf_corpus`` IDF, each negative's metadata, and the
    frozen-encoder columns when ``encoder`` is given — and the embeddings they were scored on (None
    without the encoder), for the composites. The text reasons and the probability come after
    (:func:`suspicion_inputs`), once the caller has let go of the vectors: their working set and the
    vectors are not held at once."""
    negatives = negative_residuality(records, tokenizer, idf_corpus, external_texts)
    negatives["coverage"] = 1.0 - negatives["psi"]
    meta = [(n.method, n.relation, n.rank, n.judgment) for r in records for n in r.negatives]
    for i, column in enumerate(("method", "relation", "rank", "judgment")):
        negatives[column] = pd.array([m[i] for m in meta], dtype="Int64" if i >= 2 else object)
    # the miner's own scores where the file carries them (NaN where not): its s(q,n), and its positive
    # score as sentence-transformers' margins read it, the minimum over the record's positives
    negatives["miner_score"], negatives["miner_positive_score"] = miner_scores(records)
    per_record = _lexical_records(records, negatives)
    vectors = None
    if encoder is not None and records:
        vectors = _semantic(records, negatives, per_record, encoder, semantic, seed)
    as_categories(negatives)
    as_categories(per_record)
    return negatives, per_record, vectors


def suspicion_inputs(
    records: Sequence[Record], negatives: pd.DataFrame, per_record: pd.DataFrame
) -> tuple[SuspicionInputs, np.ndarray | None]:
    """What the §3.9 reasons read per negative — the text reasons
    (:func:`~transferdx.diagnostics.suspicion.text_reasons`, from one list of the records' ids and
    texts), the encoder's scores where it scored — and the calibrated probabilities
    (:func:`_calibrated`; None without the encoder)."""
    text = _text_inputs(records)
    hits = text_reasons(text)
    inputs = _suspicion_inputs(negatives, per_record, "s_qn" in negatives, hits)
    with_texts = dataclasses.replace(inputs, neg_ids=text.neg_ids, neg_texts=text.neg_texts)
    return inputs, _calibrated(records, with_texts)


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


def _semantic(
    records: Sequence[Record],
    negatives: pd.DataFrame,
    per_record: pd.DataFrame,
    encoder: EmbeddingCache,
    s: SemanticSettings,
    seed: int,
) -> Vectors:
    """Adds the frozen-encoder columns to ``negatives`` and ``per_record`` (in place); returns the
    embeddings they were scored on, for the composite
    (:func:`~transferdx.auditing.pooling.composites`). η is measured against
    :func:`background_texts` of these records.

    Memory: each distinct text's vector is held once (queries Q, passages P); the per-negative
    embeddings are gathers of their rows (:class:`IndexedRows`), scored ``s.chunk_negatives`` at
    a time, so the working set beyond the vectors and the output columns is bounded. The values do
    not depend on the chunking (tests: whole and chunked audits give the same bytes)."""
    counts = per_record["n_negatives"].to_numpy()
    owner = np.repeat(np.arange(len(records)), counts)
    (e_q, e_p, e_n), bg_vectors = _gathers(records, encoder, background_texts(records, s.background_size, seed))
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


def _gathers(
    records: Sequence[Record], encoder: EmbeddingCache, background: Sequence[str]
) -> tuple[Vectors, np.ndarray]:
    """(e_q, e_p, e_n) of ``records`` — per record, per record, per negative — and the vectors of
    the ``background`` texts (rows in its order): one request to the cache for the distinct queries,
    one for the distinct passages — positives[0], the negatives, then the background, each in
    first-seen order — so each distinct text's vector is held once."""
    queries, positives = [r.query for r in records], [r.positives[0].text for r in records]
    negatives = [n.text for r in records for n in r.negatives]
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


class RecordTexts:
    """The texts of the audit's rows, read from its records (in the audit's order): what the audit's
    result holds so that its tables get their query, positive and negative texts on request — the
    records' own string objects, not copies."""

    def __init__(self, records: Sequence[Record]) -> None:
        self.records = records
        counts = np.fromiter((len(r.negatives) for r in records), dtype=np.int64, count=len(records))
        self.starts = np.cumsum(counts) - counts  # each record's first row in the per-negative frame

    def of_negatives(self, at: np.ndarray, neg_index: np.ndarray) -> tuple[list[str], list[str], list[str]]:
        """For each record row ``at`` its query and positives[0], and the text of its negative
        ``neg_index`` (a suspect's three texts)."""
        recs = [self.records[i] for i in np.asarray(at).tolist()]
        negs = [r.negatives[int(k)].text for r, k in zip(recs, neg_index, strict=True)]
        return [r.query for r in recs], [r.positives[0].text for r in recs], negs

    def of_rows(self, rows: np.ndarray) -> tuple[list[str], list[str], list[str]]:
        """:meth:`of_negatives` of rows of the per-negative frame."""
        owner = np.searchsorted(self.starts, rows, side="right") - 1
        return self.of_negatives(owner, np.asarray(rows) - self.starts[owner])
