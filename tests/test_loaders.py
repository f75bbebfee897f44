"""Loaders against golden samples of the real files in the data directory (counts, first and last
records, documented quirks), and round trips of the package's own formats."""

from __future__ import annotations

import gzip
import json
from collections import Counter

import pytest

from transferdx.inputs.beir import load_beir
from transferdx.inputs.flagembedding import load_flagembedding
from transferdx.inputs.msmarco import load_msmarco_triples, load_st_hard_negatives
from transferdx.inputs.reading import parse_slice
from transferdx.inputs.registry import names
from transferdx.inputs.registry import read as load
from transferdx.inputs.sentence_transformers import load_ntuple
from transferdx.inputs.textforms import read_id_text_tsv
from transferdx.inputs.transferdx_records import read_records, write_records
from transferdx.inputs.trec_dl import load_trec_dl
from transferdx.sources import demo as _demo  # noqa: F401  (registers "demo" and "demo_pool", as the package does)

DL19_RUNS = ["BM25", "BM25_RM3", "D_BERT_KD_TASB", "OPEN_AI_ADA2", "REP_LLAMA", "SPLADE_P_P_ENSEMBLE_DISTIL"]


@pytest.fixture(scope="module")
def dl19(data):
    return load_trec_dl(data / "msmarco-dl19")


def test_dl19_each_run_is_a_source(dl19):
    counts = Counter(r.source for r in dl19.records)
    assert sorted(counts) == DL19_RUNS
    # query 1133167 keeps 0 negatives for TAS-B; 168216 keeps 0 in SPLADE's top-100
    assert counts == {
        "BM25": 43,
        "BM25_RM3": 43,
        "OPEN_AI_ADA2": 43,
        "REP_LLAMA": 43,
        "D_BERT_KD_TASB": 42,
        "SPLADE_P_P_ENSEMBLE_DISTIL": 42,
    }
    empty = sorted((e.source, e.qid) for e in dl19.exclusions if e.unit == "record")
    assert empty == [("D_BERT_KD_TASB", "1133167"), ("SPLADE_P_P_ENSEMBLE_DISTIL", "168216")]


def test_dl19_golden_first_and_last_bm25_record(dl19):
    bm25 = [r for r in dl19.records if r.source == "BM25"]
    first, last = bm25[0], bm25[-1]
    assert (first.qid, first.query) == ("19335", "anthropological definition of environment")
    assert [(n.id, n.rank, n.judgment) for n in first.negatives] == [
        ("8635981", 3, 0),
        ("7267248", 4, 0),
        ("1726", 5, 0),
        ("8412687", 7, 0),
        ("6999135", 8, 0),
        ("527695", 9, 0),
        ("4835655", 13, None),
        ("527689", 14, 0),
    ]
    assert first.positives[0].id == "3175481" and first.positives[0].judgment == 3
    assert (last.qid, last.query) == ("1133167", "how is the weather in jamaica")
    assert [n.rank for n in last.negatives] == [2, 5, 12, 18, 23, 24, 28, 33]
    assert all(n.judgment == 1 for n in last.negatives)


def test_dl19_positive_order_and_no_relevant_negatives(dl19, data):
    grades = {}
    for line in (data / "msmarco-dl19" / "qrels.dl19-passage.txt").read_text().splitlines():
        qid, _, pid, g = line.split()
        grades[(qid, pid)] = int(g)
    for rec in dl19.records:
        # MS MARCO passage ids are integers: ordered numerically (design §3, identity of passages)
        keys = [(-grades[(rec.qid, p.id)], int(p.id)) for p in rec.positives]
        assert keys == sorted(keys)
        assert all(grades[(rec.qid, p.id)] >= 2 for p in rec.positives)
        assert all(grades.get((rec.qid, n.id), -1) < 2 for n in rec.negatives)
        assert len(rec.negatives) <= 8
        ranks = [n.rank for n in rec.negatives]
        assert ranks == sorted(ranks)


def test_dl19_quirk_168216_keeps_few_negatives(dl19):
    k = {r.source: len(r.negatives) for r in dl19.records if r.qid == "168216"}
    assert k["BM25"] == 3 and k["BM25_RM3"] == 1 and k["D_BERT_KD_TASB"] == 2
    assert "SPLADE_P_P_ENSEMBLE_DISTIL" not in k


