"""BEIR folders (``corpus.jsonl``, ``queries.jsonl``, ``qrels/<split>.tsv``), read through beir's
``GenericDataLoader``: as a query set (``format="beir"``: queries, their positives and the corpus as
the passage pool; no negatives of its own), as an external IDF corpus (its passage texts) and as an
evaluation benchmark (:func:`read_beir_split`, which :mod:`transferdx.evaluation` reads it through).
A passage's text is ``(title + " " + text).strip()`` everywhere (:func:`beir_passage_text`, beir's
own rule)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

from transferdx.inputs.reading import require_path
from transferdx.inputs.records import InputError, QuerySet, order_by_grade
from transferdx.inputs.registry import Format, register


def beir_passage_text(doc: dict[str, str]) -> str:
    """BEIR convention (beir's own encoders): ``(title + " " + text).strip()``, a missing title or
    text read as ``""`` (an untitled passage is its text, stripped)."""
    title, text = doc.get("title", "") or "", doc.get("text", "") or ""
    return f"{title} {text}".strip()


class BeirSplit(NamedTuple):
    """One split of a BEIR folder: ``corpus`` pid → passage text (:func:`beir_passage_text`, file
    order), ``queries`` qid → text and ``qrels`` qid → pid → grade (the queries with a qrel)."""

    corpus: dict[str, str]
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]


def read_beir_split(folder: str | Path, split: str = "test") -> BeirSplit:
    """A BEIR folder's ``split`` through ``GenericDataLoader``, passage texts by
    :func:`beir_passage_text`: what both the query set (:func:`load_beir`) and the evaluation
    benchmark read."""
    folder = require_path(folder, "folder")
    from beir.datasets.data_loader import GenericDataLoader

    for needed in ("corpus.jsonl", "queries.jsonl", f"qrels/{split}.tsv"):
        require_path(folder / needed)
    corpus, queries, qrels = GenericDataLoader(data_folder=str(folder)).load(split=split)
    return BeirSplit({pid: beir_passage_text(doc) for pid, doc in corpus.items()}, queries, qrels)


def load_beir(folder: str | Path, split: str = "test", min_score: int = 1) -> QuerySet:
    """A BEIR folder (:func:`read_beir_split`): queries + positives (qrels ≥ ``min_score``) + corpus."""
    folder = require_path(folder, "folder")
    pool, queries, qrels = read_beir_split(folder, split)
    positives = {}
    for qid, docs in qrels.items():
        ids = order_by_grade([d for d, s in docs.items() if s >= min_score], docs)
        missing = [d for d in ids if d not in pool]
        if missing:
            raise InputError(
                folder / f"qrels/{split}.tsv",
                None,
                "corpus-id",
                f"query {qid!r} names passages not in the corpus: {missing[:5]}",
            )
        if ids:
            positives[qid] = ids
    return QuerySet(folder.name, {q: queries[q] for q in positives}, positives, pool)


def load_beir_corpus_texts(folder: str | Path) -> list[str]:
    """Only the corpus of a BEIR folder (for an external IDF corpus), in file order."""
    folder = require_path(folder, "folder")
    from beir.datasets.data_loader import GenericDataLoader

    corpus = GenericDataLoader(corpus_file=str(require_path(folder / "corpus.jsonl"))).load_corpus()
    return [beir_passage_text(doc) for doc in corpus.values()]


def beir_query_set(root: str | Path, split: str = "train", **_: Any) -> QuerySet:
    """``format="beir"``: :func:`load_beir` of ``split`` (default ``train``: sources are built for
    training)."""
    return load_beir(root, split=split)


def _is_beir(root: Path) -> bool:
    return (root / "corpus.jsonl").is_file()


register(Format("beir", query_set=beir_query_set, recognises=_is_beir, corpus=load_beir_corpus_texts))
