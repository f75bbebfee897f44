"""Known-truth validation: does the audit predict which sources train worse? (pure functions).

Inputs are per-query scores of every trained (source, seed) model and of the frozen model:
``scores[source][dataset][seed]`` = nDCG@10 per query (the same query order everywhere), and a
profile (one row per source: ``kind``, diagnostics, ``flags``). Two sources of noise enter every
interval through one *two-level bootstrap*: each resample draws the queries of each dataset with
replacement (the same draw for every source: paired) and, per source, its seeds with replacement.
A source's transfer T = mean over datasets of (mean over seeds of mean over queries), range [0, 1].

- :func:`transfer_estimates`: T, seed-to-seed spread, query-only and query+seed intervals, Δ vs frozen.
- :func:`pairwise_differences`: T_a − T_b for every pair with its interval, a two-sided bootstrap
  p-value (Holm-corrected over all pairs) and whether every seed of one beats every seed of the
  other; *established* = both.
- :func:`flag_check` — (a): does each flag mark only sources that train worse than every unflagged
  genuine source, and with what evidence.
- :func:`diagnostic_agreement` — (b): Spearman and Kendall between each diagnostic (times its
  direction) and T, over all trained sources and genuine only, with intervals over the resamples.
- :func:`dose_response` — (c): T and each diagnostic along the random-mix ladder.
- :func:`minimum_detectable_difference`: per pair, the difference this design detects with 80%
  power, so a "not established" reads as "too small to see" or "absent".
- :func:`transfer_by_dataset`: T on each benchmark set on its own.
- :func:`validation_of_study`: all of it for one study (the random-mix ladder's doses:
  :func:`ladder_doses`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import scipy.stats

from transferdx.resampling import bootstrap_stream, paired_draws, percentile_bounds

if TYPE_CHECKING:
    from transferdx.analysis.study import StudyData

FROZEN = "(frozen)"  # the untrained backbone's row in the transfer table
Scores = Mapping[str, Mapping[str, Mapping[int, np.ndarray]]]  # source → dataset → seed → per query


@dataclass(frozen=True)
class Resamples:
    """Bootstrap draws of T: ``values[r, j]`` for source ``sources[j]``; ``frozen[r]`` for the
    frozen model on the same query draws (NaN when there is none)."""

    sources: tuple[str, ...]
    values: np.ndarray
    frozen: np.ndarray

    def of(self, source: str) -> np.ndarray:
        return self.values[:, self.sources.index(source)]


def _datasets(scores: Scores) -> list[str]:
    sets = [set(by_dataset) for by_dataset in scores.values()]
    return sorted(set.intersection(*sets)) if sets else []


def _check(scores: Scores, frozen: Mapping[str, np.ndarray] | None) -> list[str]:
    datasets = _datasets(scores)
    if not datasets:
        raise ValueError("no dataset is evaluated for every trained source")
    for d in datasets:
        lengths = {len(np.asarray(v)) for by in scores.values() for v in by[d].values()}
        if frozen is not None and d in frozen:
            lengths.add(len(np.asarray(frozen[d])))
        if len(lengths) != 1:
            raise ValueError(f"dataset {d!r}: per-query scores of different lengths {sorted(lengths)}")
    for source, by in scores.items():
        if any(not by[d] for d in datasets):
            raise ValueError(f"source {source!r} has no seed evaluated")
    return datasets


def point(scores: Scores) -> dict[str, float]:
    """T per source: mean over datasets of the mean over seeds of the mean over queries."""
    datasets = _check(scores, None)
    return {
        s: float(np.mean([np.mean([np.mean(v) for v in by[d].values()]) for d in datasets]))
        for s, by in sorted(scores.items())
    }


def seed_values(scores: Scores) -> dict[str, dict[int, float]]:
    """T of each seed on its own (mean over datasets of the mean over queries)."""
    datasets = _check(scores, None)
    out: dict[str, dict[int, float]] = {}
    for s, by in sorted(scores.items()):
        seeds = sorted(set.intersection(*(set(by[d]) for d in datasets)))
        out[s] = {k: float(np.mean([np.mean(by[d][k]) for d in datasets])) for k in seeds}
    return out


def resample(
    scores: Scores,
    frozen: Mapping[str, np.ndarray] | None = None,
    resamples: int = 10000,
    seed: int = 0,
    seeds: bool = True,
) -> Resamples:
    """The two-level bootstrap of T (``seeds=False``: queries only, seeds held at their mean).

    :func:`transferdx.resampling.paired_draws` on the stream (seed, 0x7A): per dataset, one draw of
    its queries shared by every source (and the frozen model), then each source's seeds."""
    datasets = _check(scores, frozen)
    sources = tuple(sorted(scores))
    values = np.zeros((resamples, len(sources)))
    frozen_values = np.zeros(resamples) if frozen is not None and all(d in frozen for d in datasets) else None
    units = [len(next(iter(scores[sources[0]][d].values()))) for d in datasets]
    replicates = [[len(scores[s][d]) for s in sources] for d in datasets] if seeds else None
    draws = paired_draws(bootstrap_stream(seed, 0x7A), units, resamples, replicates)
    for d, draw in zip(datasets, draws, strict=True):
        idx = draw.units
        for j, s in enumerate(sources):
            seed_ids = sorted(scores[s][d])
            per_seed = np.stack([np.asarray(scores[s][d][k], dtype=np.float64) for k in seed_ids])  # K × Q
            if not seeds:
                per_seed = per_seed.mean(axis=0, keepdims=True)
            means = per_seed[:, idx].mean(axis=2)  # K × R
            pick = draw.replicates[j] if seeds else np.zeros((resamples, 1), dtype=int)
            values[:, j] += np.take_along_axis(means.T, pick, axis=1).mean(axis=1) / len(datasets)
        if frozen_values is not None:
            frozen_values += np.asarray(frozen[d], dtype=np.float64)[idx].mean(axis=1) / len(datasets)  # type: ignore[index]
    return Resamples(sources, values, frozen_values if frozen_values is not None else np.full(resamples, np.nan))


