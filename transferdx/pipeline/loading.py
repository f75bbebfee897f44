"""The first verbs: records to audit (:func:`load`), a query set to build from
(:func:`load_query_set`), sources and controls built from it (:func:`build_sources`, with
:func:`trec_dl_runs` and :func:`records_as_source` as sources built alongside), the controls an
audit builds from its input's own passages (:func:`with_self_controls`), and what a command-line
run reads (:func:`load_inputs`, :func:`build_inputs`, :func:`source_records`, from
:class:`InputSettings`)."""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from transferdx.embed import EmbeddingCache
from transferdx.inputs import registry
from transferdx.inputs.records import LoadResult, QuerySet, Record
from transferdx.inputs.trec_dl import load_trec_dl
from transferdx.pipeline.encoders import EncoderLike, make_encoder
from transferdx.pipeline.settings import DEFAULT_SOURCES, InputSettings
from transferdx.sources.build import build_from_context, controls_from_records, pooled_parent
from transferdx.sources.context import BuildContext
from transferdx.sources.controls import CONTROLS

# ---------------------------------------------------------------------------------------------
# Records and query sets
# ---------------------------------------------------------------------------------------------


LOADABLE = (
    "a path (str or pathlib.Path), a list of paths, 'demo', a pandas.DataFrame, a datasets.Dataset or "
    "DatasetDict, a LoadResult, or a list of Records"
)


def _is_path(value: Any) -> bool:
    return isinstance(value, str | os.PathLike)


def check_loadable(data: Any) -> None:
    """TypeError, naming what :func:`load` takes, unless ``data`` is one of those (a list or tuple
    holds only paths or only records)."""
    if isinstance(data, list | tuple):
        if not data:
            return  # no records: the audit says so ("no records to audit in the input: empty")
        kinds = {"path" if _is_path(d) else "record" if isinstance(d, Record) else type(d).__name__ for d in data}
        if kinds in ({"path"}, {"record"}):
            return
        raise TypeError(f"load takes {LOADABLE}; got a {type(data).__name__} of {', '.join(sorted(kinds))}")
    table = hasattr(data, "columns") or hasattr(data, "column_names")
    if data is None or _is_path(data) or isinstance(data, LoadResult) or table:
        return
    raise TypeError(f"load takes {LOADABLE}; got {type(data).__name__}")


def load(
    data: Any,
    *,
    format: str = "records",
    source: str | None = None,
    on_error: str = "raise",
    **options: Any,
) -> LoadResult:
    """Records to audit, from a path (or a list of paths), the name ``"demo"``, a
    ``pandas.DataFrame``, a ``datasets.Dataset`` (or ``DatasetDict``: ``split=``, default
    ``train``), a Hugging Face Hub dataset (``"hf:OWNER/NAME[:CONFIG][@SPLIT]"``, through
    ``datasets.load_dataset``: :mod:`transferdx.inputs.hub`), or records already in memory.
    ``on_error``: ``raise`` | ``skip`` (exclude and count). Anything else is a ``TypeError`` naming
    what it takes.

    A list (or tuple) of paths gives one result holding the sources of every input, in the order
    given (:func:`load_many`), as a folder of those files would (without the folder's sidecars).

    A path (the default ``format="records"``) is recognised by its shape
    (:mod:`transferdx.inputs.registry`): a file or folder in JSONL, JSON, CSV, TSV, Parquet, Arrow, a
    ``save_to_disk`` folder, or ``.gz`` of the text forms, holding records (``qid``, ``query``,
    ``positives``, ``negatives``, ``source``), sentence-transformers ``mine_hard_negatives`` output
    (triplet, n-tuple, labeled-list with or without scores; labeled-pair without), FlagEmbedding
    ``{query, pos, neg}`` or an n-tuple table; the source is named after the file (``source=``
    overrides). DataFrames and Datasets go through the same shapes. Other ``format`` values name a
    registered reader: ``ntuple``, ``msmarco_triples``, ``flagembedding``, ``st_hard_negatives``,
    ``trec_dl``."""
    check_loadable(data)
    if isinstance(data, list | tuple) and all(_is_path(d) for d in data):
        return load_many(data, format=format, source=source, on_error=on_error, **options)
    return registry.read(
        data, format=None if format == "records" else format, source=source, on_error=on_error, **options
    )


