"""The evaluate verb: nDCG@10, Recall@100 and MAP@100 of a model on each benchmark dataset
(:mod:`transferdx.evaluation` holds the retrieval and the metrics; loaded on first use)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from transferdx.artifacts import atomic_write_text, canonical_json, content_hash, csv_text, safe_join
from transferdx.pipeline.encoders import EncoderLike, make_encoder
from transferdx.pipeline.settings import BenchmarkSettings
from transferdx.training import checkpoint_spec

if TYPE_CHECKING:
    from transferdx.embed import EmbeddingCache
    from transferdx.evaluation import BeirData, Evaluation


def benchmark_datasets(benchmark: BenchmarkSettings, seed: int = 0) -> Iterator[Any]:
    """Each benchmark dataset loaded (downloaded first when allowed and missing)."""
    from transferdx.evaluation import BENCHMARK_FORMATS

    for entry in benchmark.datasets:
        try:
            loader = BENCHMARK_FORMATS[entry.format]
        except KeyError:
            raise ValueError(
                f"benchmark dataset {entry.name!r}: unknown format {entry.format!r}; valid: {sorted(BENCHMARK_FORMATS)}"
            ) from None
        path = Path(entry.path)
        if not path.is_dir() and benchmark.download and entry.format == "beir":
            from beir import util

            util.download_and_unzip(benchmark.download_url.format(name=entry.name), str(path.parent))
        data = loader(path, entry.split, benchmark.max_queries, seed)
        yield dataclasses.replace(data, name=entry.name)


def evaluate_each(
    model: EncoderLike,
    benchmark: BenchmarkSettings,
    *,
    out: str | Path | None = None,
    cache_dir: str | Path | None = None,
    seed: int = 0,
) -> list[Evaluation]:
    """``model`` (a checkpoint folder, preset, spec or loaded model) on every benchmark dataset: one
    :class:`~transferdx.evaluation.Evaluation` each (per-query metrics and run); with ``out``, per
    dataset ``metrics.json``, ``per_query.csv`` and ``run.trec`` under ``out/<dataset>/``."""

    if isinstance(model, str | Path) and (Path(model) / "modules.json").is_file():
        model = checkpoint_spec(str(model))
    encoder = make_encoder(model, cache_dir, reference=True)
    if encoder is None:
        raise ValueError("evaluate needs a model (a checkpoint folder, preset name, spec or loaded model)")
    results = []
    for data in benchmark_datasets(benchmark, seed):
        result = finished_evaluation(encoder, data, benchmark.k_values)
        if out is not None:
            folder = safe_join(Path(out), data.name)
            atomic_write_text(folder / "metrics.json", canonical_json(result.to_dict()))
            atomic_write_text(folder / "per_query.csv", csv_text(result.per_query))
            atomic_write_text(folder / "run.trec", result.trec_run(encoder.spec.name))
        results.append(result)
    return results


def evaluation_key(scorer: Mapping[str, Any], data: BeirData, k_values: Sequence[int]) -> str:
    """What decides an evaluation's numbers: the scorer (model, revision, prompts, metric), the data
    set's name, corpus, queries, judgments and rules, and the cut-offs."""
    fields = (data.name, data.corpus, data.queries, data.qrels, data.relevance_level, data.ignore_identical_ids)
    return content_hash("evaluation-v1", dict(scorer), *fields, list(k_values))


def finished_evaluation(encoder: EmbeddingCache, data: BeirData, k_values: Sequence[int]) -> Evaluation:
    """``evaluate_dataset`` once per :func:`evaluation_key`: a finished evaluation is read back from
    ``<cache_dir>/evaluations/<key>.json`` (written atomically, checked against its key; a file
    that does not read back is recomputed and replaced), like a finished training."""
    from transferdx.evaluation import Evaluation, evaluate_dataset

    key = evaluation_key(encoder.scorer(), data, k_values)
    path = encoder.cache_dir / "evaluations" / f"{key[:32]}.json"
    try:
        stored = json.loads(path.read_text(encoding="utf-8"))
        if stored["key"] == key:
            return Evaluation(
                stored["dataset"],
                stored["model"],
                pd.DataFrame({c: stored["per_query"][c] for c in stored["per_query_columns"]}),
                stored["run"],
                tuple(stored["k_values"]),
                stored["extra"],
            )
    except (OSError, ValueError, KeyError, TypeError):
        pass
    result = evaluate_dataset(encoder, data, k_values)
    frame = result.per_query
    record = {
        "key": key,
        "dataset": result.dataset,
        "model": dict(result.model),
        "per_query_columns": [str(c) for c in frame.columns],
        "per_query": {str(c): frame[c].tolist() for c in frame.columns},
        "run": {q: dict(r) for q, r in result.run.items()},
        "k_values": list(result.k_values),
        "extra": dict(result.extra),
    }
    atomic_write_text(path, json.dumps(record, sort_keys=True))
    return result


def scores_table(results: Sequence[Evaluation]) -> pd.DataFrame:
    """One row per evaluation: dataset, n_queries, nDCG@10, Recall@100, MAP@100 (those measured)."""
    rows: list[dict[str, Any]] = []
    for result in results:
        metrics = result.to_dict()
        rows.append(
            {
                "dataset": result.dataset,
                "n_queries": metrics["n_queries"],
                **{k: metrics[k] for k in ("ndcg@10", "recall@100", "map@100") if k in metrics},
            }
        )
    return pd.DataFrame(rows)


def evaluate(
    model: EncoderLike,
    benchmark: BenchmarkSettings,
    *,
    out: str | Path | None = None,
    cache_dir: str | Path | None = None,
    seed: int = 0,
) -> pd.DataFrame:
    """nDCG@10, Recall@100, MAP@100 of ``model`` (a checkpoint folder, preset, spec or loaded model)
    on every benchmark dataset, one row each (:func:`scores_table` of :func:`evaluate_each`); with
    ``out``, per dataset ``metrics.json``, ``per_query.csv`` and ``run.trec`` under ``out/<dataset>/``."""
    return scores_table(evaluate_each(model, benchmark, out=out, cache_dir=cache_dir, seed=seed))
