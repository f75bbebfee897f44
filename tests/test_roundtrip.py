"""Every registered format that reads records is written back in its own shape (issue 32): read →
write (through the format's own writer, nothing removed) → read gives the same records and the same
file shape (columns and their order, storage form and compression); and a cleaning that removes one
negative writes a copy whose re-read lacks exactly that negative. A format added to the registry
without a case here fails :func:`test_every_registered_format_has_a_case`."""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import transferdx as tdx
from transferdx.inputs import registry
from transferdx.inputs.tables import storage_form
from transferdx.inputs.writing import CleanedQuery, Cleaning, rewrite, write_rows

QUERIES = [
    ("apple engine", "apple engine info", ["violin planet", "garden castle", "pepper moon"]),
    ("river about", "river about what", ["castle garden", "moon pepper", "planet violin"]),
    ("violin what", "violin what info", ["pepper castle", "planet garden", "engine moon"]),
]
# formats that read no file of records: the embedded demo (a name), query sets, external corpora
NOT_RECORD_FILES = {"demo"}


def _frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    return pd.DataFrame(rows)


def _table(rows: list[dict[str, Any]], name: str, form: str) -> Callable[[Path], tuple[Path, dict]]:
    def make(folder: Path) -> tuple[Path, dict]:
        path = folder / f"{name}.{form}"
        frame = _frame(rows)
        if form == "parquet":
            frame.to_parquet(path)
        elif form == "jsonl.gz":
            frame.to_json(path, orient="records", lines=True, force_ascii=False, compression="gzip")
        elif form == "csv":
            frame.to_csv(path, index=False)
        else:
            frame.to_json(path, orient="records", lines=True, force_ascii=False)
        return path, {}

    return make


def _ntuple() -> list[dict[str, Any]]:
    return [{"anchor": q, "positive": p} | {f"negative_{i}": n for i, n in enumerate(ns, 1)} for q, p, ns in QUERIES]


def _triplet() -> list[dict[str, Any]]:
    return [{"anchor": q, "positive": p, "negative": n} for q, p, ns in QUERIES for n in ns]


def _labeled_list() -> list[dict[str, Any]]:
    return [{"anchor": q, "positive": [p, *ns], "labels": [1, 0, 0, 0]} for q, p, ns in QUERIES]


def _labeled_pair() -> list[dict[str, Any]]:
    rows = []
    for q, p, ns in QUERIES:
        rows += [{"anchor": q, "positive": p, "label": 1}] + [{"anchor": q, "positive": n, "label": 0} for n in ns]
    return rows


def _scored_pair() -> list[dict[str, Any]]:
    """``mine_hard_negatives(output_format="labeled-pair", output_scores=True)``: no label, each
    query's block its positive first, then its negatives by descending score."""
    rows = []
    for q, p, ns in QUERIES:
        rows += [{"anchor": q, "positive": p, "score": 0.9}]
        rows += [{"anchor": q, "positive": n, "score": 0.5 - k / 10} for k, n in enumerate(ns)]
    return rows


def _by_order() -> list[dict[str, Any]]:
    """Columns no shape names (read by their order: anchor, positive, negatives)."""
    return [{"q": q, "a": p} | {f"x{i}": n for i, n in enumerate(ns, 1)} for q, p, ns in QUERIES]


def _flag() -> list[dict[str, Any]]:
    return [{"query": q, "pos": [p], "neg": ns} for q, p, ns in QUERIES]


def _records() -> list[dict[str, Any]]:
    return [
        {"qid": f"q{i}", "query": q, "positives": [p], "negatives": ns, "source": "mined"}
        for i, (q, p, ns) in enumerate(QUERIES)
    ]


