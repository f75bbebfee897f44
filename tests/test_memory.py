"""One copy per distinct text: texts interned at load, each distinct text tokenised once, ψ per
distinct pair equal to the previous per-negative computation, memory that follows the distinct
texts rather than their copies."""

from __future__ import annotations

import dataclasses
import gc
import json
import math
import re
import tracemalloc
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

import transferdx as tdx
from transferdx import artifacts
from transferdx.diagnostics import lexical
from transferdx.diagnostics.lexical import document_frequency, idf, negative_residuality, token_matrices
from transferdx.diagnostics.tokens import alnum
from transferdx.inputs import texts as text_pool
from transferdx.inputs.records import Passage, Record
from transferdx.inputs.texts import TextTable, intern_passage, intern_text, text_column
from transferdx.inputs.transferdx_records import read_records


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def row(qid: str, query: str, pos: str, negs: list[tuple[str, str]], source: str, **extra) -> dict:
    return {
        "qid": qid,
        "query": query,
        "positives": [{"id": "p-" + qid, "text": pos}],
        "negatives": [{"id": i, "text": t, **extra} for i, t in negs],
        "source": source,
    }


SHARED = "A passage that appears as a negative of many queries and in every source."


# ---------------------------------------------------------------------------------------------
# Load-time interning
# ---------------------------------------------------------------------------------------------


def test_loaded_records_share_one_object_per_text(tmp_path):
    folder = tmp_path / "sources"
    folder.mkdir()
    write_jsonl(
        folder / "a.jsonl",
        [
            row("q1", "first query", "positive one", [("d1", SHARED), ("d2", "other text")], "a"),
            row("q2", "second query", "positive two", [("d1", SHARED)], "a"),
        ],
    )
    write_jsonl(folder / "b.jsonl", [row("q1", "first query", "positive one", [("d1", SHARED)], "b")])
    records = {(r.source, r.qid): r for r in tdx.load(folder).records}
    a1, a2, b1 = records["a", "q1"], records["a", "q2"], records["b", "q1"]

    # the same text in two records, and in two files/sources: one str object
    assert a1.negatives[0].text == SHARED
    assert a1.negatives[0].text is a2.negatives[0].text is b1.negatives[0].text
    assert a1.query is b1.query and a1.qid is b1.qid
    assert a1.positives[0].text is b1.positives[0].text
    # equal passages (every field equal) are one Passage object
    assert a1.negatives[0] is a2.negatives[0] is b1.negatives[0]
    # and values are unchanged
    assert [n.to_dict() for n in a1.negatives] == [
        {"id": "d1", "text": SHARED, "method": None, "relation": None},
        {"id": "d2", "text": "other text", "method": None, "relation": None},
    ]


def test_interning_keeps_distinct_passages_apart(tmp_path):
    """Passages that differ in any field stay different objects (with their text still shared);
    equal-comparing values of another type or sign (1 / 1.0 / True, 0.0 / -0.0) are not merged."""
    a = Passage("d", "same text", rank=1)
    b = Passage("d", "same text", rank=2)
    assert intern_passage(a) is not intern_passage(b)
    assert intern_passage(a).text is intern_passage(b).text
    zero, minus_zero = Passage("z", "t", score=0.0), Passage("z", "t", score=-0.0)
    assert math.copysign(1, intern_passage(minus_zero).score) == -1
    assert math.copysign(1, intern_passage(zero).score) == 1
    one_int, one_float = Passage("o", "t", rank=1), Passage("o", "t", rank=1.0)  # type: ignore[arg-type]
    assert type(intern_passage(one_float).rank) is float and type(intern_passage(one_int).rank) is int

    path = write_jsonl(
        tmp_path / "r.jsonl",
        [
            row("q1", "query", "pos", [("d1", SHARED)], "s", rank=1),
            row("q2", "query two", "pos", [("d1", SHARED)], "s", rank=2),
        ],
    )
    r1, r2 = read_records(path).records
    assert r1.negatives[0] is not r2.negatives[0]
    assert (r1.negatives[0].rank, r2.negatives[0].rank) == (1, 2)
    assert r1.negatives[0].text is r2.negatives[0].text


