"""The study verb, all of it for one backbone: audit → train one retriever per source and seed →
evaluate each (and the frozen backbone) → ``study.csv`` → agree → match → tables (handed the study
in memory: :func:`transferdx.analysis.study.study_data`, what reading its folder gives). The
training plan (which source with which seed, in which order) is :func:`training_plan`."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from transferdx.analysis.study import FROZEN_SOURCE, ndcg_per_query, study_data
from transferdx.artifacts import atomic_write_text, canonical_json, csv_text, safe_join
from transferdx.auditing.report import profile_document
from transferdx.embed import EncoderSpec
from transferdx.inputs.records import LoadResult
from transferdx.pipeline.auditing import audit
from transferdx.pipeline.encoders import encoder_spec
from transferdx.pipeline.evaluating import evaluate_each, scores_table
from transferdx.pipeline.rendering import render_tables
from transferdx.pipeline.settings import AnalysisSettings, AuditOptions, BenchmarkSettings
from transferdx.pipeline.training import train
from transferdx.training import TrainSettings, checkpoint_spec


def training_seeds(kind: str, seeds: Sequence[int] | Mapping[str, Sequence[int]] | None, default: int) -> list[int]:
    """The training seeds of a source of ``kind`` (``seeds`` per kind, one list, or ``[default]``)."""
    if seeds is None:
        return [default]
    if isinstance(seeds, Mapping):
        if kind not in seeds:
            raise ValueError(f"seeds name no list for kind {kind!r}; given: {sorted(seeds)}")
        chosen = seeds[kind]
    else:
        chosen = seeds
    out = [int(k) for k in chosen]
    if not out or len(set(out)) != len(out):
        raise ValueError(f"training seeds must be a non-empty list without repeats, got {out}")
    return out


def training_plan(
    sources: Sequence[str],
    kinds: Mapping[str, str],
    seeds: Sequence[int] | Mapping[str, Sequence[int]] | None,
    default: int = 0,
) -> list[tuple[str, int]]:
    """(source, seed) runs in the order they are trained: every source's first seed, then every
    source's second, … — so an interrupted run has already seen each source once."""
    per = {s: training_seeds(kinds.get(s, "genuine"), seeds, default) for s in sources}
    rounds = max((len(v) for v in per.values()), default=0)
    return [(s, per[s][i]) for i in range(rounds) for s in sources if i < len(per[s])]


# the audit's diagnostics that study.csv repeats next to each trained source's scores
STUDY_DIAGNOSTICS = ("psi_mean", "rho_mean", "eta_mean", "inversion_rate")


def study_rows(
    scores: pd.DataFrame, run: Mapping[str, Any], after: Mapping[str, Any] | None = None
) -> list[dict[str, Any]]:
    """The ``study.csv`` rows of one evaluation, one per dataset: ``run`` (backbone, source, kind,
    seed, the source's audit diagnostics), the dataset's scores, then ``after`` (``model_dir``)."""
    return [{**run, **row, **(after or {})} for row in scores.to_dict("records")]


@dataclass(frozen=True)
class StudyResult:
    """``table``: study.csv (one row per backbone × source × dataset); ``tables``: name → rendered
    table (or the reason it was not rendered)."""

    table: pd.DataFrame
    tables: Mapping[str, Any]