def load_many(
    paths: Sequence[str | os.PathLike[str]],
    *,
    format: str = "records",
    source: str | None = None,
    on_error: str = "raise",
    **options: Any,
) -> LoadResult:
    """Several inputs (each anything :func:`load` takes as a path) as one :class:`LoadResult`: the
    records, exclusions, descriptors and measured false negatives of each, in the order given. Each
    input names its own sources (a file after its name), so ``source=`` is refused, and two inputs
    giving a source of the same name are an error naming both (rename one, or give ``source=`` to
    each in separate ``load`` calls and merge with ``LoadResult.extend``)."""
    if source is not None:
        raise ValueError("source= names the source of one input; with several, each is named after its file")
    merged = LoadResult()
    owner: dict[str, str] = {}
    for path in paths:
        part = load(path, format=format, on_error=on_error, **options)
        for name in part.sources:
            if name in owner:
                raise ValueError(
                    f"{path} and {owner[name]} both give source {name!r}: rename one of the files "
                    "(each file is a source named after it)"
                )
            owner[name] = str(path)
        merged.extend(part)
    return merged


def load_query_set(data: str | Path = "demo", *, format: str | None = None, **options: Any) -> QuerySet:
    """Queries, their positives and a passage pool to build sources from: ``"demo"``, a BEIR folder
    (``format="beir"``, ``split=`` train/test) or a TREC-DL folder (``format="trec_dl_pool"``,
    ``relevant_grade=2``). Without ``format`` the folder's contents decide."""
    return registry.read_query_set(data, format=format, **options)


def trec_dl_runs(
    root: str | Path, *, k: int = 8, slice: str | Sequence[str] | None = None, on_error: str = "raise"
) -> dict[str, LoadResult]:
    """The TREC-DL runs under ``root`` as sources to build alongside (name → its records)."""
    runs = load_trec_dl(root, on_error=on_error, k=k, slice_spec=slice)
    first = runs.sources[0] if runs.sources else None
    return {  # exclusions of no run (a judged query missing from the topics, ...) go with the first run, once
        name: LoadResult(
            [r for r in runs.records if r.source == name],
            [e for e in runs.exclusions if e.source == name or (not e.source and name == first)],
            {name: runs.descriptors.get(name, {})},
            {name: runs.false_negatives.get(name, [])},
        )
        for name in runs.sources
    }


def records_as_source(path: str | Path, name: str, on_error: str = "raise") -> LoadResult:
    """A records file or folder (e.g. LLM-written negatives for the same queries) as source ``name``."""
    part = registry.read(path, format="records", on_error=on_error)
    described = {k: v for d in part.descriptors.values() for k, v in d.items()}
    return LoadResult(
        [dataclasses.replace(r, source=name) for r in part.records],
        [dataclasses.replace(e, source=name) for e in part.exclusions],
        {name: described},
    )


def build_sources(
    query_set: QuerySet,
    sources: Sequence[str] = DEFAULT_SOURCES,
    controls: Sequence[str] | str = (),
    *,
    encoder: EncoderLike | None = None,
    k: int = 8,
    slice: str | Sequence[str] | None = None,
    seed: int = 0,
    bm25: Mapping[str, Any] | None = None,
    control_parent: str | None = None,
    external: Mapping[str, LoadResult] | None = None,
    cache_dir: str | Path | None = None,
) -> LoadResult:
    """Genuine sources (``bm25``, ``dense``, ``perturb``, hybrids ``a+b``, or ``external`` ones loaded
    from disk) and controls (``"all"`` or names) for ``query_set``; ``encoder`` is needed for
    ``dense`` and ``neighbor_positive``. ``slice``: which ranks to keep, e.g. ``"[2:10]"``."""
    external = dict(external or {})
    wanted = list(CONTROLS) if controls == "all" else list(controls)
    names = [*sources, *(e for e in external if e not in sources)]
    ctx = BuildContext(
        query_set, k=k, slice_spec=slice, seed=seed, encoder=make_encoder(encoder, cache_dir), bm25=dict(bm25 or {})
    )
    return build_from_context(ctx, names, wanted, control_parent, external)


