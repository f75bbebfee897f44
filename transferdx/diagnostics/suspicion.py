"""False-negative suspicion (design §3.9): per negative, the reasons to suspect that it answers the
query. Pure functions, arrays in and arrays out; the audit (``auditing/core.py``) feeds them.

Reasons (:data:`REASONS`, in this order wherever they are joined):

- ``positive_aware``: s(q,n) ≥ α · s(q,p) (NV-Retriever's TopK-PercPos rule, α = 0.95); when
  s(q,p) ≤ 0 the rule reads s(q,n) ≥ s(q,p). A tie at exactly α · s(q,p) is suspected.
- ``duplicate_positive``: the negative's normalised text equals the normalised text of any of the
  record's positives (:func:`normalise_text`).
- ``near_duplicate_positive``: s(p0, n) ≥ δ (passage–passage cosine to the reference positive,
  δ = 0.95).
- ``duplicate_negative``: the same passage (same id; same normalised text when the id is absent or
  empty) appeared earlier among the record's negatives; the first occurrence is not suspected.

``positive_aware`` and ``near_duplicate_positive`` need the frozen encoder (:data:`ENCODER_REASONS`);
a lexical-only audit leaves them *unchecked* (NA), never False.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

REASONS = ("positive_aware", "duplicate_positive", "near_duplicate_positive", "duplicate_negative")
ENCODER_REASONS = frozenset({"positive_aware", "near_duplicate_positive"})
TEXT_REASONS = tuple(r for r in REASONS if r not in ENCODER_REASONS)


@dataclass(frozen=True)
class SuspicionSettings:
    """α of ``positive_aware`` and δ of ``near_duplicate_positive``."""

    alpha: float = 0.95
    delta: float = 0.95

    def __post_init__(self) -> None:
        if not 0 < self.alpha <= 1:
            raise ValueError(f"suspicion alpha must lie in (0, 1], got {self.alpha}")
        if not -1 <= self.delta <= 1:
            raise ValueError(f"suspicion delta must lie in [-1, 1], got {self.delta}")


def normalise_text(text: str) -> str:
    """Unicode NFKC, case-folded, runs of whitespace collapsed to one space, ends stripped."""
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


def positive_aware(s_qp: np.ndarray, s_qn: np.ndarray, alpha: float = 0.95) -> np.ndarray:
    """s(q,n) ≥ α·s(q,p) where s(q,p) > 0, else s(q,n) ≥ s(q,p) (``s_qp`` per negative)."""
    s_qp = np.asarray(s_qp, dtype=np.float64)
    s_qn = np.asarray(s_qn, dtype=np.float64)
    bar = np.where(s_qp > 0, alpha * s_qp, s_qp)
    return np.asarray(s_qn >= bar, dtype=bool)


def near_duplicate_positive(s_pn: np.ndarray, delta: float = 0.95) -> np.ndarray:
    """cos(p0, n) ≥ δ."""
    return np.asarray(np.asarray(s_pn, dtype=np.float64) >= delta, dtype=bool)


def duplicate_positive(negatives: Sequence[str], owner: np.ndarray, positives: Sequence[Sequence[str]]) -> np.ndarray:
    """Negative k (of record ``owner[k]``) has the normalised text of any positive of its record.
    ``negatives`` and ``positives`` are raw texts; both are normalised here."""
    pos_sets = [{normalise_text(p) for p in ps} for ps in positives]
    return np.fromiter(
        (normalise_text(t) in pos_sets[int(o)] for t, o in zip(negatives, owner, strict=True)),
        dtype=bool,
        count=len(negatives),
    )


def passage_key(passage_id: str | None, text: str) -> str:
    """Identity of a passage for ``duplicate_negative``: its id, or its normalised text when the id
    is absent or empty."""
    return f"id:{passage_id}" if passage_id else f"text:{normalise_text(text)}"


def duplicate_negative(keys: Sequence[str], owner: np.ndarray) -> np.ndarray:
    """Negative k repeats an earlier negative of the same record (same :func:`passage_key`); the
    first occurrence is not suspected."""
    seen: set[tuple[int, str]] = set()
    out = np.zeros(len(keys), dtype=bool)
    for k, (key, o) in enumerate(zip(keys, owner, strict=True)):
        item = (int(o), key)
        out[k] = item in seen
        seen.add(item)
    return out


def suspicion_score(s_qp: np.ndarray, s_qn: np.ndarray, alpha: float = 0.95) -> np.ndarray:
    """s(q,n) − α·s(q,p): how far past the ``positive_aware`` bar a negative sits (suspects.csv is
    sorted by it, most suspicious first)."""
    return np.asarray(s_qn, dtype=np.float64) - alpha * np.asarray(s_qp, dtype=np.float64)


@dataclass(frozen=True)
class SuspicionInputs:
    """Per negative: its record index (``owner``), id and text; per record: the positive texts; and,
    when an encoder scored them, s(q,p) and s(q,n) per negative and s(p0,n)."""

    owner: np.ndarray
    neg_ids: Sequence[str | None]
    neg_texts: Sequence[str]
    positives: Sequence[Sequence[str]]
    s_qp: np.ndarray | None = None
    s_qn: np.ndarray | None = None
    s_pn: np.ndarray | None = None


def _positive_aware(x: SuspicionInputs, s: SuspicionSettings) -> np.ndarray | None:
    if x.s_qp is None or x.s_qn is None:
        return None
    return positive_aware(x.s_qp, x.s_qn, s.alpha)


def _near_duplicate(x: SuspicionInputs, s: SuspicionSettings) -> np.ndarray | None:
    return None if x.s_pn is None else near_duplicate_positive(x.s_pn, s.delta)


def _duplicate_positive(x: SuspicionInputs, s: SuspicionSettings) -> np.ndarray:
    return duplicate_positive(x.neg_texts, x.owner, x.positives)


def _duplicate_negative(x: SuspicionInputs, s: SuspicionSettings) -> np.ndarray:
    keys = [passage_key(i, t) for i, t in zip(x.neg_ids, x.neg_texts, strict=True)]
    return duplicate_negative(keys, x.owner)


# Register, don't branch: reason → rule (None when the inputs it needs are absent).
REASON_RULES: Mapping[str, Callable[[SuspicionInputs, SuspicionSettings], np.ndarray | None]] = {
    "positive_aware": _positive_aware,
    "duplicate_positive": _duplicate_positive,
    "near_duplicate_positive": _near_duplicate,
    "duplicate_negative": _duplicate_negative,
}


def get_reason(name: str) -> Callable[[SuspicionInputs, SuspicionSettings], np.ndarray | None]:
    if name not in REASON_RULES:
        raise ValueError(f"unknown suspicion reason {name!r}; valid: {list(REASON_RULES)}")
    return REASON_RULES[name]


def suspect_negatives(x: SuspicionInputs, settings: SuspicionSettings = SuspicionSettings()) -> pd.DataFrame:
    """One row per negative: ``fn_<reason>`` for every reason (nullable boolean, NA where the reason
    could not be checked), ``fn_reasons`` (the reasons that hold, joined by ``;`` in :data:`REASONS`
    order, empty when none) and ``fn_suspect`` (any checked reason holds)."""
    n = len(x.neg_texts)
    frame = pd.DataFrame(index=pd.RangeIndex(n))
    hits = np.zeros((n, len(REASONS)), dtype=bool)
    for j, name in enumerate(REASONS):
        values = get_reason(name)(x, settings)
        if values is None:
            frame[f"fn_{name}"] = pd.array([pd.NA] * n, dtype="boolean")
            continue
        hits[:, j] = values
        frame[f"fn_{name}"] = pd.array(values, dtype="boolean")
    names = np.asarray(REASONS, dtype=object)
    frame["fn_reasons"] = [";".join(names[row]) for row in hits]
    frame["fn_suspect"] = hits.any(axis=1)
    return frame


def checked_reasons(encoder: bool) -> tuple[str, ...]:
    """The reasons an audit checks: all of them with an encoder, the text reasons without."""
    return REASONS if encoder else TEXT_REASONS


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
