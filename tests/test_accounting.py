"""Every input item is in the output or in the exclusion log with its reason (issue "Reliability",
groups 3, 4, 5 and 7): records that vanished uncounted, unlocated encoding errors, column counts
taken from the first row, and artifacts that depended on where the input lives.

Bad files are built in ``tmp_path`` from copies of a few real lines of the data directory."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path

import pytest

from transferdx.auditing.report import exclusions_frame
from transferdx.inputs.flagembedding import load_flagembedding
from transferdx.inputs.msmarco import load_msmarco_triples, load_st_hard_negatives
from transferdx.inputs.records import DUPLICATE_NEGATIVES_KEPT, InputError
from transferdx.inputs.registry import load_path
from transferdx.inputs.sentence_transformers import load_ntuple
from transferdx.inputs.transferdx_records import read_records, write_records
from transferdx.inputs.trec_dl import load_trec_dl

DL19 = "msmarco-dl19"
TOPICS, QRELS = "topics.dl19-passage.txt", "qrels.dl19-passage.txt"


def _lines(path: Path, n: int | None = None) -> list[bytes]:
    """The first ``n`` lines of a real file, as bytes with their line ends."""
    lines = path.read_bytes().splitlines(keepends=True)
    return lines if n is None else lines[:n]


def _dl19_copy(tmp_path: Path, data: Path, topics: list[bytes] | None = None, qrels: list[bytes] | None = None):
    """A DL19 layout whose topics/qrels are (edited) copies and whose runs are the real ones (linked)."""
    root = tmp_path / "dl19"
    root.mkdir()
    (root / TOPICS).write_bytes(b"".join(topics if topics is not None else _lines(data / DL19 / TOPICS)))
    (root / QRELS).write_bytes(b"".join(qrels if qrels is not None else _lines(data / DL19 / QRELS)))
    (root / "runs").symlink_to(data / DL19 / "runs", target_is_directory=True)
    return root


def _record_units(result, units=("record", "line", "query")):
    return [e for e in result.exclusions if e.unit in units]


# ---------------------------------------------------------------------------------------------
# 3. Records vanish uncounted
# ---------------------------------------------------------------------------------------------


def test_dl19_query_missing_from_topics_is_counted(tmp_path, data):
    """Drop judged query 1133167 from the topics: its six records become one counted query
    exclusion (it used to vanish, with its own TAS-B exclusion row, 256 → 250 records and no note)."""
    topics = [line for line in _lines(data / DL19 / TOPICS) if not line.startswith(b"1133167\t")]
    root = _dl19_copy(tmp_path, data, topics=topics)
    out = load_trec_dl(root)
    assert len(out.records) == 251 and "1133167" not in {r.qid for r in out.records}
    (missing,) = [e for e in out.exclusions if e.unit == "query"]
    first = next(i for i, line in enumerate(_lines(root / QRELS), 1) if line.startswith(b"1133167 "))
    assert (missing.file, missing.line, missing.source, missing.qid, missing.field) == (
        QRELS,
        str(first),
        "",
        "1133167",
        "qid",
    )
    assert missing.reason == f"judged query missing from the topics file {TOPICS}"
    # accounting over (judged query × run): 43 × 6 = 258 = kept + record exclusions + 6 × query exclusions
    records = [e for e in out.exclusions if e.unit == "record"]
    assert [(e.source, e.qid) for e in records] == [("SPLADE_P_P_ENSEMBLE_DISTIL", "168216")]
    assert len(out.records) + len(records) + 6 * 1 == 43 * 6


def test_qrels_naming_an_unknown_query_and_unjudged_topic_are_counted(tmp_path, data):
    qrels = [*_lines(data / DL19 / QRELS), b"999999 Q0 8635981 3\n"]
    topics = [*_lines(data / DL19 / TOPICS), b"888888\ta topic nobody judged\n"]
    out = load_trec_dl(_dl19_copy(tmp_path, data, topics=topics, qrels=qrels), runs=["BM25"])
    queries = sorted((e.qid, e.file, e.line, e.reason) for e in out.exclusions if e.unit == "query")
    assert queries == [
        ("888888", TOPICS, "44", f"topic has no judgments in {QRELS}"),
        ("999999", QRELS, str(len(qrels)), f"judged query missing from the topics file {TOPICS}"),
    ]
    plain = load_trec_dl(data / DL19, runs=["BM25"])
    assert out.records == plain.records  # nothing else changes
    assert [e for e in out.exclusions if e.unit != "query"] == plain.exclusions


def test_triples_duplicate_lines_counted(tmp_path, data):
    """An exact repeat of a triples line is an exclusion "duplicate line of line N" (it used to
    vanish); every line is accounted for in the descriptor."""
    lines = _lines(data / "msmarco-toy/splade_toy/triplets/raw.tsv", 5)
    path = tmp_path / "triples.tsv"
    path.write_bytes(b"".join([*lines, lines[1], lines[3]]))
    out = load_msmarco_triples(path)  # a duplicate line is data, not an error: also under raise
    assert len(out.records) == 5 and all(len(r.negatives) == 1 for r in out.records)
    dups = [(e.line, e.unit, e.reason) for e in out.exclusions]
    assert dups == [("6", "line", "duplicate line of line 2"), ("7", "line", "duplicate line of line 4")]
    assert out.descriptors["msmarco_triples"]["lines"] == {"read": 7, "in_records": 5, "excluded": 2, "records": 5}


def test_duplicate_negatives_kept_and_counted(tmp_path, data):
    """A negative repeated within a record stays (the audit flags it as a ``duplicate_negative``
    suspect) and is counted in the source's descriptor; records and FlagEmbedding alike."""
    obj = json.loads(_lines(data / "msmarco-toy/flagembedding_msmarco.jsonl", 1)[0])
    obj["neg"] = [*obj["neg"][:3], obj["neg"][1], obj["neg"][1]]
    obj["neg_scores"] = [*obj["neg_scores"][:3], obj["neg_scores"][1], obj["neg_scores"][1]]  # one per negative
    flag = tmp_path / "flag.jsonl"
    flag.write_text(json.dumps(obj) + "\n")
    out = load_flagembedding(flag)
    assert len(out.records[0].negatives) == 5 and not out.exclusions
    assert out.descriptors["flagembedding"][DUPLICATE_NEGATIVES_KEPT] == 2
    write_records(out.records, tmp_path / "folder" / "a.jsonl")
    write_records(out.records, tmp_path / "folder" / "b.jsonl")  # same query, so a duplicate query
    again = read_records(tmp_path / "folder", on_error="skip")
    assert again.descriptors["flagembedding"][DUPLICATE_NEGATIVES_KEPT] == 2
    both = read_records(tmp_path / "folder" / "a.jsonl").extend(read_records(tmp_path / "folder" / "a.jsonl"))
    assert both.descriptors["flagembedding"][DUPLICATE_NEGATIVES_KEPT] == 4  # summed when merged
    clean = load_flagembedding(data / "msmarco-toy/flagembedding_msmarco.jsonl")
    assert DUPLICATE_NEGATIVES_KEPT not in clean.descriptors["flagembedding"]


