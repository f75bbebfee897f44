"""The controls an audit builds from a user's own file (issue 56, deliverable 4): built on a seeded
sample of the file's records, sized by :func:`control_sample_size`, recorded in the settings; the
``data=`` presets still build every control on every record."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from transferdx.inputs.records import LoadResult, Passage, Record
from transferdx.pipeline.loading import (
    CONTROL_SAMPLE_MIN,
    control_sample_size,
    load_query_set,
    with_self_controls,
)
from transferdx.sources.build import build_from_context
from transferdx.sources.context import BuildContext
from transferdx.sources.controls import CONTROLS


class HashEncoder:
    """Deterministic 16-d vectors from each text's hash: enough for ``neighbor_positive``'s top-k."""

    def embed(self, texts, role):
        rows = [np.frombuffer(hashlib.sha256(t.encode()).digest()[:16], dtype=np.uint8) for t in texts]
        return np.asarray(rows, dtype=np.float32) / 255.0


def mined(n: int, k: int = 5) -> LoadResult:
    """A one-source file of ``n`` records shaped like a mined n-tuple file (one positive, K negatives)."""
    return LoadResult(
        [
            Record(
                f"q{i:04d}",
                f"claim {i} about topic{i % 17}",
                (Passage(f"p{i}", f"abstract {i} topic{i % 17} answer"),),
                tuple(Passage(f"p{(i + j + 1) % n}", f"abstract {(i + j + 1) % n} other") for j in range(k)),
                "mined",
            )
            for i in range(n)
        ]
    )


def by_source(loaded: LoadResult) -> dict[str, list[Record]]:
    out: dict[str, list[Record]] = {}
    for r in loaded.records:
        out.setdefault(r.source, []).append(r)
    return out


def test_sample_size_is_a_sixteenth_with_a_floor():
    assert control_sample_size(12) == 12  # a small file keeps every record
    assert control_sample_size(CONTROL_SAMPLE_MIN) == CONTROL_SAMPLE_MIN
    assert control_sample_size(300) == CONTROL_SAMPLE_MIN
    assert control_sample_size(807) == 51  # the mined SciFact file of benchmarks/bench_mined.py
    assert control_sample_size(16_000) == 1_000


def test_controls_of_a_large_file_are_a_seeded_sample_recorded_in_the_settings():
    loaded = mined(400)
    built, record = with_self_controls(loaded, "auto", encoder=HashEncoder(), seed=0)
    again, record_again = with_self_controls(loaded, "auto", encoder=HashEncoder(), seed=0)
    other, _ = with_self_controls(loaded, "auto", encoder=HashEncoder(), seed=1)
    full, full_record = with_self_controls(loaded, "auto", encoder=HashEncoder(), seed=0, sample=None)

    n = control_sample_size(400)
    assert record["self_controls"]["sample"] == {"records": n, "of": 400, "seed": 0}
    assert record == record_again and built.records == again.records  # same seed, same controls
    assert "sample" not in full_record["self_controls"]
    controls, full_controls = by_source(built), by_source(full)
    assert set(controls) == {"mined", *CONTROLS} and set(record["self_controls"]["built"]) == set(CONTROLS)
    assert len(controls["mined"]) == 400  # the file itself is never sampled
    qids = {r.qid for r in controls["easy_shuffled"]}
    for name in CONTROLS:  # every control: the same n records, each as the full build made it
        assert len(controls[name]) == n and {r.qid for r in controls[name]} == qids, name
        assert set(controls[name]) <= set(full_controls[name]), name
        assert len(full_controls[name]) == 400, name
    assert qids != {r.qid for r in by_source(other)["easy_shuffled"]}  # another seed, another sample


def test_a_given_sample_size_and_a_small_file():
    built, record = with_self_controls(mined(400), ["random_passages", "own_positive_mix"], sample=120)
    assert record["self_controls"]["sample"] == {"records": 120, "of": 400, "seed": 0}
    assert {len(v) for k, v in by_source(built).items() if k != "mined"} == {120}
    small, small_record = with_self_controls(mined(30), "auto")  # below the floor: every record
    assert "sample" not in small_record["self_controls"]
    assert {len(v) for v in by_source(small).values()} == {30}
    with pytest.raises(ValueError, match="sample"):
        with_self_controls(mined(30), "auto", sample=0)


def test_data_presets_still_build_every_control_on_every_record(tmp_path):
    from omegaconf import OmegaConf

    from transferdx.config import self_controls

    assert self_controls(OmegaConf.create({"input": None, "controls": "all"})) == "none"
    query_set = load_query_set("demo")  # what build_sources does for data=…, with the fake encoder
    built = build_from_context(BuildContext(query_set, k=4, encoder=HashEncoder()), ["bm25"], list(CONTROLS))
    groups = by_source(built)
    assert set(groups) == {"bm25", *CONTROLS}
    for name in CONTROLS:
        assert len(groups[name]) == len(groups["bm25"]) == len(query_set.queries), name
