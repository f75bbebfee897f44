"""Training one retriever per (backbone, source, seed) (docs/design.md §5).

sentence-transformers ``SentenceTransformerTrainer`` with ``MultipleNegativesRankingLoss``
(scale = 1/τ) on (anchor, positive, negative_1..n) columns, ``BatchSamplers.NO_DUPLICATES``,
seeded. Each run lives in its own folder of the artifact store, keyed by the hash of everything
that shapes it (backbone, source records, settings, seed): ``train_config.json`` records that
config, ``checkpoint-*`` folders let an interrupted run resume, and ``final/`` (with a
``.complete`` marker) is the trained model — a finished run is skipped when asked again.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from transferdx.artifacts import atomic_write_text, canonical_json, content_hash
from transferdx.embed import EncoderSpec, load_sentence_transformer, resolve_model
from transferdx.embed.models import set_max_seq_length
from transferdx.inputs.records import Record

LOSSES = ("mnrl", "cached_mnrl")


@dataclass(frozen=True)
class TrainSettings:
    """Trainer settings (the ``training`` config group). ``negatives``: hard negatives per example,
    an int n (the first n of each record) or ``"all"`` (every negative, :func:`training_columns`).
    ``loss``: ``mnrl`` or ``cached_mnrl`` (GradCache, ``mini_batch_size`` texts per forward pass:
    the same loss in bounded memory)."""

    learning_rate: float = 2e-5
    batch_size: int = 32
    epochs: float = 1.0
    max_steps: int = -1
    warmup_ratio: float = 0.1
    max_seq_length: int | None = 256
    negatives: int | str = 1
    tau: float = 0.05
    precision: str = "auto"  # auto (bf16/fp16 on a GPU, fp32 on CPU) | fp32 | fp16 | bf16
    save_steps: int = 100
    save_total_limit: int = 2
    logging_steps: int = 10
    loss: str = "mnrl"
    mini_batch_size: int = 32

    def __post_init__(self) -> None:
        if not (self.negatives == "all" or (isinstance(self.negatives, int) and self.negatives >= 0)):
            raise ValueError(f"training.negatives must be an integer ≥ 0 or 'all', got {self.negatives!r}")
        if self.loss not in LOSSES:
            raise ValueError(f"training.loss must be one of {LOSSES}, got {self.loss!r}")

    @classmethod
    def from_config(cls, cfg: dict[str, Any]) -> TrainSettings:
        unknown = sorted(set(cfg) - set(cls.__dataclass_fields__))
        if unknown:
            raise ValueError(f"unknown training settings {unknown}; valid: {sorted(cls.__dataclass_fields__)}")
        return cls(**cfg)


@dataclass(frozen=True)
class TrainingColumns:
    """What a run trains on: the (anchor, positive, negative_1..n) columns, the qids left out (no
    negative to train on, or fewer than a fixed n asks for), and the qids whose negatives were
    repeated to fill the n columns (``negatives="all"`` with a record shorter than the longest)."""

    columns: dict[str, list[str]]
    left_out: list[str]
    padded: list[str]
    ids: list[tuple[str, str]] = dataclasses.field(default_factory=list)  # (qid, negative id) per slot

    @property
    def n_examples(self) -> int:
        return len(self.columns["anchor"])


def training_examples(records: Sequence[Record], negatives: int | str) -> TrainingColumns:
    """Columns for MultipleNegativesRankingLoss, which needs the same number n of negative columns
    in every row.

    - ``negatives = n`` (int): records with ≥ n negatives give their first n; the others are left out.
    - ``negatives = "all"``: n = the most negatives any record has; a record with K < n negatives
      fills its n slots with its own negatives repeated in order (slot j holds negative j mod K), so
      every model trains on exactly the audited negatives and nothing else — a repeated negative
      counts its logit more than once in the softmax, which is why such records are counted
      (``padded``). Records with no negative are left out (counted). Range: n ≥ 1 when any record
      has a negative.
    """
    if negatives != "all" and (not isinstance(negatives, int) or negatives < 0):
        raise ValueError(f"negatives per record must be an integer ≥ 0 or 'all', got {negatives!r}")
    if negatives == "all":
        width = max((len(r.negatives) for r in records), default=0)
    else:
        width = int(negatives)
    columns: dict[str, list[str]] = {"anchor": [], "positive": []}
    columns.update({f"negative_{i + 1}": [] for i in range(width)})
    left_out: list[str] = []
    padded: list[str] = []
    ids: list[tuple[str, str]] = []
    for rec in records:
        k = len(rec.negatives)
        if k < width and (negatives != "all" or k == 0):
            left_out.append(rec.qid)
            continue
        if negatives == "all" and k < width:
            padded.append(rec.qid)
        columns["anchor"].append(rec.query)
        columns["positive"].append(rec.positives[0].text)
        for i in range(width):
            columns[f"negative_{i + 1}"].append(rec.negatives[i % k].text)
            ids.append((rec.qid, rec.negatives[i % k].id))
    return TrainingColumns(columns, left_out, padded, ids)


def training_columns(records: Sequence[Record], negatives: int | str) -> tuple[dict[str, list[str]], list[str]]:
    """(columns, left-out qids) of :func:`training_examples`."""
    examples = training_examples(records, negatives)
    return examples.columns, examples.left_out


def training_pairs(columns: dict[str, list[str]]) -> list[tuple[str, str]]:
    """Every (anchor, negative text) pair in training columns."""
    negatives = [col for name, col in columns.items() if name.startswith("negative_")]
    return [(anchor, col[i]) for col in negatives for i, anchor in enumerate(columns["anchor"])]


def negatives_digest(pairs: Sequence[tuple[str, str]]) -> str:
    """A digest of the (anchor, negative text) — or (qid, negative id) — pairs a run trains on, as a
    set: equal digests mean the same negatives per query (repetition and order aside)."""
    return content_hash(sorted(set(pairs)))[:16]


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
    n_padded: int = 0


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


def train_model(
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
    from sentence_transformers.losses import CachedMultipleNegativesRankingLoss, MultipleNegativesRankingLoss

    try:
        from sentence_transformers.sentence_transformer.training_args import BatchSamplers
    except ImportError:  # sentence-transformers < 6
        from sentence_transformers.training_args import BatchSamplers  # type: ignore[no-redef]

    folder = Path(folder)
    final = folder / "final"
    examples = training_examples(records, settings.negatives)
    columns, left_out = examples.columns, examples.left_out
    n = examples.n_examples
    if (final / ".complete").is_file():
        history = (
            json.loads((folder / "log_history.json").read_text()) if (folder / "log_history.json").exists() else []
        )
        return TrainResult(folder, final, True, n, len(left_out), history, len(examples.padded))
    if n == 0:
        raise ValueError(f"no record of source {source!r} has {settings.negatives} negatives to train on")
    if settings.negatives == "all" and examples.padded:
        print(
            f"training {source or 'source'}: {len(examples.padded)} of {n} records have fewer than "
            f"{len(columns) - 2} negatives; their own negatives are repeated to fill the columns"
        )
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
        "n_padded": len(examples.padded),
        "n_negative_columns": len(columns) - 2,
        "negatives_digest": negatives_digest(training_pairs(columns)),
        "negative_ids_digest": negatives_digest(examples.ids),
    }
    atomic_write_text(folder / "train_config.json", canonical_json(config))

    model = (model_factory or load_sentence_transformer)(location, spec)
    if settings.max_seq_length is not None:
        set_max_seq_length(model, settings.max_seq_length)
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
    if settings.loss == "cached_mnrl":
        loss = CachedMultipleNegativesRankingLoss(
            model, scale=1.0 / settings.tau, mini_batch_size=settings.mini_batch_size, show_progress_bar=False
        )
    else:
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
    return TrainResult(folder, final, False, n, len(left_out), history, len(examples.padded))


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
