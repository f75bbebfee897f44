"""Miners, hybrids, perturbations and controls: invariants, seeds, and measured false negatives."""

from __future__ import annotations

import hashlib
import re
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from transferdx.auditing.core import audit
from transferdx.diagnostics.tokens import alnum
from transferdx.embed import topk_chunked
from transferdx.inputs.formats import QuerySet, load_trec_dl_query_set
from transferdx.inputs.records import OWN_POSITIVE_RELATION, LoadResult
from transferdx.sources.build import build_sources, hybrid
from transferdx.sources.context import BuildContext
from transferdx.sources.controls import CONTROLS, build_control, derangement, random_mix
from transferdx.sources.demo import demo_query_set
from transferdx.sources.miners import bm25_ranking, mine_bm25, mine_dense
from transferdx.sources.perturb import PERTURBATIONS, perturb


class FakeEncoder:
    """Deterministic unit vectors from text hashes, with a bag-of-words component so that
    similar texts are near (enough structure for rankings and neighbours)."""

    class spec:  # mimics EmbeddingCache.spec
        name = "fake"

    def embed(self, texts, role):
        out = np.zeros((len(texts), 64))
        for i, t in enumerate(texts):
            for tok in alnum(t):
                out[i, int(hashlib.md5(tok.encode()).hexdigest(), 16) % 64] += 1.0
            out[i] += 1e-3 * (np.arange(64) == int(hashlib.md5(t.encode()).hexdigest(), 16) % 64)
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)


@pytest.fixture(scope="module")
def demo_ctx():
    return BuildContext(demo_query_set(), k=8, seed=3, encoder=FakeEncoder())


WORDS = ["alpha", "beta", "gamma", "delta", "omega", "sigma", "kappa", "zeta"]


@st.composite
def query_sets(draw):
    n_pool = draw(st.integers(6, 25))
    pool = {
        f"d{i}": " ".join(draw(st.lists(st.sampled_from(WORDS), min_size=1, max_size=6))) + f" doc{i}"
        for i in range(n_pool)
    }
    n_q = draw(st.integers(1, 5))
    queries, positives = {}, {}
    for q in range(n_q):
        queries[f"q{q}"] = " ".join(draw(st.lists(st.sampled_from(WORDS), min_size=1, max_size=3)))
        positives[f"q{q}"] = draw(st.lists(st.sampled_from(sorted(pool)), min_size=1, max_size=4, unique=True))
    return QuerySet("random", queries, positives, pool)


@settings(max_examples=40, deadline=None)
@given(query_sets(), st.integers(1, 6), st.sampled_from(["[0:8]", "[2:7]", "[1:3]"]))
def test_miners_never_return_a_known_positive(qs, k, window):
    ctx = BuildContext(qs, k=k, slice_spec=window, encoder=FakeEncoder())
    for miner in (mine_bm25, mine_dense):
        for known in ("all", "p0"):
            for rec in miner(ctx, known=known).records:
                ids = {n.id for n in rec.negatives}
                forbidden = set(qs.positives[rec.qid]) if known == "all" else {qs.positives[rec.qid][0]}
                assert not ids & forbidden


def test_topk_chunked_matches_full_sort():
    rng = np.random.default_rng(0)
    q = rng.normal(size=(37, 8)).astype(np.float32)
    p = np.round(rng.normal(size=(300, 8)), 1).astype(np.float32)  # rounding makes ties
    idx, val = topk_chunked(q, p, 20, q_chunk=7, p_chunk=64)
    full = q @ p.T
    for i in range(len(q)):
        order = np.lexsort((np.arange(len(p)), -full[i]))[:20]
        assert idx[i].tolist() == order.tolist()
        np.testing.assert_allclose(val[i], full[i][order], rtol=1e-6)


def test_bm25_ranking_scores_positive_only(demo_ctx):
    ranked = bm25_ranking(demo_ctx.query_set, 10)
    qs = demo_ctx.query_set
    for qid, ids in ranked.items():
        q_tokens = set(alnum(qs.queries[qid]))
        assert all(q_tokens & set(alnum(qs.pool[i])) for i in ids)  # score > 0 ⇒ shares a term