def bootstrap_p(diff: np.ndarray) -> float:
    """Two-sided bootstrap p-value of a difference being 0: 2·(min(#≤0, #≥0) + 1)/(R + 1), capped at 1."""
    r = len(diff)
    tail = min(int(np.sum(diff <= 0)), int(np.sum(diff >= 0)))
    return float(min(1.0, 2.0 * (tail + 1) / (r + 1)))


Z_POWER_80 = float(scipy.stats.norm.ppf(0.8))


def minimum_detectable_difference(diff: np.ndarray, alpha: float = 0.05, power: float = 0.8) -> float:
    """MDD = (z_{1−α/2} + z_power) · SD*(diff): the true difference a two-sided test at level α finds
    with probability ``power``, SD* the bootstrap SD of the paired difference (seed and query
    variance as measured). Range ≥ 0; NaN with fewer than two draws."""
    draws = np.asarray(diff, dtype=np.float64)
    if len(draws) < 2:
        return float("nan")
    z = float(scipy.stats.norm.ppf(1 - alpha / 2) + scipy.stats.norm.ppf(power))
    return z * float(np.std(draws, ddof=1))


def transfer_estimates(
    scores: Scores,
    frozen: Mapping[str, np.ndarray] | None,
    kinds: Mapping[str, str],
    resamples: int = 10000,
    confidence: float = 0.95,
    seed: int = 0,
    boot: Resamples | None = None,
) -> pd.DataFrame:
    """One row per trained source (best first): ``ndcg10`` = T; ``seed_sd`` (ddof 1; NaN for one
    seed), ``seed_min``/``seed_max``, ``seeds`` (per-seed T); ``query_ci_*`` (queries only);
    ``ci_*`` (queries and seeds); ``delta_frozen`` = T − T_frozen with its interval and
    ``p_frozen`` (two-sided bootstrap); last, the frozen backbone's row (kind ``frozen``, its query
    interval) when ``frozen`` is given. ``boot``: the two-level draws already made (with ``frozen``)
    by :func:`resample` for these arguments, so that callers draw them once."""
    both = boot if boot is not None else resample(scores, frozen, resamples, seed)
    queries = resample(scores, frozen, resamples, seed, seeds=False)
    t, per_seed = point(scores), seed_values(scores)
    datasets = _datasets(scores)
    t_frozen = float(np.mean([np.mean(frozen[d]) for d in datasets])) if frozen is not None else float("nan")
    rows = []
    for s in sorted(t, key=lambda s: (-t[s], s)):
        vals = np.array(list(per_seed[s].values()))
        row: dict[str, Any] = {
            "source": s,
            "kind": kinds.get(s, ""),
            "n_seeds": len(vals),
            "ndcg10": t[s],
            "seed_sd": float(np.std(vals, ddof=1)) if len(vals) > 1 else float("nan"),
            "seed_min": float(vals.min()),
            "seed_max": float(vals.max()),
            "seeds": " ".join(f"{k}:{v:.4f}" for k, v in per_seed[s].items()),
        }
        row["query_ci_low"], row["query_ci_high"] = percentile_bounds(queries.of(s), confidence)
        row["ci_low"], row["ci_high"] = percentile_bounds(both.of(s), confidence)
        diff = both.of(s) - both.frozen
        row["delta_frozen"] = t[s] - t_frozen
        row["delta_ci_low"], row["delta_ci_high"] = percentile_bounds(diff, confidence) if frozen else (np.nan, np.nan)
        row["p_frozen"] = bootstrap_p(diff) if frozen else float("nan")
        rows.append(row)
    if frozen is not None:
        low, high = percentile_bounds(both.frozen, confidence)
        rows.append(
            {
                "source": FROZEN,
                "kind": "frozen",
                "n_seeds": 0,
                "ndcg10": t_frozen,
                "query_ci_low": low,
                "query_ci_high": high,
                "ci_low": low,
                "ci_high": high,
            }
        )
    return pd.DataFrame(rows)


