"""The sharded audit (issue 35): records split by a stable hash of the query id, the encoder's work
in map tasks that share one embedding cache, one reduce. Its artifacts are the one-process audit's
bytes over the same vectors, whatever the number of shards, whichever launcher ran the maps (in
this process, joblib, submitit's local processes, SLURM in tests/test_slurm.py); a map killed
mid-run is rerun alone and the result is the same bytes; a finished shard is not run again (the
command-line tests are in tests/test_sharding_cli.py, so that pytest-xdist runs them beside these).

"Over the same vectors": a text's vector depends on the batch it was encoded in (which texts share
it), so a one-process audit on a cold cache differs from a sharded one in the float32 rounding of the
cosines (measured on the demo: ≤ 2.7e-7 in s(q,n), profile means ≤ 2e-8, the same suspects). The
comparisons below therefore audit once sharded on a cold cache and then in one process on the cache
the maps filled; the reduce itself must encode nothing."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pandas as pd
import pytest

import transferdx as tdx
from transferdx.inputs.trec_dl import load_trec_dl
from transferdx.pipeline.sharding import (
    ShardsIncomplete,
    audit_shard,
    audit_sharded,
    encode_shard_work,
    reduce_shards,
    shard_of,
    shard_plan,
    shard_records,
    write_shard_work,
)

ARTIFACTS = ("profile.csv", "profile.json", "records.csv", "negatives.csv", "suspects.csv", "report.md")


def same_bytes(a: Path, b: Path) -> None:
    names = sorted(p.name for p in a.iterdir() if p.is_file() and not p.name.startswith("."))
    assert names == sorted(p.name for p in b.iterdir() if p.is_file() and not p.name.startswith("."))
    assert set(ARTIFACTS) <= set(names)
    for name in names:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


def reduce_summary(cache: Path, shards: int) -> dict:
    found = [json.loads(p.read_text()) for p in (cache / "audit-shards").glob("*/reduce.json")]
    return next(s for s in found if s["shards"] == shards)


def test_shard_of_is_a_stable_partition_by_query():
    """Golden shards (SHA-256 of the qid, first 8 bytes big-endian, mod N); every record in exactly
    one shard; a query's records of every source (controls too) in the same one."""
    assert [shard_of(q, 4) for q in ("1037798", "104861", "q1", "é")] == [0, 2, 2, 3]
    assert [shard_of("1037798", n) for n in (1, 2, 3, 7)] == [0, 0, 1, 5]
    with pytest.raises(ValueError, match="shards must be"):
        shard_of("q", 0)
    records = tdx.load("demo").records
    for n in (1, 3, 4):
        parts = [shard_records(records, i, n) for i in range(n)]
        assert sorted(id(r) for p in parts for r in p) == sorted(id(r) for r in records)
        homes = {}
        for i, part in enumerate(parts):
            for r in part:
                assert homes.setdefault(r.qid, i) == i


@pytest.mark.slow
def test_dl19_six_runs_in_1_3_4_shards_write_the_one_process_bytes(data, tmp_path):
    """The six TREC-DL19 runs (and the eight controls built from them), semantic audit with the
    static backbone: 1, 3 and 4 shards (maps here) write the bytes of the one-process audit — on the
    maps' cache, and on a cache of its own too, since a static model's vector (a mean of token
    embeddings) does not depend on its batch. The reduce encodes nothing; a rerun reuses every shard."""
    cache = tmp_path / "cache"
    loaded = load_trec_dl(data / "msmarco-dl19")
    kw = {"encoder": "static_minilm", "resamples": 20, "label": "msmarco-dl19"}
    for n in (3, 1, 4):
        result = audit_sharded(loaded, shards=n, cache_dir=cache, **kw)
        result.save(tmp_path / f"shards{n}")
        summary = reduce_summary(cache, n)
        assert summary["reduce_encoded_texts"] == 0
        assert sum(m["records"] for m in summary["markers"]) == len(result.records)  # the controls' too
    assert sum(m["encoded_texts"] for m in reduce_summary(cache, 3)["markers"]) > 0  # the first maps encoded
    assert all(m["encoded_texts"] == 0 for m in reduce_summary(cache, 4)["markers"])  # the cache had them
    tdx.audit(loaded, cache_dir=cache, **kw).save(tmp_path / "one")
    tdx.audit(loaded, cache_dir=tmp_path / "own-cache", **kw).save(tmp_path / "one-cold")
    for n in (1, 3, 4):
        same_bytes(tmp_path / "one", tmp_path / f"shards{n}")
    same_bytes(tmp_path / "one", tmp_path / "one-cold")
    again = audit_shard(loaded, shard=2, shards=3, cache_dir=cache, **kw)
    assert again["reused"] is True
    # two shards through work files (what audit.stage=all hands a launched task): the same bytes
    prepared = tdx.pipeline.prepare_audit(loaded, cache_dir=cache, **kw)
    plan = shard_plan(prepared, 2)
    for path in write_shard_work(prepared, plan, [0, 1]):
        marker = encode_shard_work(path, prepared.encoder)
        assert marker["reused"] is False and marker["negatives"] > 0
    reduce_shards(prepared, plan).save(tmp_path / "work2")
    same_bytes(tmp_path / "one", tmp_path / "work2")


def test_the_reduce_names_missing_shards_and_a_changed_input_invalidates_its_shard(tmp_path):
    """Lexical audit (no encoder): markers still say which shards ran; a shard whose records changed
    is missing again, the others are kept."""
    records = tdx.load("demo").records
    kw = {"encoder": None, "semantic": None, "resamples": 50, "cache_dir": tmp_path, "controls": "none"}
    prepared = tdx.pipeline.prepare_audit(records, **kw)
    plan = shard_plan(prepared, 3, tmp_path)
    with pytest.raises(ShardsIncomplete, match="3 of 3 shards"):
        reduce_shards(prepared, plan)
    one = tdx.audit(records, **kw)
    sharded = audit_sharded(records, shards=3, **kw)
    pd.testing.assert_frame_equal(one.profile, sharded.profile)
    changed = list(records)
    victim = next(i for i, r in enumerate(changed) if shard_of(r.qid, 3) == 1)
    changed[victim] = dataclasses.replace(changed[victim], negatives=changed[victim].negatives[:-1])
    prepared = tdx.pipeline.prepare_audit(changed, **kw)
    with pytest.raises(ShardsIncomplete, match=r"1 of 3 shards .*: 1;"):
        reduce_shards(prepared, shard_plan(prepared, 3, tmp_path))


def test_in_batch_loss_cannot_be_sharded(tmp_path):
    from transferdx.auditing.core import SemanticSettings

    prepared = tdx.pipeline.prepare_audit(
        tdx.load("demo").records[:4], encoder=None, semantic=SemanticSettings(in_batch=True), controls="none"
    )
    with pytest.raises(ValueError, match="in-batch"):
        shard_plan(prepared, 2, tmp_path)
