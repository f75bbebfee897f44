"""The commands an audit prints run as printed (issue 56, deliverable 3): a real ``transferdx-audit``
of a user's file that needs ``on_error=skip`` (one bad line), named by a path relative to the folder
it ran in, and of a file read through a data preset with ``data.*`` overrides; every
``transferdx-…`` command it prints (on the screen and in report.md) is run by bash, as printed,
from another folder, and writes its output. A re-audit of the cleaned copy is told apart from the
audit of the original. Lexical audits (no encoder), so that the whole module takes seconds."""

from __future__ import annotations

import csv
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser

from transferdx import config
from transferdx.auditing.commands import clean_command
from transferdx.presets import config_dir

BIN = Path(sys.executable).parent
FAST = ("diagnostics=lexical", "bootstrap.resamples=20")
COMMAND = re.compile(r"`(transferdx-[a-z]+ [^`\n]*)`|^\s*(transferdx-[a-z]+ \S.*)$", re.M)
WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma".split()


def env() -> dict[str, str]:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}


def run(verb: str, *overrides: str, cwd: Path) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [str(BIN / f"transferdx-{verb}"), *overrides], cwd=cwd, capture_output=True, text=True, env=env(), timeout=300
    )
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


def triples(n: int = 30) -> list[tuple[str, str, str]]:
    """(query, positive, negative); every fifth negative is its positive in capitals (a copy, the
    verdict's "clean"), the others share no sentence with it."""
    out = []
    for i in range(n):
        a, b = WORDS[i % len(WORDS)], WORDS[(i * 7 + 3) % len(WORDS)]
        positive = f"{a} {b} is what item {i} is about, with {WORDS[(i + 5) % len(WORDS)]}"
        negative = positive.upper() if i % 5 == 0 else f"passage {i} tells of {b} and {WORDS[(i + 9) % len(WORDS)]}"
        out.append((f"what is {a} {b} in item {i}", positive, negative))
    return out


def printed_commands(proc: subprocess.CompletedProcess, report: Path) -> list[str]:
    """Every ``transferdx-…`` command on the screen and in report.md, once each, in order."""
    found = [a or b for a, b in COMMAND.findall(proc.stdout + "\n" + report.read_text(encoding="utf-8"))]
    return list(dict.fromkeys(c.strip() for c in found))


def run_as_printed(command: str, elsewhere: Path) -> list[Path]:
    """``command`` in a fresh bash from ``elsewhere``: exit 0, and the files it wrote (its output)."""
    before = set(elsewhere.rglob("*"))
    proc = subprocess.run(
        ["bash", "-c", command], cwd=elsewhere, capture_output=True, text=True, env=env(), timeout=300
    )
    assert proc.returncode == 0, f"{command}\nexit {proc.returncode}\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
    made = sorted(p for p in set(elsewhere.rglob("*")) - before if p.is_file())
    assert made, f"{command} wrote nothing under {elsewhere}"
    return made


def as_parsed(command: str) -> dict[str, object]:
    """The overrides of ``command`` (between backticks), split as bash splits them and read as Hydra
    reads each one (its value, with its type)."""
    argv = shlex.split(command.strip("`"))
    assert argv[0] == "transferdx-clean", command
    parser = OverridesParser.create()
    return {(o := parser.parse_override(a)).key_or_group: o.value() for a in argv[1:]}