def _tevatron(subset: bool = True) -> list[dict[str, Any]]:
    """Tevatron rows (``{docid, title, text}`` passages; a title that Tevatron joins back with a
    space, and one passage without a title); with ``subset``, two subsets (two sources)."""

    def passage(docid: str, text: str) -> dict[str, Any]:
        title, _, rest = text.partition(" ")
        return {"docid": docid, "title": title, "text": rest}

    rows = []
    for i, (q, p, ns) in enumerate(QUERIES):
        negatives = [passage(f"n{i}{j}", n) for j, n in enumerate(ns)]
        negatives[-1] = {"docid": f"n{i}{len(ns) - 1}", "text": ns[-1]}
        row = {"query_id": f"{100 + i}", "query": q, "positive_passages": [passage(f"p{i}", p)]}
        rows.append(row | {"negative_passages": negatives} | ({"subset": "ab"[i % 2]} if subset else {}))
    return rows


def _triples_tsv(folder: Path) -> tuple[Path, dict]:
    path = folder / "triples.tsv"
    path.write_text("".join(f"{q}\t{p}\t{n}\n" for q, p, ns in QUERIES for n in ns), encoding="utf-8")
    return path, {"format": "msmarco_triples"}


def _triples_by_shape(folder: Path) -> tuple[Path, dict]:
    """The same lines gzipped, without ``format=``: recognised by their shape (issue 33)."""
    path = folder / "triples.tsv.gz"
    text = "".join(f"{q}\t{p}\t{n}\n" for q, p, ns in QUERIES for n in ns)
    path.write_bytes(gzip.compress(text.encode("utf-8"), mtime=0))
    return path, {}


def _ntuple_lines(folder: Path) -> tuple[Path, dict]:
    path = folder / "tuples.tsv.gz"
    text = "query\tpositive\tnegative_1\tnegative_2\tnegative_3\n"
    text += "".join("\t".join([q, p, *ns]) + "\n" for q, p, ns in QUERIES)
    path.write_bytes(gzip.compress(text.encode("utf-8"), mtime=0))
    return path, {"format": "ntuple", "group_by_query": True}


def _hard_negatives(folder: Path) -> tuple[Path, dict]:
    texts: dict[str, str] = {}
    lines = []
    for i, (_q, p, ns) in enumerate(QUERIES):
        ids = [texts.setdefault(t, f"{len(texts)}") for t in (p, *ns)]
        lines.append({"qid": f"{i}", "pos": ids[:1], "neg": {"bm25": ids[1:], "dense": ids[:0:-1]}})
    (folder / "collection.tsv").write_text("".join(f"{i}\t{t}\n" for t, i in texts.items()), encoding="utf-8")
    (folder / "queries.tsv").write_text("".join(f"{i}\t{q}\n" for i, (q, _, _) in enumerate(QUERIES)), "utf-8")
    path = folder / "hard-negatives.jsonl.gz"
    path.write_bytes(gzip.compress("".join(json.dumps(x) + "\n" for x in lines).encode(), mtime=0))
    options = {
        "format": "st_hard_negatives",
        "collection": folder / "collection.tsv",
        "queries": folder / "queries.tsv",
    }
    return path, options


def _trec_dl(folder: Path) -> tuple[Path, dict]:
    root = folder / "dl"
    (root / "runs" / "RUN").mkdir(parents=True)
    (root / "topics.dl19-passage.txt").write_text("".join(f"{i}\t{q}\n" for i, (q, _, _) in enumerate(QUERIES)))
    qrels = "".join(f"{i} 0 p{i} 3\n" + "".join(f"{i} 0 n{i}{j} 0\n" for j in range(3)) for i in range(len(QUERIES)))
    (root / "qrels.dl19-passage.txt").write_text(qrels)
    doc = [
        {
            "query": q,
            "hits": [
                {"content": t, "qid": str(i), "docid": d, "rank": r, "score": 10.0 - r}
                for r, (d, t) in enumerate([(f"p{i}", p)] + [(f"n{i}{j}", n) for j, n in enumerate(ns)], 1)
            ],
        }
        for i, (q, p, ns) in enumerate(QUERIES)
    ]
    (root / "runs" / "RUN" / "retrieve_results_dl19.json").write_text(json.dumps(doc, indent=2))
    return root, {"format": "trec_dl", "k": 8}


