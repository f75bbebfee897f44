"""The miner's own scores, put to use (design §3.9, "The miner's scores").

A file written by sentence-transformers' ``mine_hard_negatives(..., output_scores=True)`` (or
FlagEmbedding's ``pos_scores`` / ``neg_scores``) carries the miner's similarity of each passage to its
query; the readers keep it on :attr:`~transferdx.inputs.records.Passage.score`. Here, per negative,
the miner's s(q,n) and the miner's positive score as sentence-transformers uses it (the **minimum**
over the record's positives: ``hard_negatives.py`` takes the harder positive for its margins);
per source, the **agreement** of the miner's scores with the audit's encoder (Spearman's ρ of the
miner's s(q,n) against the audit's over the source's negatives), and what the library's filters would
do **on those scores**, with its exact rules (p = the minimum positive score of the query):

- ``absolute_margin`` a drops a negative when s_n + a > p;
- ``relative_margin`` r drops it when s_n > p − |p|·r;
- ``max_score`` m drops it when s_n > m;

each computed in float32 as the library does. Per setting: negatives dropped, Σ ``fn_probability``
over them (false negatives expected removed), Σ (1 − ``fn_probability``) (hard negatives expected
lost) and the queries left with no negative. The setting the verdict names (:func:`choose`) is the
one with the largest Σ (2·``fn_probability`` − 1) over what it drops, ties to the milder (fewer
dropped, then :data:`CANDIDATES` order); none when no setting's Σ is positive. Pure: arrays in,
numbers out."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import scipy.stats

from transferdx.inputs.records import Record

# The candidate settings: sentence-transformers' relative margins around the 0.05 its docs show, the
# same values as absolute margins (cosine units), and the docs' max_score=0.8 (only on a cosine scale).
RELATIVE_MARGINS = (0.02, 0.05, 0.1)
ABSOLUTE_MARGINS = (0.02, 0.05, 0.1)
MAX_SCORES = (0.8,)

# Spearman's ρ of the miner's s(q,n) with the audit's at or above this: the file reads as mined by the
# audit's own encoder (the same model gives ρ ≈ 1; float noise only), so the audit sees what the miner saw.
SAME_ENCODER_MIN = 0.95

# fewest negatives scored by both for the agreement to be measured (a rank correlation of two is ±1)
AGREEMENT_MIN_PAIRS = 3


@dataclass(frozen=True)
class FilterSetting:
    """One of sentence-transformers' ``mine_hard_negatives`` filters with its value."""

    kind: str  # "relative_margin", "absolute_margin" or "max_score"
    value: float

    @property
    def text(self) -> str:
        """As the keyword argument is written: ``relative_margin=0.05``."""
        return f"{self.kind}={self.value:g}"

    def drops(self, s_n: np.ndarray, p: np.ndarray) -> np.ndarray:
        """Which negatives the library's rule drops, given each negative's score ``s_n`` and its query's
        minimum positive score ``p`` (float32 arithmetic, as the library's tensors)."""
        s = np.asarray(s_n, dtype=np.float32)
        pos = np.asarray(p, dtype=np.float32)
        v = np.float32(self.value)
        if self.kind == "absolute_margin":
            out: np.ndarray = s + v > pos
        elif self.kind == "relative_margin":
            out = s > pos - np.abs(pos) * v
        elif self.kind == "max_score":
            out = s > v
        else:
            raise ValueError(f"unknown filter {self.kind!r}")
        return out


CANDIDATES: tuple[FilterSetting, ...] = (
    *(FilterSetting("relative_margin", r) for r in RELATIVE_MARGINS),
    *(FilterSetting("absolute_margin", a) for a in ABSOLUTE_MARGINS),
    *(FilterSetting("max_score", m) for m in MAX_SCORES),
)


@dataclass(frozen=True)
class FilterOutcome:
    """What one setting does to a source's negatives: ``dropped`` negatives, ``expected_false`` = Σ
    ``fn_probability`` over them, ``expected_hard`` = Σ (1 − ``fn_probability``) (both None where a
    dropped negative is not scored), ``emptied`` = queries left with no negative."""

    setting: FilterSetting
    dropped: int
    expected_false: float | None
    expected_hard: float | None
    emptied: int

    @property
    def gain(self) -> float | None:
        """Σ (2·``fn_probability`` − 1) over the dropped negatives: false negatives expected removed
        minus hard negatives expected lost (None where not scored)."""
        if self.expected_false is None or self.expected_hard is None:
            return None
        return self.expected_false - self.expected_hard


@dataclass(frozen=True)
class MinerFacts:
    """A source's miner-score facts: ``scores`` says whose scores the filters read (``"file"``: the
    miner's own, every negative and positive of the source carrying one; ``"encoder"``: the audit's
    s(q,n) and s(q,p0) stand in), ``n_scored`` its negatives carrying the miner's score, ``n_negatives``
    all of them, ``agreement`` Spearman's ρ of the miner's s(q,n) with the audit's (None: not
    measured), ``cosine`` whether the scores lie in [−1, 1] (``max_score`` is only tried then),
    ``outcomes`` every candidate setting's :class:`FilterOutcome` and ``chosen`` :func:`choose`'s pick."""

    scores: str
    n_scored: int
    n_negatives: int
    agreement: float | None
    cosine: bool
    outcomes: tuple[FilterOutcome, ...]
    chosen: FilterOutcome | None

    @property
    def same_encoder(self) -> bool:
        """The miner's scores rank the negatives as the audit's encoder does (ρ ≥ :data:`SAME_ENCODER_MIN`)."""
        return self.agreement is not None and self.agreement >= SAME_ENCODER_MIN

    @property
    def scored(self) -> bool:
        """Whether the Σ are defined (the audit's encoder scored every negative)."""
        return all(o.gain is not None for o in self.outcomes)


