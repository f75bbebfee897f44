"""The fault battery (issue 36): every fault a careful user meets ends in one line, loses nothing and
leaves nothing that misleads. Signals mid-audit and mid-clean, kill -9, an input replaced while it is
cleaned, a full disk (cache, export, output) and a read-only folder (small tmpfs mounts where the
test may mount them, skipped otherwise), a hostile YAML config and a pickled model; each asserts the
exit status, one line without a traceback, and that the input's items are all accounted for."""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest

import transferdx as tdx
from transferdx.artifacts import (
    CLAIM_FILE,
    COMPLETE_FILE,
    INCOMPLETE_FILE,
    IncompleteOutputWarning,
    atomic_folder,
    claim_folder,
    incomplete_output,
)
from transferdx.inputs import tables as tables_module

from .conftest import REPO
from .tiny import tiny_model

pytestmark = pytest.mark.slow

DEMO = REPO / "transferdx" / "demo" / "handwritten.jsonl"


def script(verb: str) -> str:
    return str(Path(sys.executable).with_name(f"transferdx-{verb}"))


def environment(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TRANSFERDX_CACHE_DIR": str(tmp_path / "cache"),
        **extra,
    }


def run(verb: str, *args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([script(verb), *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=600)


def one_line(stderr: str, prefix: str = "transferdx: error: ") -> str:
    """The only non-blank line on stderr (progress bars cleared), which starts with ``prefix``."""
    lines = [x for x in stderr.replace("\r", "\n").splitlines() if x.strip() and "it/s" not in x and "text/s" not in x]
    assert len(lines) == 1 and lines[0].startswith(prefix), stderr[-3000:]
    assert "Traceback" not in stderr
    return lines[0]


def claims(cache: Path) -> list[Path]:
    return [p for p in cache.rglob(".claim-*")] if cache.exists() else []


def start_and_signal(args: list[str], env: dict[str, str], cwd: Path, cache: Path, signum: int):
    """Start a run, wait until it is encoding (a cache claim exists), send ``signum``; the finished process."""
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=cwd)
    deadline = time.monotonic() + 300
    while not claims(cache):
        assert proc.poll() is None, f"the run ended before it encoded anything\n{proc.communicate()[1][-2000:]}"
        assert time.monotonic() < deadline, "the run never started encoding"
        time.sleep(0.02)
    proc.send_signal(signum)
    stdout, stderr = proc.communicate(timeout=120)
    return proc.returncode, stdout, stderr


# ---------------------------------------------------------------------------------------------
# Signals and kill -9
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("signum", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_mid_audit_ends_in_one_line_and_the_rerun_resumes(signum, status, tmp_path):
    """Ctrl-C or SIGTERM while encoding: exit 128 + signal, one line saying what the cache keeps, the
    output folder's claim and the cache's claims released, no completion marker; the same command
    then finishes, with the same bytes as a run never interrupted."""
    env, out = environment(tmp_path), tmp_path / "out"
    args = [script("audit"), f"output_dir={out}", "bootstrap.resamples=20"]
    code, _, stderr = start_and_signal(args, env, tmp_path, tmp_path / "cache", signum)
    assert code == status, stderr[-2000:]
    line = one_line(stderr, "transferdx: interrupted by ")
    assert ("SIGINT" if signum == signal.SIGINT else "SIGTERM") in line and "rerun the same command" in line
    assert not (out / CLAIM_FILE).exists() and not (out / COMPLETE_FILE).exists()
    assert claims(tmp_path / "cache") == []
    done = run("audit", *args[1:], env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (out / COMPLETE_FILE).is_file()
    reference = run("audit", f"output_dir={tmp_path / 'ref'}", "bootstrap.resamples=20", env=env, cwd=tmp_path)
    assert reference.returncode == 0
    for name in ("profile.csv", "negatives.csv", "suspects.csv", "exclusions.csv"):
        assert (out / name).read_bytes() == (tmp_path / "ref" / name).read_bytes(), name
    # every input record is in the output or in the exclusion log
    import pandas as pd

    demo = tdx.load("demo")
    profile = pd.read_csv(out / "profile.csv")
    audited = int(profile.loc[profile["kind"] == "genuine", "n_records"].sum())
    excluded = pd.read_csv(out / "exclusions.csv")
    genuine = [r for r in demo.records if r.kind == "genuine"]
    assert audited + int((excluded["unit"] == "record").sum()) == len(genuine) == 128


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGTERM])
def test_a_clean_killed_or_terminated_leaves_an_unmarked_folder_that_the_rerun_completes(signum, tmp_path):
    """kill -9 while cleaning leaves the folder with the dead run's claim and no completion marker, so
    a reader of it is warned; SIGTERM ends in one line with exit 143, releases the claims and removes
    the folder it made and left empty. Either way the rerun takes over and finishes, accounting for
    every row."""
    env, out = environment(tmp_path), tmp_path / "clean"
    args = [script("clean"), f"input={DEMO}", f"output_dir={out}", "bootstrap.resamples=20"]
    code, _, stderr = start_and_signal(args, env, tmp_path, tmp_path / "cache", signum)
    assert not (out / COMPLETE_FILE).exists()
    if signum == signal.SIGKILL:
        assert code == -signal.SIGKILL and (out / CLAIM_FILE).exists()
        (out / "cleaned").mkdir(parents=True, exist_ok=True)
        (out / "cleaned" / "handwritten.jsonl").write_text(DEMO.read_text(encoding="utf-8"), encoding="utf-8")
        with pytest.warns(IncompleteOutputWarning, match="has not finished or was cut short"):
            tdx.load(out / "cleaned" / "handwritten.jsonl")
    else:
        assert code == 143 and "interrupted by SIGTERM" in one_line(stderr, "transferdx: interrupted by ")
        assert not out.exists() and claims(tmp_path / "cache") == []  # made by the run, left empty: removed
    done = run("clean", *args[1:], env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads((out / COMPLETE_FILE).read_text())["files"]
    assert not (out / CLAIM_FILE).exists() and claims(tmp_path / "cache") == []
    descriptor = json.loads((out / "clean.json").read_text())
    rows = descriptor["rows"]
    assert rows["read"] == rows["written"] + rows["excluded_on_read"] + rows["dropped"] - rows["added"]
    with warnings.catch_warnings():
        warnings.simplefilter("error", IncompleteOutputWarning)
        tdx.load(out / "cleaned" / "handwritten.jsonl")


# ---------------------------------------------------------------------------------------------
# The input a run read is the input it wrote from
# ---------------------------------------------------------------------------------------------


def test_an_input_replaced_while_cleaning_gives_the_copy_of_the_version_read(tmp_path, monkeypatch):
    """The file is re-saved (rows dropped, one added) after it was read: the copy is byte-identical to
    a clean of the version read, every row of that version accounted for, and the summary and
    clean.json say the file changed."""
    from transferdx.pipeline import cleaning

    first = DEMO.read_text(encoding="utf-8").splitlines(keepends=True)
    path, untouched = tmp_path / "mined.jsonl", tmp_path / "same" / "mined.jsonl"
    untouched.parent.mkdir()
    path.write_text("".join(first), encoding="utf-8")
    untouched.write_text("".join(first), encoding="utf-8")
    real_audit = cleaning.audit

    def audit_then_resave(*args, **kwargs):
        result = real_audit(*args, **kwargs)
        second = tmp_path / "second.jsonl"
        second.write_text("".join(first[5:]) + first[0].replace('"qid": "q001"', '"qid": "new"'), encoding="utf-8")
        os.replace(second, path)
        return result

    reasons = ["duplicate_positive", "duplicate_negative"]
    monkeypatch.setattr(cleaning, "audit", audit_then_resave)
    changed = tdx.clean(path, reasons=reasons, out=tmp_path / "out")
    monkeypatch.setattr(cleaning, "audit", real_audit)
    same = tdx.clean(untouched, reasons=reasons, out=tmp_path / "ref")
    assert changed.descriptor["input_changed"] == ["mined.jsonl"] and same.descriptor["input_changed"] == []
    assert "changed on disk while cleaning ran" in changed.summary()
    assert changed.descriptor["input_sha256"] == same.descriptor["input_sha256"]
    copy = (tmp_path / "out" / "cleaned" / "mined.jsonl").read_bytes()
    assert copy == (tmp_path / "ref" / "cleaned" / "mined.jsonl").read_bytes()
    rows = changed.descriptor["rows"]
    assert rows["read"] == len(first) == rows["written"] + rows["excluded_on_read"] + rows["dropped"] - rows["added"]


def test_a_file_that_changes_while_it_is_read_is_a_located_error(tmp_path, monkeypatch):
    path = tmp_path / "mined.parquet"
    import pandas as pd

    pd.DataFrame({"anchor": ["q"], "positive": ["p"], "negative": ["n"]}).to_parquet(path)
    real_hash = tables_module.file_hash

    def hash_then_touch(p):
        digest = real_hash(p)
        os.utime(p, ns=(time.time_ns(), time.time_ns() + 10**9))
        return digest

    monkeypatch.setattr(tables_module, "file_hash", hash_then_touch)
    with pytest.raises(tdx.InputError, match="changed while it was being read") as info:
        tdx.load(path)
    assert str(path) in str(info.value)


# ---------------------------------------------------------------------------------------------
# Full disks and read-only folders (small tmpfs mounts)
# ---------------------------------------------------------------------------------------------


@pytest.fixture
def mount(tmp_path):
    """``mount(name, options)``: a tmpfs at ``tmp_path/name``; skipped where this user may not mount."""
    mounted: list[Path] = []

    def make(name: str, options: str) -> Path:
        point = tmp_path / name
        point.mkdir()
        proc = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(point)], capture_output=True)
        if proc.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.decode(errors='replace').strip()}")
        mounted.append(point)
        return point

    yield make
    for point in mounted:
        subprocess.run(["umount", "-l", str(point)], capture_output=True)