def test_st_line_without_systems_is_counted(tmp_path):
    coll, queries = tmp_path / "c.tsv", tmp_path / "q.tsv"
    coll.write_text("1\tone\n2\ttwo\n")
    queries.write_text("9\tquery\n")
    hard = tmp_path / "h.jsonl"
    hard.write_text(json.dumps({"qid": 9, "pos": [1], "neg": {}}) + "\n")
    with pytest.raises(InputError, match="no system lists negatives"):
        load_st_hard_negatives(hard, coll, queries)
    assert [e.field for e in load_st_hard_negatives(hard, coll, queries, on_error="skip").exclusions] == ["neg"]


# ---------------------------------------------------------------------------------------------
# 4. Encoding errors are located, and skipped under skip
# ---------------------------------------------------------------------------------------------


def _flag_lines(data: Path, n: int = 4) -> list[bytes]:
    return _lines(data / "msmarco-toy/flagembedding_msmarco.jsonl", n)


def _records_lines(data: Path, tmp_path: Path, n: int = 4) -> list[bytes]:
    out = load_flagembedding(data / "msmarco-toy/flagembedding_msmarco.jsonl", k=3)
    write_records(out.records[:n], tmp_path / "src.jsonl")
    return _lines(tmp_path / "src.jsonl")


def _break_utf8(line: bytes) -> bytes:
    """The same line with one byte inside a text replaced by 0xff (never valid in UTF-8)."""
    at = line.index(b'"', 20) + 3 if line.startswith(b"{") else 10
    return line[:at] + b"\xff" + line[at + 1 :]


