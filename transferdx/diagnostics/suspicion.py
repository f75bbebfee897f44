"""False-negative suspicion (design §3.9): per negative, the reasons to suspect that it answers the
query. Pure functions, arrays in and arrays out; the audit (``auditing/values.py``) feeds them.

Reasons (:data:`REASONS`, in this order wherever they are joined):

- ``positive_aware``: s(q,n) ≥ α · s(q,p) (NV-Retriever's TopK-PercPos rule, α = 0.95); when
  s(q,p) ≤ 0 the rule reads s(q,n) ≥ s(q,p). A tie at exactly α · s(q,p) is suspected.
- ``combined`` (instead of ``positive_aware`` when ``rule="combined"``): ``fn_probability`` (below)
  ≥ the shipped detector's own cut (:mod:`transferdx.diagnostics.fn_combined`).
- ``duplicate_positive``: the negative's normalised text equals the normalised text of any of the
  record's positives (:func:`normalise_text`).
- ``near_duplicate_positive``: s(p0, n) ≥ δ (passage–passage cosine to the reference positive,
  δ = 0.85, chosen on TREC-DL19 judgments: README, "How well it works").
- ``duplicate_negative``: the same passage (same id; same normalised text when the id is absent or
  empty) appeared earlier among the record's negatives; the first occurrence is not suspected.

Next to the reasons, every negative gets ``fn_probability``: the probability that it is a false
negative, from the shipped detectors (:func:`probabilities`: Platt-calibrated logistic regressions
fitted on TREC-DL19 + DL21; ``multi`` with the other sources' agreement where two or more genuine
sources hold the query, ``single`` elsewhere), moved by the audit to each source's own estimated
share of false negatives (:mod:`transferdx.diagnostics.prior`; NaN without an encoder).

One rule says what a suspect is (:func:`suspect_negatives`, hence ``fn_suspect``, suspects.csv and
every count the verdict states): a checked reason holds, or ``fn_probability ≥``
:data:`MIN_PROBABILITY` (reason ``fn_probability``, :data:`PROBABILITY_REASON`, listed after the
others). Default cleaning acts on :data:`ACT_REASONS` (copies and near-copies of a positive, and
``fn_probability``); the other suspects are for review. Each fixed rule's measured precision on
TREC-DL19 and DL21 is in ``experiments/results/fn_years/rule_precision.json`` (the verdict quotes it
from ``transferdx/auditing/evidence.json``).

``positive_aware``, ``combined`` and ``near_duplicate_positive`` need the frozen encoder
(:data:`ENCODER_REASONS`); a lexical-only audit leaves them *unchecked* (NA), never False, and the
rule not chosen (``positive_aware`` or ``combined``) is unchecked too.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from transferdx.diagnostics.fn_combined import MULTI, SINGLE, cleaning_cut, feature_matrix, load_combined
from transferdx.inputs.records import normalise_text, passage_key  # the identity of texts and passages

REASONS = ("positive_aware", "combined", "duplicate_positive", "near_duplicate_positive", "duplicate_negative")
ENCODER_REASONS = frozenset({"positive_aware", "combined", "near_duplicate_positive"})
TEXT_REASONS = tuple(r for r in REASONS if r not in ENCODER_REASONS)
RULES = ("positive_aware", "combined")  # the score rule: one of them is checked, the other is not

# The default cleaning's cut on the prior-adjusted fn_probability: for each detector the lowest of 0.50,
# 0.55, …, 0.95 whose out-of-year precision on TREC-DL (each year scored by the detector fitted on the
# other, pooled) is >= 0.80, and the stricter of the two; written by experiments/fit_fn_combined.py into
# fn_combined.json (``cleaning``).
MIN_PROBABILITY = float(cleaning_cut("single")["cut"])
# Reasons default cleaning acts on whatever the probability: a copy of a positive is a false negative
# by definition (DL19 and DL21 have none, so it is not measured there); a near-copy (s(p0,n) ≥ δ) was
# one in 0.78 of cases on DL19 and 0.60 on DL21 (against 0.66 and 0.60 for the default rule; base
# rates 0.58 and 0.45: experiments/results/fn_years/rule_precision.json).
HIGH_PRECISION_REASONS = ("duplicate_positive", "near_duplicate_positive")
# fn_probability ≥ MIN_PROBABILITY makes a negative a suspect whatever the other reasons say (the same
# name as transferdx.pipeline.cleaning's reason); a suspect's reasons are joined in SUSPECT_REASONS order
PROBABILITY_REASON = "fn_probability"
SUSPECT_REASONS = (*REASONS, PROBABILITY_REASON)
ACT_REASONS = (*HIGH_PRECISION_REASONS, PROBABILITY_REASON)  # what default cleaning removes


@dataclass(frozen=True)
class SuspicionSettings:
    """α of ``positive_aware``, δ of ``near_duplicate_positive``, and which score rule runs."""

    alpha: float = 0.95
    delta: float = 0.85
    rule: str = "positive_aware"

    def __post_init__(self) -> None:
        if self.rule not in RULES:
            raise ValueError(f"suspicion rule must be one of {RULES}, got {self.rule!r}")
        if not 0 < self.alpha <= 1:
            raise ValueError(f"suspicion alpha must lie in (0, 1], got {self.alpha}")
        if not -1 <= self.delta <= 1:
            raise ValueError(f"suspicion delta must lie in [-1, 1], got {self.delta}")


def positive_aware(s_qp: np.ndarray, s_qn: np.ndarray, alpha: float = 0.95) -> np.ndarray:
    """s(q,n) ≥ α·s(q,p) where s(q,p) > 0, else s(q,n) ≥ s(q,p) (``s_qp`` per negative)."""
    s_qp = np.asarray(s_qp, dtype=np.float64)
    s_qn = np.asarray(s_qn, dtype=np.float64)
    bar = np.where(s_qp > 0, alpha * s_qp, s_qp)
    return np.asarray(s_qn >= bar, dtype=bool)


def near_duplicate_positive(s_pn: np.ndarray, delta: float = 0.85) -> np.ndarray:
    """cos(p0, n) ≥ δ."""
    return np.asarray(np.asarray(s_pn, dtype=np.float64) >= delta, dtype=bool)


def duplicate_positive(negatives: Sequence[str], owner: np.ndarray, positives: Sequence[Sequence[str]]) -> np.ndarray:
    """Negative k (of record ``owner[k]``) has the normalised text of any positive of its record.
    ``negatives`` and ``positives`` are raw texts; each distinct text is normalised once."""
    norm = {t: normalise_text(t) for t in dict.fromkeys([*negatives, *(p for ps in positives for p in ps)])}
    pos_sets = [{norm[p] for p in ps} for ps in positives]
    return np.fromiter(
        (norm[t] in pos_sets[int(o)] for t, o in zip(negatives, owner, strict=True)),
        dtype=bool,
        count=len(negatives),
    )


def duplicate_negative(keys: Sequence[str], owner: np.ndarray) -> np.ndarray:
    """Negative k repeats an earlier negative of the same record (same :func:`passage_key`); the
    first occurrence is not suspected."""
    if not len(keys):
        return np.zeros(0, dtype=bool)
    codes = {key: i for i, key in enumerate(dict.fromkeys(keys))}
    code = np.fromiter((codes[k] for k in keys), dtype=np.int64, count=len(keys))
    pair = np.asarray(owner, dtype=np.int64) * len(codes) + code
    _, first = np.unique(pair, return_index=True)
    out = np.ones(len(keys), dtype=bool)
    out[first] = False
    return out


def _descending(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(NaN?, −value with NaN as 0): two sort keys putting ``values`` in descending order, NaN last."""
    values = np.asarray(values, dtype=np.float64)
    missing = np.isnan(values)
    return missing, np.where(missing, 0.0, -values)