def test_intern_text_leaves_other_types_alone():
    class Sub(str):
        pass

    s = Sub("abc")
    assert intern_text(s) is s
    fresh = "".join(["unique ", "text ", "for the pool"])
    again = "".join(["unique ", "text ", "for the pool"])
    assert fresh is not again and intern_text(fresh) is intern_text(again)


def test_pool_sweep_drops_only_unreferenced_entries():
    """A sweep forgets what nothing but the pool refers to and keeps what is still in use."""
    text_pool.release()
    pool = text_pool._TEXTS
    pool.swept_at = 8  # the first sweep comes at 16 entries
    kept = [intern_text("".join(["kept ", str(i)])) for i in range(5)]
    for i in range(100):  # dropped at once; the pool sweeps as it grows
        intern_text("".join(["dropped ", str(i)]))
    pool.sweep()
    assert set(pool.data) == set(kept)
    assert all(pool.data[k] is k for k in kept)
    kept_passage = intern_passage(Passage("x", "".join(["kept ", "passage"])))
    for i in range(50):
        intern_passage(Passage(str(i), "".join(["dropped passage ", str(i)])))
    text_pool._PASSAGES.sweep()
    assert list(text_pool._PASSAGES.data.values()) == [kept_passage]
    text_pool.release()
    assert text_pool.pooled() == (0, 0)


def test_text_table_ids():
    table = TextTable(["b"])
    ids = table.ids(["a", "b", "a", "c"])
    assert ids.tolist() == [1, 0, 1, 2]
    assert table.texts == ["b", "a", "c"] and len(table) == 3
    assert table.id("c") == 2 and table[1] == "a" and "a" in table and "z" not in table
    text = "".join(["x", "y"])
    assert table.intern(text) is table.intern("".join(["x", "y"])) is text


def test_memory_follows_distinct_texts_not_copies(tmp_path):
    """2,000 records × 8 negatives over 40 passages of ~2 kB: loading keeps one copy per distinct
    text (~0.1 MB of passage text), not one per occurrence (~32 MB) — nor holds the parsed lines'
    copies while it reads (peak; it did, 0.27 GB at 10⁶ negatives, until the records reader stopped
    keeping the rows it builds records from)."""
    rng = np.random.default_rng(0)
    passages = [f"passage {i} " + " ".join(f"w{j}" for j in rng.integers(0, 500, 400)) for i in range(40)]
    rows = []
    for q in range(2000):
        picks = rng.choice(40, size=9, replace=False)
        negs = [(f"d{j}", passages[j]) for j in picks[1:]]
        rows.append(row(f"q{q}", f"query {q}", passages[picks[0]], negs, "s"))
    path = write_jsonl(tmp_path / "r.jsonl", rows)
    copies = sum(len(passages[0]) for _ in range(2000 * 9))
    gc.collect()
    tracemalloc.start()
    try:
        loaded = read_records(path)
        gc.collect()
        retained, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(loaded.records) == 2000
    texts = {id(p.text) for r in loaded.records for p in (*r.positives, *r.negatives)}
    assert len(texts) == 40
    assert retained < copies / 4, (retained, copies)
    assert peak < copies / 4, (peak, copies)
    kept = read_records(path, keep_tables=True)  # the clean verb keeps the rows it will write back
    assert len(kept.tables[0].table.rows) == 2000


def test_suspects_hold_the_records_own_texts():
    """The suspects table's query, positive and negative are the loaded records' own string objects
    (object dtype), not copies: pandas ≥ 3 would copy each text into a new string array, about 1 kB
    a suspect (the reduce's largest holder after the values at 10⁶ negatives, +0.5 GB). Kills: the
    columns built as plain lists again."""
    from transferdx.pipeline import audit_prepared, prepare_audit

    text = "a passage that is its record's positive and, copied, one of its negatives"
    given = [
        Record(f"q{i}", f"query {i}", (Passage(f"p{i}", f"{text} {i}"),), negs, "mine")
        for i in range(40)
        for negs in [(Passage(f"n{i}", f"{text} {i}"), Passage(f"m{i}", f"another passage {i}"))]
    ]
    prepared = prepare_audit(given, encoder=None, controls="none")  # each first negative: duplicate_positive
    result = audit_prepared(prepared)
    records = prepared.loaded.records
    own = {id(t) for r in records for t in (r.query, *(p.text for p in (*r.positives, *r.negatives)))}
    suspects = result.result.suspects
    assert len(suspects) > 0
    for column in ("query", "positive", "negative"):
        assert suspects[column].dtype == object, column
        assert all(id(t) in own for t in suspects[column]), column


