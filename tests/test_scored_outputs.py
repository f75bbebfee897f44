"""The scored forms of sentence-transformers' ``mine_hard_negatives`` (``output_scores=True``), read
and written back: the REAL miner (offline, a tiny in-process model that knows the demo's words) mines
the demo's queries in all four output formats; each is saved (Parquet, JSONL), read (every passage
carries the miner's own score), cleaned (one negative removed) and read again: the same records less
that negative, the same columns, every written score still the score of the text beside it — in the
triplet's ``scores`` [pos, neg], the n-tuple's ``scores`` [pos, n1..nk] (with ``clean.fill=repeat``,
the default, a filled slot repeats its text's score), the labeled-list's ``scores`` and the
labeled-pair's ``score``. Also the rules of the scored labeled-pair (no label: each query's first row
is its positive), FlagEmbedding's string ``pos``, and tables read by column order."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import transferdx as tdx
from transferdx.inputs.flagembedding import load_flagembedding
from transferdx.inputs.records import InputError
from transferdx.inputs.sentence_transformers import ColumnsByOrderWarning

from .tiny import tiny_model

FORMATS = ("triplet", "n-tuple", "labeled-list", "labeled-pair")
FORMS = ("parquet", "jsonl")
N_QUERIES, N_NEGATIVES = 5, 3
# (query text, positive text) → score, and (query text, negative text) → score, as the miner wrote them
Scores = dict[tuple[str, str], float]


@pytest.fixture(scope="module")
def mined(tmp_path_factory) -> dict[str, Any]:
    """output_format → the Dataset ``mine_hard_negatives(..., output_scores=True)`` returns, mined
    with a tiny random model whose vocabulary is the demo's words (distinct embeddings, so distinct
    scores; the whole fixture takes a few seconds on a CPU)."""
    from datasets import Dataset
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.util import mine_hard_negatives

    demo = tdx.load_query_set("demo")
    qids = sorted(demo.queries)[:N_QUERIES]
    words = sorted({w for t in [*demo.queries.values(), *demo.pool.values()] for w in re.findall(r"\w+", t.lower())})
    folder = tiny_model(tmp_path_factory.mktemp("tiny"), words=words)
    model = SentenceTransformer(str(folder), device="cpu")
    pairs = Dataset.from_dict(
        {"anchor": [demo.queries[q] for q in qids], "positive": [demo.pool[demo.positives[q][0]] for q in qids]}
    )
    corpus = sorted(demo.pool.values())
    return {
        fmt: mine_hard_negatives(
            pairs,
            model,
            corpus=corpus,
            num_negatives=N_NEGATIVES,
            batch_size=64,
            verbose=False,
            output_format=fmt,
            output_scores=True,
        )
        for fmt in FORMATS
    }


def _expected(fmt: str, rows: list[dict[str, Any]]) -> tuple[Scores, Scores, dict[str, list[str]]]:
    """The miner's scores of positives and negatives, and each query's negatives in file order, read
    off its rows by what the miner writes (not by transferdx)."""
    pos: Scores = {}
    neg: Scores = {}
    order: dict[str, list[str]] = {}

    def negative(q: str, text: str, score: float) -> None:
        neg[(q, text)] = score
        if text not in order.setdefault(q, []):
            order[q].append(text)

    for i, row in enumerate(rows):
        q = row["anchor"]
        if fmt == "triplet":
            pos[(q, row["positive"])] = row["scores"][0]
            negative(q, row["negative"], row["scores"][1])
        elif fmt == "n-tuple":
            pos[(q, row["positive"])] = row["scores"][0]
            for k in range(1, N_NEGATIVES + 1):
                negative(q, row[f"negative_{k}"], row["scores"][k])
        elif fmt == "labeled-list":
            pos[(q, row["positive"][0])] = row["scores"][0]
            for text, score in zip(row["positive"][1:], row["scores"][1:], strict=True):
                negative(q, text, score)
        elif i == 0 or rows[i - 1]["anchor"] != q:  # labeled-pair: the block's first row, its positive
            pos[(q, row["positive"])] = row["score"]
        else:
            negative(q, row["positive"], row["score"])
    return pos, neg, order


def _save(ds: Any, form: str, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"mined.{form}"
    if form == "parquet":
        ds.to_parquet(path)
    else:
        ds.to_json(path)
    return path


def _rows(path: Path) -> list[dict[str, Any]]:
    """A file's rows as plain Python, read without transferdx."""
    if path.suffix == ".parquet":
        frame = pd.read_parquet(path)
        return [
            {c: (v.tolist() if hasattr(v, "tolist") else v) for c, v in r.items()} for r in frame.to_dict("records")
        ]
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _columns(path: Path) -> list[str]:
    if path.suffix == ".parquet":
        return list(pd.read_parquet(path).columns)
    return list(json.loads(path.read_text(encoding="utf-8").splitlines()[0]))


