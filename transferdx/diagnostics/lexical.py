"""Lexical diagnostics (docs/design.md §3): IDF over a chosen corpus and lexical residuality ψ.

- idf(t) = ln(1 + (N − df(t) + 0.5) / (df(t) + 0.5)) over an IDF corpus of N documents; a token
  the corpus never contains has df = 0. Range: (0, ln(2N + 2)]; always > 0 because df ≤ N.
- ψ(q, n) = Σ_{t ∈ T(q) \\ T(n)} idf(t) / Σ_{t ∈ T(q)} idf(t), the IDF-weighted share of query
  tokens the negative does not cover. Range [0, 1]; higher = the negative covers less of the query.
  Undefined (NaN) when T(q) is empty. Coverage C = 1 − ψ.

Everything is vectorised: each unique text is tokenised once, documents are kept only on the query
vocabulary (other tokens cannot change ψ), and pairs are scored with sparse row products.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from itertools import repeat

import numpy as np
import pandas as pd
import scipy.sparse as sp
from tqdm.auto import tqdm

from transferdx.diagnostics.tokens import Tokenizer, token_stream
from transferdx.inputs.records import Record

PROGRESS_MIN = 200_000  # show a progress bar when tokenising at least this many texts
CHUNK = 50_000  # texts tokenised per block (bounds memory on large collections)


def idf(df: np.ndarray, n_docs: int) -> np.ndarray:
    """idf = ln(1 + (N − df + 0.5)/(df + 0.5)); df ∈ [0, N]. Range (0, ln(2N + 2)]."""
    df = np.asarray(df, dtype=np.float64)
    if n_docs < 0 or np.any(df < 0) or np.any(df > n_docs):
        raise ValueError(f"document frequencies must lie in [0, N={n_docs}]")
    return np.log1p((n_docs - df + 0.5) / (df + 0.5))


@dataclass(frozen=True)
class TokenMatrices:
    """Binary token incidence on the query vocabulary: ``queries`` (n_q × V), ``docs`` (n_d × V)."""

    vocab: Mapping[str, int]
    queries: sp.csr_matrix
    docs: sp.csr_matrix


def _incidence(texts: Sequence[str], tokenizer: Tokenizer, vocab: Mapping[str, int], desc: str) -> sp.csr_matrix:
    """Rows = texts, columns = vocabulary; 1 where the text contains the token (canonical CSR).

    Texts are tokenised in chunks (``token_stream``); tokens are looked up in the vocabulary dict,
    and (text, token) pairs are deduplicated by sorting their keys.
    """
    n_vocab = max(len(vocab), 1)
    blocks = []
    chunks = range(0, len(texts), CHUNK)
    for start in tqdm(chunks, desc=desc, unit="chunk", disable=len(texts) < PROGRESS_MIN, leave=False):
        part = texts[start : start + CHUNK]
        tokens, owner = token_stream(part, tokenizer)
        cols = np.fromiter(map(vocab.get, tokens, repeat(-1)), dtype=np.int64, count=len(tokens))
        hit = cols >= 0
        keys = np.sort(owner[hit] * n_vocab + cols[hit])
        keys = keys[np.concatenate([[True], keys[1:] != keys[:-1]])] if len(keys) else keys
        rows = keys // n_vocab
        indptr = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=len(part)))])
        blocks.append(sp.csr_matrix((np.ones(len(keys)), keys % n_vocab, indptr), shape=(len(part), len(vocab))))
    if not blocks:
        return sp.csr_matrix((0, len(vocab)))
    return sp.vstack(blocks, format="csr") if len(blocks) > 1 else blocks[0]


def query_vocabulary(query_texts: Sequence[str], tokenizer: Tokenizer) -> dict[str, int]:
    """Token → column for the distinct query tokens, in first-seen order."""
    tokens, _ = token_stream(query_texts, tokenizer)
    return {t: i for i, t in enumerate(dict.fromkeys(tokens.tolist()))}


def token_matrices(query_texts: Sequence[str], doc_texts: Sequence[str], tokenizer: Tokenizer) -> TokenMatrices:
    """Tokenise each text once; the vocabulary is the query tokens in first-seen order."""
    vocab = query_vocabulary(query_texts, tokenizer)
    queries = _incidence(query_texts, tokenizer, vocab, "tokenise queries")
    docs = _incidence(doc_texts, tokenizer, vocab, "tokenise passages")
    return TokenMatrices(vocab, queries, docs)


def document_frequency(docs: sp.csr_matrix, rows: np.ndarray | None = None) -> tuple[np.ndarray, int]:
    """(df per vocabulary token, N) over ``docs`` (optionally only ``rows`` of it)."""
    sub = docs if rows is None else docs[np.asarray(rows, dtype=np.int64)]
    df = np.bincount(sub.indices, minlength=docs.shape[1]).astype(np.float64)
    return df, sub.shape[0]


def residuality(
    queries: sp.csr_matrix,
    docs: sp.csr_matrix,
    pair_query: np.ndarray,
    pair_doc: np.ndarray,
    idf_values: np.ndarray,
) -> np.ndarray:
    """ψ for each (query row, doc row) pair; NaN where the query has no token. Range [0, 1].

    Each pair expands to its query's tokens; the document side is read with scipy's element
    lookup (a binary search inside each document's sorted row), and the covered IDF mass is a bincount.
    """
    pair_query = np.asarray(pair_query, dtype=np.int64)
    pair_doc = np.asarray(pair_doc, dtype=np.int64)
    q_len = np.diff(queries.indptr)
    q_row = np.repeat(np.arange(queries.shape[0], dtype=np.int64), q_len)
    total = np.bincount(q_row, weights=idf_values[queries.indices], minlength=queries.shape[0])

    per_pair = q_len[pair_query]
    entry_pair = np.repeat(np.arange(len(pair_query), dtype=np.int64), per_pair)
    start = np.repeat(queries.indptr[pair_query] - (np.cumsum(per_pair) - per_pair), per_pair)
    cols = queries.indices[start + np.arange(len(entry_pair), dtype=np.int64)]
    if len(cols):
        found = np.asarray(docs[pair_doc[entry_pair], cols]).ravel()
    else:
        found = np.zeros(0)
    covered = np.bincount(entry_pair, weights=idf_values[cols] * found, minlength=len(pair_query))

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


def _pooled(ctx: IdfContext) -> dict[str, tuple[np.ndarray, int]]:
    rows = np.unique(np.concatenate(list(ctx.source_rows.values()))) if ctx.source_rows else np.array([], int)
    pooled = document_frequency(ctx.matrices.docs, rows)
    return {source: pooled for source in ctx.source_rows}


def _per_source(ctx: IdfContext) -> dict[str, tuple[np.ndarray, int]]:
    return {source: document_frequency(ctx.matrices.docs, rows) for source, rows in ctx.source_rows.items()}


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


def negative_residuality(
    records: Sequence[Record],
    tokenizer: Tokenizer,
    idf_corpus: str = "pooled",
    external_texts: Sequence[str] | None = None,
) -> pd.DataFrame:
    """One row per (record, negative): ``source, qid, neg_index, neg_id, psi``.

    The pooled IDF corpus is the set of unique passage texts (exact string identity) among all
    positives and negatives of all records passed in.
    """
    rule = get_idf_corpus(idf_corpus)
    n_neg = np.fromiter((len(r.negatives) for r in records), dtype=np.int64, count=len(records))
    n_pos = np.fromiter((len(r.positives) for r in records), dtype=np.int64, count=len(records))
    neg_texts = [n.text for r in records for n in r.negatives]
    pos_texts = [p.text for r in records for p in r.positives]
    query_codes, query_texts = _factorize([r.query for r in records])
    text_codes, texts = _factorize(neg_texts + pos_texts)
    source_codes, source_names = _factorize([r.source for r in records])

    pair_q = np.repeat(query_codes, n_neg).astype(np.int64)
    pair_d = text_codes[: len(neg_texts)].astype(np.int64)
    pair_src = np.repeat(source_codes, n_neg)
    pos_src = np.repeat(source_codes, n_pos)
    pos_d = text_codes[len(neg_texts) :]
    source_rows = {
        name: np.unique(np.concatenate([pair_d[pair_src == i], pos_d[pos_src == i]]))
        for i, name in enumerate(source_names)
    }

    mats = token_matrices(query_texts, texts, tokenizer)
    external = None
    if external_texts is not None:
        external = _incidence(external_texts, tokenizer, mats.vocab, "tokenise IDF corpus")
    per_source = rule(IdfContext(mats, source_rows, external))
    psi = np.full(len(pair_q), np.nan)
    for i, name in enumerate(source_names):
        df, n_docs = per_source[name]
        mask = pair_src == i
        if mask.any():
            psi[mask] = residuality(mats.queries, mats.docs, pair_q[mask], pair_d[mask], idf(df, n_docs))
    return pd.DataFrame(
        {
            "source": np.repeat(np.asarray([r.source for r in records], dtype=object), n_neg),
            "qid": np.repeat(np.asarray([r.qid for r in records], dtype=object), n_neg),
            "neg_index": np.arange(len(pair_q)) - np.repeat(np.cumsum(n_neg) - n_neg, n_neg),
            "neg_id": [n.id for r in records for n in r.negatives],
            "psi": psi,
        }
    )