def test_saving_streams_the_suspects_tables(tmp_path, monkeypatch):
    """A source with as many suspects as negatives, each row with three texts: write_audit writes
    suspects.csv (and control_suspects.csv) a chunk at a time from the one table, each chunk's texts
    read for it (``AuditResult.texts``), the same bytes as the CSV of each kind's rows with
    their texts. Kills: a copy of the table per kind plus its whole CSV as one string (the save's
    peak at 10⁶ negatives: +0.68 GB), every suspect's texts read at once (a reduce would hold them:
    0.8 GB at 5·10⁶ negatives), texts put on the wrong rows."""
    from transferdx.artifacts import csv_text
    from transferdx.auditing.pooling import SUSPECT_COLUMNS, SUSPECT_TEXT_COLUMNS
    from transferdx.auditing.report import write_audit

    demo = tdx.audit("demo", encoder=None)
    n, text = 12_000, "word " * 200  # ~1 kB a text, ~36 MB of CSV
    rng = np.random.default_rng(0)
    big = pd.DataFrame(
        {
            "source": np.where(np.arange(n) % 5 == 0, "ctl", "mine"),
            "kind": np.where(np.arange(n) % 5 == 0, "control", "genuine"),
            "qid": [f"q{i}" for i in range(n)],
            "neg_index": np.arange(n) % 7,
            "neg_id": [f"d{i}" for i in range(n)],
            "query": "a query",
            "positive": [text + str(i) for i in range(n)],
            "negative": [text + str(-i) for i in range(n)],
            **{c: rng.random(n) for c in ("s_qp", "s_qn", "s_pn", "fn_probability", "score")},
            "reasons": "positive_aware",
        },
        columns=SUSPECT_COLUMNS,
    )
    reads: list[int] = []
    held = [big[c].to_numpy(dtype=object) for c in SUSPECT_TEXT_COLUMNS]  # the texts' objects, made once

    class Texts:  # RecordTexts' protocol: a suspect's three texts by its record row (here: its own row)
        def of_negatives(self, at: np.ndarray, neg_index: np.ndarray) -> tuple[np.ndarray, ...]:
            reads.append(len(at))
            return held[0][at], held[1][at], held[2][at]

    values = big.drop(columns=list(SUSPECT_TEXT_COLUMNS))
    rows = np.arange(n, dtype=np.int64)
    result = dataclasses.replace(demo.result, suspect_values=values, texts=Texts(), suspect_records=rows)
    monkeypatch.setattr(artifacts, "CSV_CHUNK_ROWS", 500)  # chunks far smaller than the table
    write_audit(result, tmp_path / "warm", demo.settings)  # imports and plotting caches first
    csv_bytes = (tmp_path / "warm" / "suspects.csv").stat().st_size
    gc.collect()
    tracemalloc.start()
    try:
        write_audit(result, tmp_path / "out", demo.settings)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    for name, kind in (("suspects.csv", "genuine"), ("control_suspects.csv", "control")):
        want = csv_text(big.loc[big["kind"] == kind].reset_index(drop=True)).encode("utf-8")
        assert (tmp_path / "out" / name).read_bytes() == want, name
    assert csv_bytes > 20e6
    assert peak < csv_bytes / 4, (peak, csv_bytes)
    assert sum(reads) == 2 * n and max(reads) <= 500  # each save: every suspect's texts once, a chunk at a time