def suspect_order(
    probability: np.ndarray,
    score: np.ndarray,
    sources: Sequence[str],
    qids: Sequence[str],
    neg_index: np.ndarray,
    acted: np.ndarray | None = None,
) -> np.ndarray:
    """The suspects table's order, as row positions (a permutation of 0 … n−1): what default cleaning
    removes first (``acted``: a reason of :data:`ACT_REASONS`; all False when None — what the verdict
    acts on, issue 54), then ``fn_probability`` descending (NaN last), then :func:`suspicion_score`
    descending (NaN last), then source, qid and neg_index ascending, ties in their given order —
    Python's stable ``sorted`` of those tuples (strings by code point), done on arrays (the strings
    ranked once each) so that millions of suspects cost no tuple each."""
    ranks = [np.unique(np.asarray(col, dtype=object), return_inverse=True)[1].reshape(-1) for col in (sources, qids)]
    keys = (np.asarray(neg_index, dtype=np.int64), ranks[1], ranks[0])  # np.lexsort is stable: ties keep their order
    first = (
        np.zeros(len(keys[0]), dtype=np.int64) if acted is None else (~np.asarray(acted, dtype=bool)).astype(np.int64)
    )
    return np.lexsort((*keys, *_descending(score)[::-1], *_descending(probability)[::-1], first)).astype(np.int64)


