"""A Hub dataset as an input, ``hf:OWNER/NAME[:CONFIG][@SPLIT]`` (transferdx.inputs.hub), offline: a
local dataset repository folder (Parquet files per config, a README.md whose YAML ``configs:`` block
declares configs and splits, as on the Hub) read through ``datasets.load_dataset``; the records
those of the Parquet file read directly; the one-line errors (no such config, no such split, not
cached while offline); the command line's ``input=hf:…``, its printed ``transferdx-clean`` command
and the cleaned copy, a Parquet file in the input's shape."""

from __future__ import annotations

import dataclasses
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser

import transferdx as tdx
from transferdx.inputs.hub import absolute_hub_spec, hub_label, hub_source, load_hub, parse_hub
from transferdx.inputs.records import InputError

BIN = Path(sys.executable).parent
CARD = """---
configs:
- config_name: triplet
  data_files:
  - split: train
    path: "triplet/train-*.parquet"
- config_name: triplet-50
  data_files:
  - split: train
    path: "triplet-50/train-*.parquet"
  - split: dev
    path: "triplet-50/dev-*.parquet"
---
# mined triplets (a test repository)
"""
WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma".split()


def triplets(n: int, start: int = 0) -> pd.DataFrame:
    """(anchor, positive, negative) rows; every fifth negative is its positive in capitals (a copy: a
    suspect), the others share no sentence with it."""
    rows = []
    for i in range(start, start + n):
        a, b = WORDS[i % len(WORDS)], WORDS[(i * 7 + 3) % len(WORDS)]
        positive = f"{a} {b} is what item {i} is about, with {WORDS[(i + 5) % len(WORDS)]}"
        negative = positive.upper() if i % 5 == 0 else f"passage {i} tells of {b} and {WORDS[(i + 9) % len(WORDS)]}"
        rows.append((f"what is {a} {b} in item {i}", positive, negative))
    return pd.DataFrame(rows, columns=["anchor", "positive", "negative"])


@pytest.fixture(autouse=True)
def offline_cache(tmp_path, monkeypatch):
    """Offline, with an empty ``datasets`` cache of the test's own (nothing of the user's is read or written)."""
    import datasets
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-datasets-cache")


@pytest.fixture
def repo(tmp_path) -> Path:
    """A dataset repository folder: configs ``triplet`` (train) and ``triplet-50`` (train, dev)."""
    root = tmp_path / "hub repo" / "msmarco-bm25"  # a path with a space and a '/' in it
    for folder, split, frame in (
        ("triplet", "train", triplets(10)),
        ("triplet-50", "train", triplets(30)),
        ("triplet-50", "dev", triplets(12, start=100)),
    ):
        (root / folder).mkdir(parents=True, exist_ok=True)
        frame.to_parquet(root / folder / f"{split}-00000-of-00001.parquet", index=False)
    (root / "README.md").write_text(CARD, encoding="utf-8")
    return root


def test_a_spec_is_taken_apart_at_the_last_slash():
    spec = parse_hub("hf:sentence-transformers/msmarco-bm25:triplet-50@train")
    assert (spec.path, spec.config, spec.split) == ("sentence-transformers/msmarco-bm25", "triplet-50", "train")
    assert (parse_hub("hf:owner/name").config, parse_hub("hf:owner/name").split) == (None, "train")
    assert parse_hub("hf:owner/name@dev").split == "dev"
    # a ':' before the last '/' belongs to the (local) path; slicing is load_dataset's own
    local = parse_hub("hf:/data/run:3/msmarco-bm25:triplet@train[:100]")
    assert (local.path, local.config, local.split) == ("/data/run:3/msmarco-bm25", "triplet", "train[:100]")
    at = parse_hub("hf:/home/me@work/msmarco-bm25")
    assert (at.path, at.config, at.split) == ("/home/me@work/msmarco-bm25", None, "train")
    assert hub_source("hf:sentence-transformers/msmarco-bm25:triplet-50@dev") == "msmarco-bm25_triplet-50"
    assert hub_source("hf:sentence-transformers/msmarco-bm25") == "msmarco-bm25"
    for bad in ("hf:", "hf:owner/name:", "hf:owner/name@", "owner/name"):
        with pytest.raises(ValueError, match="hf:OWNER/NAME") as caught:
            parse_hub(bad)
        assert "\n" not in str(caught.value)


