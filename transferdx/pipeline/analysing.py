"""The analysis verbs over study folders (or studies already read, :class:`StudyData`):
:func:`agree` (rank agreement with transfer, blocks recovered, transfer uncertainty, paired tests),
:func:`match` (ψ-matched samples) and :func:`validate` (known-truth validation), each with the
writer of its artifacts. The statistics live in :mod:`transferdx.analysis`
(:func:`~transferdx.analysis.agreement.agreement_of_studies`,
:func:`~transferdx.analysis.matching.matching_of_studies`,
:func:`~transferdx.analysis.validation.validation_of_study`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from transferdx.analysis import studies as _studies
from transferdx.analysis.agreement import agreement_of_studies
from transferdx.analysis.matching import matching_of_studies
from transferdx.analysis.study import StudyData
from transferdx.analysis.validation import validation_of_study
from transferdx.artifacts import atomic_write_text, canonical_json, csv_text, safe_join
from transferdx.pipeline.settings import AnalysisSettings

Studies = Sequence[str | Path] | Sequence[StudyData]


def read_studies(study_dirs: Sequence[str | Path]) -> list[StudyData]:
    """Every study folder in ``study_dirs`` (a folder holding ``study.csv``, or a multirun root)."""
    return [_studies.read_study(d) for d in _studies.expand(list(study_dirs), "study.csv")]


def as_studies(studies: Studies) -> list[StudyData]:
    """``studies`` read: folders (:func:`read_studies`), or studies already read, kept as they are."""
    out: list[StudyData] = []
    folders: list[str | Path] = []
    for item in studies:
        if isinstance(item, StudyData):
            out += read_studies(folders) if folders else []
            folders = []
            out.append(item)
        else:
            folders.append(item)
    return out + (read_studies(folders) if folders else [])


def agree(studies: Studies, settings: AnalysisSettings | None = None) -> dict[str, Any]:
    """Rank agreement of each diagnostic with transfer per (backbone, setting) block, blocks
    recovered k/n, transfer-ordering uncertainty and Holm-corrected paired tests."""
    s = settings or AnalysisSettings()
    blocks = {k: list(v) for k, v in s.blocks.items()}
    return agreement_of_studies(as_studies(studies), blocks, dict(s.diagnostics), s.resamples, s.seed, s.alpha)


def match(studies: Studies, settings: AnalysisSettings | None = None) -> dict[str, pd.DataFrame]:
    """ψ-matched samples per block: share of repetitions reproducing the transfer ordering, balance."""
    s = settings or AnalysisSettings()
    blocks = {k: list(v) for k, v in s.blocks.items()}
    return matching_of_studies(
        as_studies(studies), blocks, dict(s.statistics), list(s.resolutions), s.repetitions, s.seed
    )


def validate(studies: Studies, settings: AnalysisSettings | None = None) -> dict[str, dict[str, pd.DataFrame]]:
    """Known-truth validation of every study that trained controls as well as genuine sources
    (``transferdx-study +experiment=validation``): backbone → transfer with query and seed
    intervals, pairwise differences (Holm, seed-consistent), (a) flag check, (b) diagnostic
    agreement over all and genuine sources, (c) the random-mix ladder. Studies without a trained
    control are left out."""
    s = settings or AnalysisSettings()
    v = {"diagnostics": {}, "ladder": {}, "resamples": 10000, **dict(s.validation)}
    diagnostics = {**dict(s.diagnostics), **dict(v["diagnostics"])}
    out = {}
    for study in as_studies(studies):
        if "control" in study.kinds.values() and len(study.per_query_seeds) >= 2:
            out[study.backbone] = validation_of_study(
                study, diagnostics, dict(v["ladder"]), int(v["resamples"]), alpha=s.alpha, seed=s.seed
            )
    return out


def write_validation(out: Mapping[str, Mapping[str, pd.DataFrame]], folder: Path) -> None:
    for backbone, frames in out.items():
        for name, frame in frames.items():
            atomic_write_text(safe_join(folder, f"{backbone}/{name}.csv"), csv_text(frame))


def write_agreement(out: Mapping[str, Any], folder: Path) -> None:
    atomic_write_text(safe_join(folder, "agreement.csv"), csv_text(out["agreement"]))
    atomic_write_text(safe_join(folder, "blocks_recovered.csv"), csv_text(out["blocks_recovered"], index=True))
    atomic_write_text(safe_join(folder, "paired_tests.csv"), csv_text(out["paired_tests"]))
    atomic_write_text(safe_join(folder, "transfer_uncertainty.json"), canonical_json(out["uncertainty"]))


def write_matching(out: Mapping[str, pd.DataFrame], folder: Path) -> None:
    atomic_write_text(safe_join(folder, "matched.csv"), csv_text(out["matched"]))
    atomic_write_text(safe_join(folder, "balance.csv"), csv_text(out["balance"]))