# ---------------------------------------------------------------------------------------------
# Lexical core: each distinct text tokenised once; ψ per distinct pair
# ---------------------------------------------------------------------------------------------


def counting_tokenizer(calls: Counter[str]):
    def tokenize(text: str) -> list[str]:
        calls[text] += 1
        return re.findall(r"[^\W_]+", text.lower())

    return tokenize


def synthetic_records(n_sources: int = 3, n_records: int = 120, k: int = 8, seed: int = 0) -> list[Record]:
    """Sources over one pool: shared queries and positives, negatives that repeat across records
    and sources (so pairs repeat too), some tokenless queries (ψ undefined)."""
    rng = np.random.default_rng(seed)
    vocab = [f"w{i}" for i in range(150)]
    pool = [" ".join(rng.choice(vocab, size=int(rng.integers(3, 25)))) for _ in range(90)]
    pool = list(dict.fromkeys(pool))
    queries = [" ".join(rng.choice(vocab, size=int(rng.integers(1, 6)))) for _ in range(n_records)]
    queries[::17] = ["?!"] * len(queries[::17])
    out = []
    for s in range(n_sources):
        for i in range(n_records):
            p0 = i % len(pool)
            span = 10 * (s + 1)
            negs = [int(j) for j in dict.fromkeys(((p0 + rng.integers(1, span, size=k)) % len(pool)).tolist())]
            out.append(
                Record(
                    f"q{i}",
                    queries[i],
                    (Passage(f"d{p0}", pool[p0]),),
                    tuple(Passage(f"d{j}", pool[j]) for j in negs),
                    f"s{s}",
                )
            )
    return out


def test_each_distinct_text_is_tokenised_once():
    recs = synthetic_records()
    external = [f"extra {i} w{i}" for i in range(20)]
    calls: Counter[str] = Counter()
    negative_residuality(recs, counting_tokenizer(calls), "external", external_texts=external)
    queries = {r.query for r in recs}
    passages = {p.text for r in recs for p in (*r.positives, *r.negatives)}
    assert not queries & passages
    assert set(calls) == queries | passages | set(external)
    assert max(calls.values()) == 1
    # and token_matrices alone: queries once (vocabulary and incidence from one pass)
    calls.clear()
    token_matrices(sorted(queries), sorted(passages), counting_tokenizer(calls))
    assert set(calls) == queries | passages and max(calls.values()) == 1


def previous_residuality(queries, docs, pair_query, pair_doc, idf_values):
    """The per-negative computation before this change: every pair, scipy's element lookup."""
    q_len = np.diff(queries.indptr)
    q_row = np.repeat(np.arange(queries.shape[0], dtype=np.int64), q_len)
    total = np.bincount(q_row, weights=idf_values[queries.indices], minlength=queries.shape[0])
    per_pair = q_len[pair_query]
    entry_pair = np.repeat(np.arange(len(pair_query), dtype=np.int64), per_pair)
    start = np.repeat(queries.indptr[pair_query] - (np.cumsum(per_pair) - per_pair), per_pair)
    cols = queries.indices[start + np.arange(len(entry_pair), dtype=np.int64)]
    found = np.asarray(docs[pair_doc[entry_pair], cols]).ravel() if len(cols) else np.zeros(0)
    covered = np.bincount(entry_pair, weights=idf_values[cols] * found, minlength=len(pair_query))
    denom = total[pair_query]
    with np.errstate(invalid="ignore", divide="ignore"):
        psi = np.where(denom > 0, (denom - covered) / denom, np.nan)
    return np.clip(psi, 0.0, 1.0)