@pytest.mark.parametrize("fmt", ["records", "flagembedding", "msmarco_triples", "shapes_jsonl", "shapes_tsv"])
def test_invalid_utf8_located_under_raise_and_skipped(tmp_path, data, fmt):
    if fmt == "records":
        lines, load, name = _records_lines(data, tmp_path), read_records, "r.jsonl"
    elif fmt == "flagembedding":
        lines, load, name = _flag_lines(data), load_flagembedding, "f.jsonl"
    elif fmt == "msmarco_triples":
        lines, load, name = _lines(data / "msmarco-toy/splade_toy/triplets/raw.tsv", 4), load_msmarco_triples, "t.tsv"
    elif fmt == "shapes_jsonl":
        lines, load, name = _flag_lines(data), load_path, "mined.jsonl"
    else:
        triples = _lines(data / "msmarco-toy/splade_toy/triplets/raw.tsv", 3)
        lines, load, name = [b"query\tpositive\tnegative\n", *triples], load_path, "mined.tsv"
    lines[2] = _break_utf8(lines[2])
    path = tmp_path / name
    path.write_bytes(b"".join(lines))
    with pytest.raises(InputError) as err:
        load(path)
    assert (err.value.file, err.value.line, err.value.field) == (str(path), 3, "<encoding>")
    assert "not valid UTF-8: byte 0xff" in str(err.value) and f"{path}:3: field '<encoding>'" in str(err.value)
    skipped = load(path, on_error="skip")
    (ex,) = skipped.exclusions
    assert (ex.file, ex.line, ex.field, ex.unit) == (name, "3", "<encoding>", "record")
    n_items = len(lines) - (1 if fmt == "shapes_tsv" else 0)
    assert len(skipped.records) == n_items - 1


def test_lone_surrogate_located(tmp_path, data):
    obj = json.loads(_flag_lines(data, 1)[0])
    obj["neg"][2] = "half a pair \ud800 here"
    path = tmp_path / "f.jsonl"
    path.write_text(json.dumps(obj) + "\n" + _flag_lines(data, 2)[1].decode())  # json.dumps escapes it
    with pytest.raises(InputError, match=r"f\.jsonl:1: field 'neg\[2\]': lone surrogate"):
        load_flagembedding(path)
    with pytest.raises(InputError, match=r":1: field 'neg\[2\]': lone surrogate"):
        load_path(path)
    assert len(load_flagembedding(path, on_error="skip").records) == 1
    records = tmp_path / "r.jsonl"
    records.write_text(json.dumps({"qid": "1", "query": "q", "positives": ["p"], "negatives": ["\udc80"]}) + "\n")
    with pytest.raises(InputError, match=r"field 'negatives\[0\]': lone surrogate"):
        read_records(records, source="s")


@pytest.mark.parametrize("fmt", ["records", "flagembedding", "msmarco_triples", "shapes_tsv", "shapes_csv"])
def test_bom_accepted(tmp_path, data, fmt):
    """A UTF-8 BOM before line 1 is dropped (it used to reject line 1)."""
    triples = _lines(data / "msmarco-toy/splade_toy/triplets/raw.tsv", 3)
    if fmt == "records":
        lines, load, name = _records_lines(data, tmp_path, 3), read_records, "r.jsonl"
    elif fmt == "flagembedding":
        lines, load, name = _flag_lines(data, 3), load_flagembedding, "f.jsonl"
    elif fmt == "msmarco_triples":
        lines, load, name = triples, load_msmarco_triples, "t.tsv"
    elif fmt == "shapes_tsv":
        lines, load, name = [b"query\tpositive\tnegative\n", *triples], load_path, "m.tsv"
    else:
        rows = [b'"' + b'","'.join(x.rstrip(b"\n").replace(b'"', b'""').split(b"\t")) + b'"\n' for x in triples]
        lines, load, name = [b"query,positive,negative\n", *rows], load_path, "m.csv"
    path = tmp_path / name
    path.write_bytes(b"\xef\xbb\xbf" + b"".join(lines))
    out = load(path)
    assert len(out.records) == 3 and not out.exclusions


