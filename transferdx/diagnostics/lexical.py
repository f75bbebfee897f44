"""Lexical diagnostics (docs/design.md §3): IDF over a chosen corpus and lexical residuality ψ.

- idf(t) = ln(1 + (N − df(t) + 0.5) / (df(t) + 0.5)) over an IDF corpus of N documents; a token
  the corpus never contains has df = 0. Range: (0, ln(2N + 2)]; always > 0 because df ≤ N.
- ψ(q, n) = Σ_{t ∈ T(q) \\ T(n)} idf(t) / Σ_{t ∈ T(q)} idf(t), the IDF-weighted share of query
  tokens the negative does not cover. Range [0, 1]; higher = the negative covers less of the query.
  Undefined (NaN) when T(q) is empty. Coverage C = 1 − ψ.
- Failure bucket C ≥ 0.5 (:data:`COVERAGE_BUCKET_CUT`): the negative covers at least half the
  query's IDF mass, a lexical near-copy.
- The pooled IDF corpus counts each passage once by identity (normalised text), not by exact string.

Everything is vectorised and grows with the distinct texts and pairs, not with their copies: each
distinct text is tokenised once, documents are kept only on the query vocabulary (other tokens
cannot change ψ), negatives are integer ids into text tables, and each distinct (query, passage)
pair is scored once, by binary search over the documents' sorted (row, token) keys, in blocks.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from itertools import chain, pairwise, repeat
from operator import attrgetter

import numpy as np
import pandas as pd
import scipy.sparse as sp
from tqdm.auto import tqdm

from transferdx.diagnostics.suspicion import normalise_text
from transferdx.diagnostics.tokens import Tokenizer, token_stream
from transferdx.inputs.records import Record
from transferdx.inputs.texts import TextTable

PROGRESS_MIN = 200_000  # show a progress bar when tokenising at least this many texts
TEXT_CHUNK = 50_000  # texts tokenised per block (bounds memory on large collections)
ENTRY_BLOCK = 1 << 18  # (pair, query token) entries scored per block in residuality
COVERAGE_BUCKET_CUT = 0.5
"""Failure bucket ``c_ge_05`` (DESIGN §3.2): coverage C = 1 − ψ ≥ 0.5, the negative covers at least
half the query's IDF mass, a lexical near-copy (C ∈ [0, 1]; undefined ψ is never in the bucket)."""


def idf(df: np.ndarray, n_docs: int) -> np.ndarray:
    """idf = ln(1 + (N − df + 0.5)/(df + 0.5)); df ∈ [0, N]. Range (0, ln(2N + 2)]."""
    df = np.asarray(df, dtype=np.float64)
    if n_docs < 0 or np.any(df < 0) or np.any(df > n_docs):
        raise ValueError(f"document frequencies must lie in [0, N={n_docs}]")
    return np.log1p((n_docs - df + 0.5) / (df + 0.5))


def coverage_bucket(psi: np.ndarray) -> np.ndarray:
    """Failure bucket ``c_ge_05`` per negative: ψ defined and C = 1 − ψ ≥ :data:`COVERAGE_BUCKET_CUT`
    (boolean array)."""
    psi = np.asarray(psi, dtype=np.float64)
    return ~np.isnan(psi) & (1.0 - np.nan_to_num(psi, nan=1.0) >= COVERAGE_BUCKET_CUT)


@dataclass(frozen=True)
class TokenMatrices:
    """Binary token incidence on the query vocabulary: ``queries`` (n_q × V), ``docs`` (n_d × V)."""

    vocab: Mapping[str, int]
    queries: sp.csr_matrix
    docs: sp.csr_matrix