def test_dl19_slice_is_configurable(data):
    out = load_trec_dl(data / "msmarco-dl19", runs=["BM25"], slice_spec="[2:10]")
    full = load_trec_dl(data / "msmarco-dl19", runs=["BM25"], k=10)
    a = {r.qid: [n.id for n in r.negatives] for r in out.records}
    b = {r.qid: [n.id for n in r.negatives][2:10] for r in full.records}
    assert a == {q: v for q, v in b.items() if v}


def test_dl19_unknown_run_is_an_error(data):
    with pytest.raises(ValueError, match="unknown runs \\['NOPE'\\]"):
        load_trec_dl(data / "msmarco-dl19", runs=["NOPE"])


def test_msmarco_triples_golden(data):
    out = load_msmarco_triples(data / "msmarco-toy/splade_toy/triplets/raw.tsv")
    assert len(out.records) == 100 and not out.exclusions
    first, last = out.records[0], out.records[-1]
    assert first.query == "is a little caffeine ok during pregnancy"
    assert first.negatives[0].text.startswith("It is generally safe for pregnant women to eat chocolate")
    assert last.query == "what size can a carry on duffle bag be when flying"
    assert all(len(r.negatives) == 1 and len(r.positives) == 1 for r in out.records)


def test_triples_grouped_by_query(tmp_path):
    path = tmp_path / "t.tsv"
    path.write_text("q one\tpos\tneg a\nq two\tpos2\tneg b\nq one\tpos\tneg c\n")
    out = load_msmarco_triples(path)
    assert [(r.query, [n.text for n in r.negatives]) for r in out.records] == [
        ("q one", ["neg a", "neg c"]),
        ("q two", ["neg b"]),
    ]


def test_flagembedding_golden(data):
    out = load_flagembedding(data / "msmarco-toy/flagembedding_msmarco.jsonl")
    assert len(out.records) == 10
    assert out.records[0].query == ")what was the immediate impact of the success of the manhattan project?"
    assert out.records[-1].query == "feeding rice cereal how many times per day"
    assert all(len(r.negatives) == 25 for r in out.records)
    sliced = load_flagembedding(data / "msmarco-toy/flagembedding_msmarco.jsonl", slice_spec="[2:7]")
    assert [n.rank for n in sliced.records[0].negatives] == [3, 4, 5, 6, 7]


def test_ntuple_tsv_with_header_and_jsonl(tmp_path):
    tsv = tmp_path / "n.tsv"
    tsv.write_text("qid\tquery\tpositive\tnegative_1\tnegative_2\n7\tq\tp\tn1\tn2\n")
    out = load_ntuple(tsv, source="mine")
    rec = out.records[0]
    assert (rec.qid, rec.source, [n.text for n in rec.negatives]) == ("7", "mine", ["n1", "n2"])
    js = tmp_path / "n.jsonl"
    js.write_text(json.dumps({"query": "q", "positive": "p", "negative_2": "b", "negative_1": "a"}) + "\n")
    assert [n.text for n in load_ntuple(js).records[0].negatives] == ["a", "b"]


def _st_files(tmp_path, data):
    """A sentence-transformers hard-negative file built over the real toy collection."""
    collection = data / "msmarco-toy/splade_toy/full_collection/raw.tsv"
    queries = tmp_path / "queries.tsv"
    queries.write_text("100\tfirst query\n200\tsecond query\n")
    lines = [
        {"qid": 100, "pos": [0], "neg": {"bm25": [1, 2, 0, 3], "tasb": [5, 6]}},
        {"qid": "200", "pos": [1, 2], "neg": {"bm25": [3], "tasb": [4, 1]}},
    ]
    path = tmp_path / "hard.jsonl.gz"
    with gzip.open(path, "wt") as handle:
        handle.writelines(json.dumps(x) + "\n" for x in lines)
    return path, collection, queries


