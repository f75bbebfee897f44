"""The cluster launcher for real: a ``transferdx-train -m hydra/launcher=submitit_slurm`` sweep on a
SLURM cluster (``bash scripts/slurm_localhost.sh`` starts a one-node one on this machine). Two tiny
backbones × two sources: every run finishes, a re-submission trains nothing, and the models equal
those of the same sweep under the basic (in-process) launcher, bit for bit. And a sharded audit
(``transferdx-audit audit.shards=3``) whose map tasks run as a SLURM array writes the one-process bytes.

Threads: torch's CPU kernels sum in an order that depends on the thread count (1 thread against 2
moves these weights by up to ~2e-9), and a SLURM job may see fewer CPUs than the submitting shell
(here task/none leaves the job all of them; with CPU binding it would see its ``cpus_per_task``).
Both sweeps therefore run with ``OMP_NUM_THREADS=1`` (the sbatch environment carries it into the
jobs), matching ``cpus_per_task=1``, and the weights are compared byte for byte."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from .conftest import REPO, run_cli
from .tiny import tiny_backbones

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        shutil.which("sbatch") is None,
        reason="no SLURM here (sbatch not on PATH); `bash scripts/slurm_localhost.sh` starts a one-node cluster",
    ),
]

PARTITION = os.environ.get("TRANSFERDX_SLURM_PARTITION", "debug")
RUNS = {(b, s) for b in ("tiny_a", "tiny_b") for s in ("bm25", "perturb")}
THREADS = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
SLURM = (
    "hydra/launcher=submitit_slurm",
    f"hydra.launcher.partition={PARTITION}",
    "hydra.launcher.timeout_min=10",
    "hydra.launcher.cpus_per_task=1",
    "hydra.launcher.mem_gb=1",
)
TIMEOUT = 300  # a sweep's whole run; without accounting (sacct) submitit cannot see a job that died


@pytest.fixture(scope="module")
def tiny_conf(tmp_path_factory) -> Path:
    """A config folder for Hydra's search path with two tiny local backbones (as in test_multirun)."""
    return tiny_backbones(tmp_path_factory.mktemp("tiny-slurm"))


def sweep_args(tiny_conf: Path, out: Path, *launcher: str) -> list[str]:
    return [
        "-m",
        *launcher,
        "backbone=tiny_a,tiny_b",
        "source=bm25,perturb",
        "data=demo_pool",
        f"hydra.searchpath=[file://{tiny_conf / 'conf'}]",
        f"paths.artifact_dir={out / 'artifacts'}",
        f"paths.cache_dir={out / 'cache'}",
        f"hydra.sweep.dir={out / 'sweep'}",
        "training.max_steps=2",
        "training.batch_size=8",
        "training.max_seq_length=16",
        "training.logging_steps=1",
    ]


def summaries(out: Path) -> dict[tuple[str, str], dict]:
    found = [json.loads(p.read_text()) for p in (out / "sweep").rglob("train.json")]
    runs = {(s["backbone"], s["source"]): s for s in found}
    assert len(runs) == len(found), found
    return runs


def snapshot(out: Path) -> dict[str, tuple[int, bytes]]:
    """Every file of the model store with its mtime and bytes."""
    store = out / "artifacts" / "models"
    return {str(p.relative_to(store)): (p.stat().st_mtime_ns, p.read_bytes()) for p in store.rglob("*") if p.is_file()}


def array_jobs(out: Path) -> set[str]:
    """The SLURM array job ids of a sweep, from submitit's folders (``<job>_<task>``)."""
    return {m.group(1) for p in (out / "sweep" / ".submitit").iterdir() if (m := re.fullmatch(r"(\d+)_\d+", p.name))}