def previous_psi(recs: list[Record], idf_corpus: str, external: list[str] | None = None) -> np.ndarray:
    """ψ per negative as computed before: texts by exact string, each source scored pair by pair."""
    neg_texts = [n.text for r in recs for n in r.negatives]
    pos_texts = [p.text for r in recs for p in r.positives]
    texts = list(dict.fromkeys(neg_texts + pos_texts))
    row_of = {t: i for i, t in enumerate(texts)}
    query_texts = list(dict.fromkeys(r.query for r in recs))
    mats = token_matrices(query_texts, texts, alnum)
    psi = []
    for source in dict.fromkeys(r.source for r in recs):
        own = [r for r in recs if r.source == source]
        pair_q = np.array([query_texts.index(r.query) for r in own for _ in r.negatives], dtype=np.int64)
        pair_d = np.array([row_of[n.text] for r in own for n in r.negatives], dtype=np.int64)
        if idf_corpus == "pooled":
            df, n = document_frequency(mats.docs)
        elif idf_corpus == "per_source":
            rows = np.unique([row_of[p.text] for r in own for p in (*r.negatives, *r.positives)])
            df, n = document_frequency(mats.docs, rows)
        else:
            df, n = document_frequency(lexical._incidence(external, alnum, mats.vocab, ""))
        psi.append(previous_residuality(mats.queries, mats.docs, pair_q, pair_d, idf(df, n)))
    return np.concatenate(psi)


def reference_psi(recs: list[Record]) -> np.ndarray:
    """The straightforward definition with Python sets: pooled idf over the unique passage texts."""

    def tokens(x: str) -> set[str]:
        return set(re.findall(r"[^\W_]+", x.lower()))

    docs = [tokens(t) for t in dict.fromkeys(p.text for r in recs for p in (*r.negatives, *r.positives))]
    df = Counter(t for d in docs for t in d)
    n = len(docs)

    def w(t: str) -> float:
        return math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5))

    out = []
    for r in recs:
        tq = tokens(r.query)
        total = sum(w(t) for t in tq)
        for neg in r.negatives:
            out.append(sum(w(t) for t in tq - tokens(neg.text)) / total if total > 0 else math.nan)
    return np.array(out)


@pytest.mark.parametrize("corpus", ["pooled", "per_source", "external"])
@pytest.mark.parametrize("blocks", [False, True])
def test_psi_per_distinct_pair_equals_previous_per_negative_computation(monkeypatch, corpus, blocks):
    recs = synthetic_records()
    external = [" ".join(f"w{j}" for j in range(i, i + 12)) for i in range(0, 150, 5)]
    if blocks:  # many scoring and tokenising blocks
        monkeypatch.setattr(lexical, "ENTRY_BLOCK", 7)
        monkeypatch.setattr(lexical, "TEXT_CHUNK", 5)
    pairs = {(r.query, n.text) for r in recs for n in r.negatives}
    assert len(pairs) < sum(len(r.negatives) for r in recs)  # pairs do repeat
    got = negative_residuality(recs, alnum, corpus, external_texts=external if corpus == "external" else None)
    expected = previous_psi(recs, corpus, external)
    np.testing.assert_array_equal(got["psi"].to_numpy(), expected)  # bit-identical, NaN where undefined
    assert np.isnan(expected).any()
    if corpus == "pooled":
        np.testing.assert_allclose(got["psi"].to_numpy(), reference_psi(recs), rtol=1e-12)


def test_residuality_reads_non_canonical_documents_like_scipy():
    """Duplicate stored entries are summed, as scipy's element lookup reads them."""
    queries = sp.csr_matrix(np.array([[1.0, 1.0, 0.0], [0.0, 1.0, 1.0]]))
    docs = sp.csr_matrix((np.array([1.0, 1.0, 1.0]), np.array([1, 1, 2]), np.array([0, 2, 3])), shape=(2, 3))
    assert not docs.has_canonical_format
    pq, pd_ = np.array([0, 1, 1, 0]), np.array([0, 0, 1, 1])
    w = np.array([0.5, 1.0, 2.0])
    np.testing.assert_array_equal(
        lexical.residuality(queries, docs, pq, pd_, w), previous_residuality(queries, docs, pq, pd_, w)
    )


