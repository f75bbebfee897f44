"""The notebooks run end to end: ``mined_file_to_training.ipynb`` goes from a mined triplet file to
the verdict, the suspects, the cleaned copy and a few training steps (CPU, well under a minute)."""

from __future__ import annotations

import time

import pytest

from .conftest import REPO


def _outputs(nb) -> list[dict]:
    return [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]


def test_mined_file_to_training_notebook_runs(tmp_path, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    from nbclient import NotebookClient

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    monkeypatch.setenv("TRANSFERDX_CACHE_DIR", str(tmp_path / "cache"))
    nb = nbformat.read(REPO / "notebooks" / "mined_file_to_training.ipynb", as_version=4)
    start = time.monotonic()
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    elapsed = time.monotonic() - start
    outputs = _outputs(nb)
    text = "".join(o.get("text", "") for o in outputs)
    markdown = [o["data"]["text/markdown"] for o in outputs if "text/markdown" in o.get("data", {})]
    # the loaded file, the audit (its display opens with the verdict) and the cleaning, as Markdown
    assert any(m.startswith("**LoadResult: 1 source, 24 records, 48 negatives") for m in markdown)
    audit = [m for m in markdown if "### Profile (compact" in m]
    assert len(audit) == 1 and "| mined | genuine | 24 |" in audit[0]
    assert any(m.startswith("### Cleaning") for m in markdown)
    # the cleaned copy keeps the triplet shape, and the trainer ran on it as it is
    assert "columns: ['anchor', 'positive', 'negative']" in text
    assert "steps: 2 losses: [" in text
    assert elapsed < 240, f"the notebook took {elapsed:.0f} s"
