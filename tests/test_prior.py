"""The user's base rate (diagnostics/prior.py): the Saerens–Latinne–Decaestecker EM estimate of the
share of false negatives and the Bayes prior shift of calibrated probabilities, against closed forms
and synthetic mixtures with a known prior."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from transferdx.auditing.fn_eval import expected_calibration_error
from transferdx.diagnostics.prior import adjust, em_prior, em_prior_ci


def mixture(prior: float, n: int, seed: int, train_prior: float = 0.5) -> tuple[np.ndarray, np.ndarray]:
    """Scores x ~ N(+1, 1) for positives and N(−1, 1) for negatives; p = the exact posterior at
    ``train_prior`` (calibrated there), labels drawn at ``prior``."""
    rng = np.random.default_rng(seed)
    y = rng.random(n) < prior
    x = np.where(y, rng.normal(1.0, 1.0, n), rng.normal(-1.0, 1.0, n))
    odds = np.exp(2.0 * x) * train_prior / (1.0 - train_prior)  # likelihood ratio e^{2x} times prior odds
    return odds / (1.0 + odds), y


def test_adjust_is_bayes_rule_and_identity_at_the_training_prior():
    p = np.array([0.0, 0.1, 0.5, 0.9, 1.0])
    assert np.allclose(adjust(p, 0.4, 0.4), p)
    # posterior odds scale by the prior odds ratio: odds' = odds · (π/(1−π)) / (π_t/(1−π_t))
    pi_t, pi = 0.6, 0.1
    inner = p[1:-1]
    odds = inner / (1 - inner) * (pi / (1 - pi)) / (pi_t / (1 - pi_t))
    assert np.allclose(adjust(inner, pi_t, pi), odds / (1 + odds))
    assert adjust(p, pi_t, pi)[0] == 0.0 and adjust(p, pi_t, pi)[-1] == 1.0
    # one prior per row of a 2-D p
    both = adjust(np.vstack([inner, inner]), pi_t, np.array([[pi_t], [pi]]))
    assert np.allclose(both[0], inner) and np.allclose(both[1], odds / (1 + odds))


@pytest.mark.parametrize("prior", [0.05, 0.15, 0.30, 0.575])
def test_em_recovers_a_known_prior_and_calibrates(prior):
    p, y = mixture(prior, 20_000, seed=int(prior * 1000))
    est = em_prior(p, 0.5)
    assert abs(est - y.mean()) < 0.02
    assert expected_calibration_error(adjust(p, 0.5, est), y) < 0.02
    assert expected_calibration_error(p, y) > expected_calibration_error(adjust(p, 0.5, est), y)


def test_em_fixed_point_and_edges():
    p, _ = mixture(0.3, 5000, seed=1)
    est = em_prior(p, 0.5)
    assert abs(adjust(p, 0.5, est).mean() - est) < 1e-6  # the EM fixed point: π = mean p'(π)
    assert np.isnan(em_prior(np.array([]), 0.5))
    assert em_prior(np.full(10, 1e-9), 0.5) < 1e-3  # nothing looks positive: π̂ → 0
    assert em_prior(np.full(10, 1 - 1e-9), 0.5) > 1 - 1e-3


def test_em_interval_covers_the_truth_and_is_reproducible():
    covered = 0
    for seed in range(20):
        p, y = mixture(0.15, 2000, seed=100 + seed)
        owner = np.arange(len(p)) // 8  # records of 8 negatives
        est = em_prior_ci(p, owner, 0.5, np.random.default_rng([seed, 7]), resamples=200)
        assert est.low <= est.prior <= est.high and est.n == len(p)
        covered += est.low <= y.mean() <= est.high
    assert covered >= 17  # a 95% interval: at least 17 of 20 (binomial tail below 1.6%)
    p, _ = mixture(0.3, 400, seed=3)
    owner = np.arange(len(p)) // 4
    a = em_prior_ci(p, owner, 0.5, np.random.default_rng(5), resamples=100)
    b = em_prior_ci(p, owner, 0.5, np.random.default_rng(5), resamples=100)
    assert a == b
    no_ci = em_prior_ci(p, owner, 0.5, np.random.default_rng(5), resamples=0)
    assert no_ci.prior == a.prior and np.isnan(no_ci.low) and np.isnan(no_ci.high)


def test_the_audit_estimates_each_sources_share_but_moves_nothing_to_it():
    """core.source_priors: per source π̂ with its CI (genuine only), a diagnostic (issue 54: nothing is
    moved to it). An estimate on 1, or on 0 with a mining margin in sight, is not identified: NaN share
    and CI (never 0.000 [0.000, 0.000]), the boundary recorded, and the verdict says so; π̂ = 0
    without a margin (easy negatives) stands."""
    from types import SimpleNamespace

    from transferdx.auditing.pooling import source_priors
    from transferdx.auditing.verdict import prior_sentence, prior_unidentified
    from transferdx.diagnostics.fn_combined import load_combined

    pi_t = load_combined().prior
    names = (("low", "genuine"), ("high", "control"), ("easy", "genuine"), ("margin", "genuine"), ("top", "genuine"))
    records = [SimpleNamespace(source=s, qid=f"q{i}", kind=k) for s, k in names for i in range(40)]
    owner = np.repeat(np.arange(len(records)), 4)
    rng = np.random.default_rng(0)
    few_false = np.concatenate([rng.uniform(0.0, 0.3, 140), rng.uniform(0.9, 1.0, 20)])  # few look false
    most_false = np.concatenate([rng.uniform(0.0, 0.3, 40), rng.uniform(0.9, 1.0, 120)])  # most look false
    none_false = rng.uniform(0.0, 0.3, 160)  # fewer false-looking than any mix: π̂ on the boundary 0
    all_false = rng.uniform(0.9, 1.0, 160)  # π̂ on the boundary 1
    p = np.concatenate([few_false, most_false, none_false, none_false, all_false])
    # s(q,p), s(q,n): the "margin" source's hardest negative stops at 0.92·s(q,p), just below α = 0.95
    s_qp = np.full(len(p), 0.8)
    s_qn = np.full(len(p), 0.3)
    s_qn[480] = 0.92 * 0.8
    frame = pd.DataFrame([vars(r) for r in records])  # one row per record: source, qid, kind
    priors = source_priors(frame, owner, p, seed=0, resamples=200, confidence=0.95, scores=(s_qp, s_qn, 0.95))
    low, high, easy, margin, top = (priors[n] for n, _ in names)
    assert 0 < low["fn_prior"] < pi_t and low["fn_prior_ci_low"] <= low["fn_prior"] <= low["fn_prior_ci_high"]
    assert np.isnan(low["fn_prior_boundary"]) and not prior_unidentified(low)
    assert 1 > high["fn_prior"] > pi_t and np.isnan(high["fn_prior_ci_low"])  # a control: no interval
    assert em_prior(none_false, pi_t) == 0.0 and em_prior(all_false, pi_t) == 1.0
    assert easy["fn_prior"] == 0.0 and not prior_unidentified(easy)  # no margin: the boundary 0 stands
    for side, est in ((0.0, margin), (1.0, top)):
        assert np.isnan(est["fn_prior"]) and np.isnan(est["fn_prior_ci_low"]) and np.isnan(est["fn_prior_ci_high"])
        assert est["fn_prior_boundary"] == side and prior_unidentified(est)
        said = prior_sentence(est)
        assert "not estimated" in said and f"estimate on {side:.0f}," in said and "0.000" not in said
    for est in (low, high, easy):
        said = prior_sentence(est)
        assert "not estimated" in said and "fits no mix" not in said and f"{est['fn_prior']:.3f}" not in said
