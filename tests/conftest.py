"""Shared fixtures: the real-data folder (never copied into the repository) and small builders."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from transferdx.inputs.records import Passage, Record

REPO = Path(__file__).resolve().parents[1]


def run_cli(name: str, *overrides: str, check: bool = True, timeout: int = 900, **env: str):
    """Run an installed console script (``transferdx-<name>``) offline, from the repository root."""
    import subprocess
    import sys

    script = Path(sys.executable).with_name(f"transferdx-{name}")
    if script.exists():
        command = [str(script)]
    else:
        command = [sys.executable, "-c", f"from transferdx.cli import {name}_main; {name}_main()"]
    proc = subprocess.run(
        [*command, *overrides],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "HF_HUB_OFFLINE": "1", **env},
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
    return proc


@pytest.fixture(scope="session", autouse=True)
def shared_model_exports(tmp_path_factory):
    """One folder of exported models (OpenVINO) for the whole session, so that tests with their own
    embedding caches do not each re-export the encoder; a test may point the variable elsewhere."""
    if "TRANSFERDX_MODEL_DIR" in os.environ:
        yield
        return
    os.environ["TRANSFERDX_MODEL_DIR"] = str(tmp_path_factory.mktemp("model-exports"))
    yield
    os.environ.pop("TRANSFERDX_MODEL_DIR", None)


def data_dir() -> Path:
    return Path(os.environ.get("TRANSFERDX_DATA_DIR", REPO.parent / "shared" / "data")).resolve()


@pytest.fixture(scope="session")
def data() -> Path:
    path = data_dir()
    if not (path / "msmarco-dl19").is_dir():
        pytest.skip(f"real data not found at {path} (set TRANSFERDX_DATA_DIR)")
    return path


def record(
    qid: str, query: str, negatives: list[str], source: str = "s", positive: str = "pos text", kind: str = "genuine"
) -> Record:
    """A record with one positive and text negatives (ids n0, n1, ...)."""
    return Record(
        qid,
        query,
        (Passage("p", positive),),
        tuple(Passage(f"n{i}", t) for i, t in enumerate(negatives)),
        source,
        kind,
    )
