"""One test per class of bad input: located errors under on_error=raise, counted exclusions under
on_error=skip; nothing is lost silently."""

from __future__ import annotations

import json

import pytest

from transferdx.inputs.flagembedding import load_flagembedding
from transferdx.inputs.msmarco import load_st_hard_negatives
from transferdx.inputs.records import OWN_POSITIVE_RELATION, InputError
from transferdx.inputs.sentence_transformers import load_ntuple
from transferdx.inputs.transferdx_records import read_records
from transferdx.inputs.trec_dl import load_trec_dl

GOOD = {
    "qid": "1",
    "query": "q",
    "positives": [{"id": "p", "text": "pos"}],
    "negatives": [{"id": "n", "text": "neg"}],
    "source": "s",
}


def _write(tmp_path, lines, name="r.jsonl"):
    path = tmp_path / name
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    return path


def _bad(**changes):
    obj = json.loads(json.dumps(GOOD))
    for key, value in changes.items():
        if value is ...:
            del obj[key]
        else:
            obj[key] = value
    return obj


CASES = [
    ("malformed JSON", "{not json", "<line>", "malformed JSON"),
    ("not an object", "[1, 2]", "<line>", "expected a JSON object"),
    ("missing field", _bad(query=...), "query", "missing"),
    ("wrong type", _bad(query=3), "query", "expected a string"),
    ("empty query", _bad(query="   "), "query", "empty string"),
    ("no positives", _bad(positives=[]), "positives", "no positive"),
    ("no negatives", _bad(negatives=[]), "negatives", "no negatives"),
    ("negative is positive", _bad(negatives=[{"id": "n", "text": "pos"}]), "negatives", "identical to a positive"),
    ("bad passage", _bad(negatives=[{"id": "n"}]), "negatives[0].text", "missing"),
    ("bad rank", _bad(negatives=[{"id": "n", "text": "x", "rank": "1"}]), "negatives[0].rank", "integer"),
    ("bad kind", _bad(kind="fake"), "kind", "must be one of"),
    ("missing source", _bad(source=...), "source", "missing"),
]


@pytest.mark.parametrize(("name", "line", "field", "message"), CASES, ids=[c[0] for c in CASES])
def test_records_error_classes(tmp_path, name, line, field, message):
    path = _write(tmp_path, [GOOD | {"qid": "0"}, line])
    with pytest.raises(InputError, match=message) as err:
        read_records(path, on_error="raise")
    assert err.value.file == str(path) and err.value.line == 2 and err.value.field == field
    assert f"{path}:2: field '{field}'" in str(err.value)
    skipped = read_records(path, on_error="skip")
    assert [r.qid for r in skipped.records] == ["0"]
    # a record whose only negative is excluded is then excluded itself: both are logged
    assert len(skipped.exclusions) == (2 if name == "negative is positive" else 1)
    ex = skipped.exclusions[0]
    # the error names the path as given; the exclusion log names the file relative to the input
    assert (ex.file, ex.line, ex.field) == (path.name, "2", field) and message in ex.reason


def test_duplicate_query_in_source(tmp_path):
    path = _write(tmp_path, [GOOD, GOOD])
    with pytest.raises(InputError, match="duplicate query '1' in source 's'"):
        read_records(path)
    assert len(read_records(path, on_error="skip").records) == 1


def test_partial_negative_exclusion_keeps_the_rest(tmp_path):
    rec = _bad(negatives=[{"id": "a", "text": "pos"}, {"id": "b", "text": "other"}])
    out = read_records(_write(tmp_path, [rec]), on_error="skip")
    assert [n.id for n in out.records[0].negatives] == ["b"]
    assert [(e.unit, e.item) for e in out.exclusions] == [("negative", "a")]


def test_own_positive_negative_is_kept_when_marked(tmp_path):
    rec = _bad(negatives=[{"id": "p", "text": "pos", "relation": OWN_POSITIVE_RELATION}], kind="control")
    out = read_records(_write(tmp_path, [rec]))
    assert out.records[0].negatives[0].relation == OWN_POSITIVE_RELATION and not out.exclusions


def test_missing_path_and_empty_folder(tmp_path):
    with pytest.raises(InputError, match="no such file or folder"):
        read_records(tmp_path / "nope.jsonl")
    with pytest.raises(InputError, match=r"no \*\.jsonl files"):
        read_records(tmp_path)


def test_policy_must_be_known(tmp_path):
    with pytest.raises(ValueError, match="on_error must be one of"):
        read_records(_write(tmp_path, [GOOD]), on_error="ignore")


