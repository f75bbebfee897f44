"""The sharded audit (issue 35): records split by a stable hash of the query id, the encoder's work
in map tasks that share one embedding cache, one reduce. Its artifacts are the one-process audit's
bytes over the same vectors, whatever the number of shards, whichever launcher ran the maps (in
this process, joblib, submitit's local processes, SLURM in tests/test_slurm.py); a map killed
mid-run is rerun alone and the result is the same bytes; a finished shard is not run again.

"Over the same vectors": a text's vector depends on the batch it was encoded in (which texts share
it), so a one-process audit on a cold cache differs from a sharded one in the float32 rounding of the
cosines (measured on the demo: ≤ 2.7e-7 in s(q,n), profile means ≤ 2e-8, the same suspects). The
comparisons below therefore audit once sharded on a cold cache and then in one process on the cache
the maps filled; the reduce itself must encode nothing."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

import transferdx as tdx
from transferdx.inputs.trec_dl import load_trec_dl
from transferdx.pipeline.sharding import (
    ShardsIncomplete,
    audit_shard,
    audit_sharded,
    reduce_shards,
    shard_of,
    shard_plan,
    shard_records,
)

from .conftest import REPO

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
    """The six TREC-DL19 runs, semantic audit: 1, 3 and 4 shards (maps here), then one process on
    the cache the maps filled: the same bytes. The reduce encodes nothing; a rerun reuses every shard."""
    cache = tmp_path / "cache"
    loaded = load_trec_dl(data / "msmarco-dl19")
    kw = {"cache_dir": cache, "resamples": 200, "label": "msmarco-dl19"}
    for n in (3, 1, 4):
        result = audit_sharded(loaded, shards=n, **kw)
        result.save(tmp_path / f"shards{n}")
        summary = reduce_summary(cache, n)
        assert summary["reduce_encoded_texts"] == 0
        assert sum(m["records"] for m in summary["markers"]) == len(result.records)  # the controls' too
    assert sum(m["encoded_texts"] for m in reduce_summary(cache, 3)["markers"]) > 0  # the first maps encoded
    assert all(m["encoded_texts"] == 0 for m in reduce_summary(cache, 4)["markers"])  # the cache had them
    tdx.audit(loaded, **kw).save(tmp_path / "one")
    for n in (1, 3, 4):
        same_bytes(tmp_path / "one", tmp_path / f"shards{n}")
    again = audit_shard(loaded, shard=2, shards=3, **kw)
    assert again["reused"] is True


def st_parquet(data: Path, path: Path) -> Path:
    """A sentence-transformers n-tuple Parquet file (query, positive, negative_1…4) of DL19's BM25
    run: the shape ``mine_hard_negatives(output_format="n-tuple")`` writes."""
    loaded = load_trec_dl(data / "msmarco-dl19", runs=["BM25"])
    rows = [
        {
            "query": r.query,
            "positive": r.positives[0].text,
            **{f"negative_{k + 1}": n.text for k, n in enumerate(r.negatives[:4])},
        }
        for r in loaded.records
        if len(r.negatives) >= 4
    ]
    pd.DataFrame(rows).to_parquet(path)
    return path


def cli(*args: str, cache: Path, check: bool = True, timeout: int = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFERDX_CACHE_DIR": str(cache)}
    command = [str(Path(sys.executable).with_name("transferdx-audit")), *args, f"paths.cache_dir={cache}"]
    proc = subprocess.run(command, cwd=REPO, capture_output=True, text=True, env=env, timeout=timeout)
    if check:
        assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


@pytest.mark.slow
@pytest.mark.parametrize("launcher", ["joblib", "submitit_local"])
def test_st_parquet_through_a_launcher_writes_the_one_process_bytes(launcher, data, tmp_path):
    """``transferdx-audit input=mined.parquet audit.shards=3 hydra/launcher=…``: the maps run as a Hydra
    sweep (three processes), the reduce here; then the one-process audit on that cache: the same bytes.
    A second run finds every shard done and launches nothing."""
    path = st_parquet(data, tmp_path / "mined.parquet")
    cache = tmp_path / "cache"
    common = [f"input={path}", "bootstrap.resamples=100", "backbone.backend=torch"]
    sharded = [*common, "audit.shards=3", f"hydra/launcher={launcher}"]
    first = cli(*sharded, f"output_dir={tmp_path / 'sharded'}", cache=cache)
    summary = reduce_summary(cache, 3)
    assert summary["reduce_encoded_texts"] == 0 and sum(m["encoded_texts"] for m in summary["markers"]) > 0
    assert len({m["host"] for m in summary["markers"]}) == 1 and "Traceback" not in first.stderr
    sweep = next((cache / "audit-shards").glob("*/sweep"))
    assert len([p for p in sweep.iterdir() if p.name[0].isdigit()]) == 3  # one job a shard
    before = {p: p.stat().st_mtime_ns for p in sweep.parent.glob("shard-*.json")}
    cli(*sharded, f"output_dir={tmp_path / 'again'}", cache=cache)
    assert {p: p.stat().st_mtime_ns for p in sweep.parent.glob("shard-*.json")} == before
    cli(*common, f"output_dir={tmp_path / 'one'}", cache=cache)
    same_bytes(tmp_path / "one", tmp_path / "sharded")
    same_bytes(tmp_path / "one", tmp_path / "again")


@pytest.mark.slow
def test_a_shard_killed_mid_run_is_rerun_alone_to_the_same_bytes(tmp_path):
    """Shard 1 of 3 is killed (kill -9) while encoding; shards 0 and 2 finished. ``audit.stage=reduce``
    refuses, naming shard 1; ``audit.stage=all`` runs shard 1 alone (0 and 2 untouched) and writes
    the bytes of a sharded audit never interrupted (its own cache), which equal the one-process audit's
    on the cache the maps filled."""
    cache, ref_cache = tmp_path / "cache", tmp_path / "ref-cache"
    common = ["bootstrap.resamples=50", "backbone.backend=torch", "audit.shards=3"]
    cli(*common, f"output_dir={tmp_path / 'ref'}", cache=ref_cache)
    for shard in (0, 2):
        cli(*common, "audit.stage=map", f"audit.shard={shard}", cache=cache)
    markers = sorted((cache / "audit-shards").glob("*/shard-*.json"))
    assert len(markers) == 2
    before = {p: p.read_bytes() for p in markers}
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFERDX_CACHE_DIR": str(cache)}
    command = [str(Path(sys.executable).with_name("transferdx-audit")), *common, "audit.stage=map", "audit.shard=1"]
    proc = subprocess.Popen([*command, f"paths.cache_dir={cache}"], cwd=REPO, env=env, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while not list(cache.rglob(".claim-*")):
        assert proc.poll() is None, "shard 1 finished before it could be killed"
        assert time.monotonic() < deadline
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert len(list((cache / "audit-shards").glob("*/shard-*.json"))) == 2
    refused = cli(*common, "audit.stage=reduce", f"output_dir={tmp_path / 'early'}", cache=cache, check=False)
    assert (
        refused.returncode == 2
        and "1 of 3 shards have not finished" in refused.stderr
        and "audit.shard=1" in refused.stderr
    )
    cli(*common, f"output_dir={tmp_path / 'resumed'}", cache=cache)
    assert {p: p.read_bytes() for p in markers} == before  # shards 0 and 2 were not run again
    summary = reduce_summary(cache, 3)
    assert summary["reduce_encoded_texts"] == 0
    same_bytes(tmp_path / "ref", tmp_path / "resumed")
    cli("bootstrap.resamples=50", "backbone.backend=torch", f"output_dir={tmp_path / 'one'}", cache=cache)
    same_bytes(tmp_path / "one", tmp_path / "resumed")
    cli(*common, "audit.stage=reduce", f"output_dir={tmp_path / 'reduce-again'}", cache=cache)
    same_bytes(tmp_path / "one", tmp_path / "reduce-again")


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
