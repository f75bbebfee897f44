"""transferdx-audit end to end, as a subprocess: the demo, DL19, records input, determinism, errors."""

from __future__ import annotations

import csv
import json
import subprocess
import tempfile
from pathlib import Path

import pytest

from transferdx.auditing.profiles import PROFILE_COLUMNS
from transferdx.presets import config_dir

from .conftest import run_cli

pytestmark = pytest.mark.slow


CACHE = Path(tempfile.mkdtemp(prefix="transferdx-test-cache-"))  # shared by this module's runs


def run_audit(*overrides: str, check: bool = True) -> subprocess.CompletedProcess:
    return run_cli("audit", *overrides, check=check, TRANSFERDX_CACHE_DIR=str(CACHE))


def read_profile(out: Path) -> list[dict]:
    with open(out / "profile.csv", newline="") as handle:
        return list(csv.DictReader(handle))


EXPECTED_FILES = {
    "profile.csv",
    "profile.json",
    "records.csv",
    "negatives.csv",
    "exclusions.csv",
    "report.md",
    "psi.png",
}


def test_demo_audit(tmp_path):
    out = tmp_path / "demo"
    proc = run_audit(f"output_dir={out}")
    assert EXPECTED_FILES <= {p.name for p in out.iterdir()}
    rows = {r["source"]: r for r in read_profile(out)}
    assert set(rows) == {"bm25", "handwritten", "random_passages"}
    assert list(read_profile(out)[0])[: len(PROFILE_COLUMNS)] == PROFILE_COLUMNS
    assert rows["random_passages"]["kind"] == "control"
    psi = {s: float(r["psi_mean"]) for s, r in rows.items()}
    # BM25 negatives share query words; random passages and paraphrased negatives mostly do not
    assert psi["bm25"] < psi["random_passages"] and psi["bm25"] < psi["handwritten"]
    assert float(rows["bm25"]["psi_ci_high"]) < float(rows["random_passages"]["psi_ci_low"])
    assert all(int(r["n_records"]) == 64 for r in rows.values())
    # the decision first: one line per genuine source, then the report's path
    first = proc.stdout.splitlines()
    assert first[0].startswith("- bm25 (64 records) — bottom line: ") and first[1].startswith("- handwritten (")
    assert first[2] == "" and first[3] == f"report: {(out / 'report.md').resolve()}"
    assert (out / "psi.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_same_config_same_bytes(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    run_audit(f"output_dir={a}", "bootstrap.resamples=200")
    run_audit(f"output_dir={b}", "bootstrap.resamples=200")
    for name in sorted(EXPECTED_FILES):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


def test_dl19_audit_all_six_runs(tmp_path, data):
    out = tmp_path / "dl19"
    run_audit("data=msmarco_dl19", f"paths.data_dir={data}", f"output_dir={out}")
    rows = {r["source"]: r for r in read_profile(out)}
    assert len(rows) == 6
    for r in rows.values():
        assert float(r["psi_ci_low"]) <= float(r["psi_mean"]) <= float(r["psi_ci_high"])
    assert int(rows["D_BERT_KD_TASB"]["n_records"]) == 42
    # lexical retrievers leave less of the query uncovered than dense ones
    assert float(rows["BM25"]["psi_mean"]) < float(rows["OPEN_AI_ADA2"]["psi_mean"])
    with open(out / "exclusions.csv", newline="") as handle:
        reasons = {(e["source"], e["unit"]) for e in csv.DictReader(handle)}
    assert ("D_BERT_KD_TASB", "record") in reasons and ("", "positive") in reasons
    report = (out / "report.md").read_text()
    assert "no negatives in [0:8]" in report and "BM25_RM3" in report
    profile = json.loads((out / "profile.json").read_text())
    assert profile["settings"]["idf_corpus"] == "pooled"


def test_records_input_and_sweepable_groups(tmp_path, data):
    from transferdx.inputs.flagembedding import load_flagembedding
    from transferdx.inputs.transferdx_records import write_records

    records = tmp_path / "in"
    write_records(
        load_flagembedding(data / "msmarco-toy/flagembedding_msmarco.jsonl", k=8).records, records / "flag.jsonl"
    )
    out = tmp_path / "out"
    run_audit(
        f"input={records}",
        "tokenizer=whitespace",
        "idf=per_source",
        "diagnostics=lexical",
        "controls=none",  # one file alone would get controls built from it (tested in test_api)
        f"output_dir={out}",
    )
    rows = read_profile(out)
    assert [r["source"] for r in rows] == ["flagembedding"] and rows[0]["n_negatives"] == "80"


def test_external_idf_on_scifact(tmp_path, data):
    out = tmp_path / "ext"
    run_audit(
        "idf=external", "diagnostics=lexical", f"paths.data_dir={data}", f"output_dir={out}", "bootstrap.resamples=100"
    )
    assert json.loads((out / "profile.json").read_text())["settings"]["idf_external"] == "beir:scifact"


def test_bad_input_exits_with_located_error(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"qid": "1", "query": "", "positives": [], "negatives": [], "source": "s"}\n')
    proc = run_audit(f"input={bad}", f"output_dir={tmp_path / 'o'}", check=False)
    assert proc.returncode == 2
    assert f"{bad}:1: field 'query': empty string" in proc.stderr
    skipped = run_audit(f"input={bad}", "on_error=skip", f"output_dir={tmp_path / 'o2'}", check=False)
    assert skipped.returncode == 2 and "no records to audit" in skipped.stderr  # every record excluded
    with open(tmp_path / "o2" / "exclusions.csv", newline="") as handle:
        assert [e["field"] for e in csv.DictReader(handle)] == ["query"]


def test_multirun_sweeps_tokenizers(tmp_path):
    proc = run_audit(
        "-m",
        "tokenizer=alnum,whitespace",
        "bootstrap.resamples=50",
        f"paths.output_root={tmp_path}",
        "hydra.sweep.dir=" + str(tmp_path / "sweep"),
    )
    profiles = sorted((tmp_path / "sweep").glob("*/profile.csv"))
    assert len(profiles) == 2, proc.stdout


def test_config_dir_found():
    assert Path(config_dir(), "audit.yaml").is_file()


def run_build(*overrides: str) -> subprocess.CompletedProcess:
    return run_cli("build", *overrides, TRANSFERDX_CACHE_DIR=str(CACHE))


def test_build_then_audit_the_folder(tmp_path):
    out = tmp_path / "sources"
    run_build(
        "data=demo_pool",
        "sources=[bm25,perturb,bm25+perturb]",
        "controls=[random_passages,own_positive_mix,easy_shuffled]",
        f"output_dir={out}",
    )
    names = sorted(p.name for p in out.iterdir())
    assert names == [
        ".transferdx-complete",
        "bm25+perturb.jsonl",
        "bm25.jsonl",
        "descriptors.json",
        "easy_shuffled.jsonl",
        "exclusions.csv",
        "false_negatives.json",
        "own_positive_mix.jsonl",
        "perturb.jsonl",
        "random_passages.jsonl",
    ]
    audited = tmp_path / "audit"
    run_audit(f"input={out}", "diagnostics=lexical", f"output_dir={audited}", "bootstrap.resamples=100")
    profile = json.loads((audited / "profile.json").read_text())
    kinds = {r["source"]: r["kind"] for r in profile["sources"]}
    assert kinds["own_positive_mix"] == "control" and kinds["bm25+perturb"] == "genuine"
    assert "bm25s" in profile["descriptors"]["bm25"]["mining_method"]
    assert profile["descriptors"]["easy_shuffled"]["parent_source"] == "bm25"
    assert profile["catch_rate"]["n_controls"] == 3


def test_external_source_is_loaded_renamed_and_hybridised(tmp_path):
    """An LLM-written file joins the mined sources under its configured name (here: perturbations
    written to disk stand in for it)."""
    first = tmp_path / "first"
    run_build("data=demo_pool", "sources=[perturb]", "controls=[]", f"output_dir={first}")
    out = tmp_path / "second"
    run_build(
        "data=demo_pool",
        "sources=[bm25,bm25+llm]",
        "controls=[]",
        f"+external_sources.llm={first / 'perturb.jsonl'}",
        f"output_dir={out}",
    )
    written = [json.loads(line) for line in (first / "perturb.jsonl").read_text().splitlines()]
    llm = [json.loads(line) for line in (out / "llm.jsonl").read_text().splitlines()]
    assert {r["source"] for r in llm} == {"llm"} and len(llm) == len(written)
    assert [r["negatives"] for r in llm] == [r["negatives"] for r in written]
    hybrid = [json.loads(line) for line in (out / "bm25+llm.jsonl").read_text().splitlines()]
    assert hybrid and {r["source"] for r in hybrid} == {"bm25+llm"}


def test_dl19_pool_builds_and_audits_with_false_negatives(tmp_path, data):
    out = tmp_path / "dl19pool"
    proc = run_audit(
        "data=msmarco_dl19_pool",
        f"paths.data_dir={data}",
        "diagnostics=lexical",
        "sources=[bm25,perturb,bm25+perturb]",
        "controls=[random_passages,easy_shuffled,own_positive_mix,random_mix_50]",
        f"output_dir={out}",
        "bootstrap.resamples=200",
    )
    rows = {r["source"]: r for r in read_profile(out)}
    assert rows["perturb"]["false_negative_rate"] == "not_measured"
    assert 0 < float(rows["bm25"]["false_negative_rate"]) < 1
    assert float(rows["own_positive_mix"]["false_negative_rate"]) > float(rows["bm25"]["false_negative_rate"])
    report = (out / "report.md").read_text()
    assert "## Measured false negatives" in report and "## Control catch-rate" in report
    assert "controls (known defects) flagged:" in proc.stdout
