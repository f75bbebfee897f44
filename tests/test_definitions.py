"""The definitions of docs/design.md §3, checked against closed forms written out in the test.

Every input is hand-built (records, vectors, per-record frames, profile rows); no model is loaded.
Each test names in its docstring the mutation it kills (a wrong implementation that survived the
earlier suites); the first test of each group was checked by applying that mutation by hand.
"""

from __future__ import annotations

import hashlib
import json
import math
import re

import numpy as np
import pandas as pd
import pytest

from transferdx.auditing.audit import audit_records
from transferdx.auditing.profiles import (
    ABSOLUTE_FLAG_RULES,
    FLAG_RULES,
    PROFILE_COLUMNS,
    AuditProfile,
    apply_flags,
    catch_rate,
    false_negative_rates,
    flag_thresholds,
    profile_sources,
)
from transferdx.diagnostics import lexical
from transferdx.diagnostics.composite import (
    CompositeSettings,
    composite,
    logdet_form,
    residuals,
    trace_form,
    weighted_scatter,
    weights,
)
from transferdx.diagnostics.lexical import idf, negative_residuality
from transferdx.diagnostics.semantic import BandCuts, record_scores
from transferdx.diagnostics.tokens import alnum
from transferdx.inputs.records import Exclusion, LoadResult, Passage, Record

from .fakes import FixedEncoder

# ---------------------------------------------------------------------------------------------
# Helpers: independent closed forms
# ---------------------------------------------------------------------------------------------


def sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def at(s: float, axis: int = 1, d: int = 4) -> np.ndarray:
    """A unit vector whose cosine with e_1 is exactly ``s`` (the rest of its mass on ``axis``)."""
    v = np.zeros(d)
    v[0] = s
    v[axis] = math.sqrt(1.0 - s * s)
    return v


def source_stream(seed: int, qids, *extra: int) -> np.random.Generator:
    """The documented per-source stream (seed, sha256(json of the sorted qids)[:4] little-endian)."""
    key = int.from_bytes(hashlib.sha256(json.dumps(sorted(map(str, qids))).encode("utf-8")).digest()[:4], "little")
    return np.random.default_rng([seed, key, *extra])


def ratio_ci(num, den, rng: np.random.Generator, resamples: int, confidence: float = 0.95):
    """Percentile CI of Σ num / Σ den over records resampled with replacement (≤ 200 per draw)."""
    num, den = np.asarray(num, float), np.asarray(den, float)
    n, values = len(num), []
    while len(values) < resamples:
        for idx in rng.integers(0, n, size=(min(200, resamples - len(values)), n)):
            values.append(num[idx].sum() / den[idx].sum())
    alpha = 1 - confidence
    return tuple(np.quantile(values, [alpha / 2, 1 - alpha / 2]))