def acted_on(flags: pd.DataFrame) -> np.ndarray:
    """Per row of :func:`suspect_negatives`' frame (or the audit's per-negative table): whether default
    cleaning removes it (a reason of :data:`ACT_REASONS` holds; a reason the frame has no column for,
    as in a lexical audit, does not)."""
    out = np.zeros(len(flags), dtype=bool)
    if "fn_probability" in flags:
        out |= flags["fn_probability"].to_numpy(dtype=np.float64) >= MIN_PROBABILITY
    for reason in HIGH_PRECISION_REASONS:
        if (column := f"fn_{reason}") in flags:
            out |= flags[column].fillna(False).to_numpy(dtype=bool)
    return out


def suspicion_score(s_qp: np.ndarray, s_qn: np.ndarray, alpha: float = 0.95) -> np.ndarray:
    """s(q,n) − α·s(q,p): how far past the ``positive_aware`` bar a negative sits (suspects.csv is
    sorted by it, most suspicious first)."""
    return np.asarray(s_qn, dtype=np.float64) - alpha * np.asarray(s_qp, dtype=np.float64)


@dataclass(frozen=True)
class SuspicionInputs:
    """Per negative: its record index (``owner``), id and text; per record: the positive texts; and,
    when an encoder scored them, s(q,p) and s(q,n) per negative and s(p0,n). ``text_hits``: the
    text reasons already computed (:func:`text_reasons`, with the per-row values, where the texts are);
    given them, :func:`suspect_negatives` reads no text, and ids, texts and positives may be empty."""

    owner: np.ndarray
    neg_ids: Sequence[str | None]
    neg_texts: Sequence[str]
    positives: Sequence[Sequence[str]]
    s_qp: np.ndarray | None = None
    s_qn: np.ndarray | None = None
    s_pn: np.ndarray | None = None
    coverage: np.ndarray | None = None  # 1 − ψ per negative (the combined rule)
    position: np.ndarray | None = None  # 0-based position of the negative in its record
    agree_share: np.ndarray | None = None  # the other sources' agreement (NaN: the single detector)
    agree_best: np.ndarray | None = None
    probability: np.ndarray | None = None  # fn_probability as the audit adjusted it to each source's prior
    text_hits: Mapping[str, np.ndarray] | None = None  # TEXT_REASONS → per negative, from text_reasons


def _frame(x: SuspicionInputs) -> pd.DataFrame:
    n = len(x.owner)
    nan = np.full(n, np.nan)
    return pd.DataFrame(
        {
            "s_qp": x.s_qp,
            "s_qn": x.s_qn,
            "s_pn": x.s_pn,
            "coverage": np.zeros(n) if x.coverage is None else x.coverage,
            "position": np.zeros(n) if x.position is None else x.position,
            "agree_share": nan if x.agree_share is None else x.agree_share,
            "agree_best": nan if x.agree_best is None else x.agree_best,
        }
    )


