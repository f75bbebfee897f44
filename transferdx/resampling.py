"""Seeded bootstrap machinery: the one home of transferdx's resampling (DESIGN §3.4, §5).

Every interval in transferdx is a percentile bootstrap built from three parts kept here; each
caller keeps its own statistic (source ratios and margin quantiles in ``auditing/profiles``, the
composites in ``diagnostics/composite``, detector precision/recall in ``auditing/fn_eval``,
transfer orderings in ``analysis/agreement``, transfer T in ``analysis/validation``).

- **Streams.** A bootstrap draws from ``numpy.random.default_rng([seed, *keys])``
  (:func:`bootstrap_stream`); a source's stream adds a 32-bit key from the sha256 of its records'
  qids in sorted order (:func:`records_key`, :func:`bootstrap_rng`), never from its name: the same
  records under two file names get the same intervals, adding a source changes no other source's
  draws, and a caller that needs a stream of its own adds a constant key.
- **Draws.** Resample b of n units is ``rng.integers(0, n, n)`` (row b of :func:`draw_indices`),
  drawn in chunks of B (:func:`resample_indices`) or read as multiplicities, how often each unit
  appears (:func:`resample_counts`). Paired draws (:func:`paired_draws`) draw the units of each
  group once for every member (queries of a dataset, the same for every source), optionally with a
  second level: each member's replicates (seeds) drawn with replacement on top.
- **Intervals.** The (α/2, 1 − α/2) percentiles of the resampled values, α = 1 − confidence
  (:func:`percentile_bounds` for one vector, :func:`percentile_ci` column by column with NaN
  resamples left out); :func:`collect` stacks a statistic computed on each chunk of draws.

The draws are made in the order documented on each function: the same (seed, keys, sizes, B)
gives the same resamples, so every interval is reproducible to the byte. Imports numpy only, so
every room (diagnostics, auditing, analysis) can use it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

RESAMPLE_CHUNK = 200  # resamples drawn per call by resample_indices / resample_counts, at most
# (resamples × units) elements a chunk may hold: 2²² (32 MiB as int64 or float64), so a bootstrap over
# many units (a source of 10⁵ records) draws fewer resamples at a time instead of more memory
RESAMPLE_ELEMENTS = 2**22

Draw = TypeVar("Draw")


# ---------------------------------------------------------------------------------------------
# Streams
# ---------------------------------------------------------------------------------------------


def records_key(qids: Iterable[str]) -> int:
    """A stable 32-bit integer for a source's records: the first 4 bytes (little-endian) of
    sha256(``json.dumps(sorted(qids))``), the qids as strings. It depends on which records the
    source holds (the units its bootstrap resamples), not on what the source or its file is named."""
    if isinstance(qids, str | bytes):
        raise TypeError("records_key takes the records' qids (an iterable of str), not one string")
    text = json.dumps(sorted(str(q) for q in qids))
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:4], "little")


def bootstrap_stream(seed: int, *keys: int) -> np.random.Generator:
    """The generator ``default_rng([seed, *keys])`` (with no keys the same stream as
    ``default_rng(seed)``); ``keys`` keep the streams of different bootstraps apart."""
    return np.random.default_rng([seed, *keys])


def bootstrap_rng(seed: int, qids: Iterable[str], *keys: int) -> np.random.Generator:
    """The bootstrap stream of one source, from (seed, :func:`records_key` of its records' qids,
    *keys). Every bootstrap of a source's statistics (ratios, margin quantiles, composites) starts
    from ``bootstrap_rng(seed, qids)``, so resample b is the same set of records for all of them
    (and two sources over the same queries draw the same queries: a paired resample); a statistic
    with a stream of its own adds a key (the false-negative rates: 0xF1)."""
    return bootstrap_stream(seed, records_key(qids), *keys)


def check_bootstrap(resamples: int, confidence: float) -> None:
    """ValueError unless ``resamples`` ≥ 1 and ``confidence`` lies in (0, 1)."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence}")
    if resamples < 1:
        raise ValueError(f"resamples must be ≥ 1, got {resamples}")


# ---------------------------------------------------------------------------------------------
# Draws
# ---------------------------------------------------------------------------------------------


def draw_indices(n: int, rng: np.random.Generator, resamples: int) -> np.ndarray:
    """(resamples × n) unit indices, row b being resample b: ``rng.integers(0, n, (resamples, n))``,
    units drawn with replacement."""
    return rng.integers(0, n, size=(resamples, n))