def test_random_mix_endpoints(demo_ctx):
    parent = mine_bm25(demo_ctx).records
    zero = random_mix(demo_ctx, parent, "random_mix_0", share=0.0).records
    assert [r.negatives for r in zero] == [r.negatives for r in parent]
    full = build_control("random_mix_100", demo_ctx, parent).records
    for a, b in zip(parent, full, strict=True):
        assert not {n.id for n in a.negatives} & {n.id for n in b.negatives}
        assert len(a.negatives) == len(b.negatives)
        assert not {n.id for n in b.negatives} & set(demo_ctx.query_set.positives[a.qid])
    half = build_control("random_mix_50", demo_ctx, parent).records
    for a, b in zip(parent, half, strict=True):
        kept = len({n.id for n in a.negatives} & {n.id for n in b.negatives})
        assert kept == len(a.negatives) - int(np.floor(0.5 * len(a.negatives) + 0.5))


def test_shuffle_is_a_derangement(demo_ctx):
    rng = np.random.default_rng(1)
    for n in (2, 3, 10, 101):
        perm = derangement(n, rng)
        assert sorted(perm.tolist()) == list(range(n)) and not np.any(perm == np.arange(n))
    parent = mine_bm25(demo_ctx).records
    shuffled = build_control("easy_shuffled", demo_ctx, parent).records
    donors = {tuple(n.id for n in r.negatives): r.qid for r in parent}
    for rec in shuffled:
        donor = donors.get(tuple(n.id for n in rec.negatives))
        assert donor is not None and donor != rec.qid


def test_own_positive_mix_and_neighbor_positive(demo_ctx):
    parent = mine_bm25(demo_ctx).records
    mixed = build_control("own_positive_mix", demo_ctx, parent).records
    for a, b in zip(parent, mixed, strict=True):
        own = [n for n in b.negatives if n.relation == OWN_POSITIVE_RELATION]
        assert len(own) == int(np.floor(0.5 * len(a.negatives) + 0.5))
        assert all(n.text == b.positives[0].text for n in own)
    neighbors = build_control("neighbor_positive", demo_ctx, parent).records
    all_p0 = {ps[0] for ps in demo_ctx.query_set.positives.values()}
    for rec in neighbors:
        ids = [n.id for n in rec.negatives]
        assert set(ids) <= all_p0 and rec.positives[0].id not in ids and len(ids) == len(set(ids)) == 8
    assert all(r.kind == "control" for r in neighbors)