def _id_lists(form: str) -> Callable[[Path], tuple[Path, dict]]:
    """An id table (query_id, pos_id, neg_ids, pos_score, neg_scores) in ``form`` with a corpus
    JSONL and a queries Parquet beside it (:mod:`transferdx.inputs.idlists`)."""

    def make(folder: Path) -> tuple[Path, dict]:
        texts: dict[str, str] = {}
        rows = []
        for i, (_q, p, ns) in enumerate(QUERIES):
            ids = [texts.setdefault(t, f"{len(texts)}") for t in (p, *ns)]
            scores = [0.5 - 0.1 * j for j in range(len(ns))]
            rows.append(
                {"query_id": f"q{i}", "pos_id": ids[0], "neg_ids": ids[1:], "pos_score": 0.9, "neg_scores": scores}
            )
        corpus = pd.DataFrame({"passage_id": list(texts.values()), "passage": list(texts)})
        corpus.to_json(folder / "corpus.jsonl", orient="records", lines=True, force_ascii=False)
        pd.DataFrame(
            {"query_id": [f"q{i}" for i in range(len(QUERIES))], "query": [q for q, _, _ in QUERIES]}
        ).to_parquet(folder / "queries.parquet")
        path, _ = _table(rows, "ids", form)(folder)
        return path, {"corpus": folder / "corpus.jsonl", "queries": folder / "queries.parquet"}

    return make


CASES: dict[str, tuple[str, Callable[[Path], tuple[Path, dict]]]] = {  # case → (format, input maker)
    "ntuple-parquet": ("ntuple", _table(_ntuple(), "mined", "parquet")),
    "ntuple-tsv-lines": ("ntuple", _ntuple_lines),
    "triplet-jsonl": ("triplet", _table(_triplet(), "mined", "jsonl")),
    "labeled_list-parquet": ("labeled_list", _table(_labeled_list(), "mined", "parquet")),
    "labeled_list-jsonl.gz": ("labeled_list", _table(_labeled_list(), "mined", "jsonl.gz")),
    "labeled_pair-csv": ("labeled_pair", _table(_labeled_pair(), "mined", "csv")),
    "labeled_pair-scored-parquet": ("labeled_pair", _table(_scored_pair(), "mined", "parquet")),
    "labeled_pair-scored-csv": ("labeled_pair", _table(_scored_pair(), "mined", "csv")),
    "ntuple-by-order-jsonl": ("ntuple", _table(_by_order(), "mined", "jsonl")),
    "flagembedding-jsonl": ("flagembedding", _table(_flag(), "mined", "jsonl")),
    "records-jsonl": ("records", _table(_records(), "mined", "jsonl")),
    "records-parquet": ("records", _table(_records(), "mined", "parquet")),
    "msmarco_triples-tsv": ("msmarco_triples", _triples_tsv),
    "msmarco_triples-tsv.gz-by-shape": ("msmarco_triples", _triples_by_shape),
    "st_hard_negatives-jsonl.gz": ("st_hard_negatives", _hard_negatives),
    "trec_dl": ("trec_dl", _trec_dl),
    "idlist-parquet": ("idlist", _id_lists("parquet")),
    "idlist-jsonl": ("idlist", _id_lists("jsonl")),
    "tevatron-jsonl": ("tevatron", _table(_tevatron(), "rlhn", "jsonl")),
    "tevatron-jsonl.gz": ("tevatron", _table(_tevatron(subset=False), "msmarco-passage", "jsonl.gz")),
    "tevatron-parquet": ("tevatron", _table(_tevatron(), "rlhn", "parquet")),
    "tevatron-csv": ("tevatron", _table(_tevatron(), "rlhn", "csv")),
}


def _records_of(loaded: Any) -> list[dict[str, Any]]:
    return [r.to_dict() for r in sorted(loaded.records, key=lambda r: (r.source, r.qid))]


def _raw(path: Path) -> bytes:
    return gzip.decompress(path.read_bytes()) if path.name.endswith(".gz") else path.read_bytes()


def _load(path: Path, options: dict) -> Any:
    return tdx.load(path, keep_tables=True, **options)


