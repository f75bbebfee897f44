"""A synthetic study written in the artifact layout the CLI writes (study.csv, audit/*, evaluate/*),
with a known transfer ordering LLM > Dense > BM25 (and Dense+LLM > BM25+LLM > BM25+Dense) that mean
ψ follows and mean ρ does not; plus sensitivity audits. Seeded: the same files every time."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pandas as pd

from transferdx.auditing.profiles import (
    SEMANTIC_STATS,
    AuditProfile,
    apply_flags,
    catch_rate,
    flag_thresholds,
    profile_sources,
)

GENUINE = {  # source → (mean nDCG@10, mean ψ, mean ρ, mean η)
    "bm25": (0.38, 0.29, 0.60, 0.35),
    "dense": (0.43, 0.39, 0.57, 0.44),
    "llm": (0.48, 0.53, 0.87, 0.37),
    "bm25+dense": (0.39, 0.34, 0.58, 0.40),
    "bm25+llm": (0.43, 0.41, 0.74, 0.36),
    "dense+llm": (0.47, 0.46, 0.72, 0.41),
}
CONTROLS = {  # source → (mean ψ, mean ρ, mean η)
    "random_passages": (0.95, 0.99, 0.05),
    "random_mix_25": (0.45, 0.70, 0.28),
    "random_mix_50": (0.62, 0.80, 0.20),
    "random_mix_75": (0.79, 0.90, 0.12),
    "random_mix_100": (0.95, 0.99, 0.05),
}
DATASETS = ("scifact", "nfcorpus")
BACKBONES = ("distilbert", "e5_base")
N_RECORDS, N_QUERIES, K = 40, 30, 2


def _csv(frame: pd.DataFrame, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(frame.to_csv(index=False, lineterminator="\n"), encoding="utf-8")


def _records(rng: np.random.Generator, shift: float) -> pd.DataFrame:
    rows = []
    means = {s: v[1:] for s, v in GENUINE.items()} | CONTROLS
    for source, (psi, rho, eta) in means.items():
        kind = "control" if source in CONTROLS else "genuine"
        for i in range(N_RECORDS):
            rows.append(
                {
                    "source": source,
                    "kind": kind,
                    "qid": f"q{i:03d}",
                    "n_negatives": K,
                    "psi": float(np.clip(rng.normal(psi, 0.12), 0, 1)),
                    "rho": float(np.clip(rng.normal(rho + shift, 0.05), 0, 1)),
                    "eta": float(np.clip(rng.normal(eta, 0.05), 0, 1)),
                    "inversion": float(rng.random() < (0.45 - 0.4 * rho)),
                    "loss": float(rng.gamma(2.0, 1.2)),
                    "energy": float(rng.gamma(5.0, 5.0)),
                }
            )
    return pd.DataFrame(rows)


def _profile(records: pd.DataFrame, dim: int) -> AuditProfile:
    """The audit profile through the package's own code, as ``transferdx.audit`` builds it:
    ``profile_sources`` (point values and percentile bootstrap CIs), then the envelope flags
    (``flag_thresholds``, ``apply_flags``, every rule including ``inversion_low``) and the catch-rate.

    The synthetic records model ψ, ρ, η, inversion, loss and energy only; every other per-record
    input of a profile statistic (margins, hardness, band and bucket counts) is NaN, so that
    statistic is NaN (undefined), never invented. The composites need embeddings, so they are a
    fixed function of the source's mean ρ, η and ψ, passed in as the profile's ``extra``."""
    per_record = records.copy()
    per_record["n_psi_defined"] = per_record["n_negatives"] * per_record["psi"].notna()
    for stat in SEMANTIC_STATS:
        if stat.num not in per_record:
            per_record[stat.num] = np.nan
    extra = {}
    for source, g in records.groupby("source", sort=True):
        product = float(g["rho"].mean()) * float(g["eta"].mean()) * float(g["psi"].mean())
        extra[source] = {
            "composite_logdet": float(np.log1p(product * 10) / 2),
            "composite_trace": float(product * 100),
            "embedding_dim": dim,
        }
    profile = profile_sources(per_record, seed=0, resamples=1000, extra=extra)
    thresholds = flag_thresholds(profile.rows, "envelope", {})
    rows = apply_flags(profile.rows, thresholds)
    return dataclasses.replace(profile, rows=tuple(rows), thresholds=thresholds, catch_rate=catch_rate(rows))


def _negatives(records: pd.DataFrame, rng: np.random.Generator) -> pd.DataFrame:
    rows = []
    for _, r in records.iterrows():
        for k in range(K):
            judged = r["source"] == "bm25"
            rows.append(
                {
                    "source": r["source"],
                    "qid": r["qid"],
                    "neg_index": k,
                    "coverage": float(np.clip(1 - r["psi"] + rng.normal(0, 0.1), 0, 1)),
                    "judgment": (int(rng.random() < 0.2) if judged else None),
                    "rho": float(np.clip(r["rho"] + rng.normal(0, 0.1), -1, 1)),
                    "eta": float(np.clip(r["eta"] + rng.normal(0, 0.1), -1, 1)),
                }
            )
    frame = pd.DataFrame(rows)
    frame["judgment"] = frame["judgment"].astype("Int64")
    return frame


def write_study(folder: Path, backbone: str, seed: int) -> Path:
    """One backbone's study folder."""
    rng = np.random.default_rng(seed)
    records = _records(rng, shift=0.01 * seed)
    audited = _profile(records, dim=768)
    profile = audited.to_frame()
    _csv(records, folder / "audit/records.csv")
    _csv(profile, folder / "audit/profile.csv")
    _csv(_negatives(records, rng), folder / "audit/negatives.csv")
    descriptors = {s: {"parent_source": "bm25"} for s in CONTROLS if s.startswith("random_mix")}
    settings = {"backbone": backbone, "data": "synthetic"}
    (folder / "audit/profile.json").write_text(
        json.dumps(
            {
                "settings": settings,
                "flag_thresholds": dict(audited.thresholds),
                "catch_rate": dict(audited.catch_rate),
                "descriptors": descriptors,
            },
            sort_keys=True,
        )
    )
    rows = []
    for source, (ndcg, *_rest) in GENUINE.items():
        for d, dataset in enumerate(DATASETS):
            scores = np.clip(rng.normal(ndcg + 0.05 * d + 0.01 * seed, 0.05, N_QUERIES), 0, 1)
            per_query = pd.DataFrame({"qid": [f"t{i:03d}" for i in range(N_QUERIES)], "ndcg@10": scores})
            _csv(per_query, folder / f"evaluate/{source}/{dataset}/per_query.csv")
            p = profile.set_index("source").loc[source]
            rows.append(
                {
                    "backbone": backbone,
                    "source": source,
                    "psi_mean": p["psi_mean"],
                    "rho_mean": p["rho_mean"],
                    "dataset": dataset,
                    "n_queries": N_QUERIES,
                    "ndcg@10": float(scores.mean()),
                }
            )
    _csv(pd.DataFrame(rows), folder / "study.csv")
    return folder