def probabilities(x: SuspicionInputs) -> np.ndarray | None:
    """The calibrated p(false negative) per negative at the detectors' training prior (None without
    the encoder's scores): the ``multi`` detector where the other sources' agreement is known, the
    ``single`` one elsewhere. :mod:`transferdx.diagnostics.prior` moves it to a source's own prior."""
    if x.s_qp is None or x.s_qn is None or x.s_pn is None:
        return None
    frame = _frame(x)
    multi = ~np.isnan(frame["agree_share"].to_numpy(dtype=np.float64))
    out = np.full(len(frame), np.nan)
    for rows, names, name in ((~multi, SINGLE, "single"), (multi, MULTI, "multi")):
        if rows.any():
            out[rows] = load_combined(name).probability(feature_matrix(frame[rows], names))
    return out


def _adjusted(x: SuspicionInputs) -> np.ndarray | None:
    return x.probability if x.probability is not None else probabilities(x)


def _positive_aware(x: SuspicionInputs, s: SuspicionSettings) -> np.ndarray | None:
    if x.s_qp is None or x.s_qn is None or s.rule != "positive_aware":
        return None
    return positive_aware(x.s_qp, x.s_qn, s.alpha)


def _combined(x: SuspicionInputs, s: SuspicionSettings) -> np.ndarray | None:
    if s.rule != "combined" or (p := _adjusted(x)) is None:
        return None
    return np.asarray(p >= load_combined().threshold, dtype=bool)


def _near_duplicate(x: SuspicionInputs, s: SuspicionSettings) -> np.ndarray | None:
    return None if x.s_pn is None else near_duplicate_positive(x.s_pn, s.delta)


def _duplicate_positive(x: SuspicionInputs, s: SuspicionSettings) -> np.ndarray:
    return duplicate_positive(x.neg_texts, x.owner, x.positives)


def _duplicate_negative(x: SuspicionInputs, s: SuspicionSettings) -> np.ndarray:
    pairs = list(zip(x.neg_ids, x.neg_texts, strict=True))
    keys = {pair: passage_key(*pair) for pair in dict.fromkeys(pairs)}  # one key per distinct (id, text)
    return duplicate_negative([keys[pair] for pair in pairs], x.owner)


# Register, don't branch: reason → rule (None when the inputs it needs are absent).
REASON_RULES: Mapping[str, Callable[[SuspicionInputs, SuspicionSettings], np.ndarray | None]] = {
    "positive_aware": _positive_aware,
    "combined": _combined,
    "duplicate_positive": _duplicate_positive,
    "near_duplicate_positive": _near_duplicate,
    "duplicate_negative": _duplicate_negative,
}


def get_reason(name: str) -> Callable[[SuspicionInputs, SuspicionSettings], np.ndarray | None]:
    if name not in REASON_RULES:
        raise ValueError(f"unknown suspicion reason {name!r}; valid: {list(REASON_RULES)}")
    return REASON_RULES[name]


def text_reasons(x: SuspicionInputs) -> dict[str, np.ndarray]:
    """Each of :data:`TEXT_REASONS` per negative (bool): what the texts alone say, independent of
    the encoder and of any other record — so a shard of the records computes its rows' hits as the
    whole collection would."""
    return {name: np.asarray(REASON_RULES[name](x, SuspicionSettings()), dtype=bool) for name in TEXT_REASONS}


def probable(p: np.ndarray | None, n: int) -> np.ndarray:
    """``fn_probability ≥`` :data:`MIN_PROBABILITY` per negative (False where NaN or not scored)."""
    if p is None:
        return np.zeros(n, dtype=bool)
    return np.asarray(np.nan_to_num(np.asarray(p, dtype=np.float64), nan=-1.0) >= MIN_PROBABILITY, dtype=bool)


