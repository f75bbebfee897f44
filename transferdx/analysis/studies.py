"""Reading study and audit folders for the analysis commands (the I/O edge of ``agreement``,
``matching``, ``sensitivity`` and ``tables``).

A study folder (``transferdx-study`` output) holds ``study.csv`` (one row per backbone × source ×
dataset with the diagnostics and nDCG@10), ``audit/profile.csv``, ``audit/records.csv`` and
``evaluate/<source>/<dataset>/per_query.csv`` (``evaluate/<source>/seed<k>/<dataset>/`` for a
source trained with several seeds; ``evaluate/frozen/`` for the frozen backbone).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from transferdx.analysis import validation as _validation
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


@dataclass(frozen=True)
class StudyData:
    """One ``transferdx-study`` output folder, read (:func:`read_study`): what agreement, matching,
    validation and the tables take. ``negatives`` (``audit/negatives.csv``) is read when a table
    needs it (:func:`read_negatives`), unless the study that just wrote it hands it over."""

    folder: str
    backbone: str
    study: pd.DataFrame  # study.csv without the frozen backbone's rows
    profile_json: Mapping[str, Any]  # audit/profile.json
    profile: pd.DataFrame  # audit/profile.csv indexed by source
    records: pd.DataFrame  # audit/records.csv
    transfer: pd.DataFrame  # mean nDCG@10 per source (over seeds and datasets), indexed by source
    per_query: Mapping[str, Mapping[str, np.ndarray]]  # source → dataset → nDCG@10 per query, mean over seeds
    per_query_seeds: Mapping[str, Mapping[str, Mapping[int, np.ndarray]]]  # source → dataset → seed → per query
    frozen: Mapping[str, np.ndarray]  # dataset → nDCG@10 per query of the frozen backbone ({} when not evaluated)
    kinds: Mapping[str, str]  # source → genuine|control
    negatives: pd.DataFrame | None = None  # audit/negatives.csv, when already in memory


def read_study(folder: str | Path) -> StudyData:
    """A ``transferdx-study`` output folder: profile, records, transfer (mean nDCG@10 per source),
    per-dataset results and per-query nDCG@10."""
    folder = Path(folder)
    for needed in ("study.csv", "audit/profile.csv", "audit/records.csv"):
        if not (folder / needed).is_file():
            raise FileNotFoundError(f"{folder / needed} is missing: is {folder} a transferdx-study output?")
    study = pd.read_csv(folder / "study.csv")
    frozen = _per_query(folder / "evaluate" / "frozen")
    study = study[study["source"] != "(frozen)"]
    backbone = str(study["backbone"].iloc[0])
    transfer = study.groupby("source")[["ndcg@10"]].mean()  # mean over seeds and datasets
    seed_of = study.groupby("source")["seed"].min().to_dict() if "seed" in study else {}
    per_seed = {s: _per_query_seeds(folder / "evaluate" / s, int(seed_of.get(s, 0))) for s in transfer.index}
    per_query: dict[str, dict[str, np.ndarray]] = {}
    for source, by_dataset in per_seed.items():
        for dataset, by_seed in by_dataset.items():
            per_query.setdefault(source, {})[dataset] = np.mean(list(by_seed.values()), axis=0)
    kinds = study.drop_duplicates("source").set_index("source")["kind"].to_dict() if "kind" in study else {}
    return StudyData(
        folder=str(folder),
        backbone=backbone,
        study=study,
        profile_json=json.loads((folder / "audit/profile.json").read_text(encoding="utf-8")),
        profile=pd.read_csv(folder / "audit/profile.csv").set_index("source"),
        records=pd.read_csv(folder / "audit/records.csv", dtype={"qid": str}),
        transfer=transfer,
        per_query=per_query,
        per_query_seeds=per_seed,
        frozen=frozen,
        kinds=kinds,
    )


def read_negatives(study: StudyData) -> pd.DataFrame:
    """The study's per-negative audit frame: the one it holds, else ``audit/negatives.csv`` (qid and
    neg_id as text)."""
    if study.negatives is not None:
        return study.negatives
    return pd.read_csv(Path(study.folder) / "audit/negatives.csv", dtype={"qid": str, "neg_id": str})


def _per_query(folder: Path) -> dict[str, np.ndarray]:
    """dataset → nDCG@10 per query (sorted by qid) from ``folder/<dataset>/per_query.csv``."""
    out = {}
    for path in sorted(folder.glob("*/per_query.csv")):
        frame = pd.read_csv(path, dtype={"qid": str}).sort_values("qid")
        out[path.parent.name] = frame["ndcg@10"].to_numpy()
    return out


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


def _present(blocks: Mapping[str, Sequence[str]], sources: Sequence[str]) -> dict[str, list[str]]:
    kept = {name: [s for s in members if s in sources] for name, members in blocks.items()}
    return {name: members for name, members in kept.items() if len(members) >= 2}


def agree(
    studies: Sequence[StudyData],
    blocks: Mapping[str, Sequence[str]],
    diagnostics: Mapping[str, int],
    resamples: int = 1000,
    seed: int = 0,
    alpha: float = 0.05,
) -> dict[str, Any]:
    """Agreement per (backbone, setting) block, blocks recovered k/n, and transfer uncertainty."""
    tables, uncertainty, tests = [], {}, []
    for study in studies:
        present = _present(blocks, list(study.transfer.index))
        diags = {d: v for d, v in diagnostics.items() if d in study.profile.columns}
        named = {f"{study.backbone}/{b}": m for b, m in present.items()}
        tables.append(rank_agreement(study.profile, study.transfer, named, diags))
        for block, members in named.items():
            pq = {s: study.per_query[s] for s in members if s in study.per_query}
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
    studies: Sequence[StudyData],
    blocks: Mapping[str, Sequence[str]],
    statistics: Mapping[str, int],
    resolutions: Sequence[int],
    repetitions: int,
    seed: int = 0,
) -> dict[str, pd.DataFrame]:
    """ψ-matched samples per (backbone, setting) block against that block's transfer ordering."""
    matched, balance = [], []
    for study in studies:
        for block, members in _present(blocks, list(study.transfer.index)).items():
            frame = study.records[study.records["source"].isin(members)]
            stats = {s: d for s, d in statistics.items() if s in frame.columns}
            order = ordering(study.transfer.loc[members, "ndcg@10"].to_dict())
            out = match(frame, stats, order, resolutions, repetitions, seed)
            tag = {"backbone": study.backbone, "block": block, "transfer_order": ">".join(order)}
            matched.append(out["matched"].assign(**tag))
            balance.append(out["balance"].assign(**tag))
    return {
        "matched": pd.concat(matched, ignore_index=True) if matched else pd.DataFrame(),
        "balance": pd.concat(balance, ignore_index=True) if balance else pd.DataFrame(),
    }