def test_hybrid_psi_is_mean_of_parents_when_k_even(demo_ctx):
    a = mine_bm25(demo_ctx).records
    b = mine_dense(demo_ctx).records
    h = hybrid(a, b, "bm25+dense", seed=0).records
    loaded = LoadResult([*a, *b, *h])
    negs = audit(loaded, alnum).negatives
    psi = {(s, q, i): v for s, q, i, v in zip(negs.source, negs.qid, negs.neg_id, negs.psi, strict=True)}
    by_a = {r.qid: {n.id for n in r.negatives} for r in a}
    checked = 0
    for rec in h:
        k = len(rec.negatives)
        part_a = [psi[("bm25", rec.qid, n.id)] for n in rec.negatives if n.id in by_a[rec.qid]][: (k + 1) // 2]
        part_b = [psi[("dense", rec.qid, n.id)] for n in rec.negatives if n.id not in by_a[rec.qid]]
        record_psi = np.mean([psi[("bm25+dense", rec.qid, n.id)] for n in rec.negatives])
        if k % 2 == 0 and len(part_a) == len(part_b) == k // 2:
            assert record_psi == pytest.approx((np.mean(part_a) + np.mean(part_b)) / 2, rel=1e-12)
            checked += 1
    assert checked > 40
    counts = Counter(len(r.negatives) for r in h)
    assert counts[8] > 0


def test_perturbations_keep_query_overlap_tokens():
    qs = demo_query_set()
    allowed_changes = {"negation": {"not", "no"}, "predicate_swap": None, "number_swap": None}
    applied = Counter()
    for qid, pos in qs.positives.items():
        text = qs.pool[pos[0]]
        overlap = set(alnum(qs.queries[qid])) & set(alnum(text))
        for relation in PERTURBATIONS:
            edit = perturb(text, relation)
            if edit is None:
                continue
            applied[relation] += 1
            new, changed = edit
            assert new != text
            kept = overlap - set(changed)
            assert kept <= set(alnum(new)), (relation, kept - set(alnum(new)))
            if relation in ("entity_swap", "role_reversal"):
                assert Counter(alnum(new)) == Counter(alnum(text))  # a reordering only
            if allowed_changes.get(relation):
                assert set(changed) <= allowed_changes[relation]
    assert all(applied[r] > 0 for r in PERTURBATIONS), applied
    assert perturb("Completely plain text here", "number_swap") is None
    with pytest.raises(ValueError, match="unknown perturbation"):
        perturb("x", "paraphrase")


def test_same_seed_same_sources():
    names = ["bm25", "perturb", "bm25+perturb"]

    def run(seed):
        ctx = BuildContext(demo_query_set(), seed=seed, encoder=FakeEncoder())
        return build_sources(ctx, names, list(CONTROLS))

    a, b, c = run(5), run(5), run(6)
    assert a.records == b.records and a.exclusions == b.exclusions
    rnd = lambda x: [r for r in x.records if r.source == "random_passages"]  # noqa: E731
    assert rnd(a) != rnd(c)
    assert {r.source for r in a.records} == set(names) | set(CONTROLS)
    assert all(r.kind == "control" for r in a.records if r.source in CONTROLS)


@pytest.mark.slow
def test_dl19_false_negatives_measured(data):
    qs = load_trec_dl_query_set(data / "msmarco-dl19")
    assert len(qs.queries) == 43 and len(qs.pool) > 14000
    ctx = BuildContext(qs, k=8, seed=0)
    built = build_sources(ctx, ["bm25", "perturb"], ["random_passages", "own_positive_mix"])
    assert "perturb" not in built.false_negatives  # edits of p0 are not judged passages
    fn = dict(built.false_negatives)
    assert set(fn) == {"bm25", "random_passages", "own_positive_mix"}
    ranked = bm25_ranking(qs, ctx.depth())
    for qid, n_fn, n in fn["bm25"][:10]:
        single = [p for p in ranked[qid] if p != qs.positives[qid][0]][:8]
        assert (n_fn, n) == (sum(qs.judgments[qid].get(p, -1) >= 2 for p in single), len(single))
    # the audited negatives never contain a judged-relevant passage
    for rec in built.records:
        if rec.source == "bm25":
            assert all((n.judgment or 0) < 2 for n in rec.negatives)
    rate = lambda s: sum(r[1] for r in fn[s]) / sum(r[2] for r in fn[s])  # noqa: E731
    assert rate("own_positive_mix") > rate("bm25") > rate("random_passages")
    result = audit(built, alnum, resamples=200)
    row = result.profile.to_frame().set_index("source")
    assert row.loc["perturb", "false_negative_rate"] == "not_measured"
    assert row.loc["bm25", "false_negative_rate"] == pytest.approx(rate("bm25"))
    assert (
        row.loc["bm25", "false_negative_rate_ci_low"] <= rate("bm25") <= row.loc["bm25", "false_negative_rate_ci_high"]
    )
    assert re.match(r"^\d+$", fn["bm25"][0][0])


def test_topk_chunked_all_ties_prefers_low_indices():
    q = np.ones((3, 2), dtype=np.float32)
    p = np.ones((50, 2), dtype=np.float32)
    idx, val = topk_chunked(q, p, 7, q_chunk=2, p_chunk=16)
    assert idx.tolist() == [list(range(7))] * 3 and np.all(val == 2.0)