def _incidence_block(owner: np.ndarray, cols: np.ndarray, n_rows: int, n_vocab: int) -> tuple[np.ndarray, np.ndarray]:
    """(column indices, row counts) of the canonical CSR rows for (row, column) hits (``cols`` < 0:
    not in the vocabulary): pairs sorted by row then column, duplicates removed."""
    hit = cols >= 0
    width = max(n_vocab, 1)
    keys = np.sort(owner[hit] * width + cols[hit])
    keys = keys[np.concatenate([[True], keys[1:] != keys[:-1]])] if len(keys) else keys
    return keys % width, np.bincount(keys // width, minlength=n_rows)


def _stack(blocks: list[tuple[np.ndarray, np.ndarray]], n_vocab: int) -> sp.csr_matrix:
    """One CSR matrix (``n_vocab`` columns) from row blocks of (column indices, row counts)."""
    indices = np.concatenate([b[0] for b in blocks]) if blocks else np.zeros(0, dtype=np.int64)
    counts = np.concatenate([b[1] for b in blocks]) if blocks else np.zeros(0, dtype=np.int64)
    indptr = np.concatenate([[0], np.cumsum(counts)])
    return sp.csr_matrix((np.ones(len(indices)), indices, indptr), shape=(len(counts), n_vocab))


def _incidence(texts: Sequence[str], tokenizer: Tokenizer, vocab: Mapping[str, int], desc: str) -> sp.csr_matrix:
    """Rows = texts, columns = vocabulary; 1 where the text contains the token (canonical CSR).

    Texts are tokenised in chunks (``token_stream``), each text once; tokens are looked up in the
    vocabulary dict, and (text, token) pairs are deduplicated by sorting their keys.
    """
    blocks = []
    chunks = range(0, len(texts), TEXT_CHUNK)
    with tqdm(total=len(texts), desc=desc, unit="text", disable=len(texts) < PROGRESS_MIN, leave=False) as bar:
        for start in chunks:
            part = texts[start : start + TEXT_CHUNK]
            tokens, owner = token_stream(part, tokenizer)
            cols = np.fromiter(map(vocab.get, tokens, repeat(-1)), dtype=np.int64, count=len(tokens))
            blocks.append(_incidence_block(owner, cols, len(part), len(vocab)))
            bar.update(len(part))
    return _stack(blocks, len(vocab))


def query_incidence(query_texts: Sequence[str], tokenizer: Tokenizer) -> tuple[dict[str, int], sp.csr_matrix]:
    """The query vocabulary (token → column, distinct query tokens in first-seen order) and the
    queries' incidence on it, tokenising each text once (in chunks)."""
    vocab: dict[str, int] = {}
    blocks = []
    chunks = range(0, len(query_texts), TEXT_CHUNK)
    quiet = len(query_texts) < PROGRESS_MIN
    with tqdm(total=len(query_texts), desc="tokenise queries", unit="query", disable=quiet, leave=False) as bar:
        for start in chunks:
            part = query_texts[start : start + TEXT_CHUNK]
            tokens, owner = token_stream(part, tokenizer)
            for t in dict.fromkeys(tokens.tolist()):
                vocab.setdefault(t, len(vocab))
            cols = np.fromiter(map(vocab.__getitem__, tokens), dtype=np.int64, count=len(tokens))
            blocks.append(_incidence_block(owner, cols, len(part), len(vocab)))
            bar.update(len(part))
    return vocab, _stack(blocks, len(vocab))


def query_vocabulary(query_texts: Sequence[str], tokenizer: Tokenizer) -> dict[str, int]:
    """Token → column for the distinct query tokens, in first-seen order."""
    return query_incidence(query_texts, tokenizer)[0]


def token_matrices(query_texts: Sequence[str], doc_texts: Sequence[str], tokenizer: Tokenizer) -> TokenMatrices:
    """Tokenise each text once; the vocabulary is the query tokens in first-seen order."""
    vocab, queries = query_incidence(query_texts, tokenizer)
    docs = _incidence(doc_texts, tokenizer, vocab, "tokenise passages")
    return TokenMatrices(vocab, queries, docs)


def document_frequency(docs: sp.csr_matrix, rows: np.ndarray | None = None) -> tuple[np.ndarray, int]:
    """(df per vocabulary token, N) over ``docs`` (optionally only ``rows`` of it)."""
    sub = docs if rows is None else docs[np.asarray(rows, dtype=np.int64)]
    df = np.bincount(sub.indices, minlength=docs.shape[1]).astype(np.float64)
    return df, sub.shape[0]


def _sorted_keys(docs: sp.csr_matrix) -> tuple[np.ndarray, np.ndarray, int]:
    """(row × width + column for every stored entry, in increasing order; the entries' values;
    width) of ``docs`` in canonical form (duplicates summed, as scipy's element lookup reads them)."""
    docs = sp.csr_matrix(docs)
    if not docs.has_canonical_format:
        docs = docs.copy()
        docs.sum_duplicates()
    width = max(docs.shape[1], 1)
    rows = np.repeat(np.arange(docs.shape[0], dtype=np.int64), np.diff(docs.indptr))
    return rows * width + docs.indices.astype(np.int64), docs.data, width


def residuality(
    queries: sp.csr_matrix,
    docs: sp.csr_matrix,
    pair_query: np.ndarray,
    pair_doc: np.ndarray,
    idf_values: np.ndarray,
) -> np.ndarray:
    """ψ for each (query row, doc row) pair; NaN where the query has no token. Range [0, 1].

    Each pair expands to its query's tokens; the document side is a binary search for (doc row,
    token) among the documents' sorted entries, and the covered IDF mass is a bincount. Pairs are
    scored in blocks of about :data:`ENTRY_BLOCK` (pair, token) entries, so memory stays bounded.
    """
    pair_query = np.asarray(pair_query, dtype=np.int64)
    pair_doc = np.asarray(pair_doc, dtype=np.int64)
    indptr = queries.indptr.astype(np.int64)
    q_len = np.diff(indptr)
    q_row = np.repeat(np.arange(queries.shape[0], dtype=np.int64), q_len)
    total = np.bincount(q_row, weights=idf_values[queries.indices], minlength=queries.shape[0])
    doc_keys, doc_values, width = _sorted_keys(docs)

    per_pair = q_len[pair_query]
    ends = np.cumsum(per_pair)
    cuts = np.searchsorted(ends, np.arange(ENTRY_BLOCK, int(ends[-1]) if len(ends) else 0, ENTRY_BLOCK), "right")
    bounds = np.unique(np.concatenate([[0], cuts, [len(pair_query)]]).astype(np.int64))
    covered = np.zeros(len(pair_query))
    for a, b in pairwise(bounds.tolist()):
        counts = per_pair[a:b]
        entry_pair = np.repeat(np.arange(b - a, dtype=np.int64), counts)
        start = np.repeat(indptr[pair_query[a:b]] - (np.cumsum(counts) - counts), counts)
        cols = queries.indices[start + np.arange(len(entry_pair), dtype=np.int64)]
        keys = pair_doc[a:b][entry_pair] * width + cols
        found = np.zeros(len(keys), dtype=doc_values.dtype)
        if len(doc_keys) and len(keys):
            at = np.minimum(np.searchsorted(doc_keys, keys), len(doc_keys) - 1)
            hit = doc_keys[at] == keys
            found[hit] = doc_values[at[hit]]
        covered[a:b] = np.bincount(entry_pair, weights=idf_values[cols] * found, minlength=b - a)

    denom = total[pair_query]
    with np.errstate(invalid="ignore", divide="ignore"):
        psi = np.where(denom > 0, (denom - covered) / denom, np.nan)
    return np.clip(psi, 0.0, 1.0)


# ---------------------------------------------------------------------------------------------
# IDF corpora: each returns, per source, the (df, N) to use. Registry, not if-chains.
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class IdfContext:
    """What an IDF-corpus rule may use: the unique texts' matrix and which rows each source owns."""

    matrices: TokenMatrices
    source_rows: Mapping[str, np.ndarray]  # rows of matrices.docs among a source's positives+negatives
    external: sp.csr_matrix | None = None  # an external collection on the same vocabulary
    # row → the row of the first text with the same passage identity (normalised text, design §3):
    # whitespace or case variants of one passage count once in the pooled corpus
    identity: np.ndarray | None = None


def _passages(ctx: IdfContext, rows: np.ndarray) -> np.ndarray:
    """The distinct passages among ``rows``: one row per passage identity."""
    rows = rows.astype(np.int64)
    return np.unique(ctx.identity[rows] if ctx.identity is not None else rows)


def _pooled(ctx: IdfContext) -> dict[str, tuple[np.ndarray, int]]:
    rows = np.concatenate(list(ctx.source_rows.values())) if ctx.source_rows else np.array([], int)
    pooled = document_frequency(ctx.matrices.docs, _passages(ctx, rows))
    return {source: pooled for source in ctx.source_rows}


def _per_source(ctx: IdfContext) -> dict[str, tuple[np.ndarray, int]]:
    return {
        source: document_frequency(ctx.matrices.docs, _passages(ctx, rows)) for source, rows in ctx.source_rows.items()
    }


def _external(ctx: IdfContext) -> dict[str, tuple[np.ndarray, int]]:
    if ctx.external is None:
        raise ValueError("idf corpus 'external' needs an external passage collection (idf.path)")
    ext = document_frequency(ctx.external)
    return {source: ext for source in ctx.source_rows}


IDF_CORPORA: dict[str, Callable[[IdfContext], dict[str, tuple[np.ndarray, int]]]] = {
    "pooled": _pooled,
    "per_source": _per_source,
    "external": _external,
}


def get_idf_corpus(name: str) -> Callable[[IdfContext], dict[str, tuple[np.ndarray, int]]]:
    try:
        return IDF_CORPORA[name]
    except KeyError:
        raise ValueError(f"unknown IDF corpus {name!r}; valid: {sorted(IDF_CORPORA)}") from None


# ---------------------------------------------------------------------------------------------
# Records → per-negative ψ
# ---------------------------------------------------------------------------------------------


def _factorize(values: Sequence[str]) -> tuple[np.ndarray, list[str]]:
    """(codes, uniques in first-seen order) by exact string identity."""
    index: dict[str, int] = {}
    codes = np.fromiter((index.setdefault(v, len(index)) for v in values), dtype=np.int64, count=len(values))
    return codes, list(index)


def _by_identity(objects: Sequence[object]) -> tuple[np.ndarray, list[object]]:
    """(code of each object, the distinct objects in first-seen order), by object identity."""
    keys = np.fromiter(map(id, objects), dtype=np.uint64, count=len(objects))
    _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    return rank[inverse.reshape(-1)], [objects[i] for i in first[order]]


def passage_identity(texts: Sequence[str]) -> np.ndarray:
    """For each text, the index of the first text with the same :func:`normalise_text` (one
    passage, one identity: whitespace variants of a text are the same passage)."""
    first: dict[str, int] = {}
    return np.fromiter(
        (first.setdefault(normalise_text(t), i) for i, t in enumerate(texts)), dtype=np.int64, count=len(texts)
    )


@dataclass
class _Pairs:
    """The (query, passage) pairs of a list of records, as ids into the records' distinct texts."""

    queries: TextTable
    passages: TextTable  # negatives first, then positives (first-seen order)
    pair_q: np.ndarray
    pair_d: np.ndarray
    neg_codes: np.ndarray
    neg_distinct: list[object]
    source_codes: np.ndarray
    source_names: list[str]
    source_rows: dict[str, np.ndarray]  # rows of ``passages`` among each source's positives and negatives
    n_neg: np.ndarray


def _pairs(records: Sequence[Record]) -> _Pairs:
    n_neg = np.fromiter((len(r.negatives) for r in records), dtype=np.int64, count=len(records))
    n_pos = np.fromiter((len(r.positives) for r in records), dtype=np.int64, count=len(records))
    # loaded passages are interned (transferdx.inputs.texts): a repeated passage is one object, so
    # negatives are factorised by identity and texts and ids are read once per distinct object
    neg_codes, neg_distinct = _by_identity(list(chain.from_iterable(map(attrgetter("negatives"), records))))
    queries, passages = TextTable(), TextTable()
    pair_q = np.repeat(queries.ids(list(map(attrgetter("query"), records))), n_neg)
    pair_d = passages.ids(list(map(attrgetter("text"), neg_distinct)))[neg_codes]
    pos_d = passages.ids(list(map(attrgetter("text"), chain.from_iterable(map(attrgetter("positives"), records)))))
    source_codes, source_names = _factorize([r.source for r in records])
    pair_src = np.repeat(source_codes, n_neg)
    pos_src = np.repeat(source_codes, n_pos)
    source_rows = {
        name: np.unique(np.concatenate([pair_d[pair_src == i], pos_d[pos_src == i]]))
        for i, name in enumerate(source_names)
    }
    return _Pairs(
        queries, passages, pair_q, pair_d, neg_codes, neg_distinct, source_codes, source_names, source_rows, n_neg
    )


def _corpora(
    pairs: _Pairs, mats: TokenMatrices, tokenizer: Tokenizer, idf_corpus: str, external_texts: Sequence[str] | None
) -> dict[str, tuple[np.ndarray, int]]:
    rule = get_idf_corpus(idf_corpus)
    external = None
    if external_texts is not None:
        external = _incidence(external_texts, tokenizer, mats.vocab, "tokenise IDF corpus")
    return rule(IdfContext(mats, pairs.source_rows, external, passage_identity(pairs.passages.texts)))


def negative_residuality(
    records: Sequence[Record],
    tokenizer: Tokenizer,
    idf_corpus: str = "pooled",
    external_texts: Sequence[str] | None = None,
    texts: TextTable | None = None,
) -> pd.DataFrame:
    """One row per (record, negative): ``source, qid, neg_index, neg_id, psi``; with ``texts``, also
    ``query_id`` and ``text_id``: the ids of the query and of the negative's text in that table
    (texts new to it are added), so that a per-negative table need not hold texts.

    The pooled IDF corpus is the set of unique passages among all positives and negatives of all
    records passed in, one per passage identity (normalised text: Unicode NFKC, case-folded,
    whitespace collapsed; :func:`passage_identity`), so whitespace variants of one passage count once.

    Memory and time grow with the distinct texts and pairs, not with the copies: each distinct text
    is tokenised once, negatives are integer ids into text tables, and ψ is computed once per
    distinct (query, passage) pair among the sources that share one IDF corpus.
    """
    pairs = _pairs(records)
    mats = token_matrices(pairs.queries.texts, pairs.passages.texts, tokenizer)
    per_source = _corpora(pairs, mats, tokenizer, idf_corpus, external_texts)
    pair_src = np.repeat(pairs.source_codes, pairs.n_neg)
    corpora = [per_source[name] for name in pairs.source_names]
    psi = pair_residuality(mats, pairs.pair_q, pairs.pair_d, pair_src, corpora)
    n_neg = pairs.n_neg
    frame = pd.DataFrame(
        {
            "source": np.repeat(np.asarray([r.source for r in records], dtype=object), n_neg),
            "qid": np.repeat(np.asarray([r.qid for r in records], dtype=object), n_neg),
            "neg_index": np.arange(len(pairs.pair_q)) - np.repeat(np.cumsum(n_neg) - n_neg, n_neg),
            "neg_id": np.asarray(list(map(attrgetter("id"), pairs.neg_distinct)), dtype=object)[pairs.neg_codes],
            "psi": psi,
        }
    )
    if texts is not None:
        frame["query_id"] = texts.ids(pairs.queries.texts)[pairs.pair_q]
        frame["text_id"] = texts.ids(pairs.passages.texts)[pairs.pair_d]
    return frame


def pair_residuality(
    mats: TokenMatrices,
    pair_q: np.ndarray,
    pair_d: np.ndarray,
    pair_src: np.ndarray,
    corpora: Sequence[tuple[np.ndarray, int]],
) -> np.ndarray:
    """ψ per pair (query row, doc row) of source ``pair_src`` under that source's IDF corpus
    ``corpora[source]`` = (df, N). Sources sharing one corpus (the same df array and N, as every
    source under the pooled corpus) are scored together, each distinct (query, doc) pair once; ψ
    of a pair depends only on the pair and the IDF, so the values equal those of scoring every pair."""
    psi = np.full(len(pair_q), np.nan)
    groups: dict[tuple[int, int], list[int]] = {}
    for i, (df, n_docs) in enumerate(corpora):
        groups.setdefault((id(df), int(n_docs)), []).append(i)
    n_docs_rows = max(mats.docs.shape[0], 1)
    pair_keys = np.asarray(pair_q, dtype=np.int64) * n_docs_rows + np.asarray(pair_d, dtype=np.int64)
    for members in groups.values():
        df, n_docs = corpora[members[0]]
        mask = np.isin(pair_src, members) if len(members) < len(corpora) else None
        keys, inverse = np.unique(pair_keys if mask is None else pair_keys[mask], return_inverse=True)
        if not len(keys):
            continue
        values = residuality(mats.queries, mats.docs, keys // n_docs_rows, keys % n_docs_rows, idf(df, n_docs))
        if mask is None:
            psi = values[inverse.reshape(-1)]
        else:
            psi[mask] = values[inverse.reshape(-1)]
    return psi
