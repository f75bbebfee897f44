"""Mistakes on the command line end in one line on stderr, ``transferdx: error: …``, exit status 2 and
no traceback; an empty input and exclusions of no known source are reported, never silent."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from transferdx import pipeline
from transferdx.inputs.transferdx_records import write_records

from .conftest import record, run_cli

pytestmark = pytest.mark.slow

FAST = ("diagnostics=lexical", "bootstrap.resamples=20")


def audit(tmp_path: Path, *overrides: str, **env: str) -> subprocess.CompletedProcess:
    return run_cli("audit", *FAST, f"paths.output_root={tmp_path / 'root'}", *overrides, check=False, **env)


def one_line_error(proc: subprocess.CompletedProcess) -> str:
    """The error line, after checking that it is the only thing on stderr and the exit status is 2."""
    assert proc.returncode == 2, f"exit {proc.returncode}\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("transferdx: error: "), proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    return lines[0]


def nothing_left(tmp_path: Path, *folders: Path) -> None:
    """A failed run leaves no run folder behind, and no empty output folder it made."""
    assert not (tmp_path / "root").exists() or not any((tmp_path / "root").rglob("*"))
    for folder in folders:
        assert not folder.exists(), folder


def test_output_dir_existing_file_one_line(tmp_path):
    taken = tmp_path / "taken"
    taken.write_text("not a folder")
    line = one_line_error(audit(tmp_path, f"output_dir={taken}"))
    assert f"output_dir={taken} is an existing file" in line
    assert taken.read_text() == "not a folder"


def test_input_list_one_line(tmp_path):
    line = one_line_error(audit(tmp_path, "input=[a,b]", f"output_dir={tmp_path / 'o'}"))
    assert "input= takes one path" in line and "['a', 'b']" in line
    nothing_left(tmp_path, tmp_path / "o")


def test_tokenizer_nonexistent_path_one_line(tmp_path):
    line = one_line_error(
        audit(
            tmp_path, "tokenizer=backbone", "tokenizer.model_name_or_path=/nonexistent", f"output_dir={tmp_path / 'o'}"
        )
    )
    assert "tokenizer.model_name_or_path=/nonexistent: no such folder" in line
    nothing_left(tmp_path, tmp_path / "o")
    hub = audit(
        tmp_path,
        "tokenizer=backbone",
        "tokenizer.model_name_or_path=transferdx-tests/no-such-tokenizer",
        f"output_dir={tmp_path / 'o'}",
        HF_HOME=str(tmp_path / "hf"),  # an empty Hugging Face cache; HF_HUB_OFFLINE=1 (run_cli)
    )
    assert "tokenizer.model_name_or_path: hub model 'transferdx-tests/no-such-tokenizer'" in one_line_error(hub)


@pytest.mark.parametrize("offline", ["1", "0"])
def test_hub_backbone_offline_fails_fast(tmp_path, offline):
    """An uncached hub model: offline (HF_HUB_OFFLINE=1) or with the hub out of reach (or, online, no
    such model), one line naming the model and an offline preset, in seconds instead of a stall."""
    started = time.perf_counter()
    proc = audit(
        tmp_path,
        "diagnostics=default",
        "backbone.model=transferdx-tests/no-such-model",
        f"output_dir={tmp_path / 'o'}",
        HF_HUB_OFFLINE=offline,
        HF_HOME=str(tmp_path / "hf"),  # an empty Hugging Face cache
    )
    line = one_line_error(proc)
    assert time.perf_counter() - started < 30
    assert "'transferdx-tests/no-such-model'" in line and "backbone=minilm_l6" in line
    if offline == "1":
        assert "HF_HUB_OFFLINE is set" in line
    nothing_left(tmp_path, tmp_path / "o")


def test_empty_input_is_error(tmp_path):
    """An input without one record: exit 2 naming the input (and the first exclusion), no empty profile."""
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    line = one_line_error(audit(tmp_path, f"input={empty}", f"output_dir={tmp_path / 'o'}"))
    assert f"no records to audit in {empty}" in line
    nothing_left(tmp_path, tmp_path / "o")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"qid": "1", "query": "", "positives": [], "negatives": [], "source": "s"}\n')
    line = one_line_error(audit(tmp_path, f"input={bad}", "on_error=skip", f"output_dir={tmp_path / 'o2'}"))
    assert f"no records to audit in {bad}: 1 excluded, first bad.jsonl:1: field 'query': empty string" in line
    assert f"all in {tmp_path / 'o2' / 'exclusions.csv'}" in line
    assert sorted(p.name for p in (tmp_path / "o2").iterdir()) == [".transferdx-incomplete", "exclusions.csv"]
    with pytest.raises(ValueError, match="no records to audit in the input: empty"):
        pipeline.audit([], encoder=None)


def test_ntuple_without_path_one_line(tmp_path):
    line = one_line_error(audit(tmp_path, "data=ntuple", f"output_dir={tmp_path / 'o'}"))
    assert "data=ntuple needs data.path=..." in line and "???" not in line


def test_missing_mandatory_value_one_line(tmp_path):
    """``???`` read outside ``data`` (transferdx-tables without study_dirs) names the key to set."""
    proc = run_cli("tables", f"paths.output_root={tmp_path / 'root'}", check=False)
    assert "study_dirs" in one_line_error(proc)


@pytest.mark.parametrize("name", ["a,b.jsonl", "é.jsonl"])
def test_comma_path_hint(tmp_path, name):
    """A comma or a non-ASCII character in an unquoted path: one line with the quoting that works,
    and that quoting (as bash hands it over) does work."""
    path = tmp_path / name
    write_records([record(str(i), f"query {i}", [f"negative {i}"], source="s") for i in range(4)], path)
    line = one_line_error(audit(tmp_path, f"input={path}", f"output_dir={tmp_path / 'o'}"))
    quoted = f'input="{path}"'
    assert f"'{quoted}'" in line
    proc = audit(tmp_path, quoted, "controls=none", f"output_dir={tmp_path / 'o'}")
    assert proc.returncode == 0, proc.stderr
    assert json.loads((tmp_path / "o" / "profile.json").read_text())["sources"][0]["n_records"] == 4


def test_malformed_sidecar_names_the_file(tmp_path):
    folder = tmp_path / "sources"
    write_records([record(str(i), f"query {i}", [f"negative {i}"], source="s") for i in range(4)], folder / "s.jsonl")
    (folder / "descriptors.json").write_text("{not json")
    line = one_line_error(audit(tmp_path, f"input={folder}", f"output_dir={tmp_path / 'o'}"))
    assert str(folder / "descriptors.json") in line


def test_unattributed_exclusions_reported(tmp_path):
    """A line that does not parse (on_error=skip) has no known source: counted in profile.json
    (n_excluded_unattributed and exclusions[""]) and in the last line printed."""
    path = tmp_path / "in.jsonl"
    write_records([record(str(i), f"query {i}", [f"negative {i}"], source="s") for i in range(4)], path)
    with open(path, "a", encoding="utf-8") as handle:
        handle.write("{not json\n")
    out = tmp_path / "o"
    proc = audit(tmp_path, f"input={path}", "on_error=skip", "controls=none", f"output_dir={out}")
    assert proc.returncode == 0, proc.stderr
    profile = json.loads((out / "profile.json").read_text())
    assert profile["n_excluded_unattributed"] == 1 and profile["exclusions"] == {"": 1}
    assert [r["n_excluded_records"] for r in profile["sources"]] == [0]
    assert "1 exclusions (1 records of no known source)" in proc.stdout.splitlines()[-1]
