"""Reading study and audit folders for the analysis commands (the I/O edge of ``agreement``,
``matching``, ``sensitivity`` and ``tables``).

A study folder (``transferdx-study`` output) holds ``study.csv`` (one row per backbone × source ×
dataset with the diagnostics and nDCG@10), ``audit/profile.csv``, ``audit/records.csv`` and
``evaluate/<source>/<dataset>/per_query.csv``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from transferdx.analysis.agreement import (
    blocks_recovered,
    ordering,
    paired_tests,
    rank_agreement,
    transfer_ordering_uncertainty,
)
from transferdx.analysis.matching import match
from transferdx.analysis.sensitivity import AuditRun


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


def read_study(folder: str | Path) -> dict[str, Any]:
    """A ``transferdx-study`` output folder: profile, records, transfer (mean nDCG@10 per source),
    per-dataset results and per-query nDCG@10."""
    folder = Path(folder)
    for needed in ("study.csv", "audit/profile.csv", "audit/records.csv"):
        if not (folder / needed).is_file():
            raise FileNotFoundError(f"{folder / needed} is missing: is {folder} a transferdx-study output?")
    study = pd.read_csv(folder / "study.csv")
    study = study[study["source"] != "(frozen)"]
    backbone = str(study["backbone"].iloc[0])
    transfer = study.groupby("source")[["ndcg@10"]].mean()  # mean over datasets
    per_query: dict[str, dict[str, np.ndarray]] = {}
    for source in transfer.index:
        for path in sorted((folder / "evaluate" / source).glob("*/per_query.csv")):
            frame = pd.read_csv(path, dtype={"qid": str}).sort_values("qid")
            per_query.setdefault(source, {})[path.parent.name] = frame["ndcg@10"].to_numpy()
    return {
        "folder": str(folder),
        "backbone": backbone,
        "study": study,
        "profile_json": json.loads((folder / "audit/profile.json").read_text(encoding="utf-8")),
        "profile": pd.read_csv(folder / "audit/profile.csv").set_index("source"),
        "records": pd.read_csv(folder / "audit/records.csv", dtype={"qid": str}),
        "transfer": transfer,
        "per_query": per_query,
    }


def _present(blocks: Mapping[str, Sequence[str]], sources: Sequence[str]) -> dict[str, list[str]]:
    kept = {name: [s for s in members if s in sources] for name, members in blocks.items()}
    return {name: members for name, members in kept.items() if len(members) >= 2}


def agree(
    studies: Sequence[dict[str, Any]],
    blocks: Mapping[str, Sequence[str]],
    diagnostics: Mapping[str, int],
    resamples: int = 1000,
    seed: int = 0,
    alpha: float = 0.05,
) -> dict[str, Any]:
    """Agreement per (backbone, setting) block, blocks recovered k/n, and transfer uncertainty."""
    tables, uncertainty, tests = [], {}, []
    for study in studies:
        present = _present(blocks, list(study["transfer"].index))
        diags = {d: v for d, v in diagnostics.items() if d in study["profile"].columns}
        named = {f"{study['backbone']}/{b}": m for b, m in present.items()}
        tables.append(rank_agreement(study["profile"], study["transfer"], named, diags))
        for block, members in named.items():
            pq = {s: study["per_query"][s] for s in members if s in study["per_query"]}
            if len(pq) >= 2:
                uncertainty[block] = transfer_ordering_uncertainty(pq, resamples, seed)
                tests.append(paired_tests(pq, alpha).assign(block=block))
    table = pd.concat(tables, ignore_index=True) if tables else pd.DataFrame()
    return {
        "agreement": table,
        "blocks_recovered": blocks_recovered(table) if len(table) else pd.DataFrame(),
        "uncertainty": uncertainty,
        "paired_tests": pd.concat(tests, ignore_index=True) if tests else pd.DataFrame(),
    }


def match_studies(
    studies: Sequence[dict[str, Any]],
    blocks: Mapping[str, Sequence[str]],
    statistics: Mapping[str, int],
    resolutions: Sequence[int],
    repetitions: int,
    seed: int = 0,
) -> dict[str, pd.DataFrame]:
    """ψ-matched samples per (backbone, setting) block against that block's transfer ordering."""
    matched, balance = [], []
    for study in studies:
        for block, members in _present(blocks, list(study["transfer"].index)).items():
            frame = study["records"][study["records"]["source"].isin(members)]
            stats = {s: d for s, d in statistics.items() if s in frame.columns}
            order = ordering(study["transfer"].loc[members, "ndcg@10"].to_dict())
            out = match(frame, stats, order, resolutions, repetitions, seed)
            tag = {"backbone": study["backbone"], "block": block, "transfer_order": ">".join(order)}
            matched.append(out["matched"].assign(**tag))
            balance.append(out["balance"].assign(**tag))
    return {
        "matched": pd.concat(matched, ignore_index=True) if matched else pd.DataFrame(),
        "balance": pd.concat(balance, ignore_index=True) if balance else pd.DataFrame(),
    }