def test_the_records_are_those_of_the_parquet_file_read_directly(repo):
    for config, split, n in (("triplet-50", "dev", 12), ("triplet-50", "train", 30), ("triplet", "train", 10)):
        spec = f"hf:{repo}:{config}@{split}"
        dataset = load_hub(spec)
        assert dataset.num_rows == n and dataset.column_names == ["anchor", "positive", "negative"]
        loaded = tdx.load(spec)
        assert loaded.sources == [f"msmarco-bm25_{config}"]
        direct = tdx.load(next((repo / config).glob(f"{split}-*.parquet")))
        assert len(loaded.records) == n
        renamed = [dataclasses.replace(r, source=loaded.sources[0]) for r in direct.records]
        assert loaded.records == renamed
    # the default split is train; load_dataset's slicing works; source= overrides the name
    assert tdx.load(f"hf:{repo}:triplet-50").records == tdx.load(f"hf:{repo}:triplet-50@train").records
    assert len(tdx.load(f"hf:{repo}:triplet-50@train[:7]").records) == 7
    assert tdx.load(f"hf:{repo}:triplet", source="mine").sources == ["mine"]


def test_an_unknown_config_lists_the_real_ones(repo):
    with pytest.raises(InputError) as caught:
        tdx.load(f"hf:{repo}:triplet-99")
    message = str(caught.value)
    assert "\n" not in message and caught.value.field == "<config>"
    assert "no config 'triplet-99'" in message and message.endswith("it has: triplet, triplet-50")
    with pytest.raises(InputError, match=r"several configs; name one .*: triplet, triplet-50$") as caught:
        tdx.load(f"hf:{repo}")  # two configs and none named
    assert "\n" not in str(caught.value)


def test_an_unknown_split_lists_the_real_ones(repo):
    with pytest.raises(InputError) as caught:
        tdx.load(f"hf:{repo}:triplet-50@test")
    message = str(caught.value)
    assert "\n" not in message and caught.value.field == "<split>"
    assert "(config 'triplet-50') has no split 'test'" in message
    assert set(message.rsplit("it has: ", 1)[1].split(", ")) == {"train", "dev"}
    with pytest.raises(InputError, match=r"no split 'dev'; it has: train$"):
        tdx.load(f"hf:{repo}:triplet@dev")


def test_a_dataset_not_cached_while_offline_is_one_line_saying_how():
    with pytest.raises(InputError) as caught:
        tdx.load("hf:nobody/does-not-exist")
    message = str(caught.value)
    assert "\n" not in message and message.startswith("hf:nobody/does-not-exist: ")
    assert "not in the local Hugging Face cache and offline mode is on" in message
    assert "run once online" in message and "HF_HUB_OFFLINE=0" in message


def test_a_missing_local_folder_and_a_format_are_one_line(tmp_path):
    with pytest.raises(InputError, match="no dataset") as caught:
        tdx.load(f"hf:{tmp_path / 'nowhere'}")
    assert "\n" not in str(caught.value)
    with pytest.raises(ValueError, match="read by its columns; give no format="):
        tdx.load("hf:owner/name", format="flagembedding")


def test_labels_are_portable_and_commands_absolute(repo, monkeypatch):
    monkeypatch.chdir(repo.parent)
    assert absolute_hub_spec("hf:msmarco-bm25:triplet@train") == f"hf:{repo}:triplet@train"
    assert hub_label(f"hf:{repo}:triplet@train") == "hf:msmarco-bm25:triplet@train"
    hub = "hf:sentence-transformers/msmarco-bm25:triplet-50"  # not a local folder: as given
    assert absolute_hub_spec(hub) == hub and hub_label(hub) == hub
    result = tdx.audit(f"hf:{repo}:triplet-50", encoder=None, controls="none", resamples=20)
    assert list(result.profile["source"]) == ["msmarco-bm25_triplet-50"]
    assert result.settings["data"] == "hf:msmarco-bm25:triplet-50"


def run(verb: str, *overrides: str, cwd: Path, home: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(home), "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    proc = subprocess.run(
        [str(BIN / f"transferdx-{verb}"), *overrides], cwd=cwd, capture_output=True, text=True, env=env, timeout=300
    )
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


