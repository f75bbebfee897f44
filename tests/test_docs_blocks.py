"""Every shell and Python block of the README, docs/inputs.md and docs/cleaning.md runs as written,
in page order, in one folder, on the demo: a new user's path from mining to a trained model.

Placeholders the pages use for the reader's own files (``path/to/records.jsonl``,
``path/to/folder/``) become the bundled demo's records; each command gets a run folder of its own and
the few overrides that keep it cheap (:data:`CHEAP_OVERRIDES`). Nothing is skipped silently: a line
that does not run here is in :data:`NOT_RUN` with the reason, and the test fails if a page's block
holds a line that neither runs nor is listed."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from .conftest import REPO

# In the order a new user meets them: mining (docs/inputs.md) writes the file the README audits.
PAGES = ("docs/inputs.md", "README.md", "docs/cleaning.md")
# Lines that do not run here, with the reason.
NOT_RUN = {
    "make test": "it is this test suite (CI runs it)",
}
# What ``make demo`` runs once the environment is set up (Makefile's demo target).
TRANSLATED = {"make demo": ".venv/bin/transferdx-audit"}
# Overrides that keep a command cheap: fewer bootstrap resamples, two training steps, the lexical
# diagnostics for the six TREC-DL19 runs (their semantic audit is the benchmarks' job).
CHEAP_OVERRIDES = {
    "transferdx-audit": "bootstrap.resamples=20",
    "transferdx-clean": "bootstrap.resamples=20",
    "transferdx-train": "training.max_steps=2",
}


@dataclass(frozen=True)
class Block:
    page: str
    line: int  # 1-based line of the opening fence
    language: str
    body: str


def blocks(page: str) -> list[Block]:
    """The page's fenced ``bash`` and ``python`` blocks, in order."""
    text = (REPO / page).read_text(encoding="utf-8")
    found = []
    for match in re.finditer(r"^```(\w*)\n(.*?)^```", text, flags=re.S | re.M):
        if match.group(1) in ("bash", "python"):
            line = text.count("\n", 0, match.start()) + 1
            found.append(Block(page, line, match.group(1), match.group(2)))
    return found


def shell_lines(block: Block) -> list[str]:
    return [line.split("  #", 1)[0].strip() for line in block.body.splitlines() if line.split("  #", 1)[0].strip()]


def scripts_named(following: list[Block]) -> set[str]:
    """Python files the next bash block runs (``.venv/bin/python mine.py``)."""
    if not following or following[0].language != "bash":
        return set()
    return set(re.findall(r"python (\S+\.py)", following[0].body))


def test_every_block_is_run_or_listed():
    """The pages hold shell and Python blocks, and every shell line either runs or has a reason."""
    every = [b for page in PAGES for b in blocks(page)]
    assert {b.page for b in every} == set(PAGES)
    assert {b.language for b in every} == {"bash", "python"}
    for block in (b for b in every if b.language == "bash"):
        for line in shell_lines(block):
            runnable = line.startswith((".venv/bin/transferdx-", ".venv/bin/python ")) or line in TRANSLATED
            assert runnable or line in NOT_RUN, f"{block.page}:{block.line}: {line!r} neither runs nor is listed"


def command_line(line: str, bin_dir: Path, run_dir: Path, workdir: Path) -> str:
    """The line as bash runs it here: our interpreter's scripts, the demo for the placeholders, a run
    folder of its own, and the cheap overrides."""
    line = TRANSLATED.get(line, line)
    line = line.replace("path/to/records.jsonl", str(workdir / "records.jsonl"))
    line = line.replace("path/to/folder/", f"{workdir / 'folder'}/")
    line = line.replace(".venv/bin/", f"{bin_dir}/")
    verb = line.split()[0].rsplit("/", 1)[-1]
    extra = [CHEAP_OVERRIDES.get(verb, "")]
    if "data=msmarco_dl19" in line:
        extra.append("diagnostics=lexical")
    if verb == "transferdx-train":
        extra.append(f"paths.artifact_dir={workdir / 'artifacts'}")
    if verb.startswith("transferdx-"):
        extra.append(f"hydra.sweep.dir={run_dir}" if " -m " in line else f"hydra.run.dir={run_dir}")
    return " ".join([line, *extra])


@pytest.mark.slow
def test_every_block_runs_on_the_demo(tmp_path, data):
    """Mine with the real ``mine_hard_negatives``, audit the Parquet file, read the verdict and the
    suspects from Python, clean, train two steps, and run the cleaning and input pages' commands, all as
    the pages print them; each exits 0 and the files the next step reads are there."""
    demo = REPO / "transferdx" / "demo" / "handwritten.jsonl"
    shutil.copy(demo, tmp_path / "records.jsonl")
    (tmp_path / "folder").mkdir()
    shutil.copy(demo, tmp_path / "folder" / "records.jsonl")
    bin_dir = Path(sys.executable).parent
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TRANSFERDX_DATA_DIR": str(data),
        "TRANSFERDX_CACHE_DIR": str(tmp_path / "cache"),
    }
    ran: list[str] = []
    outputs: dict[str, str] = {}
    for page in PAGES:
        page_blocks = blocks(page)
        for i, block in enumerate(page_blocks):
            where = f"{page}:{block.line}"
            if block.language == "python":
                names = scripts_named(page_blocks[i + 1 :])
                for name in names:  # a script the next block runs: saved, not run twice
                    (tmp_path / name).write_text(block.body, encoding="utf-8")
                if names:
                    continue
                source = block.body if "import transferdx" in block.body else "import transferdx as tdx\n" + block.body
                proc = subprocess.run(
                    [sys.executable, "-c", source], cwd=tmp_path, capture_output=True, text=True, env=env
                )
                assert proc.returncode == 0, f"{where}\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
                ran.append(where)
                outputs[where] = proc.stdout
                continue
            for n, line in enumerate(shell_lines(block)):
                if line in NOT_RUN:
                    continue
                command = command_line(line, bin_dir, tmp_path / "runs" / f"{block.line}-{n}", tmp_path)
                proc = subprocess.run(["bash", "-c", command], cwd=tmp_path, capture_output=True, text=True, env=env)
                assert proc.returncode == 0, f"{where}: {line}\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
                ran.append(f"{where}: {line}")
                outputs[line] = proc.stdout
    # The path's files and messages: the mined file's audit, its cleaned copy, the trained model.
    audit_line = ".venv/bin/transferdx-audit input=mined.parquet output_dir=outputs/mined"
    printed = outputs[audit_line].splitlines()  # the decision first, then the report's path
    assert printed[0].startswith("- mined (64 records) — bottom line: ") and printed[1] == ""
    assert printed[2] == f"report: {(tmp_path / 'outputs/mined/report.md').resolve()}"
    report = (tmp_path / "outputs/mined/report.md").read_text(encoding="utf-8")
    assert report.startswith("# transferdx audit\n\n## Verdict")
    profile = (tmp_path / "outputs/mined/profile.csv").read_text(encoding="utf-8")
    assert "mined,genuine,64," in profile and "random_mix_50,control" in profile
    assert (tmp_path / "outputs/clean/cleaned/mined.parquet").is_file()
    train = [out for line, out in outputs.items() if "transferdx-train" in line]
    assert train and "trained:" in train[0]
    assert (tmp_path / "out/clean/cleaned/records.jsonl").is_file()
    python_blocks = sum(b.language == "python" for page in PAGES for b in blocks(page))
    assert len([r for r in ran if ": " not in r]) == python_blocks - 1  # all but mine.py, which bash ran
