"""Id lists with lookup tables (``format="idlist"``, :mod:`transferdx.inputs.idlists`): an id table
beside a corpus and a queries table, each in any table form; missing ids located or counted; scores
kept on the passages and, in the cleaned copy, aligned with the ids that stay."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import transferdx as tdx
from transferdx import config
from transferdx.auditing.commands import clean_command
from transferdx.inputs.idlists import id_plan, load_id_lists, lookup_texts
from transferdx.inputs.records import InputError

PASSAGES = {
    "10": "apple engine info",
    "11": "violin planet",
    "12": "garden castle",
    "13": "pepper moon",
    "20": "river about what",
    "21": "castle garden",
    "22": "moon pepper",
}
QUERIES = {"q1": "apple engine", "q2": "river about"}
ROWS = [
    {"query_id": "q1", "pos_id": "10", "neg_ids": ["11", "12", "13"], "pos_score": 0.9, "neg_scores": [0.5, 0.4, 0.3]},
    {"query_id": "q2", "pos_id": "20", "neg_ids": ["21", "22", "11"], "pos_score": 0.8, "neg_scores": [0.7, 0.6, 0.1]},
]


def _write(frame: pd.DataFrame, path: Path) -> Path:
    if path.suffix == ".parquet":
        frame.to_parquet(path)
    elif path.suffix == ".csv":
        frame.to_csv(path, index=False)
    else:
        frame.to_json(path, orient="records", lines=True, force_ascii=False)
    return path


def _lookups(folder: Path, corpus_form: str = "jsonl", queries_form: str = "parquet") -> dict[str, Path]:
    corpus = pd.DataFrame({"passage_id": list(PASSAGES), "passage": list(PASSAGES.values())})
    queries = pd.DataFrame({"query_id": list(QUERIES), "query": list(QUERIES.values())})
    return {
        "corpus": _write(corpus, folder / f"corpus.{corpus_form}"),
        "queries": _write(queries, folder / f"queries.{queries_form}"),
    }


def _ids(folder: Path, form: str, rows: list[dict[str, Any]] = ROWS) -> Path:
    return _write(pd.DataFrame(rows), folder / f"ids.{form}")


def _suspect(
    loaded: Any, qid: str, neg_id: str, reason: str = "positive_aware", index: int | None = None
) -> pd.DataFrame:
    """The audit's per-negative frame, ``neg_id`` of ``qid`` suspected for ``reason`` (only its
    occurrence at ``index`` among the record's negatives, when given)."""
    rows = []
    for rec in loaded.records:
        for k, n in enumerate(rec.negatives):
            hit = rec.qid == qid and n.id == neg_id and index in (None, k)
            rows.append(
                {
                    "source": rec.source,
                    "qid": rec.qid,
                    "neg_index": k,
                    "neg_id": n.id,
                    "negative": n.text,
                    f"fn_{reason}": hit,
                    "fn_reasons": reason if hit else "",
                }
            )
    return pd.DataFrame(rows)


def test_ids_parquet_with_lookups_in_other_forms_and_scores_on_the_passages(tmp_path: Path) -> None:
    lookups = _lookups(tmp_path, corpus_form="jsonl", queries_form="parquet")
    loaded = tdx.load(_ids(tmp_path, "parquet"), **lookups)  # corpus= chooses the reader: no format=
    by_qid = {r.qid: r for r in loaded.records}
    assert sorted(by_qid) == ["q1", "q2"] and loaded.sources == ["ids"]
    q1 = by_qid["q1"]
    assert q1.query == "apple engine"
    assert [(p.id, p.text, p.score) for p in q1.positives] == [("10", "apple engine info", 0.9)]
    assert [(n.id, n.text, n.score, n.rank) for n in q1.negatives] == [
        ("11", "violin planet", 0.5, 1),
        ("12", "garden castle", 0.4, 2),
        ("13", "pepper moon", 0.3, 3),
    ]
    desc = loaded.descriptors["ids"]
    assert (
        desc["lookups"]["corpus"]["file"] == "corpus.jsonl" and desc["lookups"]["queries"]["file"] == "queries.parquet"
    )
    assert desc["rows"] == {"read": 2, "in_records": 2, "excluded": 0, "records": 2}
    assert desc["mining_scores"]["negatives"]["n"] == 6 and desc["mining_scores"]["positives"]["max"] == 0.9


