"""One study's results as the analysis takes them (:class:`StudyData`) and their one constructor,
:func:`study_data`: from a study folder (:func:`transferdx.analysis.studies.read_study`) or from a
study still in memory (``transferdx.pipeline.studying``). Pure: no files are read here."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

FROZEN_SOURCE = "(frozen)"  # the frozen backbone's rows in study.csv


@dataclass(frozen=True)
class StudyData:
    """One ``transferdx-study`` output (:func:`study_data`, from its folder by
    :func:`~transferdx.analysis.studies.read_study` or handed over in memory by the study that just
    ran): what agreement, matching, validation and the tables take. ``negatives``
    (``audit/negatives.csv``) is read when a table needs it
    (:func:`~transferdx.analysis.studies.read_negatives`), unless the study that just wrote it hands
    it over."""

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


def ndcg_per_query(per_query: pd.DataFrame) -> np.ndarray:
    """nDCG@10 per query of one evaluation's per-query frame (``per_query.csv``), in qid order."""
    return per_query.sort_values("qid")["ndcg@10"].to_numpy()


def study_data(
    folder: str | Path,
    table: pd.DataFrame,
    per_query_seeds: Mapping[str, Mapping[str, Mapping[int, np.ndarray]]],
    frozen: Mapping[str, np.ndarray],
    profile_json: Mapping[str, Any],
    profile: pd.DataFrame,
    records: pd.DataFrame,
    negatives: pd.DataFrame | None = None,
) -> StudyData:
    """A study from its parts: ``table`` = study.csv (the frozen backbone's rows included),
    ``per_query_seeds`` source → dataset → seed → nDCG@10 per query (:func:`ndcg_per_query`),
    ``frozen`` dataset → the frozen backbone's, and the audit (``profile`` indexed by source).
    Transfer = mean nDCG@10 per source over seeds and datasets; a source's per-query scores are the
    mean over its seeds. Datasets and seeds are taken in sorted order, wherever the parts come from."""
    study = table[table["source"] != FROZEN_SOURCE]
    backbone = str(study["backbone"].iloc[0])
    transfer = study.groupby("source")[["ndcg@10"]].mean()  # mean over seeds and datasets
    per_seed = {s: _sorted_scores(per_query_seeds.get(s, {})) for s in transfer.index}
    per_query: dict[str, dict[str, np.ndarray]] = {}
    for source, by_dataset in per_seed.items():
        for dataset, by_seed in by_dataset.items():
            per_query.setdefault(source, {})[dataset] = np.mean(list(by_seed.values()), axis=0)
    kinds = study.drop_duplicates("source").set_index("source")["kind"].to_dict() if "kind" in study else {}
    return StudyData(
        folder=str(folder),
        backbone=backbone,
        study=study,
        profile_json=profile_json,
        profile=profile,
        records=records,
        transfer=transfer,
        per_query=per_query,
        per_query_seeds=per_seed,
        frozen={d: frozen[d] for d in sorted(frozen)},
        kinds=kinds,
        negatives=negatives,
    )


def _sorted_scores(by_dataset: Mapping[str, Mapping[int, np.ndarray]]) -> dict[str, dict[int, np.ndarray]]:
    """dataset → seed → scores with datasets and seeds in sorted order."""
    return {d: {k: by_dataset[d][k] for k in sorted(by_dataset[d])} for d in sorted(by_dataset)}