def study(
    loaded: LoadResult,
    sources: Sequence[str],
    out: str | Path,
    *,
    encoder: str | Path | EncoderSpec = "minilm_l6",
    options: AuditOptions | None = None,
    training: TrainSettings | None = None,
    benchmark: BenchmarkSettings,
    analysis: AnalysisSettings | None = None,
    sensitivity_dirs: Sequence[str | Path] = (),
    evaluate_frozen: bool = True,
    tables: bool = True,
    artifact_dir: str | Path = "outputs/artifacts",
    cache_dir: str | Path | None = None,
    seeds: Sequence[int] | Mapping[str, Sequence[int]] | None = None,
    train_controls: bool = False,
    audit_encoder: str | Path | EncoderSpec | None = None,
) -> StudyResult:
    """One backbone's study: audit ``loaded`` (into ``out/audit``), train one retriever per source
    and seed, evaluate each (and the frozen backbone), write ``study.csv`` (diagnostics next to
    nDCG@10, one row per source × seed × dataset), then agree → match → tables into ``out/tables``.

    ``seeds``: training seeds, one list for every source or per kind (``{"genuine": [0, 1, 2],
    "control": [0, 1]}``); default ``[options.seed]``. ``train_controls``: train on the controls in
    ``loaded`` too (known-truth validation; the tables then add the validation tables). With more
    than one seed a source's evaluations go to ``evaluate/<source>/seed<k>/``. ``audit_encoder``:
    the frozen encoder of the audit when it is not the trained backbone (e.g. a static backbone
    trained on sources audited, as a user would, with MiniLM); default the backbone itself."""
    out = Path(out)
    options = options or AuditOptions()
    spec = encoder_spec(encoder)
    auditor = encoder_spec(audit_encoder) if audit_encoder is not None else spec
    frozen_encoder = auditor if options.semantic is not None else None
    # the study's controls come from its query set (build config), never from the audit itself
    audited = audit(loaded, options, encoder=frozen_encoder, cache_dir=cache_dir, controls="none")
    audited.save(safe_join(out, "audit"))
    profile = audited.profile.set_index("source")
    rows = []
    frozen_scores: dict[str, np.ndarray] = {}  # dataset → the frozen backbone's nDCG@10 per query
    per_query: dict[str, dict[str, dict[int, np.ndarray]]] = {}  # source → dataset → seed → nDCG@10 per query
    if evaluate_frozen:
        frozen = evaluate_each(
            spec, benchmark, out=safe_join(out, "evaluate/frozen"), cache_dir=cache_dir, seed=options.seed
        )
        frozen_scores = {e.dataset: ndcg_per_query(e.per_query) for e in frozen}
        rows += study_rows(scores_table(frozen), {"backbone": spec.name, "source": FROZEN_SOURCE, "kind": "frozen"})
    kinds = {r.source: r.kind for r in loaded.records}
    trained = list(sources) + [s for s in dict.fromkeys(kinds) if train_controls and kinds[s] == "control"]
    from tqdm.auto import tqdm

    plan = training_plan(trained, kinds, seeds, options.seed)
    for source, seed in tqdm(plan, desc=f"{spec.name}: train and evaluate", unit="run", disable=len(plan) < 2):
        several = len(training_seeds(kinds.get(source, "genuine"), seeds, options.seed)) > 1
        trained_model = train(
            [r for r in loaded.records if r.source == source],
            encoder=spec,
            source=source,
            settings=training,
            seed=seed,
            artifact_dir=artifact_dir,
            cache_dir=cache_dir,
            progress=False,
        )
        checkpoint = checkpoint_spec(trained_model.model_dir, f"{spec.name}-{source}")
        folder = safe_join(out, f"evaluate/{source}" + (f"/seed{seed}" if several else ""))
        evaluations = evaluate_each(checkpoint, benchmark, out=folder, cache_dir=cache_dir, seed=options.seed)
        for e in evaluations:
            per_query.setdefault(source, {}).setdefault(e.dataset, {})[seed] = ndcg_per_query(e.per_query)
        diag = {c: profile.loc[source, c] for c in STUDY_DIAGNOSTICS if c in profile.columns}
        run = {"backbone": spec.name, "source": source, "kind": kinds.get(source, ""), "seed": seed, **diag}
        rows += study_rows(scores_table(evaluations), run, {"model_dir": str(trained_model.model_dir)})
    table = pd.DataFrame(rows)
    atomic_write_text(safe_join(out, "study.csv"), csv_text(table))
    rendered: dict[str, Any] = {}
    if tables:
        # the study as its folder holds it, from memory: profile.json's content (JSON data, keys
        # sorted), the audit's frames, every evaluation's per-query nDCG@10
        written = study_data(
            out,
            table,
            per_query,
            frozen_scores,
            json.loads(canonical_json(profile_document(audited.result))),
            profile,
            audited.records,
            audited.result.negatives,
        )
        rendered = render_tables([written], safe_join(out, "tables"), analysis, sensitivity_dirs=sensitivity_dirs)
    return StudyResult(table, rendered)