def ladder_doses(study: StudyData, ladder: Mapping[str, float]) -> dict[str, float]:
    """The random-mix ladder present in a study: each trained rung with its dose, and the rungs'
    parent source (from the build descriptors) at dose 0."""
    trained = set(study.per_query_seeds)
    doses = {s: float(d) for s, d in ladder.items() if s in trained}
    descriptors = study.profile_json.get("descriptors", {})
    parents = {descriptors.get(s, {}).get("parent_source") for s in doses if s.startswith("random_mix")}
    for parent in sorted(p for p in parents if p):
        if parent in trained:
            doses.setdefault(parent, 0.0)
    return doses


def validate(
    study: StudyData,
    diagnostics: Mapping[str, int],
    ladder: Mapping[str, float],
    resamples: int = 10000,
    confidence: float = 0.95,
    alpha: float = 0.05,
    seed: int = 0,
) -> dict[str, pd.DataFrame]:
    """Known-truth validation of one study (see :mod:`transferdx.analysis.validation`): transfer with
    intervals, pairwise differences, (a) flag check, (b) diagnostic agreement, (c) ladder rungs and
    trend."""
    from transferdx.auditing.profiles import ABSOLUTE_FLAG_RULES, ALL_FLAG_RULES

    scores = study.per_query_seeds
    kinds = {s: str(study.kinds.get(s, "")) for s in scores}
    frozen = study.frozen or None
    boot = _validation.resample(scores, frozen, resamples, seed)  # one draw serves every statistic
    transfer = _validation.transfer_table(scores, frozen, kinds, resamples, confidence, seed, boot)
    pairs = _validation.pairwise_differences(scores, resamples, confidence, alpha, seed, boot)
    profile = study.profile
    absolute = [r.name for r in ABSOLUTE_FLAG_RULES if r.column in profile.columns]
    rules = [r.name for r in ALL_FLAG_RULES if r.column in profile.columns] + absolute
    flags = _validation.flag_check(profile, transfer, pairs, rules, absolute)
    agreement = _validation.diagnostic_agreement(
        profile, boot, _validation.point(scores), kinds, diagnostics, confidence, seed
    )
    by_dataset = _validation.dataset_table(scores, frozen, kinds, resamples, confidence, seed)
    doses = ladder_doses(study, ladder)
    named = [d for d in diagnostics if d != "n_flags"]
    rungs, trend = _validation.dose_response(profile, transfer, boot, doses, named, confidence)
    missed = pd.DataFrame({"source": _validation.missed_defects(profile, transfer, pairs)}, dtype=str)
    return {
        "transfer": transfer,
        "by_dataset": by_dataset,
        "pairs": pairs,
        "flags": flags,
        "missed": missed,
        "agreement": agreement,
        "ladder_rungs": rungs,
        "ladder_trend": trend,
    }