def test_text_ids_into_a_table():
    """With ``texts``, the per-negative frame carries ids into the table instead of texts."""
    recs = synthetic_records(n_sources=2, n_records=30)
    table = TextTable()
    frame = negative_residuality(recs, alnum, texts=table)
    assert [table[i] for i in frame["text_id"]] == [n.text for r in recs for n in r.negatives]
    assert [table[i] for i in frame["query_id"]] == [r.query for r in recs for _ in r.negatives]
    assert set(table) == {r.query for r in recs} | {p.text for r in recs for p in (*r.negatives, *r.positives)}
    plain = negative_residuality(recs, alnum)
    assert list(plain.columns) == ["source", "qid", "neg_index", "neg_id", "psi"]
    np.testing.assert_array_equal(plain["psi"].to_numpy(), frame["psi"].to_numpy())


def test_text_column_holds_each_distinct_text_once():
    shared = "".join(["a long passage ", "x" * 1000])
    column = text_column([shared, "other", None, shared] * 500)
    assert column.codes[:4].tolist() == [0, 1, -1, 0]
    assert column.categories.to_numpy()[0] is shared  # the object itself, not a copy
    frame = pd.DataFrame({"text": column})
    assert frame.memory_usage(deep=True)["text"] < 10_000
    assert frame["text"].iloc[3] == shared and pd.isna(frame["text"].iloc[2])
    assert len(text_column([])) == 0 and text_column([None]).isna().all()


def test_audit_negatives_texts_are_ids_into_a_table_of_distinct_texts():
    """Audit.negatives holds each distinct text once: a categorical column whose categories are the
    distinct negative texts and whose values equal the records' texts row by row."""
    import transferdx as tdx

    result = tdx.audit("demo", encoder=None, controls="none")
    frame = result.negatives
    assert isinstance(frame["text"].dtype, pd.CategoricalDtype)
    records = {(r.source, r.qid): r for r in tdx.load("demo").records}
    expected = [
        records[(s, q)].negatives[i].text
        for s, q, i in zip(frame["source"], frame["qid"], frame["neg_index"], strict=True)
    ]
    assert frame["text"].astype(object).tolist() == expected
    assert len(frame["text"].cat.categories) == len(set(expected)) < len(expected)


# ---------------------------------------------------------------------------------------------
# Low-cardinality text columns as categories
# ---------------------------------------------------------------------------------------------


def test_as_categories_keeps_the_values_with_sorted_categories():
    from transferdx.auditing.values import as_categories

    frame = pd.DataFrame(
        {
            "source": pd.array(["b", "a", "b", "c"], dtype="str"),
            "method": np.array(["x", None, "y", "x"], dtype=object),
            "qid": ["1", "2", "3", "4"],
        }
    )
    before = frame.copy()
    got = as_categories(frame)
    assert got is frame
    assert list(frame["source"].cat.categories) == ["a", "b", "c"]
    assert list(frame["method"].cat.categories) == ["x", "y"]
    assert frame["method"].isna().tolist() == [False, True, False, False]  # missing stays missing
    assert frame["source"].astype(str).tolist() == ["b", "a", "b", "c"]
    assert frame["qid"].dtype == before["qid"].dtype  # not a listed column: left alone
    assert frame.to_csv(index=False) == before.to_csv(index=False)  # the artifacts' bytes
    twice = as_categories(frame.copy())
    pd.testing.assert_frame_equal(twice, frame)


def test_the_audit_frames_hold_their_low_cardinality_columns_as_categories(data):
    from transferdx.auditing.values import CATEGORY_COLUMNS
    from transferdx.inputs.trec_dl import load_trec_dl

    result = tdx.audit(load_trec_dl(data / "msmarco-dl19", runs=["BM25", "OPEN_AI_ADA2"]), encoder=None, resamples=20)
    full = result.result
    for frame in (full.negatives, full.records, full.suspects):
        for col in set(CATEGORY_COLUMNS) & set(frame.columns):
            assert isinstance(frame[col].dtype, pd.CategoricalDtype), col
            assert list(frame[col].cat.categories) == sorted(frame[col].dropna().unique()), col
    controls = set(full.records.loc[full.records["kind"] == "control", "source"])
    assert controls  # the audit built controls: their names are categories of the full frames
    for view in (result.negatives, result.suspects):
        assert not controls & set(view["source"].cat.categories)  # a genuine view lists no control
        assert set(view["source"].value_counts().index) == set(view["source"])
