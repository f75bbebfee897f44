"""Training: the loss falls on a separable toy set; an interrupted run resumes; a finished run is skipped."""

from __future__ import annotations

import json

import pytest

from transferdx.inputs.records import Passage, Record
from transferdx.training import TrainSettings, train_model, training_columns

from .tiny import WORDS, tiny_model

pytestmark = pytest.mark.slow
TOPICS = WORDS[:8]


def toy_records(n: int = 64) -> list[Record]:
    out = []
    for i in range(n):
        t, other = TOPICS[i % 8], TOPICS[(i + 3) % 8]
        out.append(
            Record(
                str(i),
                f"what about {t}",
                (Passage(f"p{i}", f"{t} {t} info {i % 5}"),),
                (Passage(f"n{i}", f"{other} {other} info {i % 5}"),),
                "toy",
            )
        )
    return out


def spec_for(path):
    from transferdx.embed import EncoderSpec

    return EncoderSpec(name="tiny", model=str(path), source="path")


SETTINGS = TrainSettings(
    learning_rate=5e-3,
    batch_size=8,
    max_steps=40,
    warmup_ratio=0.0,
    negatives=1,
    save_steps=20,
    logging_steps=5,
    max_seq_length=16,
)


def test_columns_leave_out_short_records():
    recs = toy_records(4)
    recs[1] = Record("1", "q", recs[1].positives, (), "toy")
    columns, left = training_columns(recs, 1)
    assert left == ["1"] and len(columns["anchor"]) == 3 and list(columns) == ["anchor", "positive", "negative_1"]


def test_loss_falls_on_separable_toy_set(tmp_path):
    result = train_model(
        toy_records(),
        spec_for(tiny_model(tmp_path / "m")),
        SETTINGS,
        tmp_path / "run",
        cache_dir=tmp_path,
        progress=False,
    )
    losses = [h["loss"] for h in result.log_history if "loss" in h]
    # starts near ln(16) territory (8 positives + 8 negatives per batch) and falls clearly
    assert len(losses) == 8 and sum(losses[-3:]) / 3 < 0.7 * losses[0], losses
    assert (result.model_dir / ".complete").is_file()
    config = json.loads((tmp_path / "run" / "train_config.json").read_text())
    assert config["n_examples"] == 64 and config["settings"]["tau"] == 0.05
    again = train_model(toy_records(), spec_for(tmp_path / "m" / "st"), SETTINGS, tmp_path / "run", cache_dir=tmp_path)
    assert again.skipped


def test_interrupted_run_resumes_from_checkpoint(tmp_path):
    from transformers import TrainerCallback

    class Interrupt(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step == 25:
                raise KeyboardInterrupt("simulated interruption")

    model = tiny_model(tmp_path / "m")
    with pytest.raises(KeyboardInterrupt):
        train_model(
            toy_records(),
            spec_for(model),
            SETTINGS,
            tmp_path / "run",
            cache_dir=tmp_path,
            callbacks=[Interrupt()],
            progress=False,
        )
    assert (tmp_path / "run" / "checkpoint-20").is_dir() and not (tmp_path / "run" / "final").exists()

    steps: list[int] = []

    class Count(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            steps.append(state.global_step)

    resumed = train_model(
        toy_records(),
        spec_for(model),
        SETTINGS,
        tmp_path / "run",
        cache_dir=tmp_path,
        callbacks=[Count()],
        progress=False,
    )
    assert steps == list(range(21, 41))  # continued after checkpoint-20, not from step 0
    assert [h["step"] for h in resumed.log_history if "loss" in h] == list(range(5, 45, 5))
    assert not resumed.skipped and (resumed.model_dir / ".complete").is_file()