def test_a_missing_passage_id_is_located_or_counted(tmp_path: Path) -> None:
    rows = [ROWS[0], {**ROWS[1], "neg_ids": ["21", "99", "11"]}]
    path = _ids(tmp_path, "jsonl", rows)
    lookups = _lookups(tmp_path)
    with pytest.raises(InputError) as err:
        load_id_lists(path, **lookups)
    assert (err.value.line, err.value.field) == (2, "neg_ids") and "'99' is not in corpus.jsonl" in err.value.message
    loaded = load_id_lists(path, on_error="skip", **lookups)
    assert [r.qid for r in loaded.records] == ["q1"]
    [excluded] = loaded.exclusions
    assert (excluded.file, excluded.line, excluded.field, excluded.unit) == ("ids.jsonl", "2", "neg_ids", "record")
    rows_desc = loaded.descriptors["ids"]["rows"]
    assert rows_desc["read"] == rows_desc["in_records"] + rows_desc["excluded"] == 2


def test_a_missing_query_id_is_located(tmp_path: Path) -> None:
    path = _ids(tmp_path, "parquet", [ROWS[0], {**ROWS[1], "query_id": "q9"}])
    with pytest.raises(InputError, match=r"ids.parquet:2: field 'query_id': query 'q9' is not in queries.parquet"):
        load_id_lists(path, **_lookups(tmp_path))


@pytest.mark.parametrize("form", ["parquet", "jsonl"])
def test_clean_removes_an_id_and_its_aligned_score(form: str, tmp_path: Path) -> None:
    lookups = _lookups(tmp_path, corpus_form="csv", queries_form="jsonl")
    path = _ids(tmp_path, form)
    loaded = tdx.load(path, format="idlist", keep_tables=True, **lookups)
    result = tdx.clean(loaded, _suspect(loaded, "q2", "22"), reasons=["positive_aware"], out=tmp_path / "clean")
    assert result.descriptor["faithful"], result.descriptor["note"]
    copy = tmp_path / "clean" / "cleaned" / path.name
    assert copy.is_file()
    if form == "parquet":
        written = pd.read_parquet(copy).to_dict("records")
    else:
        written = [json.loads(line) for line in copy.read_text(encoding="utf-8").splitlines()]
    assert [list(row) for row in written] == [list(ROWS[0])] * 2
    by_qid = {row["query_id"]: row for row in written}
    assert list(by_qid["q2"]["neg_ids"]) == ["21", "11"] and list(by_qid["q2"]["neg_scores"]) == [0.7, 0.1]
    assert list(by_qid["q1"]["neg_ids"]) == ["11", "12", "13"] and list(by_qid["q1"]["neg_scores"]) == [0.5, 0.4, 0.3]
    again = tdx.load(copy, format="idlist", **lookups)  # the same lookups read the copy
    after = {r.qid: [(n.id, n.score) for n in r.negatives] for r in again.records}
    assert after == {"q1": [("11", 0.5), ("12", 0.4), ("13", 0.3)], "q2": [("21", 0.7), ("11", 0.1)]}
    assert result.rows["change"].tolist() == ["trimmed"]


def test_a_repeat_removed_keeps_the_first_occurrence_and_its_score(tmp_path: Path) -> None:
    """A negative listed twice in a row (kept on reading, a ``duplicate_negative`` suspect): removing
    the repeat leaves the first occurrence, and the scores stay aligned with the ids."""
    rows = [{**ROWS[0], "neg_ids": ["11", "12", "11", "13"], "neg_scores": [0.5, 0.4, 0.45, 0.3]}]
    lookups = _lookups(tmp_path)
    loaded = tdx.load(_ids(tmp_path, "parquet", rows), keep_tables=True, **lookups)
    assert loaded.descriptors["ids"]["duplicate_negatives_kept"] == 1
    frame = _suspect(loaded, "q1", "11", reason="duplicate_negative", index=2)
    tdx.clean(loaded, frame, reasons=["duplicate_negative"], out=tmp_path / "clean")
    [row] = pd.read_parquet(tmp_path / "clean" / "cleaned" / "ids.parquet").to_dict("records")
    assert list(row["neg_ids"]) == ["11", "12", "13"] and list(row["neg_scores"]) == [0.5, 0.4, 0.3]