def _written_scores(fmt: str, rows: list[dict[str, Any]]) -> list[tuple[str, str, float, bool]]:
    """Every (query, text, score, is_positive) a written file pairs, by the file's own layout."""
    out = []
    for i, row in enumerate(rows):
        q = row["anchor"]
        if fmt == "triplet":
            out += [(q, row["positive"], row["scores"][0], True), (q, row["negative"], row["scores"][1], False)]
        elif fmt == "n-tuple":
            negs = [c for c in row if c.startswith("negative_")]
            assert len(row["scores"]) == 1 + len(negs)
            out.append((q, row["positive"], row["scores"][0], True))
            out += [(q, row[c], row["scores"][k], False) for k, c in enumerate(negs, 1)]
        elif fmt == "labeled-list":
            assert len(row["scores"]) == len(row["positive"])
            out += [(q, t, s, k == 0) for k, (t, s) in enumerate(zip(row["positive"], row["scores"], strict=True))]
        else:
            out.append((q, row["positive"], row["score"], i == 0 or rows[i - 1]["anchor"] != q))
    return out


def _by_query(loaded: Any) -> dict[str, Any]:
    return {r.query: r for r in loaded.records}


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("fmt", FORMATS)
def test_scored_outputs_read_clean_and_reread(mined, tmp_path, fmt, form):
    """Kills: a score dropped or shifted on reading (a passage's score not the miner's), a cleaned
    copy whose ``scores`` list keeps the removed negative's score or misaligns (n-tuple filled by
    ``repeat``: the filled slot's score not its text's), a changed column set, a lost query."""
    ds = mined[fmt]
    assert ("score" if fmt == "labeled-pair" else "scores") in ds.column_names
    path = _save(ds, form, tmp_path / "in")
    pos, neg, order = _expected(fmt, _rows(path))
    loaded = tdx.load(path)
    records = _by_query(loaded)
    assert set(records) == {q for q, _ in pos} and not loaded.exclusions
    for q, record in records.items():
        assert [(p.text, p.score) for p in record.positives] == [
            (t, pytest.approx(s)) for (qq, t), s in pos.items() if qq == q
        ]
        assert [n.text for n in record.negatives] == order[q]
        assert [n.score for n in record.negatives] == [pytest.approx(neg[(q, t)]) for t in order[q]]
    desc = loaded.descriptors["mined"]
    assert desc["mining_scores"]["negatives"]["n"] == len(neg)
    if fmt == "labeled-pair":  # the rule stated, and no query whose negatives are out of the miner's order
        assert desc["scored_pairs"]["queries"] == N_QUERIES
        assert desc["scored_pairs"]["queries_not_descending"] == 0
        assert "first row of each query's block is its positive" in desc["scored_pairs"]["rule"]

    # clean: the second negative of the first query is removed (a text reason, no model)
    first = loaded.records[0]
    gone = first.negatives[1]
    frame = pd.DataFrame(
        [
            {
                "source": r.source,
                "qid": r.qid,
                "neg_index": k,
                "neg_id": n.id,
                "negative": n.text,
                "fn_positive_aware": r is first and k == 1,
                "fn_reasons": "positive_aware" if r is first and k == 1 else "",
            }
            for r in loaded.records
            for k, n in enumerate(r.negatives)
        ]
    )
    result = tdx.clean(path, frame, reasons=["positive_aware"], out=tmp_path / "clean")
    assert result.descriptor["faithful"], result.descriptor["note"]
    copy = tmp_path / "clean" / "cleaned" / path.name
    assert _columns(copy) == _columns(path)
    written = _rows(copy)
    for q, text, score, is_positive in _written_scores(fmt, written):  # every written score is its text's
        assert text != gone.text or q != first.query
        assert score == pytest.approx((pos if is_positive else neg)[(q, text)])
    again = _by_query(tdx.load(copy))
    assert set(again) == set(records)
    for q, record in records.items():
        wanted = [n for n in record.negatives if not (q == first.query and n.text == gone.text)]
        assert [(n.text, n.score) for n in again[q].negatives] == [(n.text, pytest.approx(n.score)) for n in wanted]
        assert [(p.text, p.score) for p in again[q].positives] == [
            (p.text, pytest.approx(p.score)) for p in record.positives
        ]
    if fmt == "n-tuple":  # the row kept 2 of its 3 negatives: fill=repeat repeats its first, score and all
        row = next(r for r in written if r["anchor"] == first.query)
        kept = [n.text for n in first.negatives if n.text != gone.text]
        assert [row[f"negative_{k}"] for k in (1, 2, 3)] == [kept[0], kept[1], kept[0]]
        assert row["scores"][3] == row["scores"][1]