def test_st_hard_negatives_one_source_per_system(tmp_path, data):
    path, collection, queries = _st_files(tmp_path, data)
    out = load_st_hard_negatives(path, collection, queries, k=8)
    texts = read_id_text_tsv(collection)
    by = {(r.source, r.qid): r for r in out.records}
    assert sorted(by) == [("bm25", "100"), ("bm25", "200"), ("tasb", "100"), ("tasb", "200")]
    assert [n.id for n in by[("bm25", "100")].negatives] == ["1", "2", "3"]  # positive 0 removed
    assert by[("bm25", "100")].negatives[0].text == texts["1"]
    assert [n.rank for n in by[("bm25", "100")].negatives] == [1, 2, 4]
    assert [n.id for n in by[("tasb", "200")].negatives] == ["4"]
    removed = [(e.source, e.qid, e.item) for e in out.exclusions]
    assert removed == [("bm25", "100", "0"), ("tasb", "200", "1")]
    only = load_st_hard_negatives(path, collection, queries, systems=["tasb"], slice_spec="[0:1]")
    assert {r.source for r in only.records} == {"tasb"} and all(len(r.negatives) == 1 for r in only.records)


def test_beir_scifact_golden(data):
    qs = load_beir(data / "beir/scifact", split="test")
    assert len(qs.queries) == 300 and len(qs.pool) == 5183
    assert sum(len(v) for v in qs.positives.values()) == 339
    assert qs.queries["1"] == "0-dimensional biomaterials show inductive properties."
    assert qs.positives["1"] == ["31715818"]
    train = load_beir(data / "beir/scifact", split="train")
    assert len(train.queries) == 809 and sum(len(v) for v in train.positives.values()) == 919


def test_records_round_trip(tmp_path, dl19):
    path = tmp_path / "dl19.jsonl"
    write_records(dl19.records, path)
    back = read_records(path)
    assert back.records == dl19.records and not back.exclusions


def test_records_folder_reads_every_file(tmp_path, dl19):
    for source in ("BM25", "REP_LLAMA"):
        write_records([r for r in dl19.records if r.source == source], tmp_path / f"{source}.jsonl")
    out = read_records(tmp_path)
    assert Counter(r.source for r in out.records) == {"BM25": 43, "REP_LLAMA": 43}


def test_registry_and_slices():
    assert set(names("read")) == {
        "records",
        "ntuple",
        "msmarco_triples",
        "flagembedding",
        "st_hard_negatives",
        "idlist",
        "tevatron",
        "trec_dl",
        "demo",
    }
    assert set(names("query_set")) == {"beir", "trec_dl_pool", "demo_pool"}
    shapes = ["flagembedding", "ntuple", "triplet", "labeled_list", "labeled_pair", "tevatron", "records"]
    assert names("shape") == shapes
    with pytest.raises(ValueError, match="unknown input format 'csv'"):
        load("x", format="csv")
    with pytest.raises(ValueError, match="'beir' is a query set, not records"):
        load("x", format="beir")
    assert parse_slice("[2:7]") == slice(2, 7)
    assert parse_slice(None, 8) == slice(0, 8)
    for bad in ("2:7", "[7:2]", "[a:b]"):
        with pytest.raises(ValueError, match="slice"):
            parse_slice(bad)


def test_one_chooser_serves_paths_configs_and_names(tmp_path, data):
    """``load`` reads a named format from a path given positionally or as a config gives it
    (``path=`` / ``root=`` among the options), and the demo by its name."""
    toy = data / "msmarco-toy/flagembedding_msmarco.jsonl"
    by_path = load(toy, format="flagembedding", k=3)
    by_config = load(format="flagembedding", path=str(toy), k=3, seed=0, source="flagembedding")
    assert by_path == by_config == load_flagembedding(toy, k=3)
    assert load(format="trec_dl", root=str(data / "msmarco-dl19"), runs=["BM25"]).sources == ["BM25"]
    assert load("demo").sources == load(format="demo", k=8, seed=0).sources


def test_registry_knows_the_demo_on_its_own():
    """``sources/demo.py`` registers the demo into the inputs registry (inputs import nothing above
    them); the package imports its verbs lazily, and any verb that loads imports the sources: the
    public ``load`` and the registry then both find it in a fresh process."""
    import subprocess
    import sys

    code = (
        "import transferdx as tdx;"
        "from transferdx.inputs.registry import read, read_query_set;"
        "n = len(tdx.load('demo').sources);"
        "print(n, len(read('demo').sources), read_query_set('demo').name)"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert out.split() == ["3", "3", "demo"]
