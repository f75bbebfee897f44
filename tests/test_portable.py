"""Outputs do not depend on where the input lives (issue "Reliability", group 7): the same records,
with a bad line, at two different paths give byte-identical artifacts."""

from __future__ import annotations

import shutil
from pathlib import Path

import transferdx as tdx

DEMO = Path(tdx.__file__).parent / "demo" / "handwritten.jsonl"
ARTIFACTS = ("profile.json", "profile.csv", "report.md", "exclusions.csv", "records.csv", "negatives.csv")


def _copy(folder: Path) -> Path:
    folder.mkdir(parents=True)
    target = folder / "mined.jsonl"
    shutil.copyfile(DEMO, target)
    with open(target, "a", encoding="utf-8") as handle:
        handle.write('{"qid": "bad", "query": "", "positives": [], "negatives": []}\n')  # one excluded line
    return target


def test_same_data_at_two_paths_gives_same_bytes(tmp_path):
    outs = []
    for where in ("a/deep/place", "elsewhere"):
        path = _copy(tmp_path / where)
        out = tmp_path / f"out-{where.replace('/', '-')}"
        tdx.audit(str(path), encoder=None, controls="none", on_error="skip").save(out)
        outs.append(out)
    for name in ARTIFACTS:
        assert (outs[0] / name).read_bytes() == (outs[1] / name).read_bytes(), name
    text = (outs[0] / "profile.json").read_text(encoding="utf-8") + (outs[0] / "exclusions.csv").read_text("utf-8")
    assert str(tmp_path) not in text and "mined.jsonl" in text
