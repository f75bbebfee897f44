"""The embedded demo set (package data written for this package): query set, hand-written
negatives, and its three sources. Registers itself in the inputs registry on import: ``"demo"``
(the three sources, ``load("demo")``) and ``"demo_pool"`` (the query set, ``load_query_set("demo")``);
``transferdx.sources`` imports this module, so the registry knows the demo wherever the package is
used."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

from transferdx.inputs.records import LoadResult, QuerySet
from transferdx.inputs.registry import Format, register
from transferdx.inputs.transferdx_records import read_records
from transferdx.sources.context import BuildContext
from transferdx.sources.controls import random_passages
from transferdx.sources.miners import mine_bm25

DEMO_FOLDER = "demo"  # inside the transferdx package


def demo_query_set() -> QuerySet:
    """The demo's queries, positives and passage pool."""
    folder = resources.files("transferdx").joinpath(DEMO_FOLDER)
    pool: dict[str, str] = {}
    for line in folder.joinpath("passages.jsonl").read_text(encoding="utf-8").splitlines():
        if line.strip():
            obj = json.loads(line)
            pool[obj["id"]] = obj["text"]
    queries: dict[str, str] = {}
    positives: dict[str, list[str]] = {}
    for line in folder.joinpath("queries.jsonl").read_text(encoding="utf-8").splitlines():
        if line.strip():
            obj = json.loads(line)
            queries[obj["qid"]] = obj["query"]
            positives[obj["qid"]] = list(obj["positives"])
    return QuerySet("demo", queries, positives, pool)


def demo_handwritten(on_error: str = "raise") -> LoadResult:
    """The demo's hand-written (LLM-style) negatives, as shipped records."""
    with resources.as_file(resources.files("transferdx").joinpath(DEMO_FOLDER).joinpath("handwritten.jsonl")) as path:
        result = read_records(path, on_error)
    result.describe("handwritten", mining_method="hand-written LLM-style paraphrased negatives (demo)")
    return result


def demo_sources(k: int = 8, seed: int = 0, on_error: str = "raise") -> LoadResult:
    """The demo's sources: ``bm25`` (mined now with bm25s), ``handwritten``, ``random_passages``."""

    ctx = BuildContext(demo_query_set(), k=k, seed=seed)
    result = mine_bm25(ctx)
    result.extend(demo_handwritten(on_error))
    result.extend(random_passages(ctx))
    return result


def _demo(path: str | Path | None = None, on_error: str = "raise", k: int = 8, seed: int = 0, **_: Any) -> LoadResult:
    """``load("demo")``: :func:`demo_sources` (the name given as ``path`` and other options unused)."""
    return demo_sources(k=k, seed=seed, on_error=on_error)


def _demo_pool(root: str | Path | None = None, **_: Any) -> QuerySet:
    """``load_query_set("demo")``: :func:`demo_query_set`."""
    return demo_query_set()


register(Format("demo", read=_demo, names=("demo",)))
register(Format("demo_pool", query_set=_demo_pool, names=("demo", "demo_pool")))