def test_every_registered_format_has_a_case() -> None:
    record_formats = {n for n, f in registry.FORMATS.items() if f.read is not None or f.shape is not None}
    assert record_formats - NOT_RECORD_FILES <= {fmt for fmt, _ in CASES.values()}


@pytest.mark.parametrize("case", sorted(CASES))
def test_read_write_read_is_the_same(case: str, tmp_path: Path) -> None:
    _fmt, make = CASES[case]
    path, options = make(tmp_path)
    first = _load(path, options)
    assert first.tables and not first.unwritable
    same = [CleanedQuery(r) for r in first.records]
    cleaning = Cleaning(
        {(q.record.source, q.record.qid): q for q in same}, {(q.record.source, q.record.query): q for q in same}
    )
    copy = tmp_path / "copy" / (path.name if path.is_file() else "")
    if path.is_dir():
        copy = tmp_path / "copy" / path.name
    for kept in first.tables:
        rewritten = rewrite(kept, cleaning)
        assert not rewritten.changes
        dest = copy / kept.name if path.is_dir() else copy
        write_rows(rewritten.columns, rewritten.rows, dest, kept.storage, kept.path, kept.split)
        for name, data in kept.companions.items():
            (copy / name).write_bytes(data)
        assert rewritten.columns == kept.table.columns
    again = _load(copy, options)
    assert _records_of(again) == _records_of(first)
    if path.is_file():
        assert storage_form(copy) == storage_form(path)
        assert [t.table.columns for t in again.tables] == [t.table.columns for t in first.tables]
        if path.suffix == ".tsv" or path.name.endswith(".tsv.gz"):  # MS MARCO lines: the same bytes
            assert _raw(copy) == _raw(path)


@pytest.mark.parametrize("case", sorted(CASES))
def test_clean_removes_exactly_one_negative(case: str, tmp_path: Path) -> None:
    """The second negative of the first record is suspected (a per-negative frame built here, reason
    ``positive_aware``); the cleaned copy, read back, lacks it and keeps every other negative."""
    _fmt, make = CASES[case]
    path, options = make(tmp_path)
    loaded = _load(path, options)
    rows = []
    for rec in loaded.records:
        for k, n in enumerate(rec.negatives):
            hit = rec is loaded.records[0] and k == 1
            rows.append(
                {
                    "source": rec.source,
                    "qid": rec.qid,
                    "neg_index": k,
                    "neg_id": n.id,
                    "negative": n.text,
                    "fn_positive_aware": hit,
                    "fn_reasons": "positive_aware" if hit else "",
                }
            )
    frame = pd.DataFrame(rows)
    gone = loaded.records[0].negatives[1]
    fixed_slots = case.startswith(("ntuple", "triplet", "msmarco_triples"))
    # a fixed-slot row short of one negative is dropped by default; keep=2 writes its first two accepted
    keep = 2 if case.startswith(("ntuple", "msmarco_triples")) else None
    result = tdx.clean(loaded, frame, reasons=["positive_aware"], out=tmp_path / "clean", keep=keep)
    assert result.descriptor["faithful"], result.descriptor["note"]
    copy = tmp_path / "clean" / "cleaned" / (path.name if path.is_file() else "")
    again = tdx.load(copy if path.is_file() else tmp_path / "clean" / "cleaned", **options)
    before = {(r.source, r.qid): [n.text for n in r.negatives] for r in loaded.records}
    after = {(r.source, r.qid): [n.text for n in r.negatives] for r in again.records}
    key = (loaded.records[0].source, loaded.records[0].qid)
    assert gone.text not in after.get(key, [])
    for k, texts in before.items():  # nothing invented: every negative written was the record's
        assert set(after.get(k, [])) <= set(texts) - ({gone.text} if k == key else set())
        wanted = [t for t in texts if not (k == key and t == gone.text)][:keep]
        if not (fixed_slots and keep is None and k == key):  # the short triplet row is dropped
            assert after[k][: len(wanted)] == wanted
