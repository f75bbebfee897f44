"""Tevatron / RLHN training rows (``transferdx/inputs/tevatron.py``), built by hand from the real
TREC-DL19 runs: each run becomes a ``subset`` (as RLHN names the dataset of each row), so a file of
two runs reads back as two sources holding exactly the run's records (ids, texts, order) and is
audited per subset; one run alone gets the self-controls any single-source file gets. A passage
without ``text`` is a located error; a row without negatives a counted exclusion; the writer keeps
every key of the objects it keeps or moves, and a row left with no negative follows the list
formats' policy (left out and listed, or borrowed with ``clean.fill=borrow``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import transferdx as tdx
from transferdx.inputs.records import NO_NEGATIVE, InputError, Passage, Record
from transferdx.inputs.tevatron import format_passage
from transferdx.inputs.trec_dl import load_trec_dl
from transferdx.inputs.writing import RELABEL_UNWRITTEN, CleanedQuery, Cleaning, rewrite

RUNS = ("BM25", "D_BERT_KD_TASB")
N_QUERIES = 4


def _passage(p: Passage) -> dict[str, Any]:
    """A ``{docid, title, text}`` object that Tevatron joins back to ``p.text``: its first word as
    the title where the join gives the text back exactly, else no title."""
    title, _, rest = p.text.partition(" ")
    if rest and format_passage(rest, title) == p.text:
        return {"docid": p.id, "title": title, "text": rest}
    return {"docid": p.id, "title": "", "text": p.text}


def _dl19(data: Path, runs: tuple[str, ...] = RUNS) -> tuple[list[Record], list[dict[str, Any]]]:
    """The first queries of the runs (read by the TREC-DL reader) and the same as Tevatron rows."""
    loaded = load_trec_dl(data / "msmarco-dl19", runs=list(runs))
    qids = sorted({r.qid for r in loaded.records})[:N_QUERIES]
    records = [r for r in loaded.records if r.qid in qids]
    rows = [
        {
            "query_id": r.qid,
            "query": r.query,
            "positive_passages": [_passage(p) for p in r.positives],
            "negative_passages": [_passage(n) for n in r.negatives],
            "subset": r.source,
        }
        for r in records
    ]
    return records, rows


def _jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def _view(r: Record) -> tuple[Any, ...]:
    return (
        r.source,
        r.qid,
        r.query,
        [(p.id, p.text) for p in r.positives],
        [(n.id, n.text) for n in r.negatives],
    )


def test_rows_of_two_runs_read_as_one_source_per_subset(data: Path, tmp_path: Path) -> None:
    records, rows = _dl19(data)
    assert any(p["title"] for row in rows for p in row["negative_passages"])  # the join is exercised
    path = _jsonl(tmp_path / "rlhn-dl19.jsonl", rows)
    loaded = tdx.load(path)
    assert loaded.sources == sorted(RUNS)
    assert sorted(map(_view, loaded.records)) == sorted(map(_view, records))
    for r in loaded.records:
        assert [n.rank for n in r.negatives] == list(range(1, len(r.negatives) + 1))
        assert {n.method for n in r.negatives} == {"tevatron"}
    for run in RUNS:
        desc = loaded.descriptors[run]
        n = sum(1 for r in records if r.source == run)
        assert desc["shape"] == "tevatron" and desc["subset"] == run
        assert desc["rows"] == {"read": n, "in_records": n, "excluded": 0, "records": n}
    # the same rows as Parquet (structs) and as a DataFrame in memory read the same
    frame = pd.DataFrame(rows)
    frame.to_parquet(tmp_path / "rlhn-dl19.parquet")
    for again in (tdx.load(tmp_path / "rlhn-dl19.parquet"), tdx.load(frame)):
        assert sorted(map(_view, again.records)) == sorted(map(_view, records))


def test_without_a_subset_column_the_file_is_the_source(data: Path, tmp_path: Path) -> None:
    records, rows = _dl19(data, ("BM25",))
    path = _jsonl(tmp_path / "msmarco-passage.jsonl", [{k: v for k, v in r.items() if k != "subset"} for r in rows])
    loaded = tdx.load(path)
    assert loaded.sources == ["msmarco-passage"]
    assert sorted(v[1:] for v in map(_view, loaded.records)) == sorted(v[1:] for v in map(_view, records))
    assert tdx.load(path, format="tevatron", source="mine").sources == ["mine"]


def test_audit_profiles_each_subset(data: Path, tmp_path: Path) -> None:
    _records, rows = _dl19(data)
    path = _jsonl(tmp_path / "rlhn-dl19.jsonl", rows)
    audit = tdx.audit(path, encoder=None, resamples=20)
    profile = audit.profile.set_index("source")
    assert sorted(profile.index[profile["kind"] == "genuine"]) == sorted(RUNS)
    for run in RUNS:
        assert profile.loc[run, "kind"] == "genuine"
        assert profile.loc[run, "n_records"] == N_QUERIES


def test_one_subset_gets_the_self_controls(data: Path, tmp_path: Path) -> None:
    records, rows = _dl19(data, ("BM25",))
    path = _jsonl(tmp_path / "rlhn-bm25.jsonl", rows)
    kinds = tdx.audit(path, encoder=None, resamples=20).profile.set_index("source")["kind"]
    assert list(kinds[kinds == "genuine"].index) == ["BM25"]
    # the controls the same records get read any other way, built from the one subset's own passages
    same = tdx.audit(records, encoder=None, resamples=20).profile.set_index("source")["kind"]
    controls = set(kinds[kinds == "control"].index)
    assert controls and controls == set(same[same == "control"].index)


def test_a_passage_without_text_is_a_located_error(tmp_path: Path) -> None:
    good = {
        "query_id": "1",
        "query": "what is a violin",
        "positive_passages": [{"docid": "p1", "title": "Violin", "text": "a string instrument"}],
        "negative_passages": [{"docid": "n1", "title": "", "text": "a planet"}],
    }
    bad = good | {
        "query_id": "2",
        "negative_passages": [{"docid": "n1", "title": "", "text": "a planet"}, {"docid": "n2", "title": "Moon"}],
    }
    path = _jsonl(tmp_path / "train.jsonl", [good, bad])
    with pytest.raises(InputError) as err:
        tdx.load(path)
    assert (err.value.file, err.value.line, err.value.field) == (str(path), 2, "negative_passages[1].text")
    assert "missing" in err.value.message
    skipped = tdx.load(path, on_error="skip")
    assert [r.qid for r in skipped.records] == ["1"]
    (excluded,) = skipped.exclusions
    assert (excluded.line, excluded.field, excluded.unit) == ("2", "negative_passages[1].text", "record")
    assert skipped.descriptors["train"]["rows"] == {"read": 2, "in_records": 1, "excluded": 1, "records": 1}


def test_a_missing_passages_column_is_named(tmp_path: Path) -> None:
    row = {"query_id": "1", "query": "q", "negative_passages": [{"docid": "n", "text": "n"}]}
    with pytest.raises(InputError, match=r"field '<columns>': .*Tevatron rows need positive_passages as well"):
        tdx.load(_jsonl(tmp_path / "train.jsonl", [row]))


def test_every_row_is_accounted_for_under_skip(tmp_path: Path) -> None:
    """A line that is no JSON, a bad ``subset`` and a repeated ``query_id``: each a counted
    exclusion with its line; each source's rows read = in_records + excluded, and the rows no source
    can claim are said on every source (``rows_without_subset``)."""

    def row(i: int, subset: Any = "a", qid: str | None = None) -> str:
        passages = {"positive_passages": [{"docid": f"p{i}", "text": f"positive {i}"}]}
        passages["negative_passages"] = [{"docid": f"n{i}", "title": "T", "text": f"negative {i}"}]
        return json.dumps({"query_id": qid or str(i), "query": f"query {i}", **passages, "subset": subset})

    path = tmp_path / "rlhn.jsonl"
    path.write_text("\n".join([row(0), "{not json", row(1, "b"), row(2, 5), row(3, "a", "0")]) + "\n")
    loaded = tdx.load(path, on_error="skip")
    assert sorted((r.source, r.qid) for r in loaded.records) == [("a", "0"), ("b", "1")]
    assert [(e.line, e.field, e.source) for e in loaded.exclusions] == [
        ("2", "<line>", ""),
        ("4", "subset", ""),
        ("5", "qid", "a"),
    ]
    assert loaded.descriptors["a"]["rows"] == {"read": 2, "in_records": 1, "excluded": 1, "records": 1}
    assert loaded.descriptors["b"]["rows"] == {"read": 1, "in_records": 1, "excluded": 0, "records": 1}
    assert {d["rows_without_subset"] for d in loaded.descriptors.values()} == {2}
    with pytest.raises(InputError) as err:
        tdx.load(path)
    assert err.value.line == 2


def test_a_row_without_negatives_is_a_counted_exclusion(tmp_path: Path) -> None:
    rows = [
        {
            "query_id": str(i),
            "query": f"query {i}",
            "positive_passages": [{"docid": f"p{i}", "title": "", "text": f"positive {i}"}],
            "negative_passages": [{"docid": f"n{i}", "title": "", "text": f"negative {i}"}] if i else [],
        }
        for i in range(3)
    ]
    loaded = tdx.load(_jsonl(tmp_path / "relabelled.jsonl", rows))  # under on_error=raise too
    assert sorted(r.qid for r in loaded.records) == ["1", "2"]
    (empty,) = loaded.exclusions
    assert empty.no_negative and empty.reason == NO_NEGATIVE and empty.line == "1"


def _cleaning(
    loaded: Any, drop: dict[str, set[str]], relabel: dict[str, str] | None = None, fill: str = "repeat"
) -> Cleaning:
    """A cleaning that removes the negatives ``drop[qid]`` names (by docid) and relabels
    ``relabel[qid]`` (a docid) as a positive; ``fill=borrow`` lends the next query's negatives."""
    relabel = relabel or {}
    cleaned = []
    for r in loaded.records:
        gone = drop.get(r.qid, set()) | ({relabel[r.qid]} if r.qid in relabel else set())
        moved = tuple(n for n in r.negatives if n.id == relabel.get(r.qid))
        rec = Record(r.qid, r.query, r.positives + moved, tuple(n for n in r.negatives if n.id not in gone), r.source)
        cleaned.append(CleanedQuery(rec, moved))
    if fill == "borrow":
        lenders = [q for q in cleaned if q.record.negatives]
        cleaned = [
            q if q.record.negatives else CleanedQuery(q.record, q.added, lenders[0].record.negatives) for q in cleaned
        ]
    by_qid = {(q.record.source, q.record.qid): q for q in cleaned}
    return Cleaning(by_qid, {(q.record.source, q.record.query): q for q in cleaned}, fill=fill)