def test_a_full_output_disk_names_the_file_and_leaves_no_marker(tmp_path, mount):
    full = mount("full", "size=64k")
    out = full / "out"
    proc = run("audit", "diagnostics=lexical", f"output_dir={out}", env=environment(tmp_path), cwd=tmp_path)
    line = one_line(proc.stderr)
    assert proc.returncode == 2 and f"cannot write {out}/" in line and "no space left on the device" in line
    assert not (out / COMPLETE_FILE).exists() and not (out / CLAIM_FILE).exists()
    assert (out / INCOMPLETE_FILE).exists() and incomplete_output(out) == out.resolve()  # cut short: marked


def test_a_full_cache_disk_names_the_cache_file(tmp_path, mount):
    full = mount("full", "size=64k")
    env = environment(tmp_path, TRANSFERDX_CACHE_DIR=str(full / "cache"))
    proc = run("audit", f"output_dir={tmp_path / 'out'}", "bootstrap.resamples=20", env=env, cwd=tmp_path)
    line = one_line(proc.stderr)
    assert proc.returncode == 2 and f"cannot write {full}/" in line and "no space left" in line


def test_a_full_disk_during_the_openvino_export_names_the_export(tmp_path, mount):
    pytest.importorskip("openvino")
    full = mount("full", "size=1m")
    env = environment(tmp_path, TRANSFERDX_MODEL_DIR=str(full / "models"))
    args = (f"output_dir={tmp_path / 'out'}", "bootstrap.resamples=20", "backbone.backend=openvino")
    proc = run("audit", *args, env=env, cwd=tmp_path)
    line = one_line(proc.stderr)
    assert proc.returncode == 2 and f"cannot write {full}/models/openvino-" in line and "no space left" in line
    assert not [p for p in (full / "models").iterdir() if ".work." in p.name]  # no scratch folder left