def job_states(job: str, wait_s: float = 60) -> dict[str, str]:
    """Task id → state of an array job, as slurmctld reports it (no accounting, so no sacct: scontrol,
    which keeps a finished job for MinJobAge, 300 s by default). submitit returns as soon as a task has
    written its result, so a task may still be finishing: wait for every task to end."""
    deadline = time.monotonic() + wait_s
    while True:
        lines = subprocess.run(
            ["scontrol", "-o", "show", "job", job], capture_output=True, text=True, check=True
        ).stdout.splitlines()
        fields = [dict(re.findall(r"(\w+)=(\S*)", line)) for line in lines]
        states = {f["ArrayTaskId"]: f["JobState"] for f in fields if f.get("ArrayJobId") == job}
        if not set(states.values()) & {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING"}:
            return states
        if time.monotonic() > deadline:
            return states
        time.sleep(0.5)


@dataclass
class Sweeps:
    slurm: Path
    first: dict[tuple[str, str], dict]
    second: dict[tuple[str, str], dict]
    before: dict[str, tuple[int, bytes]]
    after: dict[str, tuple[int, bytes]]
    jobs: list[str]  # the array job of the first submission, then of the second
    local: Path


@pytest.fixture(scope="module")
def sweeps(tiny_conf, tmp_path_factory) -> Sweeps:
    """The sweep submitted twice to SLURM (the same command both times) and, meanwhile, run once
    under Hydra's basic launcher (in-process, one run after another) into a separate store; run side
    by side to save wall time (each process has one thread, the machine two cores)."""
    probe = subprocess.run(["sinfo", "-h", "-p", PARTITION, "-o", "%T"], capture_output=True, text=True)
    if probe.returncode != 0 or not probe.stdout.strip():
        pytest.fail(
            f"sbatch is installed but SLURM partition {PARTITION!r} does not answer ({probe.stderr.strip()}); "
            "start the localhost cluster with `bash scripts/slurm_localhost.sh`"
        )
    slurm, local = tmp_path_factory.mktemp("slurm"), tmp_path_factory.mktemp("local")
    script = Path(sys.executable).with_name("transferdx-train")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", **THREADS}
    with open(local / "train.log", "w") as log:
        basic = subprocess.Popen(
            [str(script), *sweep_args(tiny_conf, local)], cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT
        )
    try:
        run_cli("train", *sweep_args(tiny_conf, slurm, *SLURM), timeout=TIMEOUT, **THREADS)
        first, before, jobs = summaries(slurm), snapshot(slurm), array_jobs(slurm)
        run_cli("train", *sweep_args(tiny_conf, slurm, *SLURM), timeout=TIMEOUT, **THREADS)
        second, after = summaries(slurm), snapshot(slurm)
        assert basic.wait(timeout=TIMEOUT) == 0, (local / "train.log").read_text()
    except BaseException:  # a sweep that failed or timed out may leave jobs queued: cancel ours, by id
        basic.kill()
        if (slurm / "sweep" / ".submitit").is_dir():
            subprocess.run(["scancel", *array_jobs(slurm)], capture_output=True)
        raise
    return Sweeps(slurm, first, second, before, after, [*sorted(jobs), *sorted(array_jobs(slurm) - jobs)], local)


def test_every_run_finishes_on_slurm(sweeps):
    assert set(sweeps.first) == RUNS
    for run in sweeps.first.values():
        assert not run["skipped_already_trained"], run
        assert Path(run["model_dir"], ".complete").is_file(), run
        assert Path(run["model_dir"]).is_relative_to(sweeps.slurm / "artifacts" / "models")
    assert len({r["model_dir"] for r in sweeps.first.values()}) == 4
    # SLURM ran them: one array job of four tasks per submission, each COMPLETED
    assert len(sweeps.jobs) == 2, sweeps.jobs
    for job in sweeps.jobs:
        assert job_states(job) == dict.fromkeys(("0", "1", "2", "3"), "COMPLETED"), job
    # submitit's logs live in the sweep folder: <sweep>/.submitit/<job>_<task>/<job>_<task>_0_log.{out,err}
    first = sweeps.jobs[0]
    logs = sorted((sweeps.slurm / "sweep" / ".submitit").glob(f"{first}_*/{first}_*_0_log.out"))
    assert len(logs) == 4
    trained = [line for log in logs for line in log.read_text().splitlines() if line.startswith("trained: ")]
    assert sorted(line.split()[1] for line in trained) == sorted(r["model_dir"] for r in sweeps.first.values())
    assert all("Job completed successfully" in log.read_text() for log in logs)
    script = (sweeps.slurm / "sweep" / ".submitit" / first / f"{first}_submission.sh").read_text()
    assert f"#SBATCH --partition={PARTITION}" in script and "#SBATCH --cpus-per-task=1" in script


def test_resubmission_trains_nothing(sweeps):
    assert set(sweeps.second) == RUNS
    assert all(run["skipped_already_trained"] for run in sweeps.second.values()), sweeps.second
    assert {k: r["model_dir"] for k, r in sweeps.second.items()} == {k: r["model_dir"] for k, r in sweeps.first.items()}
    assert sweeps.after == sweeps.before  # no file of the model store written, rewritten or added
    second = sweeps.jobs[1]
    logs = sorted((sweeps.slurm / "sweep" / ".submitit").glob(f"{second}_*/{second}_*_0_log.out"))
    assert len(logs) == 4 and all("already trained: " in log.read_text() for log in logs)


def test_slurm_models_equal_the_basic_launchers(sweeps):
    here, local = summaries(sweeps.local), sweeps.local
    assert set(here) == RUNS and not any(r["skipped_already_trained"] for r in here.values())
    for key, run in sweeps.first.items():
        slurm_dir = Path(run["model_dir"])
        local_dir = Path(here[key]["model_dir"])
        # the same content address (seed<k>-<hash>) under each artifact store
        assert slurm_dir.relative_to(sweeps.slurm / "artifacts") == local_dir.relative_to(local / "artifacts")
        assert (slurm_dir / "model.safetensors").read_bytes() == (local_dir / "model.safetensors").read_bytes(), key
        config = "train_config.json"
        assert (slurm_dir.parent / config).read_bytes() == (local_dir.parent / config).read_bytes(), key
        losses = [
            [(e["step"], e["loss"]) for e in json.loads((d.parent / "log_history.json").read_text()) if "loss" in e]
            for d in (slurm_dir, local_dir)
        ]
        assert losses[0] == losses[1] and len(losses[0]) == 2, (key, losses)


def test_a_sharded_audit_on_slurm_writes_the_one_process_bytes(tmp_path):
    """``transferdx-audit audit.shards=3 hydra/launcher=submitit_slurm``: the three map tasks go to
    SLURM as one array job (every task COMPLETED), the reduce runs here; the one-process audit on the
    cache they filled writes the same bytes (issue 35)."""
    cache = tmp_path / "cache"
    common = ["bootstrap.resamples=50", "backbone.backend=torch", f"paths.cache_dir={cache}"]
    env = {**THREADS, "TRANSFERDX_CACHE_DIR": str(cache)}
    run_cli("audit", *common, "audit.shards=3", *SLURM, f"output_dir={tmp_path / 'sharded'}", timeout=TIMEOUT, **env)
    sweep = next((cache / "audit-shards").glob("*/sweep"))
    jobs = {m.group(1) for p in (sweep / ".submitit").iterdir() if (m := re.fullmatch(r"(\d+)_\d+", p.name))}
    assert len(jobs) == 1, jobs
    assert job_states(jobs.pop()) == dict.fromkeys(("0", "1", "2"), "COMPLETED")
    reduce = json.loads((sweep.parent / "reduce.json").read_text())
    assert reduce["reduce_encoded_texts"] == 0 and sum(m["encoded_texts"] for m in reduce["markers"]) > 0
    run_cli("audit", *common, f"output_dir={tmp_path / 'one'}", **env)
    names = ("profile.csv", "profile.json", "records.csv", "negatives.csv", "suspects.csv", "report.md")
    for name in names:
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "sharded" / name).read_bytes(), name
