"""transferdx-tables on a synthetic study with a known ordering: byte-identical snapshots, cell
traces that resolve to the artifacts, determinism, the sensitivity collector, and the notebook."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import scipy.stats

from transferdx import AnalysisSettings, render_tables
from transferdx.analysis.sensitivity import AuditRun, changed, find_base, kendall, sensitivity, value_range
from transferdx.inputs.records import LoadResult, sample_queries
from transferdx.paper.tables import Cell, PaperTable, source_label

from .conftest import REPO, record, run_cli
from .synthetic import write_all

SNAPSHOTS = REPO / "tests" / "snapshots" / "tables"
UPDATE = os.environ.get("TRANSFERDX_UPDATE_SNAPSHOTS") == "1"
BLOCKS = {"non-hybrid": ["bm25", "dense", "llm"], "hybrid": ["bm25+dense", "bm25+llm", "dense+llm"]}


def render(root: Path, out: Path) -> None:
    """The tables step in-process, through the library (what ``transferdx-tables`` calls)."""
    settings = AnalysisSettings(in_family="distilbert", resamples=200, repetitions=20)
    render_tables([root / "study"], out, settings, sensitivity_dirs=[root / "sensitivity"])


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("synthetic")
    write_all(root)
    render(root, root / "tables")
    return root


def test_tables_match_snapshots(rendered):
    out = rendered / "tables"
    produced = sorted(p.name for p in out.iterdir() if p.suffix in {".md", ".tex", ".csv"})
    expected = [f"table{i}.{ext}" for i in range(1, 11) for ext in ("csv", "md", "tex")]
    assert set(expected) <= set(produced)
    if UPDATE:
        SNAPSHOTS.mkdir(parents=True, exist_ok=True)
        for name in produced:
            (SNAPSHOTS / name).write_bytes((out / name).read_bytes())
    snapshots = sorted(p.name for p in SNAPSHOTS.iterdir())
    assert produced == snapshots, "set TRANSFERDX_UPDATE_SNAPSHOTS=1 after an intended change"
    for name in produced:
        assert (out / name).read_bytes() == (SNAPSHOTS / name).read_bytes(), name


def test_same_artifacts_same_bytes(rendered, tmp_path):
    render(rendered, tmp_path / "again")
    first = {
        p.relative_to(rendered / "tables"): p.read_bytes() for p in (rendered / "tables").rglob("*") if p.is_file()
    }
    second = {p.relative_to(tmp_path / "again"): p.read_bytes() for p in (tmp_path / "again").rglob("*") if p.is_file()}
    skip = {Path("manifest.json")}  # names the output folder's parent as the inputs' root
    first = {k: v for k, v in first.items() if k not in skip and ".hydra" not in str(k)}
    second = {k: v for k, v in second.items() if k not in skip and ".hydra" not in str(k)}
    assert first.keys() == second.keys() and all(first[k] == second[k] for k in first)
    assert {"figures/agreement_scatter.png", "figures/control_ladder.png", "figures/profiles.png"} <= {
        str(k) for k in first
    }


def test_every_cell_traces_to_its_artifact(rendered):
    trace = pd.read_csv(rendered / "tables" / "table1.trace.csv")
    assert len(trace) == 12 * 3  # 2 backbones × 6 sources × (2 datasets + mean)
    for _, row in trace.iterrows():
        results = pd.read_csv(rendered / row["artifact"])
        source = row["locator"].split(";")[0].removeprefix("source=")
        part = results[results["source"] == source]
        if "dataset=" in row["locator"]:
            dataset = row["locator"].split("dataset=")[1].split(";")[0]
            value = part.loc[part["dataset"] == dataset, "ndcg@10"].iloc[0]
        else:
            value = part["ndcg@10"].mean()
        assert float(row["value"]) == pytest.approx(value, rel=1e-9)
    psi = pd.read_csv(rendered / "tables" / "table2.trace.csv")
    row = psi[psi["column"] == "Mean ψ"].iloc[0]
    profile = pd.read_csv(rendered / row["artifact"]).set_index("source")
    assert float(row["value"]) == pytest.approx(profile.loc["bm25", "psi_mean"], rel=1e-9)


def test_known_ordering_recovered(rendered):
    agreement = pd.read_csv(rendered / "tables" / "agree" / "agreement.csv")
    psi = agreement[agreement["diagnostic"] == "psi_mean"]
    rho = agreement[agreement["diagnostic"] == "rho_mean"]
    assert len(psi) == 4 and psi["recovered"].all() and (psi["kendall"] == 1.0).all()
    assert not rho["recovered"].any()
    table4 = pd.read_csv(rendered / "tables" / "table4.csv").set_index("Variant")
    assert table4.loc["Mean ψ only", "Blocks"] == "4/4" and table4.loc["Mean ρ only", "Blocks"] == "0/4"
    # every control ranks below every genuine source only where the controls' ψ is low: not here
    assert table4.loc["Mean ψ only", "Criterion"] == "no/no"


def test_table8_detects_the_swapped_quarter_sample(rendered):
    table8 = pd.read_csv(rendered / "tables" / "table8.csv").set_index("Setting")
    assert list(table8.columns) == ["25%", "50%", "100%"]
    assert table8.loc["Non-hybrid"].tolist() == [1.0, 1.0, 1.0]
    assert table8.loc["Hybrid", "25%"] == pytest.approx(1 / 3) and table8.loc["Hybrid", "100%"] == 1.0


def test_notebook_runs_on_the_artifacts(rendered):
    nbformat = pytest.importorskip("nbformat")
    from nbclient import NotebookClient

    nb = nbformat.read(REPO / "notebooks" / "audit_and_agreement.ipynb", as_version=4)
    study = rendered / "study" / "distilbert"
    os.environ["TRANSFERDX_STUDY_DIR"] = str(study)
    os.environ["TRANSFERDX_TABLES_DIR"] = str(rendered / "tables")
    try:
        NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(REPO)}}).execute()
    finally:
        os.environ.pop("TRANSFERDX_STUDY_DIR")
        os.environ.pop("TRANSFERDX_TABLES_DIR")
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert "4/5 controls flagged; genuine flagged: 0" in "".join(o.get("text", "") for o in outputs)
    assert any("image/png" in o.get("data", {}) for o in outputs)  # the agreement figure


def test_missing_study_is_a_clear_error(tmp_path):
    proc = run_cli("tables", f"study_dirs=[{tmp_path / 'nope'}]", f"output_dir={tmp_path / 'o'}", check=False)
    assert proc.returncode == 2 and "holds no study.csv" in proc.stderr


# ---------------------------------------------------------------------------------------------
# pure parts


def profile(values: dict[str, float], column: str = "composite_logdet") -> pd.DataFrame:
    return pd.DataFrame({column: values}).rename_axis("source")


def test_kendall_equals_scipy():
    rng = np.random.default_rng(3)
    a, b = rng.normal(size=6), rng.normal(size=6)
    names = [f"s{i}" for i in range(6)]
    got = kendall(dict(zip(names, a, strict=True)), dict(zip(names, b, strict=True)))
    assert got == pytest.approx(scipy.stats.kendalltau(a, b)[0])
    assert np.isnan(kendall({"a": 1.0, "b": 1.0}, {"a": 0.0, "b": 1.0}))


def test_base_run_and_one_at_a_time_factors():
    base = {"tokenizer": "alnum", "idf_corpus": "pooled", "tau": 0.05}
    runs = [
        AuditRun(base, profile({"x": 1.0, "y": 2.0, "z": 3.0}), "base"),
        AuditRun({**base, "tau": 0.1}, profile({"x": 3.0, "y": 2.0, "z": 1.0}), "tau"),
        AuditRun({**base, "sample_fraction": 0.5}, profile({"x": 1.0, "y": 3.0, "z": 2.0}), "half"),
        AuditRun({**base, "tokenizer": "whitespace"}, profile({"x": 0.5, "y": 2.5, "z": 3.5}), "ws"),
    ]
    assert find_base(runs, {"tokenizer": "alnum", "sample_fraction": 1.0}).folder == "base"
    frame = sensitivity(
        runs, {"tokenizer": "alnum", "sample_fraction": 1.0}, {"b": ["x", "y", "z"]}, {"composite_logdet": 1}
    )
    by = frame.set_index("factor")
    assert by.loc["base", "kendall_tau"] == 1.0 and by.loc["tau", "kendall_tau"] == -1.0
    assert by.loc["sample_fraction", "kendall_tau"] == pytest.approx(1 / 3)
    assert by.loc["tau", "ordering"] == "x>y>z" and not by.loc["tau", "same_ordering"]
    assert value_range(runs, runs[0], "tokenizer", "x", "composite_logdet") == (0.5, 1.0)
    external = AuditRun({**base, "idf_corpus": "external", "idf_external": "beir:scifact"}, profile({"x": 2.0}), "ext")
    assert changed(external, runs[0]) == {"idf_corpus": "external (beir:scifact)"}
    assert value_range([*runs, external], runs[0], "idf_corpus", "x", "composite_logdet") == (1.0, 2.0)
    with pytest.raises(ValueError, match="distinct runs match"):
        find_base(runs[1:3], {"tokenizer": "alnum"})


def test_sample_queries_is_paired_and_seeded():
    recs = [record(f"q{i}", "q", ["n"], source=s) for s in ("a", "b") for i in range(20)]
    half, dropped = sample_queries(LoadResult(recs), 0.5, seed=1)
    again, _ = sample_queries(LoadResult(recs), 0.5, seed=1)
    assert dropped == 20 and [r.qid for r in half.records] == [r.qid for r in again.records]
    qids = {s: {r.qid for r in half.records if r.source == s} for s in ("a", "b")}
    assert qids["a"] == qids["b"] and len(qids["a"]) == 10
    assert sample_queries(LoadResult(recs), 1.0)[1] == 0
    with pytest.raises(ValueError, match=r"sample_fraction must be in \(0, 1\]"):
        sample_queries(LoadResult(recs), 0.0)


def test_table_formats_and_bold():
    table = PaperTable(
        "Table X",
        "A caption with ψ & 50%.",
        ("Model", "Source", "Score"),
        (("M", "bm25", Cell(0.5, "f.csv", "r1", bold=True)), ("M", "dense", Cell(float("nan"), "f.csv", "r2"))),
        groups=1,
    )
    md = table.to_markdown()
    assert "| M | bm25 | **0.500** |" in md and "|  | dense | n/a |" in md
    tex = table.to_latex()
    assert "\\textbf{0.500}" in tex and "$\\psi$ \\& 50\\%" in tex
    assert table.to_csv().splitlines() == ["Model,Source,Score", "M,bm25,0.5", "M,dense,"]
    assert list(table.trace()["locator"]) == ["r1", "r2"]
    assert source_label("bm25+dense") == "BM25+Dense" and source_label("easy_shuffled") == "Easy shuffled"


def test_audit_sample_fraction_is_reported(tmp_path):
    out = tmp_path / "half"
    run_cli("audit", "diagnostics=lexical", "sample_fraction=0.5", "bootstrap.resamples=50", f"output_dir={out}")
    profile = pd.read_csv(out / "profile.csv")
    assert (profile["n_records"] == 32).all()  # the demo's 64 queries, halved, the same for every source
    records = pd.read_csv(out / "records.csv")
    assert records.groupby("source")["qid"].apply(frozenset).nunique() == 1
    settings = json.loads((out / "profile.json").read_text())["settings"]
    assert settings["sample_fraction"] == 0.5 and settings["records_sampled_out"] == 3 * 32