# ---------------------------------------------------------------------------------------------
# labeled-pair with scores (no label): the rule and its checks
# ---------------------------------------------------------------------------------------------


def _pairs(rows: list[tuple[str, str, float]], tmp_path: Path, name: str = "pairs") -> Path:
    path = tmp_path / f"{name}.parquet"
    pd.DataFrame([{"anchor": q, "positive": d, "score": s} for q, d, s in rows]).to_parquet(path)
    return path


def test_scored_pair_counts_queries_whose_negatives_are_not_descending(tmp_path):
    """A second positive (score 0.5) before negatives 0.7, 0.3 is read as a negative, and the query
    is counted as out of order; a query in the miner's order is not. Kills: the count missing, or
    counting every query."""
    path = _pairs(
        [
            *[("q one", "p1", 0.9), ("q one", "p2", 0.5), ("q one", "n1", 0.7), ("q one", "n2", 0.3)],
            *[("q two", "p", 0.8), ("q two", "m1", 0.6), ("q two", "m2", 0.6), ("q two", "m3", 0.1)],
        ],
        tmp_path,
    )
    loaded = tdx.load(path)
    records = _by_query(loaded)
    assert [p.text for p in records["q one"].positives] == ["p1"]
    assert [n.text for n in records["q one"].negatives] == ["p2", "n1", "n2"]
    assert [n.score for n in records["q two"].negatives] == [0.6, 0.6, 0.1]
    summary = loaded.descriptors["pairs"]["scored_pairs"]
    assert (summary["queries"], summary["queries_not_descending"]) == (2, 1)


def test_scored_pair_rows_not_contiguous_is_a_located_error(tmp_path):
    """A query met again after another query's rows cannot be read by the miner's order: a located
    error (line 4, the anchor column), or under ``skip`` a counted exclusion of that row."""
    rows = [("q one", "p1", 0.9), ("q one", "n1", 0.5), ("q two", "p", 0.8), ("q one", "n2", 0.3)]
    rows.append(("q two", "m", 0.2))
    path = _pairs(rows, tmp_path)
    with pytest.raises(InputError) as info:
        tdx.load(path)
    assert (info.value.line, info.value.field) == (4, "anchor")
    assert "not contiguous" in str(info.value) and "line 1" in str(info.value)
    skipped = tdx.load(path, on_error="skip")
    assert [str(e.line) for e in skipped.exclusions] == ["4"]
    assert [n.text for n in _by_query(skipped)["q one"].negatives] == ["n1"]


def test_scored_pair_relabel_is_listed_not_written_as_a_negative(tmp_path):
    """A relabeled negative cannot be a second positive in a file without labels (a re-read takes
    only a block's first row as one): its row leaves the copy and the passage is listed."""
    from transferdx.inputs.records import Passage
    from transferdx.inputs.writing import RELABEL_UNWRITTEN, CleanedQuery, Cleaning, rewrite

    path = _pairs([("q", "p", 0.9), ("q", "n1", 0.5), ("q", "n2", 0.4), ("q", "n3", 0.3)], tmp_path)
    loaded = tdx.load(path, keep_tables=True)
    (record,) = loaded.records
    n1 = record.negatives[0]
    cleaned = CleanedQuery(
        dataclasses.replace(record, negatives=record.negatives[1:]),
        added=(Passage(n1.id, n1.text, score=n1.score),),
    )
    cleaning = Cleaning({(record.source, record.qid): cleaned}, {(record.source, record.query): cleaned})
    out = rewrite(loaded.tables[0], cleaning)
    assert [r["positive"] for r in out.rows] == ["p", "n2", "n3"]
    assert [r["score"] for r in out.rows] == [0.9, 0.4, 0.3]
    assert [c.change for c in out.changes] == ["dropped", RELABEL_UNWRITTEN]