def resample_chunk(n: int) -> int:
    """Resamples per chunk over ``n`` units: :data:`RESAMPLE_CHUNK`, fewer when a chunk would hold more
    than :data:`RESAMPLE_ELEMENTS` elements — ``max(1, min(200, 2²² // n))``, in [1, 200]. The draws do
    not depend on it (``rng.integers`` fills its output in order, so chunks of any size are the same
    stream); a statistic computed by BLAS on a chunk may differ in the last bit with its row count."""
    return max(1, min(RESAMPLE_CHUNK, RESAMPLE_ELEMENTS // max(n, 1)))


def resample_indices(
    n: int, rng: np.random.Generator, resamples: int, chunk: int | None = None
) -> Iterator[np.ndarray]:
    """Yield (B_chunk × n) matrices of the record indices of each bootstrap resample, drawn as
    ``rng.integers(0, n, (B_chunk, n))``, the same stream as ``scipy.stats.bootstrap`` draws for one
    sample; B_chunk = ``chunk`` (default :func:`resample_chunk` of n), the last chunk the rest."""
    step = resample_chunk(n) if chunk is None else chunk
    for start in range(0, resamples, step):
        yield draw_indices(n, rng, min(step, resamples - start))


def resample_counts(n: int, rng: np.random.Generator, resamples: int, chunk: int | None = None) -> Iterator[np.ndarray]:
    """Yield (B_chunk × n) float64 matrices of how often each record appears in each bootstrap
    resample (the counts of :func:`resample_indices`; each row sums to n). A chunk holds its indices
    and its counts, one row counted at a time."""
    for idx in resample_indices(n, rng, resamples, chunk):
        counts = np.empty(idx.shape, dtype=np.float64)
        for b, row in enumerate(idx):
            counts[b] = np.bincount(row, minlength=n)
        yield counts


@dataclass(frozen=True)
class PairedDraw:
    """One group's draws for all B resamples: ``units`` (B × n) indices of the group's units, the
    same for every member (paired); ``replicates[j]`` (B × k_j) indices of member j's replicates
    (empty without a second level)."""

    units: np.ndarray
    replicates: tuple[np.ndarray, ...] = ()


def paired_draws(
    rng: np.random.Generator,
    units: Sequence[int],
    resamples: int,
    replicates: Sequence[Sequence[int]] | None = None,
) -> Iterator[PairedDraw]:
    """The paired (and, with ``replicates``, two-level) bootstrap draws, one :class:`PairedDraw` per
    group in order.

    Group g has ``units[g]`` units (a dataset's queries); each resample draws them with replacement
    (:func:`draw_indices`), one draw shared by every member (source). ``replicates[g][j]``: how many
    replicates (seeds) member j has in group g; each resample then also draws those with
    replacement. Order of the stream: group by group, the units first, then each member's
    replicates in member order."""
    for g, n in enumerate(units):
        drawn = draw_indices(n, rng, resamples)
        reps = tuple(draw_indices(k, rng, resamples) for k in replicates[g]) if replicates is not None else ()
        yield PairedDraw(drawn, reps)


# ---------------------------------------------------------------------------------------------
# Intervals
# ---------------------------------------------------------------------------------------------


def collect(draws: Iterable[Draw], statistic: Callable[[Draw], np.ndarray]) -> np.ndarray:
    """(B × k) values of ``statistic`` on each chunk of draws (it maps a chunk of B_chunk resamples
    to B_chunk × k values), stacked in draw order."""
    return np.concatenate([statistic(chunk) for chunk in draws])


def percentile_bounds(values: np.ndarray, confidence: float) -> tuple[float, float]:
    """The (α/2, 1 − α/2) percentiles of ``values`` (numpy's default "linear" quantile), α = 1 −
    confidence; NaN when a value is NaN."""
    tail = (1.0 - confidence) / 2.0
    return float(np.quantile(values, tail)), float(np.quantile(values, 1.0 - tail))


def percentile_ci(stats: np.ndarray, confidence: float) -> tuple[np.ndarray, np.ndarray]:
    """The (α/2, 1 − α/2) percentiles of each column of ``stats`` (resamples × n_stats), NaN
    resamples left out (NaN where every resample is NaN)."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence}")
    k = stats.shape[1]
    low = np.full(k, np.nan)
    high = np.full(k, np.nan)
    for j in range(k):
        col = stats[:, j][~np.isnan(stats[:, j])]
        if len(col):
            low[j], high[j] = percentile_bounds(col, confidence)
    return low, high