def test_hard_negatives_package_layout(tmp_path: Path) -> None:
    """The ``hard-negatives`` package's configs: ``documents`` (document_id, document), ``queries``
    (query_id, query), ``scores`` (query_id, document_ids — the positive first — and scores), one
    row per positive: a query's rows are one record, a negative both rows give kept once."""
    docs = pd.DataFrame({"document_id": [int(k) for k in PASSAGES], "document": list(PASSAGES.values())})
    queries = pd.DataFrame({"query_id": [1, 2], "query": list(QUERIES.values())})
    scores = pd.DataFrame(
        {
            "query_id": [1, 1, 2],
            "document_ids": [[10, 11, 12], [13, 11, 20], [20, 21, 22]],
            "scores": [[0.9, 0.5, 0.4], [0.85, 0.5, 0.45], [0.8, 0.7, 0.6]],
        }
    )
    loaded = tdx.load(
        _write(scores, tmp_path / "scores.parquet"),
        corpus=_write(docs, tmp_path / "documents.parquet"),
        queries=_write(queries, tmp_path / "queries.parquet"),
    )
    by_qid = {r.qid: r for r in loaded.records}
    assert [(p.id, p.score) for p in by_qid["1"].positives] == [("10", 0.9), ("13", 0.85)]
    assert [(n.id, n.score) for n in by_qid["1"].negatives] == [("11", 0.5), ("12", 0.4), ("20", 0.45)]
    merged = [e for e in loaded.exclusions if e.merged]
    assert [(e.line, e.item) for e in merged] == [("2", "11")]


def test_triplet_ids_with_an_unread_margin_column(tmp_path: Path) -> None:
    """sentence-transformers/msmarco ``bert-ensemble-margin-mse`` (query_id, positive_id,
    negative_id, score: a margin) with its ``corpus`` (passage_id, passage) and ``queries``
    (query_id, query): rows grouped by query, ``score`` listed as not read and kept in the copy;
    the row of a removed negative is dropped."""
    rows = [
        {"query_id": "q1", "positive_id": "10", "negative_id": n, "score": m}
        for n, m in (("11", 3.0), ("12", 2.5), ("13", 1.0))
    ]
    lookups = _lookups(tmp_path)
    path = _ids(tmp_path, "jsonl", rows)
    loaded = tdx.load(path, format="idlist", keep_tables=True, **lookups)
    [record] = loaded.records
    assert [n.id for n in record.negatives] == ["11", "12", "13"] and all(n.score is None for n in record.negatives)
    assert loaded.descriptors["ids"]["columns_not_read"] == ["score"]
    tdx.clean(loaded, _suspect(loaded, "q1", "12"), reasons=["positive_aware"], out=tmp_path / "clean")
    copy = [json.loads(line) for line in (tmp_path / "clean" / "cleaned" / "ids.jsonl").read_text().splitlines()]
    assert [(r["negative_id"], r["score"]) for r in copy] == [("11", 3.0), ("13", 1.0)]


def test_headerless_tsv_lookups_and_a_csv_id_table(tmp_path: Path) -> None:
    """MS MARCO's ``collection.tsv`` / ``queries.tsv`` (id<TAB>text, no header) as lookups; list
    cells of a CSV id table read back from their printed form."""
    (tmp_path / "collection.tsv").write_text("".join(f"{k}\t{v}\n" for k, v in PASSAGES.items()), encoding="utf-8")
    (tmp_path / "queries.tsv").write_text("".join(f"{k}\t{v}\n" for k, v in QUERIES.items()), encoding="utf-8")
    path = tmp_path / "ids.csv"
    pd.DataFrame(
        [{**r, "neg_ids": json.dumps(r["neg_ids"]), "neg_scores": json.dumps(r["neg_scores"])} for r in ROWS]
    ).to_csv(path, index=False)
    loaded = tdx.load(path, corpus=tmp_path / "collection.tsv", queries=tmp_path / "queries.tsv")
    q2 = next(r for r in loaded.records if r.qid == "q2")
    assert [(n.text, n.score) for n in q2.negatives] == [
        ("castle garden", 0.7),
        ("moon pepper", 0.6),
        ("violin planet", 0.1),
    ]


