"""Run folders: a new folder per run (two runs started in the same second never share one), an
explicit ``output_dir=`` is the only folder a run touches, and a folder a live run owns is refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from transferdx import config
from transferdx.artifacts import CLAIM_FILE, FolderInUseError, claim_folder, run_id

from .conftest import REPO, run_cli

pytestmark = pytest.mark.slow

FAST = ("diagnostics=lexical", "bootstrap.resamples=20")


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def test_two_runs_same_second_get_distinct_folders(tmp_path):
    """Two audits started together without output_dir: each its own folder, each folder one run's
    artifacts (report.md and profile.json of the same run), both exit 0."""
    script = Path(sys.executable).with_name("transferdx-audit")
    command = (
        [str(script)]
        if script.exists()
        else [sys.executable, "-c", "from transferdx.cli import audit_main; audit_main()"]
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFERDX_CACHE_DIR": str(tmp_path / "cache")}
    procs = [
        subprocess.Popen(
            [*command, *FAST, f"paths.output_root={tmp_path}", f"seed={seed}"],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for seed in (1, 2)
    ]
    outs = [proc.communicate(timeout=600) for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0], outs
    folders = sorted((tmp_path / "audit").iterdir())
    assert len(folders) == 2, folders
    printed = sorted(
        str(Path(line.split("report: ", 1)[1]).parent)
        for out, _ in outs
        for line in out.splitlines()
        if line.startswith("report: ")
    )
    assert printed == [str(f.resolve()) for f in folders]
    for folder in folders:
        seed = json.loads((folder / "profile.json").read_text())["settings"]["seed"]
        assert f"**seed**: `{seed}`" in (folder / "report.md").read_text()
        assert OmegaConf.load(folder / ".hydra" / "config.yaml").seed == seed
        assert not (folder / CLAIM_FILE).exists()  # released at the end of the run


def test_run_ids_differ_within_one_second():
    """The folder name: start time to the second, pid, random suffix; never the same twice."""
    ids = {run_id() for _ in range(200)}
    assert len(ids) == 200
    stamp = next(iter(ids)).split("_")
    assert len(stamp) == 3 and stamp[2].startswith(f"{os.getpid()}-")


def test_output_dir_leaves_nothing_else(tmp_path):
    """With output_dir= the run writes its artifacts there and nothing anywhere else under
    paths.output_root: no stray <verb>/<timestamp>/ with .hydra and cli.log, not in output_dir either."""
    out = tmp_path / "root" / "mine"
    run_cli("audit", *FAST, f"paths.output_root={tmp_path / 'root'}", f"output_dir={out}")
    assert {p.relative_to(tmp_path / "root").parts[0] for p in (tmp_path / "root").iterdir()} == {"mine"}
    names = {p.name for p in out.iterdir()}
    assert {"profile.json", "report.md", "records.csv"} <= names
    assert not names & {".hydra", "cli.log", CLAIM_FILE}
    build = tmp_path / "root" / "sources"
    run_cli(
        "build",
        "data=demo_pool",
        "sources=[bm25]",
        "controls=[]",
        f"paths.output_root={tmp_path / 'root'}",
        f"output_dir={build}",
    )
    assert sorted(p.name for p in (tmp_path / "root").iterdir()) == ["mine", "sources"]
    assert not {p.name for p in build.iterdir()} & {".hydra", "cli.log", CLAIM_FILE}


def test_default_run_folder_keeps_hydra_record(tmp_path):
    """Without output_dir, Hydra's run folder holds the artifacts, .hydra and the job log, as before."""
    run_cli("audit", *FAST, f"paths.output_root={tmp_path}")
    (folder,) = (tmp_path / "audit").iterdir()
    assert {".hydra", "profile.json", "cli.log"} <= {p.name for p in folder.iterdir()}


def test_folder_owned_by_a_live_run_is_refused(tmp_path):
    """A second run asking for the folder a live run owns exits 2 with one line naming the owner; a
    claim left by a dead run is taken over."""
    out = tmp_path / "shared"
    with claim_folder(out):
        with pytest.raises(FolderInUseError):
            with claim_folder(out):
                pass
        proc = run_cli("audit", *FAST, f"paths.output_root={tmp_path}", f"output_dir={out}", check=False)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.strip().splitlines() == [proc.stderr.strip()]
        assert "in use by another transferdx run" in proc.stderr and f"pid {os.getpid()}" in proc.stderr
        assert not (out / "profile.json").exists()
    assert not (out / CLAIM_FILE).exists()
    (out / CLAIM_FILE).write_text("pid 999999 on nowhere, started long ago\n")  # its run died
    run_cli("audit", *FAST, f"paths.output_root={tmp_path}", f"output_dir={out}")
    assert (out / "profile.json").is_file() and not (out / CLAIM_FILE).exists()


def test_explicit_output_dir_is_read_without_resolving_the_default():
    """The resolver behind hydra.run.dir: None for the default (Hydra's own folder, not known yet),
    the value for a path or an interpolation the user wrote."""
    cfg = OmegaConf.create({"paths": {"output_root": "o"}, "output_dir": "${hydra:runtime.output_dir}"})
    assert config.explicit_output_dir(cfg) is None
    cfg.output_dir = "${paths.output_root}/mine"
    assert config.explicit_output_dir(cfg) == "o/mine"
    assert config.explicit_output_dir(OmegaConf.create({"x": 1})) is None