@pytest.mark.slow
def test_the_command_line_audits_a_hub_dataset_and_its_clean_command_runs(repo, tmp_path):
    """``input=hf:<folder>:<config>`` given relative to the working folder: the report names it, the
    printed ``transferdx-clean`` carries ``input=hf:…`` (its folder absolute) and, run as printed from
    another folder, writes the copy as ``<source>.parquet`` in the input's columns, without the
    suspects."""
    out, elsewhere, home = tmp_path / "audit", tmp_path / "elsewhere", tmp_path / "hf-home"
    elsewhere.mkdir()
    proc = run(
        "audit",
        "input=hf:msmarco-bm25:triplet-50",
        "diagnostics=lexical",
        "bootstrap.resamples=20",
        f"output_dir={out}",
        cwd=repo.parent,
        home=home,
    )
    assert "- msmarco-bm25_triplet-50 (30 records)" in proc.stdout
    report = (out / "report.md").read_text(encoding="utf-8")
    assert "- **data**: `hf:msmarco-bm25:triplet-50`" in report
    assert f"- **input**: `hf:{repo}:triplet-50`" in report
    commands = re.findall(r"`(transferdx-clean [^`\n]*)`", proc.stdout)
    assert commands, proc.stdout[-3000:]
    parser = OverridesParser.create()  # each word as bash splits it, read as Hydra reads it
    parsed = {(o := parser.parse_override(word)).key_or_group: o.value() for word in shlex.split(commands[0])[1:]}
    assert parsed == {"input": f"hf:{repo}:triplet-50", "diagnostics": "lexical"}

    cleaned = subprocess.run(
        ["bash", "-c", f"{commands[0]} output_dir=copy"],
        cwd=elsewhere,
        capture_output=True,
        text=True,
        env={
            **os.environ,
            "HF_HUB_OFFLINE": "1",
            "HF_HOME": str(home),
            "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
        },
        timeout=300,
    )
    assert cleaned.returncode == 0, cleaned.stderr[-3000:]
    copy = elsewhere / "copy" / "cleaned" / "msmarco-bm25_triplet-50.parquet"
    assert [p.name for p in copy.parent.iterdir()] == [copy.name]
    frame = pd.read_parquet(copy)
    original = triplets(30)
    assert list(frame.columns) == ["anchor", "positive", "negative"]
    # the six negatives that copy their positive are gone (their rows, left without one, dropped)
    kept = original[original["negative"] != original["positive"].str.upper()].reset_index(drop=True)
    pd.testing.assert_frame_equal(frame, kept)


LOOKUP_CARD = """---
configs:
- config_name: corpus
  data_files:
  - split: train
    path: "corpus/train-*.parquet"
- config_name: queries
  data_files:
  - split: train
    path: "queries/train-*.parquet"
---
# lookup tables (a test repository laid out as sentence-transformers/msmarco's corpus and queries)
"""


def test_an_id_tables_lookups_given_as_hub_configs(tmp_path, monkeypatch):
    """``corpus=`` / ``queries=`` as ``hf:…`` configs read the same records as the same tables in local
    files; a printed command keeps them as Hub specs (a local repository folder made absolute)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from transferdx import config
    from transferdx.presets import config_dir

    passages = {"10": "apple engine info", "11": "violin planet", "12": "garden castle", "20": "river about what"}
    queries = {"q1": "apple engine", "q2": "river about"}
    corpus = pd.DataFrame({"passage_id": list(passages), "passage": list(passages.values())})
    query_table = pd.DataFrame({"query_id": list(queries), "query": list(queries.values())})
    root = tmp_path / "lookups"
    for name, frame in (("corpus", corpus), ("queries", query_table)):
        (root / name).mkdir(parents=True)
        frame.to_parquet(root / name / "train-00000-of-00001.parquet", index=False)
    (root / "README.md").write_text(LOOKUP_CARD, encoding="utf-8")
    ids = tmp_path / "ids.parquet"
    rows = [
        {"query_id": "q1", "pos_id": "10", "neg_ids": ["11", "12"]},
        {"query_id": "q2", "pos_id": "20", "neg_ids": ["12", "11"]},
    ]
    pd.DataFrame(rows).to_parquet(ids)
    corpus.to_parquet(tmp_path / "corpus.parquet")
    query_table.to_parquet(tmp_path / "queries.parquet")

    hub = tdx.load(ids, corpus=f"hf:{root}:corpus", queries=f"hf:{root}:queries")
    local = tdx.load(ids, corpus=tmp_path / "corpus.parquet", queries=tmp_path / "queries.parquet")
    assert [r.to_dict() for r in hub.records] == [r.to_dict() for r in local.records]
    assert [n.id for n in hub.records[0].negatives] == ["11", "12"]
    with pytest.raises(InputError, match="nope"):
        tdx.load(ids, corpus=f"hf:{root}:nope", queries=f"hf:{root}:queries")

    monkeypatch.chdir(tmp_path)
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        cfg = compose(
            config_name="audit",
            overrides=["data=idlist", "data.path=ids.parquet", "data.corpus=hf:lookups:corpus", "data.queries=q.tsv"],
        )
    read = config.read_with(cfg)
    assert read["data.corpus"] == f"hf:{root}:corpus" and read["data.queries"] == str(tmp_path / "q.tsv")


def test_an_id_table_from_the_hub_is_refused_in_one_line_not_read_as_texts(repo):
    """Lookups given with a Hub input: the id table would be read by its columns (ids as texts), so it is
    refused, saying what to do."""
    with pytest.raises(ValueError, match="not yet from the Hub") as err:
        tdx.load(f"hf:{repo}:triplet", corpus="corpus.parquet", queries="queries.parquet")
    assert "\n" not in str(err.value)