def test_a_read_only_output_or_run_folder_is_named(tmp_path, mount):
    read_only = mount("ro", "ro")
    env = environment(tmp_path)
    for setting in (f"output_dir={read_only / 'out'}", f"hydra.run.dir={read_only / 'run'}"):
        proc = run("audit", "diagnostics=lexical", setting, env=env, cwd=tmp_path)
        line = one_line(proc.stderr)
        assert proc.returncode == 2 and str(read_only) in line and "read-only" in line, line


def test_an_unwritable_log_file_is_named(tmp_path):
    """Hydra's "Unable to configure handler 'file'" becomes the log file's path and the cause."""
    run_dir = tmp_path / "run"
    (run_dir / "cli.log").mkdir(parents=True)
    proc = run("audit", "diagnostics=lexical", f"hydra.run.dir={run_dir}", env=environment(tmp_path), cwd=tmp_path)
    line = one_line(proc.stderr)
    assert proc.returncode == 2 and f"the run's log file {run_dir / 'cli.log'}" in line


# ---------------------------------------------------------------------------------------------
# Hostile configs and models stay data
# ---------------------------------------------------------------------------------------------


def test_a_python_tag_in_a_config_is_refused_in_one_line(tmp_path):
    (tmp_path / "conf" / "data").mkdir(parents=True)
    bad = tmp_path / "conf" / "data" / "evil.yaml"
    bad.write_text(f'name: evil\nformat: !!python/object/apply:os.system ["touch {tmp_path / "PWNED"}"]\n')
    args = ("--config-dir", str(tmp_path / "conf"), "data=evil", f"output_dir={tmp_path / 'out'}")
    proc = run("audit", *args, env=environment(tmp_path), cwd=tmp_path)
    line = one_line(proc.stderr)
    assert proc.returncode == 2 and f"{bad}: line 2" in line and "!!python/object/apply:os.system is refused" in line
    assert not (tmp_path / "PWNED").exists()


