"""The sharded audit from the command line (issue 35): ``transferdx-audit audit.shards=N`` with the maps
run through Hydra launchers (joblib, submitit's local processes; SLURM in tests/test_slurm.py), a
re-submission that runs nothing, and a map killed with kill -9 that is rerun alone. Each compares
bytes with the one-process audit on the cache the maps filled (why that cache: tests/test_sharding.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from transferdx.inputs.trec_dl import load_trec_dl

from .conftest import REPO, run_cli
from .test_sharding import reduce_summary, same_bytes


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
    """``transferdx-audit`` with its embedding cache (and the shards' markers) in ``cache``."""
    env = {"TRANSFERDX_CACHE_DIR": str(cache)}
    return run_cli("audit", *args, f"paths.cache_dir={cache}", check=check, timeout=timeout, **env)


@pytest.mark.slow
@pytest.mark.parametrize("launcher", ["joblib", "submitit_local"])
def test_st_parquet_through_a_launcher_writes_the_one_process_bytes(launcher, data, tmp_path):
    """``transferdx-audit input=mined.parquet audit.shards=3 hydra/launcher=…``: the maps run as a Hydra
    sweep (three processes), the reduce here; then the one-process audit on that cache: the same bytes.
    A second run finds every shard done and launches nothing."""
    path = st_parquet(data, tmp_path / "mined.parquet")
    cache = tmp_path / "cache"
    common = [f"input={path}", "bootstrap.resamples=20", "backbone.backend=torch"]
    sharded = [*common, "audit.shards=3", f"hydra/launcher={launcher}"]
    first = cli(*sharded, f"output_dir={tmp_path / 'sharded'}", cache=cache)
    summary = reduce_summary(cache, 3)
    assert summary["reduce_encoded_texts"] == 0 and sum(m["encoded_texts"] for m in summary["markers"]) > 0
    assert len({m["host"] for m in summary["markers"]}) == 1 and "Traceback" not in first.stderr
    sweep = next((cache / "audit-shards").glob("*/sweep"))
    assert len([p for p in sweep.iterdir() if p.name[0].isdigit()]) == 3  # one job a shard
    assert len(list(sweep.parent.glob("shard-*.work.json.gz"))) == 3  # each read its texts, not the input
    kept = [*(p for p in sweep.parent.glob("*.json") if p.name != "reduce.json"), sweep / "multirun.yaml"]
    before = {p: p.stat().st_mtime_ns for p in kept}
    assert len(before) == 4
    cli(*sharded, f"output_dir={tmp_path / 'again'}", cache=cache)
    assert {p: p.stat().st_mtime_ns for p in kept} == before  # no marker rewritten, no sweep launched
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
    common = ["bootstrap.resamples=20", "backbone.backend=torch", "audit.shards=3"]
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
    cli("bootstrap.resamples=20", "backbone.backend=torch", f"output_dir={tmp_path / 'one'}", cache=cache)
    same_bytes(tmp_path / "one", tmp_path / "resumed")
    cli(*common, "audit.stage=reduce", f"output_dir={tmp_path / 'reduce-again'}", cache=cache)
    same_bytes(tmp_path / "one", tmp_path / "reduce-again")
