"""The audit's pooled steps: what reads every row of a source at once — π̂ and the flags it moves,
the §3.9 suspects table, the composite with its CI (from the source's vectors), the profile with
its flags, the judged evaluation — after the per-row values (:mod:`transferdx.auditing.values`)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from transferdx.auditing.fn_eval import eval_frame, fn_evaluation, labels
from transferdx.auditing.values import SemanticSettings, Vectors, as_categories
from transferdx.diagnostics.composite import ci_resamples, composite_with_ci, weights
from transferdx.diagnostics.fn_combined import load_combined
from transferdx.diagnostics.prior import em_prior_ci, identified
from transferdx.diagnostics.suspicion import (
    SuspicionInputs,
    SuspicionSettings,
    acted_on,
    checkable_reasons,
    margin_mining,
    record_counts,
    suspect_negatives,
    suspect_order,
    suspicion_score,
)
from transferdx.resampling import bootstrap_rng, resample_counts


@dataclass(frozen=True)
class FlagSettings:
    mode: str = "envelope"
    fixed: Mapping[str, float] = field(
        default_factory=lambda: {"rho": 0.870, "eta": 0.443, "psi": 0.529, "inversion": 0.083}
    )


SUSPECT_COLUMNS = [
    "source",
    "kind",
    "qid",
    "neg_index",
    "neg_id",
    "query",
    "positive",
    "negative",
    "s_qp",
    "s_qn",
    "s_pn",
    "fn_probability",
    "score",
    "reasons",
]

# the suspects' three texts, one per suspect (read on request: :class:`~transferdx.auditing.values.RecordTexts`)
SUSPECT_TEXT_COLUMNS = ("query", "positive", "negative")


@dataclass(frozen=True)
class Pooling:
    """The settings of the steps that pool each source after the per-row values and the composites
    (π̂ and the suspects, the judged rates, the profile and its flags, the judged evaluation): the
    :func:`~transferdx.auditing.audit.audit_records` keyword arguments they read."""

    semantic: SemanticSettings = SemanticSettings()
    seed: int = 0
    resamples: int = 1000
    confidence: float = 0.95
    flags: FlagSettings = FlagSettings()
    kinds: Mapping[str, str] | None = None
    settings: Mapping[str, Any] | None = None


def descriptor_kinds(descriptors: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """The kind each described source has even without records: a control's descriptor says so."""
    return {
        name: "control" for name, d in descriptors.items() if str(d.get("mining_method", "")).startswith("control:")
    }


def recorded_suspicion_settings(s: SuspicionSettings, scored: bool) -> dict[str, Any]:
    """What the §3.9 suspicion checked: the reasons, the score rule, and α and δ where an encoder
    scored (α only matters for ``rule=positive_aware``)."""
    return {
        "reasons_checked": list(checkable_reasons(scored, s.rule)),
        "rule": s.rule if scored else "not_measured",
        "alpha": s.alpha if scored else "not_measured",
        "delta": s.delta if scored else "not_measured",
    }


def judged_evaluation(
    negatives: pd.DataFrame,
    per_record: pd.DataFrame,
    relevant_grade: int | None,
    s: SuspicionSettings,
    *,
    seed: int,
    resamples: int,
    confidence: float,
) -> dict[str, Any]:
    """The suspicion scored against deep judgments (:func:`transferdx.auditing.fn_eval.fn_evaluation`)
    where the input has graded judgments, an encoder scored and some negative is judged relevant;
    otherwise ``{"status": "not_measured", "reason": ...}``."""
    if relevant_grade is None or "judgment" not in negatives:
        return {"status": "not_measured", "reason": "the input carries no graded judgments"}
    if "s_qn" not in negatives:
        return {"status": "not_measured", "reason": "lexical-only audit (the rule needs the encoder)"}
    if not (labels(negatives["judgment"], relevant_grade)).any():
        return {
            "status": "not_measured",
            "reason": f"no negative is judged >= {relevant_grade} (load a TREC-DL layout with labels=single)",
        }
    frame = eval_frame(negatives, per_record)
    result = fn_evaluation(
        frame, relevant_grade, alpha=s.alpha, delta=s.delta, seed=seed, resamples=resamples, confidence=confidence
    )
    return {"status": "measured", **result}