def _gz_truncated(tmp_path: Path, lines: list[bytes], name: str) -> Path:
    whole = gzip.compress(b"".join(lines) * 40, mtime=0)  # long enough to break off mid-stream
    path = tmp_path / name
    path.write_bytes(whole[: len(whole) * 2 // 3])
    return path


def test_truncated_gzip_located(tmp_path, data):
    """A .jsonl.gz cut short: the lines before the break are read, the break itself is one located
    problem (it used to be an EOFError traceback)."""
    lines = _flag_lines(data, 2)
    # distinct queries per line so that the repeated block is not a run of duplicate queries
    objs = [json.loads(line) for line in lines]
    block = []
    for i in range(200):
        obj = dict(objs[i % 2], query=f"{objs[i % 2]['query']} #{i}")
        block.append((json.dumps(obj) + "\n").encode())
    whole = gzip.compress(b"".join(block), mtime=0)
    path = tmp_path / "f.jsonl.gz"
    path.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(InputError) as err:
        load_flagembedding(path)
    assert err.value.field == "<encoding>" and "truncated gzip stream" in err.value.message
    assert isinstance(err.value.line, int) and 1 < err.value.line < 200
    skipped = load_flagembedding(path, on_error="skip")
    (ex,) = skipped.exclusions
    assert ex.line == str(err.value.line) and ex.field == "<encoding>"
    assert len(skipped.records) == err.value.line - 1  # every line before the break is kept
    lines_desc = skipped.descriptors["flagembedding"]["rows"]
    assert lines_desc["read"] == lines_desc["in_records"] + lines_desc["excluded"] == err.value.line
    shaped = load_path(path, on_error="skip")  # the shape reader too
    assert len(shaped.records) == err.value.line - 1 and [e.field for e in shaped.exclusions] == ["<encoding>"]
    with pytest.raises(InputError, match="<encoding>"):
        load_path(path)
    # not a gzip file at all
    fake = tmp_path / "x.jsonl.gz"
    fake.write_bytes(b"".join(lines))
    with pytest.raises(InputError, match=r"x\.jsonl\.gz:1: field '<encoding>': corrupt gzip stream"):
        load_flagembedding(fake)


# ---------------------------------------------------------------------------------------------
# 5. The column count comes from the format, never from the first row
# ---------------------------------------------------------------------------------------------


def test_tsv_column_count_from_format_not_first_row(tmp_path, data):
    """30 real triples whose first row has a stray 4th field: ``raise`` blames line 1 (it blamed
    line 2), ``skip`` excludes that one line and keeps the 29 good ones (it kept one)."""
    lines = _lines(data / "msmarco-toy/splade_toy/triplets/raw.tsv", 30)
    lines[0] = lines[0].rstrip(b"\n") + b"\tstray\n"
    path = tmp_path / "t.tsv"
    path.write_bytes(b"".join(lines))
    with pytest.raises(InputError) as err:
        load_msmarco_triples(path)
    assert (err.value.line, err.value.field) == (1, "<line>")
    assert "expected 3 tab-separated fields (query, positive, negative), got 4" in err.value.message
    out = load_msmarco_triples(path, on_error="skip")
    assert [(e.line, e.field) for e in out.exclusions] == [("1", "<line>")]
    assert len(out.records) == 29
    assert out.descriptors["msmarco_triples"]["lines"] == {"read": 30, "in_records": 29, "excluded": 1, "records": 29}
    # a generic n-tuple table without header: each row stands for itself (K may vary per record)
    mixed = tmp_path / "n.tsv"
    mixed.write_text("q1\tp1\tn1\tn2\nq2\tp2\tn3\nq3\tp3\n")
    with pytest.raises(InputError, match=r"n\.tsv:3: field '<line>': expected at least 3"):
        load_ntuple(mixed)
    kept = load_ntuple(mixed, on_error="skip")
    assert [len(r.negatives) for r in kept.records] == [2, 1] and len(kept.exclusions) == 1


# ---------------------------------------------------------------------------------------------
# 7. Artifacts do not depend on where the input lives
# ---------------------------------------------------------------------------------------------


def test_exclusion_paths_relative(tmp_path, data):
    """The same bad input at two places gives byte-identical exclusion logs: files are named
    relative to the input's root (errors still name the path as given)."""
    lines = _records_lines(data, tmp_path, 3)
    lines[1] = b"{not json\n"
    logs = []
    for where in ("a", "b/deeper"):
        folder = tmp_path / where / "in"
        folder.mkdir(parents=True)
        (folder / "s.jsonl").write_bytes(b"".join(lines))
        (folder / "t.jsonl").write_bytes(b"".join(lines[:1]).replace(b'"flagembedding"', b'"other"'))
        skipped = read_records(folder, on_error="skip")
        assert [e.file for e in skipped.exclusions] == ["s.jsonl"]
        logs.append(exclusions_frame(tuple(skipped.exclusions)).to_csv(index=False).encode())
        with pytest.raises(InputError) as err:
            read_records(folder / "s.jsonl")
        assert err.value.file == str(folder / "s.jsonl")
    assert logs[0] == logs[1]
    # TREC-DL: relative to the layout's root
    root = _dl19_copy(tmp_path, data)
    out = load_trec_dl(root)
    assert Counter(e.file for e in out.exclusions) == {
        QRELS: 712,  # relevant passages whose text no run has
        "runs/D_BERT_KD_TASB/retrieve_results_dl19.json": 1,
        "runs/SPLADE_P_P_ENSEMBLE_DISTIL/retrieve_results_dl19.json": 1,
    }
    elsewhere = load_trec_dl(data / DL19)
    assert elsewhere.exclusions == out.exclusions