def transfer_by_dataset(
    scores: Scores,
    frozen: Mapping[str, np.ndarray] | None,
    kinds: Mapping[str, str],
    resamples: int = 10000,
    confidence: float = 0.95,
    seed: int = 0,
) -> pd.DataFrame:
    """:func:`transfer_estimates` on each benchmark set on its own (column ``dataset``): a source's
    nDCG@10 there, with its two-level interval and Δ vs frozen."""
    frames = []
    for d in _datasets(scores):
        one = {s: {d: by[d]} for s, by in scores.items()}
        one_frozen = {d: frozen[d]} if frozen is not None and d in frozen else None
        frame = transfer_estimates(one, one_frozen, kinds, resamples, confidence, seed)
        frame.insert(0, "dataset", d)
        frames.append(frame)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def pairwise_differences(
    scores: Scores,
    resamples: int = 10000,
    confidence: float = 0.95,
    alpha: float = 0.05,
    seed: int = 0,
    boot: Resamples | None = None,
) -> pd.DataFrame:
    """Every pair (a, b) with T_a ≥ T_b: ``diff`` = T_a − T_b and its interval; ``p`` (two-sided,
    two-level bootstrap) and ``p_holm`` (Holm over all pairs); ``seed_consistent``: the smallest
    seed of a beats the largest of b; ``established`` = p_holm < alpha and seed_consistent."""
    from statsmodels.stats.multitest import multipletests

    boot = boot if boot is not None else resample(scores, None, resamples, seed)
    t, per_seed = point(scores), seed_values(scores)
    rows = []
    for x, y in combinations(sorted(t), 2):
        a, b = (x, y) if (t[x], y) >= (t[y], x) else (y, x)
        diff = boot.of(a) - boot.of(b)
        low, high = percentile_bounds(diff, confidence)
        rows.append(
            {
                "a": a,
                "b": b,
                "diff": t[a] - t[b],
                "ci_low": low,
                "ci_high": high,
                "p": bootstrap_p(diff),
                "seed_consistent": bool(min(per_seed[a].values()) > max(per_seed[b].values())),
                "mdd": minimum_detectable_difference(diff, alpha),
                "diff_draws": diff,
            }
        )
    m = max(1, len(rows))
    for row in rows:
        row["mdd_holm"] = minimum_detectable_difference(row.pop("diff_draws"), alpha / m)
    columns = ["a", "b", "diff", "ci_low", "ci_high", "p", "seed_consistent", "mdd", "mdd_holm"]
    frame = pd.DataFrame(rows, columns=columns)
    if len(frame):
        reject, p_holm, *_ = multipletests(frame["p"], alpha=alpha, method="holm")
        frame["p_holm"] = p_holm
        frame["established"] = reject & frame["seed_consistent"].to_numpy()
    else:
        frame["p_holm"], frame["established"] = [], []
    return frame.sort_values(["a", "b"], key=lambda c: c.map(lambda s: (-t[s], s))).reset_index(drop=True)