def suspicion(
    negatives: pd.DataFrame,
    per_record: pd.DataFrame,
    inputs: SuspicionInputs,
    s: SuspicionSettings,
    scored: bool,
    calibrated: np.ndarray | None,
    *,
    seed: int = 0,
    resamples: int = 1000,
    confidence: float = 0.95,
) -> tuple[pd.DataFrame, np.ndarray, dict[str, dict[str, float]]]:
    """Adds the §3.9 columns to ``negatives`` (``fn_<reason>``, ``fn_reasons``, ``fn_suspect``) and
    ``per_record`` (``n_fn_suspect``, ``n_fn_<reason>``) in place; returns the suspects table
    without its texts, each suspect's record (a row of ``per_record``: with the table's
    ``neg_index``, where its texts are read on request) and each source's π̂. The table: one row per negative with
    ``fn_suspect`` (the one rule of :func:`~transferdx.diagnostics.suspicion.suspect_negatives`),
    every source's (suspects.csv holds the genuine sources' rows, control_suspects.csv the
    controls'), sorted by what default cleaning removes first (a reason of ``ACT_REASONS``), then
    ``fn_probability`` descending (undefined last), then s(q,n) − α·s(q,p) descending (undefined
    last), then source, qid, neg_index. The encoder reasons reuse the audit's embeddings;
    ``inputs`` and ``calibrated``: :func:`~transferdx.auditing.values.suspicion_inputs` (the
    probabilities None without the encoder)."""
    owner = inputs.owner
    nan = np.full(len(owner), np.nan)
    s_qp = inputs.s_qp if inputs.s_qp is not None else nan
    s_qn = inputs.s_qn if inputs.s_qn is not None else nan
    s_pn = inputs.s_pn if inputs.s_pn is not None else nan
    priors: dict[str, dict[str, float]] = {}
    if calibrated is not None:
        scores = (s_qp, s_qn, s.alpha) if scored else None
        priors = source_priors(per_record, owner, calibrated, seed, resamples, confidence, scores)
        inputs = dataclasses.replace(inputs, probability=calibrated)
    flags = as_categories(suspect_negatives(inputs, s), ("fn_reasons",))  # converted once, then shared
    for col in flags.columns:
        negatives[col] = flags[col].to_numpy() if col == "fn_suspect" else flags[col].array
    for col, values in record_counts(flags, owner, len(per_record)).items():
        per_record[col] = values

    rows = np.flatnonzero(flags["fn_suspect"].to_numpy(bool))
    prob = flags["fn_probability"].to_numpy(dtype=np.float64)[rows]
    score = suspicion_score(s_qp[rows], s_qn[rows], s.alpha) if scored else nan[rows]
    neg_index = negatives["neg_index"].to_numpy()[rows].astype(np.int64)
    sources, qids = per_record["source"].to_numpy(dtype=object), per_record["qid"].to_numpy(dtype=object)
    # sorted before the table is built (each column gathered once, the table never reordered)
    order = suspect_order(prob, score, sources[owner[rows]], qids[owner[rows]], neg_index, acted_on(flags)[rows])
    rows, prob, score, neg_index = rows[order], prob[order], score[order], neg_index[order]
    at = owner[rows]
    suspects = pd.DataFrame(
        {
            "source": per_record["source"].array.take(at),
            "kind": per_record["kind"].array.take(at),
            "qid": per_record["qid"].array.take(at),
            "neg_index": neg_index,
            "neg_id": negatives["neg_id"].array.take(rows),
            "s_qp": s_qp[rows],
            "s_qn": s_qn[rows],
            "s_pn": s_pn[rows],
            "fn_probability": prob,
            "score": score,
            "reasons": flags["fn_reasons"].to_numpy()[rows],
        },
        columns=[c for c in SUSPECT_COLUMNS if c not in SUSPECT_TEXT_COLUMNS],
    )
    return as_categories(suspects), at, priors