# ---------------------------------------------------------------------------------------------
# Controls built from an input's own passages (the audit's ``controls``)
# ---------------------------------------------------------------------------------------------


# A control record costs the audit what a record of the input costs it less the encoding (its passages
# are the input's own, already encoded), and nearly all of that is the composite's bootstrap, per
# source: on a mined SciFact file (807 records × 5 negatives, 2 shared AVX2 cores, profiled warm) the
# eight full controls took 8 × ~27 s of a 271 s audit, building them 1.2 s. A sixteenth of the records
# per control puts the eight at ≲ 10% of a cold audit (measured: +3 s, 2% of it, in
# benchmarks/bench_mined.py) and caught the same 8 of 8 as the full controls there; below
# CONTROL_SAMPLE_MIN records a control's rates are too noisy for the saving, so a small input keeps all.
CONTROL_SAMPLE_SHARE = 1 / 16
CONTROL_SAMPLE_MIN = 50


def control_sample_size(n_records: int) -> int:
    """How many of ``n_records`` parent records each control keeps under ``sample="auto"``:
    ⌈n / 16⌉, at least :data:`CONTROL_SAMPLE_MIN`, at most n."""
    return min(n_records, max(CONTROL_SAMPLE_MIN, math.ceil(n_records * CONTROL_SAMPLE_SHARE)))


def sample_controls(
    built: LoadResult, parents: Sequence[str], sample: int | str | None = "auto", seed: int = 0
) -> tuple[LoadResult, dict[str, Any]]:
    """The controls of a seeded sample of their parent records (``parents``: their qids, as the
    controls name them) — the same records in every control, each as the full build made it — and
    what to record (``{"sample": {"records", "of", "seed"}}``; ``{}`` when every record is kept).
    ``sample``: ``"auto"`` (:func:`control_sample_size`), a number of records, or None (all)."""
    qids = sorted(set(parents))
    if sample is None:
        return built, {}
    if sample == "auto":
        n = control_sample_size(len(qids))
    elif isinstance(sample, int) and not isinstance(sample, bool) and sample >= 1:
        n = min(sample, len(qids))
    else:
        raise ValueError(f"the controls' sample is 'auto', a number of records ≥ 1 or None (all); got {sample!r}")
    if n >= len(qids):
        return built, {}
    picks = np.random.default_rng([seed, 0xC0]).choice(len(qids), size=n, replace=False)
    kept = {qids[i] for i in picks}
    out = LoadResult(
        [r for r in built.records if r.qid in kept],
        [e for e in built.exclusions if not e.qid or e.qid in kept],
        {name: dict(d) for name, d in built.descriptors.items()},
        {name: [row for row in rows if row[0] in kept] for name, rows in built.false_negatives.items()},
    )
    return out, {"sample": {"records": n, "of": len(qids), "seed": seed}}


