"""The evaluate verb: nDCG@10, Recall@100 and MAP@100 of a model on each benchmark dataset
(:mod:`transferdx.evaluation` holds the retrieval and the metrics; loaded on first use)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from transferdx.artifacts import atomic_write_text, canonical_json, csv_text, safe_join
from transferdx.pipeline.encoders import EncoderLike, make_encoder
from transferdx.pipeline.settings import BenchmarkSettings
from transferdx.training import checkpoint_spec

if TYPE_CHECKING:
    from transferdx.evaluation import Evaluation


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
    from transferdx.evaluation import evaluate_dataset

    if isinstance(model, str | Path) and (Path(model) / "modules.json").is_file():
        model = checkpoint_spec(str(model))
    encoder = make_encoder(model, cache_dir, reference=True)
    if encoder is None:
        raise ValueError("evaluate needs a model (a checkpoint folder, preset name, spec or loaded model)")
    results = []
    for data in benchmark_datasets(benchmark, seed):
        result = evaluate_dataset(encoder, data, benchmark.k_values)
        if out is not None:
            folder = safe_join(Path(out), data.name)
            atomic_write_text(folder / "metrics.json", canonical_json(result.to_dict()))
            atomic_write_text(folder / "per_query.csv", csv_text(result.per_query))
            atomic_write_text(folder / "run.trec", result.trec_run(encoder.spec.name))
        results.append(result)
    return results


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