def miner_scores(records: Sequence[Record]) -> tuple[np.ndarray, np.ndarray]:
    """Per negative of ``records`` (in their order): the miner's s(q,n) and the miner's positive score
    of its record as sentence-transformers' margins read it, the minimum over the record's positives;
    NaN where the negative has no score, or where some positive of its record has none."""
    neg = np.fromiter(
        (math.nan if n.score is None else float(n.score) for r in records for n in r.negatives), dtype=np.float64
    )
    per_record = np.asarray([_min_positive(r) for r in records], dtype=np.float64)
    counts = np.fromiter((len(r.negatives) for r in records), dtype=np.int64, count=len(records))
    return neg, np.repeat(per_record, counts)


def _min_positive(record: Record) -> float:
    """The minimum of the record's positives' scores; NaN where it has none or one lacks a score."""
    scores = [p.score for p in record.positives]
    if not scores or any(x is None for x in scores):
        return math.nan
    return min(float(x) for x in scores if x is not None)


def miner_agreement(miner: np.ndarray, audit: np.ndarray) -> float | None:
    """Spearman's rank correlation of the miner's s(q,n) with the audit's over the negatives both
    scored (``scipy.stats.spearmanr``: average ranks for ties); None with fewer than
    :data:`AGREEMENT_MIN_PAIRS` of them or where either is constant (undefined)."""
    a, b = np.asarray(miner, dtype=np.float64), np.asarray(audit, dtype=np.float64)
    both = np.isfinite(a) & np.isfinite(b)
    if both.sum() < AGREEMENT_MIN_PAIRS or np.ptp(a[both]) == 0 or np.ptp(b[both]) == 0:
        return None
    rho = float(scipy.stats.spearmanr(a[both], b[both]).statistic)
    return None if math.isnan(rho) else rho


def filter_outcomes(
    s_n: np.ndarray,
    p: np.ndarray,
    owner: np.ndarray,
    probability: np.ndarray | None,
    settings: Sequence[FilterSetting] = CANDIDATES,
    n_queries: int | None = None,
) -> tuple[FilterOutcome, ...]:
    """Each of ``settings`` applied to negatives with scores ``s_n``, their query's minimum positive
    score ``p`` and their query ``owner`` (0-based, ``n_queries`` queries; default the largest + 1),
    with ``probability`` (``fn_probability`` per negative; None or NaN: the Σ are not scored)."""
    owner = np.asarray(owner, dtype=np.int64)
    n = int(n_queries if n_queries is not None else (owner.max() + 1 if len(owner) else 0))
    prob = np.full(len(owner), np.nan) if probability is None else np.asarray(probability, dtype=np.float64)
    had = np.bincount(owner, minlength=n) > 0
    out = []
    for setting in settings:
        hit = setting.drops(s_n, p)
        left = np.bincount(owner[~hit], minlength=n)
        dropped = prob[hit]
        scored = not np.isnan(dropped).any()
        out.append(
            FilterOutcome(
                setting,
                int(hit.sum()),
                float(dropped.sum()) if scored else None,
                float((1.0 - dropped).sum()) if scored else None,
                int((had & (left == 0)).sum()),
            )
        )
    return tuple(out)


def choose(outcomes: Sequence[FilterOutcome]) -> FilterOutcome | None:
    """The setting with the largest Σ (2·``fn_probability`` − 1) over the negatives it drops, ties to
    the milder (fewer dropped, then the given order); None when no setting's Σ is positive, or any is
    not scored (the choice is not made on part of the scores)."""
    if not outcomes or any(o.gain is None for o in outcomes):
        return None
    order = sorted(range(len(outcomes)), key=lambda i: (-(outcomes[i].gain or 0.0), outcomes[i].dropped, i))
    best = outcomes[order[0]]
    return best if (best.gain or 0.0) > 0 else None


def source_miner_facts(
    miner_s_n: np.ndarray,
    miner_p: np.ndarray,
    audit_s_n: np.ndarray | None,
    audit_p: np.ndarray | None,
    owner: np.ndarray,
    probability: np.ndarray | None,
    n_queries: int,
) -> MinerFacts | None:
    """:class:`MinerFacts` of one source's negatives (``owner``: each negative's query, 0-based of
    ``n_queries``). The file's own scores are read when every negative and its query's positives carry
    one; otherwise the audit's s(q,n) and s(q,p0) stand in (``audit_s_n`` / ``audit_p``; None in a
    lexical audit, and with no file scores either, None is returned: nothing to read)."""
    miner_s_n, miner_p = np.asarray(miner_s_n, dtype=np.float64), np.asarray(miner_p, dtype=np.float64)
    n_scored = int(np.isfinite(miner_s_n).sum())
    own = len(miner_s_n) > 0 and bool(np.isfinite(miner_s_n).all() and np.isfinite(miner_p).all())
    if own:
        s_n, p, whose = miner_s_n, miner_p, "file"
    elif audit_s_n is not None and audit_p is not None:
        s_n, p, whose = np.asarray(audit_s_n, dtype=np.float64), np.asarray(audit_p, dtype=np.float64), "encoder"
    else:
        return None
    cosine = bool(len(s_n) and np.abs(s_n).max() <= 1.0 and np.abs(p).max() <= 1.0)
    settings = tuple(c for c in CANDIDATES if cosine or c.kind != "max_score")
    outcomes = filter_outcomes(s_n, p, owner, probability, settings, n_queries)
    agree = miner_agreement(miner_s_n, audit_s_n) if audit_s_n is not None and n_scored else None
    return MinerFacts(whose, n_scored, len(s_n), agree, cosine, outcomes, choose(outcomes))