# ---------------------------------------------------------------------------------------------
# FlagEmbedding: pos / neg as a string
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("key", ["pos", "neg"])
def test_flagembedding_string_list_says_why(tmp_path, key):
    """FlagEmbedding samples from ``pos`` / ``neg``: a string would train on its characters. The
    error is located (line 2, the field) and says so and what to write."""
    good = {"query": "a", "pos": ["p"], "neg": ["n"]}
    bad = {"query": "b", "pos": ["p"], "neg": ["n"]} | {key: "one passage"}
    path = tmp_path / "flag.jsonl"
    path.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n", encoding="utf-8")
    with pytest.raises(InputError) as info:
        load_flagembedding(path)
    assert (info.value.line, info.value.field) == (2, key)
    message = str(info.value)
    assert "split it into characters" in message and f'"{key}": ["…"]' in message and "\n" not in message


# ---------------------------------------------------------------------------------------------
# Columns by order
# ---------------------------------------------------------------------------------------------


def test_columns_read_by_order_with_the_mapping_visible(tmp_path):
    """``q, a, x1, x2``: no shape's names; read as the trainer reads it (anchor, positive, negatives),
    the mapping said once as it is read and kept in the descriptor; the cleaned copy keeps the file's
    own column names and order. Kills: the table refused, read in another order, or silently."""
    rows = [
        {"q": "apple engine", "a": "apple engine info", "x1": "violin planet", "x2": "garden castle"},
        {"q": "river about", "a": "river about what", "x1": "castle garden", "x2": "moon pepper"},
    ]
    path = tmp_path / "plain.parquet"
    pd.DataFrame(rows).to_parquet(path)
    with pytest.warns(ColumnsByOrderWarning, match=r"plain\.parquet: anchor=q, positive=a, negatives=x1, x2") as seen:
        loaded = tdx.load(path)
    assert len([w for w in seen if w.category is ColumnsByOrderWarning]) == 1
    records = _by_query(loaded)
    assert [p.text for p in records["apple engine"].positives] == ["apple engine info"]
    assert [n.text for n in records["apple engine"].negatives] == ["violin planet", "garden castle"]
    assert loaded.descriptors["plain"]["columns_by_order"].startswith("anchor=q, positive=a, negatives=x1, x2")
    frame = pd.DataFrame(
        [
            {
                "source": r.source,
                "qid": r.qid,
                "neg_index": k,
                "neg_id": n.id,
                "negative": n.text,
                "fn_positive_aware": r.query == "river about" and k == 0,
                "fn_reasons": "positive_aware" if r.query == "river about" and k == 0 else "",
            }
            for r in loaded.records
            for k, n in enumerate(r.negatives)
        ]
    )
    with pytest.warns(ColumnsByOrderWarning):
        tdx.clean(path, frame, reasons=["positive_aware"], out=tmp_path / "clean")
    copy = tmp_path / "clean" / "cleaned" / path.name
    written = pd.read_parquet(copy)
    assert list(written.columns) == ["q", "a", "x1", "x2"]
    river = written[written["q"] == "river about"].iloc[0]
    assert [river["x1"], river["x2"]] == ["moon pepper", "moon pepper"]  # fill=repeat: its own negative again
    with pytest.warns(ColumnsByOrderWarning):
        again = _by_query(tdx.load(copy))
    assert [n.text for n in again["river about"].negatives] == ["moon pepper"]


@pytest.mark.parametrize("form", ["parquet", "csv"])
def test_columns_by_order_need_every_column_text(tmp_path, form):
    """A column of numbers (or nulls) is not a passage: the table stays the unrecognised-shape
    error, which names the column; nothing of it ignored."""
    frame = pd.DataFrame({"q": ["a b", "c d"], "a": ["pa", "pc"], "x1": ["n1", "n2"], "x2": [0.5, 0.25]})
    path = tmp_path / f"t.{form}"
    frame.to_parquet(path) if form == "parquet" else frame.to_csv(path, index=False)
    with pytest.raises(InputError, match="unrecognised shape") as info:
        tdx.load(path)
    why = "is not text at line 1 (0.5)" if form == "parquet" else "holds only numbers or lists"
    assert f"not read by column order (first anchor, second positive, the rest negatives): column 'x2' {why}" in str(
        info.value
    )
    two = tmp_path / "two.parquet"
    frame[["q", "a"]].to_parquet(two)
    with pytest.raises(InputError, match="unrecognised shape"):
        tdx.load(two)


def test_headerless_csv_of_text_is_not_read_by_order(tmp_path):
    """A CSV whose first line is a row (prose where names would be) is no table of named columns:
    reading it by order would take its first row as a header and lose it, so it stays the error that
    says how to read a file without a header row."""
    path = tmp_path / "rows.csv"
    path.write_text("what is a cat,a cat is an animal,a dog barks\nwhat is rain,rain is water,sun is hot\n")
    with pytest.raises(InputError, match=r"unrecognised shape.*without a header row"):
        tdx.load(path)