def test_tsv_wrong_field_count(tmp_path):
    path = tmp_path / "t.tsv"
    path.write_text("q\tp\tn\nq2\tp2\n")
    with pytest.raises(InputError, match=r"expected at least 3 tab-separated fields \(.*\), got 2") as err:
        load_ntuple(path)
    assert err.value.line == 2
    assert len(load_ntuple(path, on_error="skip").exclusions) == 1


def test_flagembedding_bad_list_item(tmp_path):
    path = _write(tmp_path, [{"query": "q", "pos": ["p"], "neg": ["ok", 5]}])
    with pytest.raises(InputError, match="field 'neg\\[1\\]': expected a string"):
        load_flagembedding(path)


def test_st_unknown_passage_and_query(tmp_path):
    coll = tmp_path / "c.tsv"
    coll.write_text("1\tone\n2\ttwo\n")
    queries = tmp_path / "q.tsv"
    queries.write_text("9\tquery\n")
    hard = _write(
        tmp_path,
        [{"qid": 9, "pos": [1], "neg": {"bm25": [2, 3]}}, {"qid": 8, "pos": [1], "neg": {"bm25": [2]}}],
        "h.jsonl",
    )
    with pytest.raises(InputError, match=r"passage id '3' is not in c\.tsv"):
        load_st_hard_negatives(hard, coll, queries)
    out = load_st_hard_negatives(hard, coll, queries, on_error="skip")
    assert not out.records and [e.line for e in out.exclusions] == ["1", "2"]


def test_collection_duplicate_id(tmp_path):
    coll = tmp_path / "c.tsv"
    coll.write_text("1\tone\n1\tagain\n")
    queries = tmp_path / "q.tsv"
    queries.write_text("9\tquery\n")
    hard = _write(tmp_path, [{"qid": 9, "pos": [1], "neg": {"bm25": [1]}}], "h.jsonl")
    with pytest.raises(InputError, match=r"c\.tsv:2: field 'id': duplicate id '1'"):
        load_st_hard_negatives(hard, coll, queries)


def _dl_layout(tmp_path, qrels="1 Q0 a 3\n1 Q0 b 0\n", hits=None):
    root = tmp_path / "dl"
    (root / "runs" / "SYS").mkdir(parents=True)
    (root / "topics.dl19-passage.txt").write_text("1\tquery one\n")
    (root / "qrels.dl19-passage.txt").write_text(qrels)
    hits = (
        hits
        if hits is not None
        else [
            {"qid": 1, "docid": "a", "rank": 1, "score": 2.0, "content": "relevant"},
            {"qid": 1, "docid": "b", "rank": 2, "score": 1.0, "content": "judged zero"},
            {"qid": 1, "docid": "c", "rank": 3, "score": 0.5, "content": "unjudged"},
        ]
    )
    (root / "runs" / "SYS" / "retrieve_results_dl19.json").write_text(
        json.dumps([{"query": "query one", "hits": hits}])
    )
    return root


def test_trec_dl_minimal_layout(tmp_path):
    out = load_trec_dl(_dl_layout(tmp_path))
    rec = out.records[0]
    assert [p.id for p in rec.positives] == ["a"]
    assert [(n.id, n.judgment, n.rank) for n in rec.negatives] == [("b", 0, 2), ("c", None, 3)]


def test_trec_dl_bad_grade(tmp_path):
    with pytest.raises(InputError, match=r"qrels\.dl19-passage\.txt:2: field 'grade': expected an integer"):
        load_trec_dl(_dl_layout(tmp_path, qrels="1 Q0 a 3\n1 Q0 b high\n"))


def test_trec_dl_bad_hit(tmp_path):
    hits = [{"qid": 1, "docid": "a", "rank": "one", "content": "x"}]
    with pytest.raises(InputError, match=r"\[0\]: field 'hits\[0\]\.rank': expected an integer"):
        load_trec_dl(_dl_layout(tmp_path, hits=hits))


def test_trec_dl_query_without_negatives_is_counted(tmp_path):
    hits = [{"qid": 1, "docid": "a", "rank": 1, "content": "relevant"}]
    out = load_trec_dl(_dl_layout(tmp_path, hits=hits))
    assert not out.records
    assert [(e.source, e.qid, e.unit) for e in out.exclusions] == [("SYS", "1", "record")]


def test_bad_sidecar_is_a_located_error(tmp_path):
    _write(tmp_path, [GOOD], "s.jsonl")
    (tmp_path / "false_negatives.json").write_text(json.dumps({"s": [["1", "two", 8]]}))
    with pytest.raises(InputError, match=r"false_negatives\.json: field 's'"):
        read_records(tmp_path)
    (tmp_path / "false_negatives.json").write_text(json.dumps({"s": [["1", 2, 8]]}))
    assert read_records(tmp_path).false_negatives == {"s": [("1", 2, 8)]}