def _flag_sets(profile: pd.DataFrame) -> dict[str, set[str]]:
    """Source → the flag names it carries: envelope rules (``flags``) and absolute rules
    (``absolute_flags``), names joined by ';'."""
    out: dict[str, set[str]] = {s: set() for s in profile.index}
    for column in ("flags", "absolute_flags"):
        if column not in profile.columns:
            continue
        for s, v in profile[column].items():
            out[s] |= set(filter(None, str(v if isinstance(v, str) else "").split(";")))
    return out


def _pair(pairs: pd.DataFrame, a: str, b: str) -> Mapping[str, Any] | None:
    hit = pairs[(pairs["a"] == a) & (pairs["b"] == b)]
    return hit.iloc[0].to_dict() if len(hit) else None


def flag_check(
    profile: pd.DataFrame,
    transfer: pd.DataFrame,
    pairs: pd.DataFrame,
    rules: Sequence[str],
    absolute: Sequence[str] = (),
) -> pd.DataFrame:
    """(a) For each flag rule (and ``any`` flag, and ``any_absolute``: any of the ``absolute`` rules)
    and each trained source it flags: is its T below
    every unflagged genuine source's (``worse_than_all``), established against each of them
    (``established_vs_all``), and the gap to the weakest unflagged genuine source
    (``margin`` = T_g − T_f, with that pair's interval and Holm p). A rule that flags no trained
    source gets one row with ``source`` empty. ``profile`` is indexed by source."""
    t = transfer.set_index("source")["ndcg10"].to_dict()
    kinds = transfer.set_index("source")["kind"].to_dict()
    flagged_by = _flag_sets(profile.loc[[s for s in t if s in profile.index]])
    rows = []
    absolute_names = set(absolute)

    def carries(source: str, rule: str) -> bool:
        names = flagged_by.get(source, set())
        if rule == "any":
            return bool(names)
        if rule == "any_absolute":
            return bool(names & absolute_names)
        return rule in names

    for rule in [*rules, "any", "any_absolute"]:
        hits = [s for s in t if carries(s, rule)]
        clean = [s for s in t if kinds.get(s) == "genuine" and s not in hits]
        if not hits:
            rows.append({"flag": rule, "source": "", "kind": "", "n_unflagged_genuine": len(clean)})
            continue
        for f in sorted(hits, key=lambda s: (-t[s], s)):
            row: dict[str, Any] = {"flag": rule, "source": f, "kind": kinds.get(f, ""), "ndcg10": t[f]}
            row["n_unflagged_genuine"] = len(clean)
            if clean:
                weakest = min(clean, key=lambda s: (t[s], s))
                found = [_pair(pairs, g, f) for g in clean]
                row["worse_than_all"] = all(t[g] > t[f] for g in clean)
                row["established_vs_all"] = all(p is not None and bool(p["established"]) for p in found)
                row["n_established"] = sum(p is not None and bool(p["established"]) for p in found)
                row["weakest_genuine"] = weakest
                row["margin"] = t[weakest] - t[f]
                pair = _pair(pairs, weakest, f) or _pair(pairs, f, weakest)
                if pair is not None:
                    sign = 1.0 if pair["a"] == weakest else -1.0
                    lo, hi = sign * pair["ci_low"], sign * pair["ci_high"]
                    row["margin_ci_low"], row["margin_ci_high"] = min(lo, hi), max(lo, hi)
                    row["margin_p_holm"] = pair["p_holm"]
            rows.append(row)
    columns = [
        "flag",
        "source",
        "kind",
        "ndcg10",
        "n_unflagged_genuine",
        "worse_than_all",
        "established_vs_all",
        "n_established",
        "weakest_genuine",
        "margin",
        "margin_ci_low",
        "margin_ci_high",
        "margin_p_holm",
    ]
    return pd.DataFrame(rows).reindex(columns=columns)