SENSITIVITY = {  # run folder → (settings changed from the base, composite multiplier per source rank)
    "base": {},
    "tok_whitespace": {"tokenizer": "whitespace"},
    "tok_backbone": {"tokenizer": "backbone"},
    "idf_per_source": {"idf_corpus": "per_source"},
    "frac_25": {"sample_fraction": 0.25},
    "frac_50": {"sample_fraction": 0.5},
    "tau_0.1": {"tau": 0.1},
    "encoder_e5": {"backbone": "e5_base"},
}


def write_sensitivity(folder: Path, seed: int = 7) -> Path:
    """Audit folders (profile.csv + profile.json) for a one-at-a-time sensitivity sweep."""
    rng = np.random.default_rng(seed)
    records = _records(rng, shift=0.0)
    profile = _profile(records, dim=384).to_frame()
    for i, (name, change) in enumerate(SENSITIVITY.items()):
        run = folder / name
        frame = profile.copy()
        if change:  # perturb values; the quarter sample swaps the two closest hybrids
            frame["composite_logdet"] = frame["composite_logdet"] * (1 + 0.03 * rng.standard_normal(len(frame)))
            frame["psi_mean"] = frame["psi_mean"] + 0.01 * i
            frame["coverage_mean"] = 1 - frame["psi_mean"]
        if name == "frac_25":
            idx = frame.index[frame["source"].isin(["bm25+llm", "dense+llm"])]
            frame.loc[idx, "composite_logdet"] = frame.loc[idx[::-1], "composite_logdet"].to_numpy()
        _csv(frame, run / "profile.csv")
        settings = {"tokenizer": "alnum", "idf_corpus": "pooled", "tau": 0.05, "backbone": "distilbert", **change}
        if settings.get("sample_fraction") == 1.0:
            settings.pop("sample_fraction")
        (run / "profile.json").write_text(json.dumps({"settings": settings}, sort_keys=True))
    return folder


def write_all(root: Path) -> dict[str, Path]:
    """Two backbones' studies and one sensitivity sweep under ``root``."""
    studies = [write_study(root / "study" / b, b, seed) for seed, b in enumerate(BACKBONES)]
    return {"studies": studies, "sensitivity": write_sensitivity(root / "sensitivity")}