def linear_quantile(values, q: float) -> float:
    """The "linear" sample quantile, by hand: interpolate at position (n − 1)·q of the sorted values."""
    v = sorted(values)
    pos = (len(v) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (pos - lo) * (v[hi] - v[lo])


def ref_psi(query: str, negative: str, corpus: list[str]) -> float:
    """ψ(q, n) = Σ_{t ∈ T(q)∖T(n)} idf(t) / Σ_{t ∈ T(q)} idf(t) with idf over ``corpus`` (unique texts)."""

    def tokens(x: str) -> set[str]:
        return set(re.findall(r"[^\W_]+", x.lower()))

    docs = [tokens(t) for t in dict.fromkeys(corpus)]
    n_docs = len(docs)

    def w(t: str) -> float:
        df = sum(t in d for d in docs)
        return math.log(1 + (n_docs - df + 0.5) / (df + 0.5))

    tq, tn = tokens(query), tokens(negative)
    total = sum(w(t) for t in tq)
    return sum(w(t) for t in tq - tn) / total if total else math.nan


def passage_record(qid: str, query: str, pos: str, negs: list[str], source: str = "s", kind: str = "genuine"):
    return Record(
        qid,
        query,
        (Passage(f"{qid}-p", pos),),
        tuple(Passage(f"{qid}-n{i}", t) for i, t in enumerate(negs)),
        source,
        kind,
    )


# ---------------------------------------------------------------------------------------------
# §3.2 frozen encoder: record_scores
# ---------------------------------------------------------------------------------------------


def scores(s_qp: list[float], s_qn: list[list[float]], tau: float = 0.05, **kw):
    """record_scores on e_q = e_1, so every cosine is exactly the given value."""
    e1 = np.eye(4)[0]
    e_q = np.stack([e1] * len(s_qp))
    e_p = np.stack([at(s, 1) for s in s_qp])
    e_n = np.stack([at(s, 2) for row in s_qn for s in row])
    counts = np.array([len(row) for row in s_qn])
    return record_scores(e_q, e_p, e_n, counts, tau, **kw), (e_p, e_n)


def test_inversion_counts_a_tie_against_the_positive():
    """kills: `max_n >= s_qp` → `max_n > s_qp` in the inversion rule (and `diff >= 0` → `diff > 0`
    in the inverted band): a negative tied with the positive is an inversion, margin exactly 0."""
    (neg, rec), _ = scores([0.5, 0.5], [[0.2, 0.5], [0.49, 0.2]])
    assert rec["inversion"].tolist() == [1.0, 0.0]
    assert rec["margin"][0] == 0.0
    assert rec["margin"][1] == pytest.approx(0.5 - 0.49, abs=1e-15)
    assert neg["band"][1] == 0  # the tie is in band "inverted"
    assert neg["rho"][1] == 0.5


def test_loss_pi_energy_on_an_inverted_record_with_tau_not_one():
    """kills: `/ tau` → `* tau` (or dropping the max shift) in the loss softmax, `log(z) − x` → `log(z) + x`:
    L = −log softmax([s_qp, s_qn..]/τ)_0 on a record whose negative outscores the positive, τ = 0.5."""
    tau = 0.5
    s_qp, s_qn = [0.1, 0.7], [[0.6, -0.3, 0.2], [0.2]]
    (neg, rec), (e_p, e_n) = scores(s_qp, s_qn, tau)
    flat = [s for row in s_qn for s in row]
    owner = [0, 0, 0, 1]
    for i, (p, ns) in enumerate(zip(s_qp, s_qn, strict=True)):
        z = math.exp(p / tau) + sum(math.exp(s / tau) for s in ns)
        assert rec["loss"][i] == pytest.approx(-math.log(math.exp(p / tau) / z), rel=1e-12)
        assert rec["rho"][i] == pytest.approx(np.mean([sigmoid((p - s) / tau) for s in ns]), rel=1e-12)
        assert rec["eta"][i] == pytest.approx(np.mean([max(0.0, s) for s in ns]), rel=1e-12)
    for k, s in enumerate(flat):
        i = owner[k]
        z = math.exp(s_qp[i] / tau) + sum(math.exp(x / tau) for x in s_qn[i])
        pi = math.exp(s / tau) / z
        assert neg["pi"][k] == pytest.approx(pi, rel=1e-12)
        dist2 = float(np.sum((e_n[k] - e_p[i]) ** 2))
        assert neg["energy"][k] == pytest.approx((pi / tau) ** 2 * dist2, rel=1e-12)
    assert rec["energy"][0] == pytest.approx(neg["energy"][:3].sum(), rel=1e-12)
    assert rec["inversion"].tolist() == [1.0, 0.0]
    assert rec["margin"][0] == pytest.approx(0.1 - 0.6, abs=1e-15)
    assert neg["eta"][1] == 0.0  # max(0, −0.3)


def test_hardness_closed_form_and_undefined_when_positive_not_above_background():
    """kills: `denom > 0` → `denom >= 0` (s_qp == b must be NaN, not ±inf) or → `denom != 0` (s_qp < b
    must be NaN, not a negative ratio); h = (s_qn − b)/(s_qp − b), record h = mean of defined values."""
    b = 0.25
    background = np.array([b, 0.0, 0.0, 0.0])  # b(q) = e_1 · background = 0.25 exactly
    (neg, rec), _ = scores([0.75, 0.25, 0.125], [[0.5, 0.0], [0.5], [0.375]], background=background)
    assert neg["hardness"][0] == pytest.approx((0.5 - b) / (0.75 - b), abs=1e-15)
    assert neg["hardness"][1] == pytest.approx((0.0 - b) / (0.75 - b), abs=1e-15)
    assert math.isnan(neg["hardness"][2])  # s_qp == b
    assert math.isnan(neg["hardness"][3])  # s_qp < b
    assert rec["hardness"][0] == pytest.approx(((0.5 - b) + (0.0 - b)) / 2 / (0.75 - b), abs=1e-15)
    assert math.isnan(rec["hardness"][1]) and math.isnan(rec["hardness"][2])
    np.testing.assert_array_equal(rec["background"], [b, b, b])


def test_hard_band_edge_with_default_cuts():
    """kills: `w >= cuts.hard` → `w > cuts.hard`: w = exp((s_qn − s_qp)/τ) exactly 0.5 is `hard`."""
    s_qn = math.log(0.5)  # τ = 1, s_qp = 0 → w = exp(ln 0.5) = 0.5 exactly in float64
    assert math.exp(s_qn) == 0.5
    below = float(np.nextafter(s_qn, -1.0))
    (neg, _), _ = scores([0.0], [[s_qn, below, -0.95, 0.3]], tau=1.0)
    assert neg["band"].tolist() == [1, 2, 2, 0]  # hard, medium (w just under 0.5), medium, inverted


def test_medium_band_edge_and_band_rule():
    """kills: `w >= cuts.medium` → `w > cuts.medium`: a w exactly equal to the medium cut is `medium`;
    also checks the whole band rule against w computed here."""
    tau = 0.05
    w_m = float(np.exp((np.float64(0.4) - np.float64(0.5)) / tau))  # the same float operations
    cuts = BandCuts(hard=0.5, medium=w_m)
    (neg, _), _ = scores([0.5], [[0.4, float(np.nextafter(0.4, -1.0)), 0.5, 0.6]], tau, cuts=cuts)
    assert neg["band"].tolist() == [2, 3, 0, 0]
    diffs = [0.0, -0.02, -0.06, -0.2, 0.1]
    (neg, _), _ = scores([0.8], [[0.8 + d for d in diffs]], tau)
    expected = []
    for d in diffs:
        s = (0.8 + d) - 0.8
        w = math.exp(min(s / tau, 0.0))
        expected.append(0 if s >= 0 else 1 if w >= 0.5 else 2 if w >= 0.1 else 3)
    assert neg["band"].tolist() == expected == [0, 1, 2, 3, 0]


@pytest.mark.parametrize(
    ("hard", "medium", "ok"),
    [
        (0.5, 0.1, True),
        (1.0, 0.1, True),  # hard may equal 1
        (0.5, 0.0, False),  # medium must be > 0
        (0.5, -0.1, False),
        (1.0 + 1e-9, 0.1, False),  # hard ≤ 1
        (0.3, 0.3, False),  # medium < hard, strictly
        (0.2, 0.4, False),
    ],
)
def test_band_cuts_validation(hard, medium, ok):
    """kills: `0 < medium` → `0 <= medium`, `medium < hard` → `medium <= hard`, `hard <= 1` → `hard < 1`
    in BandCuts' rule 0 < medium < hard ≤ 1."""
    if ok:
        assert BandCuts(hard=hard, medium=medium).hard == hard
    else:
        with pytest.raises(ValueError, match="band cut-offs"):
            BandCuts(hard=hard, medium=medium)


# ---------------------------------------------------------------------------------------------
# §3.1 lexical: idf, ψ, negative_residuality
# ---------------------------------------------------------------------------------------------


def test_idf_closed_form_and_rejections():
    """kills: `df < 0` → `df <= 0` (df = 0 is valid), `df > n_docs` → `>=` (df = N is valid), a wrong
    constant in ln(1 + (N − df + 0.5)/(df + 0.5)), and dropping `n_docs < 0` (N < 0 with no df at all)."""
    n = 5
    dfs = [0, 1, 2, 5]
    expected = [math.log(1 + (n - df + 0.5) / (df + 0.5)) for df in dfs]
    np.testing.assert_allclose(idf(np.array(dfs), n), expected, rtol=1e-14)
    assert idf(np.array([0]), 5)[0] == pytest.approx(math.log(2 * 5 + 2))  # the maximum, ln(2N + 2)
    for df, n_docs in [([-1], 5), ([6], 5), ([0], -1), ([], -1), ([0, 3], 2)]:
        with pytest.raises(ValueError, match="document frequencies"):
            idf(np.array(df), n_docs)


def test_idf_empty_corpus_gives_ln2():
    """kills: `n_docs < 0` → `n_docs <= 0` (or `< 1`): N = 0 with df = 0 is in range, idf = ln 2 = ln(2N + 2)."""
    assert idf(np.array([0]), 0)[0] == pytest.approx(math.log(2))


LEX_RECORDS = [
    ("q1", "red apple pie", "apple pie recipe", ["red car", "green apple", "pie chart", "nothing here"]),
    ("q2", "blue sky", "clear blue sky today", ["sky diving"]),
    ("q3", "red apple pie", "red apple", ["apple", "red pie"]),
    ("q4", "ocean waves crash", "waves on the ocean", ["crash test", "ocean blue", "waves"]),
]


def lex_records(source: str = "s") -> list[Record]:
    return [passage_record(f"{source}{qid}", q, p, ns, source) for qid, q, p, ns in LEX_RECORDS]


def test_negative_residuality_neg_index_restarts_per_record():
    """kills: `np.arange(len(pair_q)) - np.repeat(cumsum(n_neg) - n_neg, n_neg)` → `+` (or without the
    restart): neg_index is the position of the negative within its record, 0..K−1; neg_id and ψ too."""
    recs = lex_records()
    frame = negative_residuality(recs, alnum)
    assert frame["neg_index"].tolist() == [0, 1, 2, 3, 0, 0, 1, 0, 1, 2]
    assert frame["neg_id"].tolist() == [n.id for r in recs for n in r.negatives]
    assert frame["qid"].tolist() == [r.qid for r in recs for _ in r.negatives]
    corpus = [x.text for r in recs for x in (*r.negatives, *r.positives)]
    expected = [ref_psi(r.query, n.text, corpus) for r in recs for n in r.negatives]
    np.testing.assert_allclose(frame["psi"].to_numpy(), expected, rtol=1e-12)


@pytest.mark.parametrize("chunk", [1, 2, 3])
def test_multi_block_tokenisation_equals_one_block(monkeypatch, chunk):
    """kills: `len(blocks) > 1` → `> 2` / `< 1` / returning one block, and block offsets (`start + TEXT_CHUNK`)
    in the chunked incidence: several blocks give the same ψ as one block and as the closed form."""
    recs = lex_records()
    one_block = negative_residuality(recs, alnum)["psi"].to_numpy()
    monkeypatch.setattr(lexical, "TEXT_CHUNK", chunk)
    blocks = negative_residuality(recs, alnum)["psi"].to_numpy()
    np.testing.assert_array_equal(blocks, one_block)
    corpus = [x.text for r in recs for x in (*r.negatives, *r.positives)]
    expected = [ref_psi(r.query, n.text, corpus) for r in recs for n in r.negatives]
    np.testing.assert_allclose(blocks, expected, rtol=1e-12)


# ---------------------------------------------------------------------------------------------
# §3.3 composite
# ---------------------------------------------------------------------------------------------


def test_weights_exponents_and_undefined_psi():
    """kills: swapped or dropped exponents in w = ρ^a·η^b·ψ^c, and `nan=0.0` → `nan=1.0` (ψ NaN → w = 0)."""
    rho_, eta_, psi_ = np.array([0.9, 0.5, 0.7]), np.array([0.4, 0.8, 0.3]), np.array([0.6, np.nan, 0.25])
    s = CompositeSettings(exp_rho=2.0, exp_eta=0.5, exp_psi=3.0)
    expected = [0.9**2 * 0.4**0.5 * 0.6**3, 0.0, 0.7**2 * 0.3**0.5 * 0.25**3]
    np.testing.assert_allclose(weights(rho_, eta_, psi_, s), expected, rtol=1e-14)
    np.testing.assert_allclose(weights(rho_, eta_, psi_, CompositeSettings()), [0.9 * 0.4 * 0.6, 0.0, 0.7 * 0.3 * 0.25])


def test_zero_residual_convention():
    """kills: dropping the zero rows (`keep = norms >= zero_tol` → `>= 0`), projecting out q only
    (`for u in (u1, u2)` → `(u1,)`) and the `where=norms >= tol` guard of the unit step: a negative in
    span{q, p} has residual 0 and adds nothing to M; a zero q or a p collinear with q drops out of the
    span (no NaN)."""
    e = np.eye(4)
    q, p = e[0], e[1]
    n_in_span = 0.6 * e[0] + 0.8 * e[1]
    n_off = np.array([0.6, 0.0, 0.8, 0.0])
    r = residuals(np.stack([q, q, q]), np.stack([p, p, p]), np.stack([n_in_span, q, n_off]))
    np.testing.assert_array_equal(r, [np.zeros(4), np.zeros(4), e[2]])
    # the collinear negative contributes nothing: M over {n_off, n_in_span} = ½ M over {n_off}
    s = CompositeSettings()
    two = weighted_scatter(np.stack([q, q]), np.stack([p, p]), np.stack([n_off, n_in_span]), np.ones(2), s)
    one = weighted_scatter(q[None], p[None], n_off[None], np.ones(1), s)
    np.testing.assert_allclose(two, 0.5 * one, atol=1e-15)
    np.testing.assert_allclose(one, np.outer(e[2], e[2]), atol=1e-15)
    # degenerate span: p = q → only q is projected out; q = 0 → only p is projected out
    n = np.array([0.5, 0.5, 0.5, 0.5])
    r_pq = residuals(q[None], q[None], n[None])[0]
    np.testing.assert_allclose(r_pq, np.array([0, 0.5, 0.5, 0.5]) / math.sqrt(0.75), atol=1e-15)
    r_q0 = residuals(np.zeros((1, 4)), p[None], n[None])[0]
    np.testing.assert_allclose(r_q0, np.array([0.5, 0, 0.5, 0.5]) / math.sqrt(0.75), atol=1e-15)
    # a zero negative is a zero residual
    np.testing.assert_array_equal(residuals(q[None], p[None], np.zeros((1, 4))), np.zeros((1, 4)))


def test_zero_residual_tolerance_is_inclusive():
    """kills: `norms >= zero_tol` → `norms > zero_tol` in both the residual and the unit step: a norm
    exactly equal to the tolerance is kept."""
    e = np.eye(4)
    n_off = np.array([0.6, 0.0, 0.8, 0.0])  # residual off span{e_1, e_2}: (0, 0, 0.8, 0), norm 0.8 exactly
    assert np.linalg.norm([0.0, 0.0, 0.8, 0.0]) == 0.8
    np.testing.assert_array_equal(residuals(e[:1], e[1:2], n_off[None], zero_tol=0.8), e[2:3])
    # q of norm exactly 0.5 with tol 0.5 still spans e_1 (the residual loses its e_1 part)
    q_short = 0.5 * e[0]
    np.testing.assert_array_equal(residuals(q_short[None], e[1:2], n_off[None], zero_tol=0.5), e[2:3])


def gram_schmidt_residual(q, p, n, tol=1e-6):
    basis = []
    for v in (q, p):
        u = v - sum((v @ b) * b for b in basis)
        if np.linalg.norm(u) >= tol:
            basis.append(u / np.linalg.norm(u))
    r = n - sum((n @ b) * b for b in basis)
    return r / np.linalg.norm(r) if np.linalg.norm(r) >= tol else np.zeros_like(r)


def test_logdet_and_trace_forms_against_numpy():
    """kills: `/ m.shape[0]` → `* m.shape[0]`, `m / eps` → `m * eps`, `trace / eps` → `trace * eps`,
    `/ max(n, 1)` dropped: (1/d)·log det(I + M/ε) and tr(M)/ε with M = (1/n) Σ w r rᵀ, d = 3."""
    rng = np.random.default_rng(7)
    d, n, eps = 3, 5, 0.05
    e_q, e_p, e_n = (rng.normal(size=(n, d)) for _ in range(3))
    w = rng.uniform(0.1, 1.0, n)
    m = sum(wi * np.outer(r, r) for wi, r in zip(w, map(gram_schmidt_residual, e_q, e_p, e_n), strict=True)) / n
    assert logdet_form(m, eps) == pytest.approx(math.log(np.linalg.det(np.eye(d) + m / eps)) / d, rel=1e-12)
    assert trace_form(m, eps) == pytest.approx(np.trace(m) / eps, rel=1e-12)
    s = CompositeSettings(eps=eps)
    np.testing.assert_allclose(weighted_scatter(e_q, e_p, e_n, w, s), m, atol=1e-14)
    for chunk in (4096, 2):
        got = composite(e_q, e_p, e_n, w, CompositeSettings(eps=eps, chunk=chunk))
        assert got["logdet"] == pytest.approx(math.log(np.linalg.det(np.eye(d) + m / eps)) / d, rel=1e-12)
        assert got["trace"] == pytest.approx(np.trace(m) / eps, rel=1e-12)


def test_logdet_rejects_non_positive_definite():
    """kills: `sign <= 0` → `sign < 0` (a singular I + M/ε must raise, not return −inf)."""
    eps = 0.1
    with pytest.raises(ValueError, match="positive definite"):
        logdet_form(np.diag([-eps, 0.0, 0.0]), eps)  # I + M/ε singular: sign 0
    with pytest.raises(ValueError, match="positive definite"):
        logdet_form(np.diag([-2 * eps, 0.0, 0.0]), eps)  # det < 0


@pytest.mark.parametrize("eps", [0.0, -1e-3])
def test_composite_eps_must_be_positive(eps):
    """kills: `not self.eps > 0` → `not self.eps >= 0` (or the check removed): ε = 0 and ε < 0 raise."""
    with pytest.raises(ValueError, match="composite ε"):
        CompositeSettings(eps=eps)
    assert CompositeSettings(eps=1e-12).eps == 1e-12


# ---------------------------------------------------------------------------------------------
# §3.4 source level: the semantic branch of profile_sources, through audit with a fake encoder
# ---------------------------------------------------------------------------------------------


# (qid, s(q, p), [s(q, n_k)]): a tie, an inversion, positive-first records; K = 3, 1, 2, 4
SEM = [
    ("q1", 0.5, [0.5, 0.45, 0.1]),
    ("q2", 0.3, [0.6]),
    ("q3", 0.8, [0.2, 0.7]),
    ("q4", 0.9, [-0.2, 0.3, 0.88, 0.0]),
]


def semantic_audit(resamples: int = 100):
    vectors, recs = {}, []
    for i, (qid, sp, sns) in enumerate(SEM):
        pos = f"positive {qid}"
        vectors[pos] = at(sp, 1)
        negs = [f"negative {qid} {k}" for k in range(len(sns))]
        for k, (t, s) in enumerate(zip(negs, sns, strict=True)):
            vectors[t] = at(s, 2 + (k % 2))
        recs.append(passage_record(qid, f"query {qid} word{i}", pos, negs, "g"))
    result = audit_records(LoadResult(recs), alnum, encoder=FixedEncoder(vectors), seed=0, resamples=resamples)
    return result, vectors


def test_profile_semantic_statistics_through_audit():
    """kills: `semantic = "rho" in per_record.columns` mutated (the whole semantic branch), and the margin
    quantile levels/names in QUANTILES: ρ, η, inversion, margin mean/median/p05/p10, margin signs and
    band shares of a source against values computed here from the same vectors."""
    result, _ = semantic_audit()
    row = result.profile.to_frame().set_index("source").loc["g"]
    tau = 0.05
    rhos = [np.mean([sigmoid((sp - s) / tau) for s in sns]) for _, sp, sns in SEM]
    etas = [np.mean([max(0.0, s) for s in sns]) for _, sp, sns in SEM]
    margins = [sp - max(sns) for _, sp, sns in SEM]
    invs = [float(max(sns) >= sp) for _, sp, sns in SEM]
    assert invs == [1.0, 1.0, 0.0, 0.0]
    assert row["rho_mean"] == pytest.approx(np.mean(rhos), rel=1e-12)
    assert row["eta_mean"] == pytest.approx(np.mean(etas), rel=1e-12)
    assert row["inversion_rate"] == 0.5
    assert row["margin_mean"] == pytest.approx(np.mean(margins), rel=1e-12)
    assert row["margin_median"] == pytest.approx(linear_quantile(margins, 0.5), abs=1e-12)
    assert row["margin_p05"] == pytest.approx(linear_quantile(margins, 0.05), abs=1e-12)
    assert row["margin_p10"] == pytest.approx(linear_quantile(margins, 0.10), abs=1e-12)
    assert row["margin_p05"] < row["margin_p10"] < row["margin_median"]
    for col in ("margin_median", "margin_p05", "margin_p10"):
        assert min(margins) <= row[f"{col}_ci_low"] <= row[f"{col}_ci_high"] <= max(margins)
    assert (row["margin_lt0"], row["margin_eq0"], row["margin_gt0"]) == (0.25, 0.25, 0.5)
    # bands per negative, from w = exp((s_qn − s_qp)/τ), shares over all 10 negatives
    counts = dict.fromkeys(("inverted", "hard", "medium", "easy"), 0)
    for _, sp, sns in SEM:
        for s in sns:
            w = math.exp((s - sp) / tau)
            counts["inverted" if s >= sp else "hard" if w >= 0.5 else "medium" if w >= 0.1 else "easy"] += 1
    assert counts == {"inverted": 2, "hard": 1, "medium": 2, "easy": 5}
    for band, c in counts.items():
        assert row[f"band_{band}"] == pytest.approx(c / 10)
    assert row["bucket_rho_lt_05"] == pytest.approx(1 / 10)  # strictly inverted: q2's 0.6 > 0.3
    assert row["bucket_eta_le_025"] == pytest.approx(4 / 10)  # 0.1, 0.2, −0.2, 0.0
    assert (row["n_records"], row["n_negatives"]) == (4, 10)


def test_profile_hardness_loss_energy_through_audit():
    """kills: `n_h_undefined` counting the wrong column / sign, and h, loss, energy means: the background
    is the mean of every pool passage, b = e_1 · mean; q2 (s_qp = 0.3 < b) has no defined h."""
    result, vectors = semantic_audit()
    row = result.profile.to_frame().set_index("source").loc["g"]
    tau = 0.05
    b = float(np.mean(list(vectors.values()), axis=0)[0])
    assert 0.3 < b < 0.5
    hs, losses, energies = [], [], []
    for qid, sp, sns in SEM:
        if sp > b:
            hs.append(np.mean([(s - b) / (sp - b) for s in sns]))
        z = math.exp(sp / tau) + sum(math.exp(s / tau) for s in sns)
        losses.append(math.log(z) - sp / tau)
        e_p = vectors[f"positive {qid}"]
        energies.append(
            sum(
                (math.exp(s / tau) / z / tau) ** 2 * float(np.sum((vectors[f"negative {qid} {k}"] - e_p) ** 2))
                for k, s in enumerate(sns)
            )
        )
    assert row["n_h_undefined"] == 1
    assert row["h_mean"] == pytest.approx(np.mean(hs), rel=1e-9)
    assert row["loss_mean"] == pytest.approx(np.mean(losses), rel=1e-9)
    assert row["energy_mean"] == pytest.approx(np.mean(energies), rel=1e-9)


# ---------------------------------------------------------------------------------------------
# §3.4 shares with a denominator: Σ num / Σ den, on a hand-built per-record frame
# ---------------------------------------------------------------------------------------------

SHARE_STATS = {
    "band_inverted": "n_band_inverted",
    "band_hard": "n_band_hard",
    "band_medium": "n_band_medium",
    "band_easy": "n_band_easy",
    "bucket_rho_lt_05": "n_bucket_rho_lt_05",
    "bucket_eta_le_025": "n_bucket_eta_le_025",
}


def per_record_frame(source: str = "a") -> pd.DataFrame:
    """Three records with K = 1, 4, 5 (bands sum to K); ψ undefined in the third record."""
    return pd.DataFrame(
        {
            "source": [source] * 3,
            "kind": ["genuine"] * 3,
            "qid": ["r1", "r2", "r3"],
            "n_negatives": [1, 4, 5],
            "psi": [0.2, 0.6, np.nan],
            "coverage": [0.8, 0.4, np.nan],
            "n_psi_defined": [1, 2, 0],
            "n_bucket_c_ge_05": [1, 1, 0],
            "rho": [0.3, 0.9, 0.7],
            "eta": [0.5, 0.2, 0.4],
            "inversion": [1.0, 0.0, 0.0],
            "margin": [-0.1, 0.2, 0.05],
            "margin_lt0": [1.0, 0.0, 0.0],
            "margin_eq0": [0.0, 0.0, 0.0],
            "margin_gt0": [0.0, 1.0, 1.0],
            "hardness": [1.2, np.nan, 0.4],
            "loss": [1.0, 0.5, 0.25],
            "energy": [2.0, 1.0, 4.0],
            "n_band_inverted": [1, 0, 0],
            "n_band_hard": [0, 1, 0],
            "n_band_medium": [0, 3, 1],
            "n_band_easy": [0, 0, 4],
            "n_bucket_rho_lt_05": [1, 0, 2],
            "n_bucket_eta_le_025": [0, 4, 1],
        }
    )


def test_share_is_ratio_of_sums_not_mean_of_ratios():
    """kills: `Stat(..., "n_negatives")` denominators mutated or dropped (a mean of per-record shares),
    and `"n_psi_defined"` → another column for C ≥ 0.5: each share is Σ numerators / Σ denominators."""
    frame = per_record_frame()
    row = profile_sources(frame, resamples=50).rows[0]
    k = frame["n_negatives"].to_numpy()
    for stat, num in SHARE_STATS.items():
        n = frame[num].to_numpy()
        assert row[stat] == pytest.approx(n.sum() / k.sum(), rel=1e-12)
        assert row[stat] != pytest.approx(np.mean(n / k))  # the wrong definition differs here
    assert row["bucket_c_ge_05"] == pytest.approx(2 / 3)  # (1 + 1 + 0) / (1 + 2 + 0), not / 10
    # means of record values: den = 1 where defined
    assert row["psi_mean"] == pytest.approx(0.4) and row["n_psi_undefined"] == 1
    assert row["coverage_mean"] == pytest.approx(0.6)
    assert row["h_mean"] == pytest.approx(0.8) and row["n_h_undefined"] == 1
    assert row["rho_mean"] == pytest.approx(np.mean([0.3, 0.9, 0.7]))
    assert row["margin_median"] == pytest.approx(0.05)
    assert (row["n_records"], row["n_negatives"]) == (3, 10)


def test_share_ci_is_the_ratio_bootstrap_of_the_source_stream():
    """kills: CI columns named or computed wrongly (`ci_prefix`, counts @ num / counts @ den): the CI of
    band_easy and of rho_mean equal percentile CIs of Σ num / Σ den over the seeded record resamples."""
    frame = per_record_frame("src")
    row = profile_sources(frame, seed=4, resamples=300, confidence=0.9).rows[0]
    low, high = ratio_ci(frame["n_band_easy"], frame["n_negatives"], source_stream(4, frame["qid"]), 300, 0.9)
    assert (row["band_easy_ci_low"], row["band_easy_ci_high"]) == pytest.approx((low, high), abs=1e-12)
    low, high = ratio_ci(frame["rho"], np.ones(3), source_stream(4, frame["qid"]), 300, 0.9)
    assert (row["rho_ci_low"], row["rho_ci_high"]) == pytest.approx((low, high), abs=1e-12)
    assert "rho_mean_ci_low" not in row


def test_lexical_frame_has_no_semantic_columns():
    """kills: `semantic = "rho" in per_record.columns` → `True`/`not in`: a lexical-only frame gets only ψ."""
    frame = per_record_frame()[["source", "kind", "qid", "n_negatives", "psi", "coverage", "n_psi_defined"]]
    row = profile_sources(frame, resamples=20).rows[0]
    assert row["psi_mean"] == pytest.approx(0.4)
    assert not {"rho_mean", "margin_median", "n_h_undefined", "band_easy"} & set(row)


# ---------------------------------------------------------------------------------------------
# AuditProfile: exclusions and settings in their slots; to_dict, summary, to_frame
# ---------------------------------------------------------------------------------------------


def exclusion(source: str, unit: str) -> Exclusion:
    return Exclusion("in.jsonl", "3", source, "q", unit, "", "negatives", "none left")


def test_profile_keeps_exclusions_and_settings_in_their_slots():
    """kills: the AuditProfile(...) arguments swapped/dropped in profile_sources, and `ex.unit == "record"`
    mutated: only record exclusions are counted, per source, sorted; settings kept as given."""
    frame = per_record_frame("a")
    excl = [exclusion("b", "record"), exclusion("a", "record"), exclusion("a", "negative"), exclusion("a", "record")]
    settings = {"tau": 0.05, "seed": 3}
    profile = profile_sources(frame, excl, resamples=20, settings=settings, sources=["a", "b"])
    d = profile.to_dict()
    assert d["exclusions"] == {"a": 2, "b": 1}
    assert list(d["exclusions"]) == ["a", "b"]
    assert d["settings"] == settings
    rows = {r["source"]: r for r in d["sources"]}
    assert rows["a"]["n_excluded_records"] == 2 and rows["b"]["n_excluded_records"] == 1
    assert rows["b"]["n_records"] == 0 and math.isnan(rows["b"]["psi_mean"])
    assert d["flag_thresholds"] == {} and d["catch_rate"] == {} and d["descriptors"] == {}


def test_audit_profile_to_dict_summary_and_frame():
    """kills: to_dict keys mapped to the wrong attribute, summary's column list or float format mutated,
    and the column order of to_frame (contract columns first, then the others)."""
    rows = (
        {
            "source": "a",
            "kind": "genuine",
            "n_records": 3,
            "n_negatives": 7,
            "psi_mean": 0.12345,
            "psi_ci_low": 0.1,
            "psi_ci_high": 0.2,
            "coverage_mean": 0.87655,
            "n_psi_undefined": 0,
            "rho_mean": 0.98765,
            "flags": "rho_high",
            "loss_mean": 1.5,
        },
    )
    profile = AuditProfile(
        rows,
        exclusions={"a": 1},
        settings={"seed": 0},
        thresholds={"mode": "envelope"},
        descriptors={"a": {"slice": "[0:8]"}},
        catch_rate={"n_controls": 0},
    )
    assert profile.to_dict() == {
        "settings": {"seed": 0},
        "sources": [dict(rows[0])],
        "exclusions": {"a": 1},
        "flag_thresholds": {"mode": "envelope"},
        "catch_rate": {"n_controls": 0},
        "descriptors": {"a": {"slice": "[0:8]"}},
    }
    frame = profile.to_frame()
    assert list(frame.columns) == [*PROFILE_COLUMNS, "rho_mean", "flags", "loss_mean"]
    header, line = profile.summary().splitlines()
    assert header.split() == [
        "source",
        "kind",
        "n_records",
        "psi_mean",
        "psi_ci_low",
        "psi_ci_high",
        "rho_mean",
        "loss_mean",
        "flags",
    ]
    assert line.split() == ["a", "genuine", "3", "0.123", "0.100", "0.200", "0.988", "1.500", "rho_high"]
    assert list(AuditProfile(()).to_frame().columns) == PROFILE_COLUMNS


# ---------------------------------------------------------------------------------------------
# §3.5 flags and control catch-rate
# ---------------------------------------------------------------------------------------------


def prow(source, kind, rho_, eta_, psi_, inv):
    return {"source": source, "kind": kind, "rho_mean": rho_, "eta_mean": eta_, "psi_mean": psi_, "inversion_rate": inv}


GENUINE = [prow("g1", "genuine", 0.80, 0.30, 0.40, 0.20), prow("g2", "genuine", 0.85, 0.35, 0.50, 0.10)]


def test_envelope_from_genuine_only_max_for_high_min_for_low():
    """kills: `r.get("kind") == "genuine"` mutated (a control moving the envelope), `max` ↔ `min` for the
    high rules / the low rule, and the NaN filter dropped (a NaN genuine row first would make max NaN):
    thresholds are max ρ, η, ψ and min inversion over the defined genuine values."""
    extreme = prow("c_extreme", "control", 0.99, 0.95, 0.99, 0.0)
    nan_genuine = prow("g_nan", "genuine", math.nan, math.nan, math.nan, math.nan)
    t = flag_thresholds([nan_genuine, *GENUINE, extreme], "envelope", {"rho": 0.1})
    assert t == {"mode": "envelope", "rho_high": 0.85, "eta_high": 0.35, "psi_high": 0.5, "inversion_low": 0.1}
    low_control = prow("c_low", "control", 0.1, 0.1, 0.1, 0.9)
    assert flag_thresholds([low_control, *GENUINE], "envelope", {}) == t  # rows[0] may be a control
    assert [r.high for r in FLAG_RULES] == [True, True, True, False]


def test_flags_are_strict_at_the_threshold():
    """kills: `v > t` → `v >= t` and `v < t` → `v <= t`: a source exactly at a threshold is not flagged,
    for the high rules and for the low rule; just beyond it, it is."""
    t = flag_thresholds(GENUINE, "envelope", {})
    at_edge = prow("c_edge", "control", 0.85, 0.35, 0.5, 0.1)
    beyond = prow("c_beyond", "control", 0.8500001, 0.3500001, 0.5000001, 0.0999999)
    rows = apply_flags([*GENUINE, at_edge, beyond], t)
    flags = {r["source"]: r["flags"] for r in rows}
    assert flags == {"g1": "", "g2": "", "c_edge": "", "c_beyond": "rho_high;eta_high;psi_high;inversion_low"}
    assert rows[2]["flag_reasons"] == ""


def test_flag_reasons_name_value_and_threshold():
    """kills: the reason text mutated (symbol, operator, `.6g` values, "max genuine"/"min genuine"/"fixed"
    source) and `"; ".join` → another separator."""
    t = flag_thresholds(GENUINE, "envelope", {})
    c = prow("c", "control", 0.9, 0.2, 0.75, 0.05)
    (row,) = apply_flags([c], t)
    assert row["flags"] == "rho_high;psi_high;inversion_low"
    assert (
        row["flag_reasons"]
        == "ρ 0.9 > 0.85 (max genuine); ψ 0.75 > 0.5 (max genuine); inversion 0.05 < 0.1 (min genuine)"
    )
    (eta_only,) = apply_flags([prow("e", "control", 0.1, 0.4, 0.1, 0.5)], t)
    assert eta_only["flag_reasons"] == "η 0.4 > 0.35 (max genuine)"


def test_fixed_mode_uses_the_fixed_values():
    """kills: `mode == "fixed"` branch mutated (envelope used instead), a missing fixed key not skipped,
    and the "(fixed)" reason: thresholds are exactly the configured values."""
    fixed = {"rho": 0.870, "eta": 0.443, "psi": 0.529, "inversion": 0.083}
    t = flag_thresholds(GENUINE, "fixed", fixed)
    assert t == {"mode": "fixed", "rho_high": 0.87, "eta_high": 0.443, "psi_high": 0.529, "inversion_low": 0.083}
    assert flag_thresholds(GENUINE, "fixed", {"eta": 0.2}) == {"mode": "fixed", "eta_high": 0.2}
    rows = apply_flags([*GENUINE, prow("c", "control", 0.95, 0.2, 0.3, 0.05)], t)
    assert [r["flags"] for r in rows] == ["", "", "rho_high;inversion_low"]
    assert rows[2]["flag_reasons"] == "ρ 0.95 > 0.87 (fixed); inversion 0.05 < 0.083 (fixed)"
    # the genuine envelope is not enforced under fixed thresholds: a genuine source may be flagged
    (g,) = apply_flags([prow("g", "genuine", 0.88, 0.1, 0.1, 0.5)], t)
    assert g["flags"] == "rho_high" and g["flag_reasons"] == "ρ 0.88 > 0.87 (fixed)"
    with pytest.raises(ValueError, match="flag mode"):
        flag_thresholds(GENUINE, "study", fixed)


def test_flags_skip_nan_values_missing_columns_and_missing_thresholds():
    """kills: `rule.column not in rows[0]` mutated (a lexical-only profile gets only the ψ threshold) and
    `rule.name not in thresholds` dropped (KeyError); NaN rows are never flagged (the `_nan` guard in
    apply_flags is an equivalent mutant: NaN fails both strict comparisons anyway)."""
    lexical_rows = [
        {"source": "g", "kind": "genuine", "psi_mean": 0.4},
        {"source": "c", "kind": "control", "psi_mean": 0.6},
    ]
    t = flag_thresholds(lexical_rows, "envelope", {})
    assert t == {"mode": "envelope", "psi_high": 0.4}
    assert [r["flags"] for r in apply_flags(lexical_rows, t)] == ["", "psi_high"]
    assert flag_thresholds([], "envelope", {}) == {"mode": "envelope"}
    only_eta = flag_thresholds(GENUINE, "fixed", {"eta": 0.32})  # rows have ρ, ψ, inversion but no threshold
    assert [r["flags"] for r in apply_flags(GENUINE, only_eta)] == ["", "eta_high"]
    nan_row = prow("n", "control", math.nan, math.nan, math.nan, math.nan)
    (r,) = apply_flags([nan_row], flag_thresholds(GENUINE, "envelope", {}))
    assert (r["flags"], r["flag_reasons"]) == ("", "")


def test_catch_rate_counts_and_lists():
    """kills: `kind == "control"` / `"genuine"` mutated, `sum(bool(...))` → a count of flags, the
    per-rule lists and the escapees: counts on hand-built flagged rows."""
    rows = [
        {"source": "g1", "kind": "genuine", "flags": ""},
        {"source": "g2", "kind": "genuine", "flags": "eta_high"},
        {"source": "c1", "kind": "control", "flags": "rho_high;psi_high"},
        {"source": "c2", "kind": "control", "flags": ""},
        {"source": "c3", "kind": "control", "flags": "psi_high"},
        {"source": "c4", "kind": "control", "flags": "inversion_low;rho_high;eta_high"},
    ]
    assert catch_rate(rows) == {
        "n_controls": 4,
        "n_controls_flagged": 3,
        "by_flag": {
            "rho_high": ["c1", "c4"],
            "eta_high": ["c4"],
            "psi_high": ["c1", "c3"],
            "inversion_low": ["c4"],
        },
        "controls_not_flagged": ["c2"],
        "genuine_flagged": ["g2"],
        # no row has absolute_flags: the absolute rules catch nothing
        "n_controls_absolute_flagged": 0,
        "absolute_by_flag": {r.name: [] for r in ABSOLUTE_FLAG_RULES},
        "genuine_absolute_flagged": [],
    }
    no_flags_column = [{"source": "c", "kind": "control"}]
    assert catch_rate(no_flags_column)["controls_not_flagged"] == ["c"]


# ---------------------------------------------------------------------------------------------
# §3.6 measured false negatives
# ---------------------------------------------------------------------------------------------


def test_false_negative_rate_is_ratio_of_sums_with_bootstrap_ci():
    """kills: `num.sum() / den.sum()` → a mean of per-record ratios, columns r[1]/r[2] swapped, the
    stream (seed, sha256(qids), 0xF1) changed: rate = Σ judged-relevant / Σ K with its percentile CI."""
    rows = [("q1", 1, 4), ("q2", 0, 2), ("q3", 3, 6), ("q4", 0, 8)]
    out = false_negative_rates({"a": rows}, ["a"], seed=2, resamples=300, confidence=0.9)
    assert out["a"]["false_negative_rate"] == pytest.approx(4 / 20)
    low, high = ratio_ci(
        [r[1] for r in rows], [r[2] for r in rows], source_stream(2, [r[0] for r in rows], 0xF1), 300, 0.9
    )
    assert out["a"]["false_negative_rate_ci_low"] == pytest.approx(low, abs=1e-12)
    assert out["a"]["false_negative_rate_ci_high"] == pytest.approx(high, abs=1e-12)


def test_false_negative_rate_not_measured_and_empty_denominator():
    """kills: `if not rows` → `if rows is None` (an absent or an empty source must be `not_measured` in
    all three fields); a source whose records have no negatives gets NaN."""
    out = false_negative_rates({"a": [("q", 0, 0)], "empty": []}, ["a", "absent", "empty"], resamples=20)
    nm = {
        "false_negative_rate": "not_measured",
        "false_negative_rate_ci_low": "not_measured",
        "false_negative_rate_ci_high": "not_measured",
    }
    assert out["absent"] == nm and out["empty"] == nm
    assert math.isnan(out["a"]["false_negative_rate"])
    assert list(out) == ["a", "absent", "empty"]