def missed_defects(profile: pd.DataFrame, transfer: pd.DataFrame, pairs: pd.DataFrame) -> list[str]:
    """Controls no flag marks although they train established-worse than every genuine source."""
    kinds = transfer.set_index("source")["kind"].to_dict()
    flagged = _flag_sets(profile.loc[[s for s in kinds if s in profile.index]])
    genuine = [s for s, k in kinds.items() if k == "genuine"]
    out = []
    for c in (s for s, k in kinds.items() if k == "control" and not flagged.get(s)):
        found = [_pair(pairs, g, c) for g in genuine]
        if genuine and all(p is not None and bool(p["established"]) for p in found):
            out.append(c)
    return sorted(out)


def _rank_stats(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """(Spearman ρ, Kendall τ-b); NaN when either side is constant."""
    if len(x) < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return float("nan"), float("nan")
    return float(scipy.stats.spearmanr(x, y).statistic), float(scipy.stats.kendalltau(x, y).statistic)


def spearman_rows(values: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Spearman ρ between the fixed vector ``values`` (n) and each row of ``y`` (R × n) (average
    ranks, as scipy); NaN where a row or ``values`` is constant."""
    rx = scipy.stats.rankdata(values)
    ry = scipy.stats.rankdata(y, axis=1)
    rx = rx - rx.mean()
    ry = ry - ry.mean(axis=1, keepdims=True)
    den = np.sqrt((rx**2).sum()) * np.sqrt((ry**2).sum(axis=1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, (ry @ rx) / np.where(den > 0, den, 1.0), np.nan)


def spearman_paired_rows(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Spearman ρ between row r of ``x`` and row r of ``y`` (both R × n), average ranks; NaN where
    either row is constant."""
    rx = scipy.stats.rankdata(x, axis=1)
    ry = scipy.stats.rankdata(y, axis=1)
    rx = rx - rx.mean(axis=1, keepdims=True)
    ry = ry - ry.mean(axis=1, keepdims=True)
    den = np.sqrt((rx**2).sum(axis=1)) * np.sqrt((ry**2).sum(axis=1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, (rx * ry).sum(axis=1) / np.where(den > 0, den, 1.0), np.nan)


def _diagnostic_sd(profile: pd.DataFrame, name: str, members: Sequence[str], confidence: float) -> np.ndarray | None:
    """Per source, the SD of a diagnostic read off its audit interval (normal approximation:
    SD = (high − low) / (2 z_{1−α/2})); None when the profile has no interval for it."""
    prefix = name[: -len("_mean")] if name.endswith("_mean") else name
    low, high = f"{prefix}_ci_low", f"{prefix}_ci_high"
    if low not in profile.columns or high not in profile.columns:
        return None
    width = pd.to_numeric(profile.loc[list(members), high], errors="coerce") - pd.to_numeric(
        profile.loc[list(members), low], errors="coerce"
    )
    z = float(scipy.stats.norm.ppf(0.5 + confidence / 2))
    sd = width.to_numpy(dtype=np.float64) / (2 * z)
    return np.where(np.isfinite(sd), np.maximum(sd, 0.0), 0.0)


def diagnostic_agreement(
    profile: pd.DataFrame,
    boot: Resamples,
    observed: Mapping[str, float],
    kinds: Mapping[str, str],
    diagnostics: Mapping[str, int],
    confidence: float = 0.95,
    seed: int = 0,
) -> pd.DataFrame:
    """(b) Per diagnostic (profile column → direction, +1: higher predicts better transfer) and
    subset (``all`` trained sources, ``genuine`` only): Spearman ρ and Kendall τ-b between
    direction × diagnostic and T (range [−1, 1]; 1 = the diagnostic orders the sources as transfer
    does); Spearman's interval and P(ρ > 0) over the transfer resamples with the diagnostic held at
    its audited value (``spearman_ci_*``, transfer uncertainty only) and with both uncertainties
    (``spearman_both_ci_*``, ``p_positive_both``): in resample r each source's diagnostic is drawn
    from N(value, SD²), SD from its audit interval (:func:`_diagnostic_sd`; records resampled by the
    audit's bootstrap), paired with the r-th transfer draw (queries and seeds). ``n_flags`` (the
    number of flags a source carries) can be a diagnostic (held: no interval)."""
    rows = []
    subsets = {
        "all": [s for s in boot.sources],
        "genuine": [s for s in boot.sources if kinds.get(s) == "genuine"],
    }
    for name, direction in diagnostics.items():
        if name == "n_flags":
            column = pd.Series({s: float(len(v)) for s, v in _flag_sets(profile).items()})
        elif name in profile.columns:
            column = pd.to_numeric(profile[name], errors="coerce")
        else:
            continue
        for subset, members in subsets.items():
            members = [s for s in members if s in column.index and np.isfinite(column.get(s, np.nan))]
            row: dict[str, Any] = {"diagnostic": name, "direction": direction, "subset": subset}
            row["n_sources"] = len(members)
            if len(members) >= 3:
                x = direction * column.loc[members].to_numpy(dtype=np.float64)
                y = np.array([observed[s] for s in members])
                row["spearman"], row["kendall"] = _rank_stats(x, y)
                cols = [boot.sources.index(s) for s in members]
                rho = spearman_rows(x, boot.values[:, cols])
                finite = rho[np.isfinite(rho)]
                if len(finite):
                    row["spearman_ci_low"], row["spearman_ci_high"] = percentile_bounds(finite, confidence)
                    row["p_positive"] = float(np.mean(finite > 0))
                sd = _diagnostic_sd(profile, name, members, confidence) if name != "n_flags" else None
                if sd is not None:
                    rng = bootstrap_stream(seed, 0xD1A6)
                    noise = rng.standard_normal((len(boot.values), len(members))) * (direction * sd)
                    both = spearman_paired_rows(x[None, :] + noise, boot.values[:, cols])
                    finite = both[np.isfinite(both)]
                    if len(finite):
                        bounds = percentile_bounds(finite, confidence)
                        row["spearman_both_ci_low"], row["spearman_both_ci_high"] = bounds
                        row["p_positive_both"] = float(np.mean(finite > 0))
            rows.append(row)
    columns = [
        "diagnostic",
        "direction",
        "subset",
        "n_sources",
        "spearman",
        "spearman_ci_low",
        "spearman_ci_high",
        "p_positive",
        "spearman_both_ci_low",
        "spearman_both_ci_high",
        "p_positive_both",
        "kendall",
    ]
    return pd.DataFrame(rows).reindex(columns=columns)


def ols_slope(x: np.ndarray, y: np.ndarray) -> np.ndarray | float:
    """Least-squares slope of ``y`` on ``x``: Σ(x − x̄)(y − ȳ) / Σ(x − x̄)², for a vector ``y`` or for
    each row of a matrix; NaN when ``x`` is constant."""
    centred = x - x.mean()
    denom = float(centred @ centred)
    if denom == 0:
        return float("nan") if y.ndim == 1 else np.full(len(y), np.nan)
    slope = (y - y.mean(axis=-1, keepdims=True)) @ centred / denom
    return float(slope) if y.ndim == 1 else slope


def dose_response(
    profile: pd.DataFrame,
    transfer: pd.DataFrame,
    boot: Resamples,
    ladder: Mapping[str, float],
    diagnostics: Sequence[str],
    confidence: float = 0.95,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(c) The random-mix ladder: ``rungs`` (one row per trained rung, by dose: T with its
    interval and each diagnostic with its audit interval where the profile has one) and
    ``trend`` (per measure: Spearman ρ with the dose, range [−1, 1]; for transfer also the OLS
    slope of T on dose with its interval over the resamples and P(slope < 0))."""
    t = transfer.set_index("source")
    present = sorted((s for s in ladder if s in t.index and s in boot.sources), key=lambda s: (ladder[s], s))
    rows = []
    for s in present:
        row: dict[str, Any] = {"source": s, "dose": float(ladder[s])}
        row.update({k: t.loc[s, k] for k in ("ndcg10", "ci_low", "ci_high", "seeds")})
        for d in diagnostics:
            if d in profile.columns and s in profile.index:
                row[d] = float(profile.loc[s, d])
                prefix = d[: -len("_mean")] if d.endswith("_mean") else d
                for side in ("low", "high"):
                    if f"{prefix}_ci_{side}" in profile.columns:
                        row[f"{d}_ci_{side}"] = float(profile.loc[s, f"{prefix}_ci_{side}"])
        rows.append(row)
    rungs = pd.DataFrame(rows)
    trend = []
    if len(present) >= 2:
        dose = np.array([ladder[s] for s in present], dtype=np.float64)
        slopes = np.asarray(ols_slope(dose, boot.values[:, [boot.sources.index(s) for s in present]]))
        obs = rungs["ndcg10"].to_numpy(dtype=np.float64)
        row = {"measure": "transfer (nDCG@10)", "n_rungs": len(present)}
        row["spearman_dose"] = _rank_stats(dose, obs)[0]
        row["slope"] = ols_slope(dose, obs)
        row["slope_ci_low"], row["slope_ci_high"] = percentile_bounds(slopes, confidence)
        row["p_slope_negative"] = float(np.mean(slopes < 0))
        trend.append(row)
        for d in diagnostics:
            if d in rungs.columns:
                vals = rungs[d].to_numpy(dtype=np.float64)
                ok = np.isfinite(vals)
                sp = _rank_stats(dose[ok], vals[ok])[0] if ok.sum() >= 3 else float("nan")
                slope = ols_slope(dose[ok], vals[ok]) if ok.sum() >= 2 else float("nan")
                trend.append({"measure": d, "n_rungs": int(ok.sum()), "spearman_dose": sp, "slope": slope})
    columns = ["measure", "n_rungs", "spearman_dose", "slope", "slope_ci_low", "slope_ci_high", "p_slope_negative"]
    return rungs, pd.DataFrame(trend).reindex(columns=columns)


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


def validation_of_study(
    study: StudyData,
    diagnostics: Mapping[str, int],
    ladder: Mapping[str, float],
    resamples: int = 10000,
    confidence: float = 0.95,
    alpha: float = 0.05,
    seed: int = 0,
) -> dict[str, pd.DataFrame]:
    """Known-truth validation of one study from one two-level draw (:func:`resample`): transfer with
    intervals (:func:`transfer_estimates`, per dataset :func:`transfer_by_dataset`), pairwise
    differences, (a) :func:`flag_check` and :func:`missed_defects`, (b)
    :func:`diagnostic_agreement`, (c) :func:`dose_response` along the ladder (:func:`ladder_doses`)."""
    from transferdx.auditing.profiles import ABSOLUTE_FLAG_RULES, ALL_FLAG_RULES

    scores = study.per_query_seeds
    kinds = {s: str(study.kinds.get(s, "")) for s in scores}
    frozen = study.frozen or None
    boot = resample(scores, frozen, resamples, seed)  # one draw serves every statistic
    transfer = transfer_estimates(scores, frozen, kinds, resamples, confidence, seed, boot)
    pairs = pairwise_differences(scores, resamples, confidence, alpha, seed, boot)
    profile = study.profile
    absolute = [r.name for r in ABSOLUTE_FLAG_RULES if r.column in profile.columns]
    rules = [r.name for r in ALL_FLAG_RULES if r.column in profile.columns] + absolute
    flags = flag_check(profile, transfer, pairs, rules, absolute)
    agreement = diagnostic_agreement(profile, boot, point(scores), kinds, diagnostics, confidence, seed)
    by_dataset = transfer_by_dataset(scores, frozen, kinds, resamples, confidence, seed)
    doses = ladder_doses(study, ladder)
    named = [d for d in diagnostics if d != "n_flags"]
    rungs, trend = dose_response(profile, transfer, boot, doses, named, confidence)
    missed = pd.DataFrame({"source": missed_defects(profile, transfer, pairs)}, dtype=str)
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