PRIOR_STREAM = 0xF2  # the prior's bootstrap stream key, next to the false-negative rates' 0xF1
# Why fn_probability is never moved to the source's estimated share π̂ (issue 54): on 42 files mined the
# way users mine (sentence-transformers' mine_hard_negatives over TREC-DL19/DL21 with the audit's own
# encoder, a static model and BM25; top-k, windows, score caps, margins) the estimate's interval
# covered the judged share on 15 of the 30 files where it was inside (0, 1), fell on 0 or 1 on the
# other 12, and moving the probabilities to it made them worse calibrated than at the training share in
# 8 of 16 regime × year cells and better in 4 (a BM25 file's judged share 0.33 was estimated 0.000
# [0.000, 0.062]): experiments/results/fn_mined/RESULTS.md. Label shift, the estimate's assumption,
# does not hold between a miner's output and TREC-DL's top-8.
PRIOR_WHY = "experiments/results/fn_mined/RESULTS.md"


def source_priors(
    records: pd.DataFrame,
    owner: np.ndarray,
    p: np.ndarray,
    seed: int,
    resamples: int,
    confidence: float,
    scores: tuple[np.ndarray, np.ndarray, float] | None = None,
) -> dict[str, dict[str, float]]:
    """Per source (``records``: one row per record with ``source``, ``qid``, ``kind``; ``owner``: each
    negative's record; ``p``: the calibrated probabilities): π̂, the EM estimate of its share of false
    negatives with its bootstrap CI over the source's records
    (:func:`~transferdx.diagnostics.prior.em_prior_ci`; genuine sources only, a control's CI is NaN) —
    a diagnostic: nothing is moved to it (:data:`PRIOR_WHY`). The share is **not identified** where π̂
    falls on 1, or on 0 while the source's negatives show a mining margin under the audit's encoder
    (``scores``: per negative s(q,p), s(q,n) and α; :func:`~transferdx.diagnostics.suspicion.margin_mining`):
    no mix of the detectors' false and true negatives explains the file, as when its miner filtered
    under this encoder; then ``fn_prior`` and its CI are NaN and ``fn_prior_boundary`` is the boundary
    (NaN otherwise). π̂ = 0 without a margin (easy negatives) stands. Returns ``{source: {fn_prior,
    fn_prior_ci_low, fn_prior_ci_high, fn_prior_boundary}}``."""
    train_prior = load_combined().prior
    source_of = records["source"].to_numpy(dtype=object)
    qids, kinds = records["qid"].to_numpy(dtype=object), records["kind"].to_numpy(dtype=object)
    out: dict[str, dict[str, float]] = {}
    for name in dict.fromkeys(source_of.tolist()):
        recs = np.flatnonzero(source_of == name)
        rows = np.flatnonzero(np.isin(owner, recs))
        if not len(rows):
            continue
        local = np.searchsorted(recs, owner[rows])
        rng = bootstrap_rng(seed, qids[recs].tolist(), PRIOR_STREAM)
        # the interval only for genuine sources: a control gets the estimate alone
        genuine = kinds[recs[0]] == "genuine"
        est = em_prior_ci(p[rows], local, train_prior, rng, resamples if genuine else 0, confidence)
        margin = scores is not None and margin_mining(scores[0][rows], scores[1][rows], scores[2]) is not None
        if not identified(est.prior) and (est.prior > 0 or margin):
            out[str(name)] = dict.fromkeys(("fn_prior", "fn_prior_ci_low", "fn_prior_ci_high"), math.nan)
            out[str(name)]["fn_prior_boundary"] = est.prior
            continue
        out[str(name)] = {
            "fn_prior": est.prior,
            "fn_prior_ci_low": est.low,
            "fn_prior_ci_high": est.high,
            "fn_prior_boundary": math.nan,
        }
    return out