def test_headerless_id_triples_as_mmarco_ships_them(tmp_path: Path) -> None:
    """mMARCO's ``triples.train.ids.small.tsv`` (``qid<TAB>pid<TAB>pid``, no header) with a
    collection and queries TSV: a short line is located (counted under skip), the copy is the same
    headerless lines less the row of the removed negative."""
    (tmp_path / "collection.tsv").write_text("".join(f"{k}\t{v}\n" for k, v in PASSAGES.items()), encoding="utf-8")
    (tmp_path / "queries.tsv").write_text("".join(f"{k}\t{v}\n" for k, v in QUERIES.items()), encoding="utf-8")
    lines = ["q1\t10\t11", "q1\t10\t12", "q1\t10", "q2\t20\t21", "q2\t20\t22"]
    path = tmp_path / "triples.train.ids.small.tsv"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    lookups = {"corpus": tmp_path / "collection.tsv", "queries": tmp_path / "queries.tsv"}
    with pytest.raises(InputError) as err:
        tdx.load(path, **lookups)
    assert err.value.line == 3 and "expected 3 tab-separated fields" in err.value.message
    loaded = tdx.load(path, on_error="skip", keep_tables=True, **lookups)
    assert {r.qid: [n.id for n in r.negatives] for r in loaded.records} == {"q1": ["11", "12"], "q2": ["21", "22"]}
    assert loaded.descriptors["triples.train.ids.small"]["rows"] == {
        "read": 5,
        "in_records": 4,
        "excluded": 1,
        "records": 2,
    }
    tdx.clean(loaded, _suspect(loaded, "q2", "21"), reasons=["positive_aware"], out=tmp_path / "clean")
    copy = (tmp_path / "clean" / "cleaned" / path.name).read_text(encoding="utf-8")
    assert copy == "q1\t10\t11\nq1\t10\t12\nq2\t20\t22\n"


def test_lookup_tables_are_checked_and_titles_joined(tmp_path: Path) -> None:
    corpus = pd.DataFrame({"_id": ["a", "b"], "title": ["Apple", None], "text": ["engine info", "violin"]})
    texts, name, digest = lookup_texts(_write(corpus, tmp_path / "corpus.jsonl"), "passage")
    assert texts == {"a": "Apple engine info", "b": "violin"} and name == "corpus.jsonl" and digest
    assert lookup_texts(corpus, "passage")[0] == texts  # a DataFrame in memory goes the same way
    dup = pd.DataFrame({"passage_id": ["a", "b", "a"], "passage": ["x", "y", "z"]})
    with pytest.raises(InputError) as err:
        lookup_texts(_write(dup, tmp_path / "dup.parquet"), "passage")
    assert (err.value.line, err.value.field) == (
        3,
        "passage_id",
    ) and "duplicate id 'a' (also line 1)" in err.value.message
    with pytest.raises(InputError, match="no text column"):
        lookup_texts(pd.DataFrame({"query_id": ["q"], "body": ["x"]}), "query")


def test_relabel_joins_a_positives_list(tmp_path: Path) -> None:
    rows = [{"query_id": "q1", "pos_ids": ["10"], "neg_ids": ["11", "12", "13"]}]
    lookups = _lookups(tmp_path)
    path = _ids(tmp_path, "jsonl", rows)
    loaded = tdx.load(path, keep_tables=True, **lookups)
    tdx.clean(loaded, _suspect(loaded, "q1", "12"), reasons=["positive_aware"], action="relabel", out=tmp_path / "c")
    [row] = [json.loads(line) for line in (tmp_path / "c" / "cleaned" / "ids.jsonl").read_text().splitlines()]
    assert row == {"query_id": "q1", "pos_ids": ["10", "12"], "neg_ids": ["11", "13"]}
    [record] = tdx.load(tmp_path / "c" / "cleaned" / "ids.jsonl", **lookups).records
    assert [p.id for p in record.positives] == ["10", "12"] and [n.id for n in record.negatives] == ["11", "13"]


def test_relabel_with_one_positive_a_row_is_listed_and_the_window_rest_stays(tmp_path: Path) -> None:
    """``k=2`` audits the first two negatives; the third stays in the copy. A relabeled id cannot
    join a one-id ``pos_id`` column: it leaves the negatives and is listed (``relabel_unwritten``)."""
    lookups = _lookups(tmp_path)
    loaded = tdx.load(_ids(tmp_path, "jsonl"), format="idlist", k=2, keep_tables=True, **lookups)
    assert [n.id for n in loaded.records[0].negatives] == ["11", "12"]
    assert loaded.descriptors["ids"]["slice"] == "[0:2]"
    out = tmp_path / "c"
    result = tdx.clean(loaded, _suspect(loaded, "q1", "12"), reasons=["positive_aware"], action="relabel", out=out)
    rows = [json.loads(line) for line in (out / "cleaned" / "ids.jsonl").read_text().splitlines()]
    assert rows[0] | {"neg_scores": None} == {**ROWS[0], "neg_ids": ["11", "13"], "neg_scores": None}
    assert rows[0]["neg_scores"] == [0.5, 0.3] and rows[1] == ROWS[1]
    unwritten = result.rows[result.rows["change"] == "relabel_unwritten"]
    assert unwritten["qid"].tolist() == ["q1"] and unwritten["detail"].str.startswith("12: ").all()