def test_the_writer_keeps_the_objects_and_the_other_columns(tmp_path: Path) -> None:
    rows = [
        {
            "query_id": "1",
            "query": "violin",
            "positive_passages": [{"docid": "p1", "title": "Violin", "text": "a string instrument"}],
            "negative_passages": [
                {"docid": "n1", "title": "Viola", "text": "a larger string instrument", "score": 9.5},
                {"docid": "n2", "title": "", "text": "a planet", "score": 3.0},
                {"docid": "n3", "title": "Moon", "text": "a satellite", "score": 2.0},
            ],
            "subset": "music",
            "extra": "kept",
        },
        {
            "query_id": "2",
            "query": "moon",
            "positive_passages": [{"docid": "p2", "title": "Moon", "text": "Earth's satellite"}],
            "negative_passages": [{"docid": "n4", "title": "", "text": "a violin"}],
            "subset": "space",
            "extra": "also kept",
        },
    ]
    path = _jsonl(tmp_path / "rlhn.jsonl", rows)
    loaded = tdx.load(path, keep_tables=True)
    (kept,) = loaded.tables
    out = rewrite(kept, _cleaning(loaded, {"1": {"n2"}}, {"1": "n1"}))
    first, second = out.rows
    assert first["negative_passages"] == [rows[0]["negative_passages"][2]]  # the object as it was
    assert first["positive_passages"] == [*rows[0]["positive_passages"], rows[0]["negative_passages"][0]]
    assert (first["subset"], first["extra"], second) == ("music", "kept", rows[1])
    assert [(c.line, c.change, c.n_lost) for c in out.changes] == [(1, "relabeled", 2)]
    assert out.columns == list(kept.table.columns)

    # a row left with no negative: left out and listed (its relabeled passage too) ...
    out = rewrite(kept, _cleaning(loaded, {"2": {"n4"}}))
    assert [r["query_id"] for r in out.rows] == ["1"]
    assert [(c.line, c.change) for c in out.changes] == [(2, "unwritable")]
    out = rewrite(kept, _cleaning(loaded, {"1": {"n2", "n3"}}, {"1": "n1"}))
    assert [r["query_id"] for r in out.rows] == ["2"]
    assert [c.change for c in out.changes] == ["unwritable", RELABEL_UNWRITTEN]
    none = rewrite(kept, _cleaning(loaded, {"2": {"n4"}}, fill="none"))
    assert [c.change for c in none.changes] == ["dropped"]
    # ... or, with clean.fill=borrow, written with the next query's kept negatives (their objects)
    out = rewrite(kept, _cleaning(loaded, {"2": {"n4"}}, fill="borrow"))
    assert out.rows[1]["negative_passages"] == rows[0]["negative_passages"]
    assert [(c.line, c.change) for c in out.changes] == [(2, "borrowed")]