def suspect_negatives(x: SuspicionInputs, settings: SuspicionSettings = SuspicionSettings()) -> pd.DataFrame:
    """One row per negative: ``fn_<reason>`` for every reason (nullable boolean, NA where the reason
    could not be checked), ``fn_reasons`` (what holds, joined by ``;`` in :data:`SUSPECT_REASONS`
    order, ``fn_probability`` last when ``fn_probability ≥`` :data:`MIN_PROBABILITY`; empty when
    none), ``fn_suspect`` (``fn_reasons`` is not empty: the one rule of a suspect) and
    ``fn_probability`` (float, NaN without the encoder)."""
    n = len(x.owner)
    frame = pd.DataFrame(index=pd.RangeIndex(n))
    prob = _adjusted(x)
    hits = np.zeros((n, len(SUSPECT_REASONS)), dtype=bool)
    given = x.text_hits or {}
    for j, name in enumerate(REASONS):
        values = given[name] if name in given else get_reason(name)(x, settings)
        if values is None:
            frame[f"fn_{name}"] = pd.array([pd.NA] * n, dtype="boolean")
            continue
        hits[:, j] = values
        frame[f"fn_{name}"] = pd.array(values, dtype="boolean")
    hits[:, SUSPECT_REASONS.index(PROBABILITY_REASON)] = probable(prob, n)
    names = np.asarray(SUSPECT_REASONS, dtype=object)
    patterns, which = np.unique(hits, axis=0, return_inverse=True)  # join each distinct pattern once
    joined = np.asarray([";".join(names[row]) for row in patterns], dtype=object)
    frame["fn_reasons"] = joined[np.asarray(which).reshape(-1)] if n else np.asarray([], dtype=object)
    frame["fn_suspect"] = hits.any(axis=1)
    frame["fn_probability"] = np.full(n, np.nan) if prob is None else prob
    return frame


def checkable_reasons(encoder: bool, rule: str = "positive_aware") -> tuple[str, ...]:
    """The reasons an audit checks: with an encoder, all but the score rule not chosen; without
    one, the text reasons."""
    if not encoder:
        return TEXT_REASONS
    return tuple(r for r in REASONS if r == rule or r not in RULES)


def record_counts(negatives: pd.DataFrame, owner: np.ndarray, n_records: int) -> dict[str, np.ndarray]:
    """Per record: ``n_fn_suspect`` and ``n_fn_<reason>``; a reason that was not checked gives NaN
    (so its rate is NaN, not 0)."""
    out = {"n_fn_suspect": np.bincount(owner, weights=negatives["fn_suspect"].to_numpy(bool), minlength=n_records)}
    for name in REASONS:
        col = negatives[f"fn_{name}"]
        if col.isna().any():
            out[f"n_fn_{name}"] = np.full(n_records, np.nan)
        else:
            out[f"n_fn_{name}"] = np.bincount(owner, weights=col.to_numpy(bool), minlength=n_records)
    return {k: v if np.isnan(v).any() else v.astype(np.int64) for k, v in out.items()}


# a mining margin shows when the hardest negative of the file stops within MARGIN_EDGE below the
# positive-aware bar α·s(q,p) (a random or easy file stops far below it)
MARGIN_EDGE = 0.10


@dataclass(frozen=True)
class MarginMining:
    """The negatives stop short of the positive-aware bar: every s(q,n) < α·s(q,p) (all s(q,p) > 0)
    and the closest comes within :data:`MARGIN_EDGE` of it. ``relative`` = 1 − max s(q,n)/s(q,p)
    ∈ (1 − α, MARGIN_EDGE + 1 − α] (what sentence-transformers' ``relative_margin`` guarantees),
    ``absolute`` = min s(q,p) − s(q,n) > 0 (its ``absolute_margin``)."""

    relative: float
    absolute: float
    alpha: float


def margin_mining(s_qp: np.ndarray, s_qn: np.ndarray, alpha: float = 0.95) -> MarginMining | None:
    """:class:`MarginMining` when the per-negative scores (``s_qp`` per negative) show a mining margin,
    else None (also when some s(q,p) ≤ 0 or NaN, or there are no negatives)."""
    s_qp, s_qn = np.asarray(s_qp, dtype=np.float64), np.asarray(s_qn, dtype=np.float64)
    if not len(s_qn) or np.isnan(s_qp).any() or np.isnan(s_qn).any() or (s_qp <= 0).any():
        return None
    ratio = float((s_qn / s_qp).max())
    gap = float((s_qp - s_qn).min())
    if gap <= 0 or not alpha - MARGIN_EDGE <= ratio < alpha:
        return None
    return MarginMining(1.0 - ratio, gap, alpha)