def test_the_clean_command_carries_what_the_input_was_read_with(tmp_path, monkeypatch):
    """The settings the audit read its input with are in the command, each read back by Hydra as the
    value it was (a path with a space, a boolean, a word that looks like a number); a path that
    exists is made absolute."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "my file.jsonl").write_text("{}\n", encoding="utf-8")
    settings = {"data": "my file.jsonl", "on_error": "skip", "read_with": {"diagnostics": "lexical"}}
    assert as_parsed(clean_command(settings, "my file.jsonl")) == {
        "input": str(tmp_path / "my file.jsonl"),
        "on_error": "skip",
        "diagnostics": "lexical",
    }
    assert as_parsed(clean_command({**settings, "input": "/abs/my file.jsonl"})) == {
        "input": "/abs/my file.jsonl",
        "on_error": "skip",
        "diagnostics": "lexical",
    }
    preset = {"data.path": "/d/x y.tsv", "data.header": False, "data.source": "2024", "data.runs": ["a", "b c"]}
    read = {"data": "ntuple", **preset}
    assert as_parsed(clean_command({"data": "ntuple", "on_error": "raise", "read_with": read}, "ntuple", True)) == {
        **read,
        "diagnostics": "lexical",
    }
    assert clean_command({"data": "(in memory)", "on_error": "skip"}) == "`transferdx.clean(records, audit)`"


def test_read_with_is_what_the_command_line_changed(tmp_path, monkeypatch):
    """:func:`transferdx.config.read_with`: ``input`` absolute; a data preset's name with the
    ``data.*`` values the command line changed (its paths absolute), not those it left; lexical."""
    monkeypatch.chdir(tmp_path)

    def composed(*overrides: str) -> dict[str, object]:
        GlobalHydra.instance().clear()
        with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
            return config.read_with(compose(config_name="audit", overrides=list(overrides)))

    assert composed("input=sub/mined.jsonl", "on_error=skip") == {"input": str(tmp_path / "sub/mined.jsonl")}
    assert composed("data=ntuple", "data.path=x.tsv", "data.header=false", "diagnostics=lexical") == {
        "data": "ntuple",
        "data.path": str(tmp_path / "x.tsv"),
        "data.header": False,
        "diagnostics": "lexical",
    }
    assert composed("data=demo") == {"data": "demo"}


@pytest.mark.slow
def test_every_printed_command_runs_as_printed_from_another_folder(tmp_path):
    work, elsewhere = tmp_path / "work", tmp_path / "elsewhere"
    work.mkdir()
    elsewhere.mkdir()
    lines = [json.dumps({"question": q, "answer": p, "negative": n}) for q, p, n in triples()]
    lines.insert(3, '{"question": "a line cut short')  # needs on_error=skip
    (work / "mined.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    with open(work / "mined.tsv", "w", encoding="utf-8") as handle:  # n-tuple lines: a data preset reads them
        handle.writelines(f"{q}\t{p}\t{n}\tfiller passage {i}\n" for i, (q, p, n) in enumerate(triples()))

    audits = {
        "input": ("input=mined.jsonl", "on_error=skip"),
        "data": ("data=ntuple", "data.path=mined.tsv", "data.header=false", "data.source=tuples"),
    }
    ran = []
    for name, overrides in audits.items():
        out = tmp_path / f"audit-{name}"
        proc = run("audit", *overrides, *FAST, f"output_dir={out}", cwd=work)
        commands = printed_commands(proc, out / "report.md")
        cleans = [c for c in commands if c.startswith("transferdx-clean ")]
        assert cleans, proc.stdout[-3000:]
        for command in commands:
            if name == "input":
                assert f"input={work / 'mined.jsonl'}" in command and "on_error=skip" in command, command
            else:
                assert f"data.path={work / 'mined.tsv'}" in command and "data.source=tuples" in command, command
            assert "diagnostics=lexical" in command, command
            made = run_as_printed(command, elsewhere)
            if command in cleans:  # the copy, with clean.json beside its folder
                copies = [p for p in made if p.parent.name == "cleaned" and (p.parent.parent / "clean.json") in made]
                if name == "input":  # in the input's own form and name
                    assert [p.name for p in copies] == ["mined.jsonl"], made
                assert max(p.read_text(encoding="utf-8").count("\n") for p in copies) >= 20, made
            ran.append(command)
    assert len(ran) >= 2

    # the cleaned copy audited again: its own source name, data label and absolute input
    copy = next(elsewhere.rglob("cleaned/mined.jsonl"))
    out = tmp_path / "audit-copy"
    run("audit", f"input={os.path.relpath(copy, work)}", "on_error=skip", *FAST, f"output_dir={out}", cwd=work)
    with open(out / "profile.csv", newline="", encoding="utf-8") as handle:
        genuine = [r["source"] for r in csv.DictReader(handle) if r["kind"] == "genuine"]
    assert genuine == ["mined_cleaned"]
    report = (out / "report.md").read_text(encoding="utf-8")
    assert f"- **input**: `{copy.resolve()}`" in report and "- **data**: `cleaned/mined.jsonl`" in report
    original = (tmp_path / "audit-input" / "report.md").read_text(encoding="utf-8")
    assert f"- **input**: `{work / 'mined.jsonl'}`" in original and "- **data**: `mined.jsonl`" in original
    assert "mined_cleaned" not in original


def test_a_cleaned_copy_audited_from_python_is_named_as_the_copy(tmp_path):
    """``tdx.audit`` of a ``transferdx-clean`` copy: its source ``<source>_cleaned``, described as
    cleaned (how, from clean.json), its data ``cleaned/<file>``; ``tdx.load`` of the copy (what the
    clean verb and training read) keeps the file's own names."""
    import transferdx as tdx

    path = tmp_path / "mined.jsonl"
    path.write_text(
        "".join(json.dumps({"question": q, "answer": p, "negative": n}) + "\n" for q, p, n in triples()),
        encoding="utf-8",
    )
    tdx.clean(path, encoder=None, reasons=["duplicate_positive"], out=tmp_path / "out")
    copy = tmp_path / "out" / "cleaned" / "mined.jsonl"
    assert tdx.load(copy).sources == ["mined"]
    result = tdx.audit(copy, encoder=None, controls="none", resamples=20)
    assert list(result.profile["source"]) == ["mined_cleaned"]
    assert result.settings["data"] == "cleaned/mined.jsonl"
    cleaned = result.descriptors["mined_cleaned"]["cleaned"]
    assert cleaned["action"] == "remove" and cleaned["reasons"] == ["duplicate_positive"]
    original = tdx.audit(path, encoder=None, controls="none", resamples=20)
    assert list(original.profile["source"]) == ["mined"] and original.settings["data"] == "mined.jsonl"