def with_self_controls(
    loaded: LoadResult,
    controls: str | Sequence[str],
    *,
    kinds: Mapping[str, str] | None = None,
    encoder: EmbeddingCache | None = None,
    seed: int = 0,
    sample: int | str | None = "auto",
) -> tuple[LoadResult, dict[str, Any]]:
    """``loaded`` plus controls built from its own passages, with every genuine source as their parent
    (pooled: :func:`transferdx.sources.build.pooled_parent`), and what to record (``{"self_controls":
    {parent, parents, built, skipped[, sample]}}``, ``parent`` the parents joined by ``+``; ``{}``
    when none is built). ``controls``: ``"auto"`` (all eight when there are fewer than two genuine
    sources or no control), ``"all"``, a list of names, or ``"none"``; a name already among the
    sources is not built again. ``kinds``: source → genuine|control overrides of the records'
    own. ``encoder`` is needed for ``neighbor_positive`` (skipped, and said so, without one).

    ``sample``: how many parent records every control keeps (:func:`sample_controls`): ``"auto"``
    (:func:`control_sample_size`: about a sixteenth of them, at least :data:`CONTROL_SAMPLE_MIN`), a
    number, or None (every record). A sample is recorded as ``sample: {records, of, seed}``."""
    overrides = kinds or {}
    kind = {r.source: overrides.get(r.source, r.kind) for r in loaded.records}
    genuine = sorted(s for s, k in kind.items() if k == "genuine")
    wanted: list[str]
    if controls in ("none", None) or not genuine:
        wanted = []
    elif controls == "auto":
        wanted = list(CONTROLS) if len(genuine) < 2 or "control" not in kind.values() else []
    elif controls == "all":
        wanted = list(CONTROLS)
    else:
        wanted = [str(c) for c in controls]
    wanted = [c for c in wanted if c not in kind]
    if not wanted:
        return loaded, {}
    built, skipped = controls_from_records(loaded, wanted, genuine, encoder=encoder, seed=seed)
    parents = [r.qid for r in pooled_parent(loaded, genuine)]
    built, sampled = sample_controls(built, parents, sample, seed)
    parent = {"parent": "+".join(genuine), "parents": genuine}
    record = {"self_controls": {**parent, "built": sorted(built.sources), "skipped": skipped, **sampled}}
    merged = LoadResult(list(loaded.records), list(loaded.exclusions), dict(loaded.descriptors))
    merged.false_negatives.update(loaded.false_negatives)
    merged.relevant_grade = loaded.relevant_grade
    return merged.extend(built), record


# ---------------------------------------------------------------------------------------------
# What a command-line run reads (InputSettings, from the config's ``input``, ``data`` and ``build``)
# ---------------------------------------------------------------------------------------------


def build_inputs(settings: InputSettings, encoder: EmbeddingCache | None = None) -> LoadResult:
    """Sources and controls built from the query set ``settings`` names (plus the TREC-DL runs with
    ``options["include_runs"]`` and the files named in ``external_sources``)."""
    options = dict(settings.options)
    query_set = load_query_set(options.pop("root", "demo"), format=settings.format, **options)
    external: dict[str, LoadResult] = {}
    if options.get("include_runs"):
        runs = trec_dl_runs(settings.options["root"], k=settings.k, slice=settings.slice, on_error=settings.on_error)
        external.update(runs)
    for name, path in settings.external_sources.items():
        external[name] = records_as_source(path, name, settings.on_error)
    return build_sources(
        query_set,
        list(settings.sources),
        list(settings.controls),
        encoder=encoder,
        k=settings.k,
        slice=settings.slice,
        seed=settings.seed,
        bm25=dict(settings.bm25),
        control_parent=settings.control_parent,
        external=external,
    )


def load_inputs(
    settings: InputSettings, encoder: EmbeddingCache | None = None, keep_tables: bool = False
) -> LoadResult:
    """Records for a run: ``settings.path`` (records JSONL), sources built from a query set, or the
    ``data`` config group's reader (``keep_tables``: for the clean verb, as :func:`load`)."""
    if path := settings.path:
        return load(path, on_error=settings.on_error, keep_tables=keep_tables)
    if registry.is_query_set(settings.format):
        return build_inputs(settings, encoder)
    return registry.read(
        format=settings.format,
        on_error=settings.on_error,
        keep_tables=keep_tables,
        seed=settings.seed,
        **settings.options,
    )


def source_records(settings: InputSettings, encoder: EmbeddingCache | None, source: str) -> LoadResult:
    """The records of one source: from ``settings.path`` (a records file/folder) or built from the
    query set (that source alone, no controls)."""
    if path := settings.path:
        loaded = load(path, on_error=settings.on_error)
    else:
        loaded = build_inputs(dataclasses.replace(settings, sources=(source,), controls=()), encoder)
    records = [r for r in loaded.records if r.source == source]
    if not records:
        raise ValueError(f"source {source!r} has no records (available: {loaded.sources})")
    return LoadResult(records, [e for e in loaded.exclusions if e.source == source])
