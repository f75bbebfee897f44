"""Training one retriever per (backbone, source, seed) (docs/design.md §5).

sentence-transformers ``SentenceTransformerTrainer`` with ``MultipleNegativesRankingLoss``
(scale = 1/τ) on (anchor, positive, negative_1..n) columns, ``BatchSamplers.NO_DUPLICATES``,
seeded. Each run lives in its own folder of the artifact store, keyed by the hash of everything
that shapes it (backbone, source records, settings, seed): ``train_config.json`` records that
config, ``checkpoint-*`` folders let an interrupted run resume, and ``final/`` (with a
``.complete`` marker) is the trained model — a finished run is skipped when asked again.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from transferdx.artifacts import atomic_write_text, canonical_json, content_hash
from transferdx.embed import EncoderSpec, load_sentence_transformer, resolve_model
from transferdx.inputs.records import Record


@dataclass(frozen=True)
class TrainSettings:
    """Trainer settings (the ``training`` config group)."""

    learning_rate: float = 2e-5
    batch_size: int = 32
    epochs: float = 1.0
    max_steps: int = -1
    warmup_ratio: float = 0.1
    max_seq_length: int | None = 256
    negatives: int = 1
    tau: float = 0.05
    precision: str = "auto"  # auto (bf16/fp16 on a GPU, fp32 on CPU) | fp32 | fp16 | bf16
    save_steps: int = 100
    save_total_limit: int = 2
    logging_steps: int = 10

    @classmethod
    def from_config(cls, cfg: dict[str, Any]) -> TrainSettings:
        unknown = sorted(set(cfg) - set(cls.__dataclass_fields__))
        if unknown:
            raise ValueError(f"unknown training settings {unknown}; valid: {sorted(cls.__dataclass_fields__)}")
        return cls(**cfg)


def training_columns(records: Sequence[Record], negatives: int) -> tuple[dict[str, list[str]], list[str]]:
    """(anchor, positive, negative_1..n) columns from records with at least ``negatives`` negatives
    (the first n are used); returns the columns and the qids left out for having fewer."""
    if negatives < 0:
        raise ValueError(f"negatives per record must be ≥ 0, got {negatives}")
    columns: dict[str, list[str]] = {"anchor": [], "positive": []}
    columns.update({f"negative_{i + 1}": [] for i in range(negatives)})
    skipped = []
    for rec in records:
        if len(rec.negatives) < negatives:
            skipped.append(rec.qid)
            continue
        columns["anchor"].append(rec.query)
        columns["positive"].append(rec.positives[0].text)
        for i in range(negatives):
            columns[f"negative_{i + 1}"].append(rec.negatives[i].text)
    return columns, skipped


def run_key(spec: EncoderSpec, revision: str, records: Sequence[Record], settings: TrainSettings, seed: int) -> str:
    """Content address of a training run."""
    data = content_hash([r.to_dict() for r in records])
    return content_hash(asdict(spec), revision, data, asdict(settings), seed)[:16]


@dataclass(frozen=True)
class TrainResult:
    folder: Path
    model_dir: Path
    skipped: bool
    n_examples: int
    n_left_out: int
    log_history: list[dict[str, Any]]


def _warmup(ratio: float) -> dict[str, Any]:
    """Transformers ≥ 5 takes the warm-up ratio as a float ``warmup_steps``; older ones as ``warmup_ratio``."""
    import transformers

    major = int(transformers.__version__.split(".")[0])
    return {"warmup_steps": float(ratio)} if major >= 5 else {"warmup_ratio": ratio}


def _precision(setting: str) -> dict[str, Any]:
    """Mixed-precision flags: ``auto`` picks bf16 (or fp16) on a GPU and fp32 on a CPU."""
    if setting == "fp32":
        return {}
    if setting in ("fp16", "bf16"):
        return {setting: True}
    if setting != "auto":
        raise ValueError(f"precision must be auto, fp32, fp16 or bf16, got {setting!r}")
    import torch

    if not torch.cuda.is_available():
        return {}
    return {"bf16": True} if torch.cuda.is_bf16_supported() else {"fp16": True}


def train(
    records: Sequence[Record],
    spec: EncoderSpec,
    settings: TrainSettings,
    folder: str | Path,
    *,
    seed: int = 0,
    cache_dir: str | Path = ".",
    source: str = "",
    model_factory: Callable[[str, EncoderSpec], Any] | None = None,
    callbacks: Sequence[Any] = (),
    progress: bool = True,
) -> TrainResult:
    """Train (or resume, or skip when finished) one retriever into ``folder``."""
    from datasets import Dataset
    from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments
    from sentence_transformers.losses import MultipleNegativesRankingLoss

    try:
        from sentence_transformers.sentence_transformer.training_args import BatchSamplers
    except ImportError:  # sentence-transformers < 6
        from sentence_transformers.training_args import BatchSamplers  # type: ignore[no-redef]

    folder = Path(folder)
    final = folder / "final"
    columns, left_out = training_columns(records, settings.negatives)
    n = len(columns["anchor"])
    if (final / ".complete").is_file():
        history = (
            json.loads((folder / "log_history.json").read_text()) if (folder / "log_history.json").exists() else []
        )
        return TrainResult(folder, final, True, n, len(left_out), history)
    if n == 0:
        raise ValueError(f"no record of source {source!r} has {settings.negatives} negatives to train on")
    location, revision = resolve_model(spec, Path(cache_dir))
    folder.mkdir(parents=True, exist_ok=True)
    config = {
        "backbone": asdict(spec),
        "revision": revision,
        "source": source,
        "seed": seed,
        "settings": asdict(settings),
        "n_examples": n,
        "n_left_out": len(left_out),
    }
    atomic_write_text(folder / "train_config.json", canonical_json(config))

    model = (model_factory or load_sentence_transformer)(location, spec)
    if settings.max_seq_length is not None:
        model.max_seq_length = settings.max_seq_length
    dataset = Dataset.from_dict(columns)
    prompts = None
    if spec.query_prompt or spec.passage_prompt:
        prompts = {c: (spec.query_prompt if c == "anchor" else spec.passage_prompt) for c in columns}
    args = SentenceTransformerTrainingArguments(
        output_dir=str(folder),
        num_train_epochs=settings.epochs,
        max_steps=settings.max_steps,
        per_device_train_batch_size=settings.batch_size,
        learning_rate=settings.learning_rate,
        **_warmup(settings.warmup_ratio),
        batch_sampler=BatchSamplers.NO_DUPLICATES,
        seed=seed,
        data_seed=seed,
        save_strategy="steps",
        save_steps=settings.save_steps,
        save_total_limit=settings.save_total_limit,
        logging_steps=settings.logging_steps,
        report_to="none",
        disable_tqdm=not progress,
        prompts=prompts,
        **_precision(settings.precision),
    )
    loss = MultipleNegativesRankingLoss(model, scale=1.0 / settings.tau)
    trainer = SentenceTransformerTrainer(
        model=model, args=args, train_dataset=dataset, loss=loss, callbacks=list(callbacks)
    )
    resume = any(p.name.startswith("checkpoint-") for p in folder.iterdir())
    trainer.train(resume_from_checkpoint=True if resume else None)
    model.save(str(final))
    history = trainer.state.log_history
    atomic_write_text(folder / "log_history.json", json.dumps(history, indent=1, default=str) + "\n")
    (final / ".complete").write_text("ok\n")
    return TrainResult(folder, final, False, n, len(left_out), history)


def checkpoint_spec(model_dir: str | Path, name: str | None = None) -> EncoderSpec:
    """An encoder spec for a trained checkpoint (a local folder); named ``<backbone>-<source>`` from
    the run's ``train_config.json`` when there is one, else after the folder."""
    model_dir = Path(model_dir)
    if name is None:
        config = model_dir.parent / "train_config.json"
        if config.is_file():
            run = json.loads(config.read_text(encoding="utf-8"))
            name = f"{run['backbone']['name']}-{run['source']}"
        else:
            name = model_dir.name
    return EncoderSpec(name=name, model=str(model_dir), source="path")