def test_id_plan_needs_a_query_a_positive_and_negatives() -> None:
    assert id_plan(["query_id", "pos_id", "neg_ids"]) is not None
    assert id_plan(["query_id", "document_ids", "scores"]) == {
        "qid": "query_id",
        "documents": "document_ids",
        "document_scores": "scores",
    }
    assert id_plan(["query_id", "pos_id"]) is None and id_plan(["pos_id", "neg_ids"]) is None


def test_the_preset_makes_the_lookup_paths_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from transferdx.presets import config_dir

    monkeypatch.chdir(tmp_path)
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        cfg = compose(
            config_name="audit",
            overrides=["data=idlist", "data.path=ids.parquet", "data.corpus=c.jsonl", "data.queries=q.tsv"],
        )
    read = config.read_with(cfg)
    assert read == {
        "data": "idlist",
        "data.path": str(tmp_path / "ids.parquet"),
        "data.corpus": str(tmp_path / "c.jsonl"),
        "data.queries": str(tmp_path / "q.tsv"),
    }
    command = clean_command({"read_with": read})  # what the audit prints: it names both lookups
    assert f"data.corpus={tmp_path / 'c.jsonl'}" in command and f"data.queries={tmp_path / 'q.tsv'}" in command


def test_a_negative_that_is_also_a_positive_goes_as_in_every_row_format(tmp_path: Path) -> None:
    """Rows become records through :class:`~transferdx.inputs.rows.RowReader`: a negative whose text
    is one of the query's positives is the builder's located error, a counted exclusion under skip."""
    path = _ids(tmp_path, "jsonl", [{"query_id": "q1", "pos_id": "10", "neg_ids": ["11", "10"]}])
    lookups = _lookups(tmp_path)
    with pytest.raises(InputError) as err:
        load_id_lists(path, **lookups)
    assert (err.value.line, err.value.field) == (1, "negatives") and "identical to a positive" in err.value.message
    loaded = load_id_lists(path, on_error="skip", **lookups)
    assert [n.id for n in loaded.records[0].negatives] == ["11"]
    [excluded] = loaded.exclusions
    assert (excluded.unit, excluded.item) == ("negative", "10")


def test_query_ids_of_one_text_are_one_record_and_cleaned_in_each_row(tmp_path: Path) -> None:
    """Rows are grouped by query text (as in every row format): a query id whose text an earlier one
    has joins that record (its qid the first row's); the copy cleans the rows of both ids."""
    corpus = pd.DataFrame({"passage_id": list(PASSAGES), "passage": list(PASSAGES.values())})
    queries = pd.DataFrame({"query_id": ["q1", "q3"], "query": ["apple engine", "apple engine"]})
    lookups = {"corpus": _write(corpus, tmp_path / "corpus.jsonl"), "queries": _write(queries, tmp_path / "q.jsonl")}
    rows = [
        {"query_id": "q1", "pos_id": "10", "neg_ids": ["11", "13"]},
        {"query_id": "q3", "pos_id": "10", "neg_ids": ["12", "13"]},
    ]
    path = _ids(tmp_path, "jsonl", rows)
    loaded = load_id_lists(path, keep_tables=True, **lookups)
    [record] = loaded.records
    assert record.qid == "q1" and [n.id for n in record.negatives] == ["11", "13", "12"]
    assert [(e.line, e.item) for e in loaded.exclusions if e.merged] == [("2", "13")]
    result = tdx.clean(loaded, _suspect(loaded, "q1", "12"), reasons=["positive_aware"], out=tmp_path / "c")
    copy = [json.loads(line) for line in (tmp_path / "c" / "cleaned" / "ids.jsonl").read_text().splitlines()]
    assert [r["neg_ids"] for r in copy] == [["11", "13"], ["13"]]
    assert result.rows[["qid", "change"]].values.tolist() == [["q3", "trimmed"]]