def add_other_positive(negatives: pd.DataFrame, per_record: pd.DataFrame, hit: np.ndarray) -> None:
    """Adds ``other_positive`` to ``negatives`` (the negative is a positive of another qid, not of its
    own: :func:`~transferdx.diagnostics.other_positive.other_positive`) and ``n_other_positive`` to
    ``per_record``, in place. Not a suspicion reason; the source rate ``other_positive_rate`` feeds the
    absolute flag ``copies_other_positive``."""
    owner = np.repeat(np.arange(len(per_record)), per_record["n_negatives"].to_numpy(dtype=np.int64))
    negatives["other_positive"] = hit
    per_record["n_other_positive"] = np.bincount(owner, weights=hit, minlength=len(per_record)).astype(np.int64)


def composites(
    negatives: pd.DataFrame,
    per_record: pd.DataFrame,
    vectors: Vectors,
    s: SemanticSettings,
    seed: int,
    resamples: int = 1000,
    confidence: float = 0.95,
) -> dict[str, dict[str, Any]]:
    """The per-source composites with their percentile bootstrap CIs over records (``<form>_ci_low``
    / ``<form>_ci_high``; the source's own stream, so the same resamples as its other statistics),
    from the embeddings :func:`~transferdx.auditing.values.row_values` scored."""
    e_q, e_p, e_n = vectors
    owner = np.repeat(np.arange(len(per_record)), per_record["n_negatives"].to_numpy())
    w = weights(
        negatives["rho"].to_numpy(dtype=np.float64),
        negatives["eta"].to_numpy(dtype=np.float64),
        negatives["psi"].to_numpy(dtype=np.float64),
        s.composite,
    )
    neg_source = negatives["source"].to_numpy()
    rec_source = per_record["source"].to_numpy()
    composites: dict[str, dict[str, Any]] = {}
    for name in sorted(set(neg_source)):
        mask = np.flatnonzero(neg_source == name)
        rec_rows = np.flatnonzero(rec_source == name)  # the source's records, in profile order
        n_resamples = ci_resamples(len(mask), resamples, s.composite)
        estimates = composite_with_ci(
            e_q.take(owner[mask]),
            e_p.take(owner[mask]),
            e_n.take(mask),
            w[mask],
            np.searchsorted(rec_rows, owner[mask]),
            _shown(
                resample_counts(
                    len(rec_rows), bootstrap_rng(seed, per_record["qid"].to_numpy()[rec_rows]), n_resamples
                ),
                n_resamples,
                f"composite CI {name}",
                n_resamples * len(mask) >= COMPOSITE_PROGRESS_MIN,
            ),
            confidence,
            s.composite,
        )
        composites[name] = {}
        for form, est in estimates.items():
            composites[name][f"composite_{form}"] = est.value
            composites[name][f"composite_{form}_ci_low"] = est.ci_low
            composites[name][f"composite_{form}_ci_high"] = est.ci_high
        composites[name]["composite_ci_resamples"] = n_resamples
        composites[name]["embedding_dim"] = int(e_n.shape[1])
    return composites


# the composite CI shows a progress bar from this many resamples × negatives (about 30 s on 2 cores)
COMPOSITE_PROGRESS_MIN = 10_000_000


def _shown(chunks: Iterable[np.ndarray], total: int, desc: str, show: bool) -> Iterator[np.ndarray]:
    """``chunks`` of resamples as they come, with a progress bar of ``total`` resamples when ``show``."""
    with tqdm(total=total, desc=desc, unit="resample", disable=not show, leave=False) as bar:
        for chunk in chunks:
            yield chunk
            bar.update(len(chunk))
