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


def test_the_audit_lowers_probabilities_to_the_estimate_but_never_raises_them():
    """core.source_priors: per source π̂ with its CI (genuine only), and p moved to min(π̂, π_t);
    the verdict says when the estimate was above the training share and not applied."""
    from types import SimpleNamespace

    from transferdx.auditing.core import source_priors
    from transferdx.auditing.verdict import prior_sentence
    from transferdx.diagnostics.fn_combined import load_combined

    pi_t = load_combined().prior
    records = [
        SimpleNamespace(source=s, qid=f"q{i}", kind=k)
        for s, k in (("low", "genuine"), ("high", "control"))
        for i in range(40)
    ]
    owner = np.repeat(np.arange(len(records)), 4)
    rng = np.random.default_rng(0)
    p = np.concatenate([rng.uniform(0.0, 0.3, 160), rng.uniform(0.85, 1.0, 160)])  # few, then most look false
    frame = pd.DataFrame([vars(r) for r in records])  # one row per record: source, qid, kind
    adjusted, priors = source_priors(frame, owner, p, seed=0, resamples=200, confidence=0.95)
    low, high = priors["low"], priors["high"]
    assert low["fn_prior"] < pi_t and low["fn_prior_applied"] == low["fn_prior"]
    assert low["fn_prior_ci_low"] <= low["fn_prior"] <= low["fn_prior_ci_high"]
    assert np.allclose(adjusted[:160], adjust(p[:160], pi_t, low["fn_prior"])) and (adjusted[:160] <= p[:160]).all()
    assert high["fn_prior"] > pi_t and high["fn_prior_applied"] == pi_t and np.isnan(high["fn_prior_ci_low"])
    assert np.allclose(adjusted[160:], p[160:])  # not raised
    said = prior_sentence({**high, "fn_prior_ci_low": 0.9, "fn_prior_ci_high": 1.0})
    assert said is not None and "not raised" in said and f"{pi_t:.3f}" in said
    assert "moved to it" in (prior_sentence(low) or "")
