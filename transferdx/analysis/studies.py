"""Reading study and audit folders for the analysis commands (the I/O edge of ``agreement``,
``matching``, ``validation``, ``sensitivity`` and ``tables``): a study folder becomes a
:class:`~transferdx.analysis.study.StudyData` through :func:`~transferdx.analysis.study.study_data`,
the constructor a study still in memory goes through too.

A study folder (``transferdx-study`` output) holds ``study.csv`` (one row per backbone × source ×
dataset with the diagnostics and nDCG@10), ``audit/profile.csv``, ``audit/records.csv`` and
``evaluate/<source>/<dataset>/per_query.csv`` (``evaluate/<source>/seed<k>/<dataset>/`` for a
source trained with several seeds; ``evaluate/frozen/`` for the frozen backbone).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from transferdx.analysis.sensitivity import AuditRun
from transferdx.analysis.study import FROZEN_SOURCE, StudyData, ndcg_per_query, study_data


def expand(folders: Sequence[str | Path], marker: str) -> list[Path]:
    """Each folder that holds ``marker``, or — for a multirun root or a folder of sweeps — every
    folder below it that does (sorted)."""
    found: list[Path] = []
    for folder in map(Path, folders):
        if (folder / marker).is_file():
            found.append(folder)
            continue
        below = sorted(p.parent for p in folder.rglob(marker))
        if not below:
            raise FileNotFoundError(f"{folder} holds no {marker} (nor do its subfolders)")
        found.extend(below)
    return found


def read_audit(folder: str | Path) -> AuditRun:
    """A ``transferdx-audit`` output folder as a sensitivity :class:`AuditRun` (settings + profile)."""
    folder = Path(folder)
    if not (folder / "profile.json").is_file():
        raise FileNotFoundError(f"{folder / 'profile.json'} is missing: is {folder} a transferdx-audit output?")
    settings = json.loads((folder / "profile.json").read_text(encoding="utf-8"))["settings"]
    profile = pd.read_csv(folder / "profile.csv").set_index("source")
    return AuditRun(settings, profile, str(folder))


def read_study(folder: str | Path) -> StudyData:
    """A ``transferdx-study`` output folder (:func:`study_data` of its files): study.csv, the audit
    (profile, records) and every evaluation's per-query nDCG@10."""
    folder = Path(folder)
    for needed in ("study.csv", "audit/profile.csv", "audit/records.csv"):
        if not (folder / needed).is_file():
            raise FileNotFoundError(f"{folder / needed} is missing: is {folder} a transferdx-study output?")
    table = pd.read_csv(folder / "study.csv")
    trained = table[table["source"] != FROZEN_SOURCE]
    seed_of = trained.groupby("source")["seed"].min().to_dict() if "seed" in trained else {}
    sources = sorted(trained["source"].unique())
    return study_data(
        folder,
        table,
        {s: _per_query_seeds(folder / "evaluate" / s, int(seed_of.get(s, 0))) for s in sources},
        _per_query(folder / "evaluate" / "frozen"),
        json.loads((folder / "audit/profile.json").read_text(encoding="utf-8")),
        pd.read_csv(folder / "audit/profile.csv").set_index("source"),
        pd.read_csv(folder / "audit/records.csv", dtype={"qid": str}),
    )


def read_negatives(study: StudyData) -> pd.DataFrame:
    """The study's per-negative audit frame: the one it holds, else ``audit/negatives.csv`` (qid and
    neg_id as text)."""
    if study.negatives is not None:
        return study.negatives
    return pd.read_csv(Path(study.folder) / "audit/negatives.csv", dtype={"qid": str, "neg_id": str})


def _per_query(folder: Path) -> dict[str, np.ndarray]:
    """dataset → nDCG@10 per query (sorted by qid) from ``folder/<dataset>/per_query.csv``."""
    return {
        path.parent.name: ndcg_per_query(pd.read_csv(path, dtype={"qid": str}))
        for path in sorted(folder.glob("*/per_query.csv"))
    }


def _per_query_seeds(folder: Path, single: int = 0) -> dict[str, dict[int, np.ndarray]]:
    """dataset → seed → nDCG@10 per query: ``seed<k>/<dataset>/`` folders, or the one seed
    ``single`` of a source trained once (``<dataset>/``)."""
    out: dict[str, dict[int, np.ndarray]] = {}
    for seed in sorted(int(p.name[4:]) for p in folder.glob("seed*/") if p.name[4:].isdigit()):
        for dataset, scores in _per_query(folder / f"seed{seed}").items():
            out.setdefault(dataset, {})[seed] = scores
    for dataset, scores in _per_query(folder).items():
        out.setdefault(dataset, {})[single] = scores
    return out
