"""Benchmark: the static backbone (``backbone=static_minilm``) against MiniLM-L6, side by side in one
run — encoding throughput on SciFact passages and training throughput on n-tuples with every negative.

Both models come from the offline all-MiniLM-L6-v2 package (the static one is built from its token
embeddings). Encoding: the same SciFact passages, batch 64, 128 tokens, plain ``model.encode`` (no
cache). Training: the same ``--steps`` steps of ``MultipleNegativesRankingLoss`` on (anchor, positive,
8 negatives) rows of SciFact train built from BM25 (batch 32, 128 tokens, the validation preset's
shape), timed after a warm-up step. Prints texts/s and rows/s of each and the ratios.

    python benchmarks/bench_static.py [--data-dir ../shared/data] [--passages 500] [--steps 10]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path


def _clock() -> type:
    from transformers import TrainerCallback

    class Clock(TrainerCallback):
        """The time at the end of every training step."""

        def __init__(self) -> None:
            self.times: list[float] = []

        def on_step_end(self, *args: object, **kwargs: object) -> None:
            self.times.append(time.perf_counter())

    return Clock


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default="../shared/data")
    parser.add_argument("--passages", type=int, default=500)
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args()

    from datasets import Dataset
    from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments
    from sentence_transformers.losses import MultipleNegativesRankingLoss

    from transferdx.embed import load_sentence_transformer, resolve_model
    from transferdx.embed.models import set_max_seq_length
    from transferdx.evaluation import load_beir_split
    from transferdx.pipeline.encoders import encoder_spec

    data = load_beir_split(Path(args.data_dir) / "beir" / "scifact", "test")
    passages = list(data.corpus.values())[: args.passages]
    cache = Path(tempfile.mkdtemp(prefix="bench-static-"))
    rows = {
        "anchor": [f"claim {i}: " + p[:80] for i, p in enumerate(passages)],
        "positive": passages,
        **{f"negative_{j + 1}": passages[j + 1 :] + passages[: j + 1] for j in range(8)},
    }
    dataset = Dataset.from_dict(rows)
    out: dict[str, dict[str, float]] = {}
    for name in ("minilm_l6", "static_minilm"):
        spec = encoder_spec(name)
        location, _ = resolve_model(spec, cache)
        model = load_sentence_transformer(location, spec)
        set_max_seq_length(model, 128)
        model.encode(passages[:64], batch_size=64)  # warm-up
        started = time.perf_counter()
        model.encode(passages, batch_size=64)
        encode = len(passages) / (time.perf_counter() - started)
        train_args = SentenceTransformerTrainingArguments(
            output_dir=str(cache / f"train-{name}"),
            per_device_train_batch_size=32,
            max_steps=args.steps + 1,
            learning_rate=0.05 if name == "static_minilm" else 1e-4,
            save_strategy="no",
            report_to="none",
            disable_tqdm=True,
            logging_steps=1000,
        )
        loss = MultipleNegativesRankingLoss(model, scale=20.0)
        clock = _clock()()
        trainer = SentenceTransformerTrainer(
            model=model, args=train_args, train_dataset=dataset, loss=loss, callbacks=[clock]
        )
        trainer.train()
        times = clock.times
        per_step = (times[-1] - times[0]) / (len(times) - 1)
        out[name] = {"encode_texts_per_s": encode, "train_rows_per_s": 32 / per_step, "train_s_per_step": per_step}
    ratio = {
        "encode_static_over_minilm": out["static_minilm"]["encode_texts_per_s"]
        / out["minilm_l6"]["encode_texts_per_s"],
        "train_static_over_minilm": out["static_minilm"]["train_rows_per_s"] / out["minilm_l6"]["train_rows_per_s"],
    }
    print(json.dumps({"measured": out, "ratios": ratio}, indent=1))


if __name__ == "__main__":
    main()