class _Payload:
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_a_pickled_model_is_refused_in_one_line(tmp_path):
    folder = tiny_model(tmp_path / "model")
    (folder / "model.safetensors").unlink()
    (folder / "pytorch_model.bin").write_bytes(pickle.dumps(_Payload(tmp_path / "PWNED")))
    args = (f"backbone.model={folder}", f"output_dir={tmp_path / 'out'}", "backbone.backend=torch")
    proc = run("audit", *args, env=environment(tmp_path), cwd=tmp_path)
    line = one_line(proc.stderr)
    assert proc.returncode == 2 and "pickled weights" in line and str(folder) in line
    assert not (tmp_path / "PWNED").exists()


# ---------------------------------------------------------------------------------------------
# No leftovers that mislead
# ---------------------------------------------------------------------------------------------


def test_a_rerun_clears_the_files_the_last_finished_run_wrote(tmp_path):
    """Two cleans into one folder: the second's copy only (was: v1.jsonl beside v2.jsonl); a user's
    own file in the folder, written before the first run, stays."""
    env, out = environment(tmp_path), tmp_path / "clean"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    time.sleep(0.05)
    for name in ("v1", "v2"):
        data = DEMO.read_text(encoding="utf-8").replace('"source": "handwritten"', f'"source": "{name}"')
        (tmp_path / f"{name}.jsonl").write_text(data, encoding="utf-8")
        args = (f"input={tmp_path / f'{name}.jsonl'}", f"output_dir={out}", "clean.reasons=[duplicate_positive]")
        proc = run("clean", *args, env=env, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr[-2000:]
    assert sorted(p.name for p in (out / "cleaned").iterdir()) == ["v2.jsonl"]
    assert (out / "notes.txt").read_text() == "mine"
    assert "cleaned/v2.jsonl" in json.loads((out / COMPLETE_FILE).read_text())["files"]


def test_an_abandoned_scratch_folder_is_removed_by_the_next_run(tmp_path):
    """atomic_folder's scratch of a run that died (kill -9 mid-export) goes; a live run's stays."""
    import socket

    host = socket.gethostname().replace(".", "-")
    dead = subprocess.Popen(["true"])
    dead.wait()
    abandoned = tmp_path / f".export.work.{host}.{dead.pid}.abc"
    live = tmp_path / f".export.work.{host}.{os.getpid()}.def"
    other_host = tmp_path / f".export.work.elsewhere.{dead.pid}.ghi"
    for folder in (abandoned, live, other_host):
        (folder / "folder").mkdir(parents=True)
    with atomic_folder(tmp_path / "export") as work:
        (work / "model.bin").write_bytes(b"x")
    assert not abandoned.exists() and live.exists() and other_host.exists()
    assert (tmp_path / "export" / "model.bin").read_bytes() == b"x"


def test_a_good_folder_published_meanwhile_stays_under_its_reader(tmp_path):
    """Two jobs export one model at once (CI's SLURM sweep did): the second to finish keeps the
    first's good folder, which a reader has open, instead of deleting it; a damaged one is replaced."""
    target = tmp_path / "export"

    def good(folder):
        return (folder / "ok").is_file()

    with atomic_folder(target, keep=good) as ours:
        (ours / "model.xml").write_text("second")
        target.mkdir()  # the first job publishes while we are still writing
        (target / "model.xml").write_text("first")
        (target / "ok").write_text("")
        reader = open(target / "model.xml")
    assert (target / "model.xml").read_text() == "first" and reader.read() == "first"
    reader.close()
    assert not list(tmp_path.glob(".export.work.*")), "our scratch copy is removed"
    (target / "ok").unlink()  # damaged: the next export replaces it whole
    with atomic_folder(target, keep=good) as ours:
        (ours / "model.xml").write_text("third")
        (ours / "ok").write_text("")
    assert (target / "model.xml").read_text() == "third"
    assert not list(tmp_path.glob(".export.work.*"))


def test_claim_folder_writes_the_marker_last_and_only_on_success(tmp_path):
    """A run that fails (or is interrupted) after writing leaves .transferdx-incomplete and no
    completion marker, so a reader is warned; the next run that finishes replaces it."""
    out = tmp_path / "out"
    with pytest.raises(RuntimeError):
        with claim_folder(out):
            (out / "a.csv").write_text("1")
            raise RuntimeError("cut short")
    assert not (out / COMPLETE_FILE).exists() and (out / INCOMPLETE_FILE).exists()
    assert incomplete_output(out / "a.csv") == out.resolve()
    with claim_folder(out):
        (out / "b.csv").write_text("2")
    assert json.loads((out / COMPLETE_FILE).read_text()) == {"files": ["b.csv"]}
    assert not (out / INCOMPLETE_FILE).exists() and incomplete_output(out / "b.csv") is None


# ---------------------------------------------------------------------------------------------
# Bounded memory per record
# ---------------------------------------------------------------------------------------------


def test_an_over_long_text_excludes_its_record_with_the_reason(tmp_path, monkeypatch):
    rows = [json.loads(line) for line in DEMO.read_text(encoding="utf-8").splitlines()]
    rows[3]["negatives"][0]["text"] = "word " * 400
    path = tmp_path / "long.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    monkeypatch.setenv("TRANSFERDX_MAX_TEXT_CHARS", "1000")
    with pytest.raises(tdx.InputError, match=r"long.jsonl:4: field 'negatives\[0\].text': text of 2,000 characters"):
        tdx.load(path)
    loaded = tdx.load(path, on_error="skip")
    assert len(loaded.records) + len(loaded.exclusions) == len(rows)
    (exclusion,) = loaded.exclusions
    assert exclusion.line == "4" and "longer than the limit of 1,000" in exclusion.reason
