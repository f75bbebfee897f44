"""Named inputs: datasets the audit reads, query sets sources are built from, external IDF corpora.

Register, don't branch: each is a name → function; an unknown name is a ``ValueError`` listing the valid ones."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from transferdx.inputs.formats import (
    LOADERS,
    QuerySet,
    load_beir,
    load_beir_corpus_texts,
    load_trec_dl_query_set,
    read_id_text_tsv,
)
from transferdx.inputs.records import LoadResult, read_records
from transferdx.sources.demo import demo_query_set, demo_sources


def _demo(on_error: str = "raise", k: int = 8, seed: int = 0, **_: Any) -> LoadResult:
    return demo_sources(k=k, seed=seed, on_error=on_error)


# Inputs the audit can read: the demo plus every loader format.
DATASETS: dict[str, Callable[..., LoadResult]] = {"demo": _demo, **LOADERS}


# External IDF corpora: a format name → a reader returning the collection's passage texts.
EXTERNAL_CORPORA: dict[str, Callable[[str], list[str]]] = {
    "beir": lambda path: load_beir_corpus_texts(path),
    "tsv": lambda path: list(read_id_text_tsv(path).values()),
    "records": lambda path: sorted({p.text for r in read_records(path).records for p in (*r.positives, *r.negatives)}),
}


# Query sets (queries, positives, pool) that sources are built from.
QUERY_SETS: dict[str, Callable[..., QuerySet]] = {
    "beir": lambda root, split="train", **_: load_beir(root, split=split),
    "trec_dl_pool": lambda root, relevant_grade=2, **_: load_trec_dl_query_set(root, relevant_grade=relevant_grade),
    "demo_pool": lambda **_: demo_query_set(),
}
