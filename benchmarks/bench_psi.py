"""Benchmark: vectorised ψ against a plain per-pair Python ``set`` implementation.

25,000 records × 8 negatives over real passage text (the DL19 runs' passages and the SciFact corpus
from the data directory; queries are 5–9-word windows of real passages). Both implementations use
the alnum tokenizer and the pooled IDF corpus; the script checks they agree and prints pairs/s and
the speed-up, measured side by side in one run.

    python benchmarks/bench_psi.py [--data-dir ../shared/data] [--records 25000] [--k 8]
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections import Counter
from pathlib import Path

import numpy as np

from transferdx.diagnostics.lexical import document_frequency, idf, negative_residuality, residuality, token_matrices
from transferdx.diagnostics.suspicion import normalise_text
from transferdx.diagnostics.tokens import alnum
from transferdx.inputs.records import Passage, Record


def passage_texts(data_dir: Path) -> list[str]:
    texts: dict[str, None] = {}
    for run in sorted((data_dir / "msmarco-dl19" / "runs").iterdir()):
        for entry in json.loads((run / "retrieve_results_dl19.json").read_text(encoding="utf-8")):
            for hit in entry["hits"]:
                texts.setdefault(hit["content"], None)
    with open(data_dir / "beir" / "scifact" / "corpus.jsonl", encoding="utf-8") as handle:
        for line in handle:
            doc = json.loads(line)
            texts.setdefault(f"{doc['title']} {doc['text']}".strip(), None)
    return list(texts)


def build_records(texts: list[str], n_records: int, k: int, seed: int) -> list[Record]:
    rng = np.random.default_rng(seed)
    records = []
    for i in range(n_records):
        src = int(rng.integers(len(texts)))
        words = texts[src].split()
        width = int(rng.integers(5, 10))
        start = int(rng.integers(0, max(1, len(words) - width)))
        query = " ".join(words[start : start + width]) or texts[src][:40]
        # half the negatives near the source passage in the pool (shared vocabulary), half random
        near = (src + rng.integers(1, 50, size=k // 2)) % len(texts)
        far = rng.integers(0, len(texts), size=k - k // 2)
        negs = [Passage(f"p{j}", texts[j]) for j in np.concatenate([near, far]) if j != src]
        records.append(Record(f"q{i}", query, (Passage(f"p{src}", texts[src]),), tuple(negs), "bench"))
    return records


def baseline_psi(records: list[Record]) -> list[float]:
    """The plain implementation: pooled idf by a Counter over token sets (each passage once by its
    normalised text, design §3 "Identity of passages"), then a loop over pairs."""
    corpus = {normalise_text(p.text): p.text for r in records for p in (*r.positives, *r.negatives)}.values()
    df: Counter[str] = Counter()
    for text in corpus:
        df.update(set(alnum(text)))
    n = len(corpus)

    def idf(t: str) -> float:
        d = df.get(t, 0)
        return math.log1p((n - d + 0.5) / (d + 0.5))

    out = []
    for rec in records:
        q = set(alnum(rec.query))
        total = sum(idf(t) for t in q)
        for neg in rec.negatives:
            missing = q - set(alnum(neg.text))
            out.append(sum(idf(t) for t in missing) / total if total > 0 else float("nan"))
    return out


def stage_comparison(records: list[Record]) -> tuple[float, float, int]:
    """Scoring stage only, both sides given the same tokenised inputs and idf.

    Baseline: a loop over pairs with cached token sets and an idf dict. transferdx: ``residuality``
    on the incidence matrices. Returns (baseline s, transferdx s, pairs).
    """
    queries = list(dict.fromkeys(r.query for r in records))
    texts = list(dict.fromkeys(p.text for r in records for p in (*r.positives, *r.negatives)))
    mats = token_matrices(queries, texts, alnum)
    df, n = document_frequency(mats.docs)
    weights = idf(df, n)
    q_row = {q: i for i, q in enumerate(queries)}
    d_row = {t: i for i, t in enumerate(texts)}
    pair_q = np.array([q_row[r.query] for r in records for _ in r.negatives])
    pair_d = np.array([d_row[n.text] for r in records for n in r.negatives])
    vocab_idf = {t: weights[i] for t, i in mats.vocab.items()}
    q_sets = {q: set(alnum(q)) for q in queries}
    d_sets = {t: set(alnum(t)) for t in texts}

    t0 = time.perf_counter()
    base = []
    for rec in records:
        q = q_sets[rec.query]
        total = sum(vocab_idf[t] for t in q)
        for neg in rec.negatives:
            base.append(sum(vocab_idf[t] for t in q - d_sets[neg.text]) / total if total > 0 else float("nan"))
    t_base = time.perf_counter() - t0
    t0 = time.perf_counter()
    ours = residuality(mats.queries, mats.docs, pair_q, pair_d, weights)
    t_ours = time.perf_counter() - t0
    if not np.allclose(np.asarray(base), ours, rtol=0, atol=1e-9, equal_nan=True):
        raise SystemExit("scoring stages disagree")
    return t_base, t_ours, len(pair_q)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default="../shared/data")
    parser.add_argument("--records", type=int, default=25_000)
    parser.add_argument("--k", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    texts = passage_texts(Path(args.data_dir))
    records = build_records(texts, args.records, args.k, args.seed)
    pairs = sum(len(r.negatives) for r in records)
    print(f"{len(records)} records, {pairs} pairs, {len(texts)} distinct passage texts")

    t0 = time.perf_counter()
    ours = negative_residuality(records, alnum, "pooled")["psi"].to_numpy()
    t_ours = time.perf_counter() - t0

    t0 = time.perf_counter()
    base = np.asarray(baseline_psi(records))
    t_base = time.perf_counter() - t0

    both = ~np.isnan(base)
    agree = (
        bool(np.array_equal(np.isnan(base), np.isnan(ours))) and float(np.max(np.abs(base[both] - ours[both]))) < 1e-9
    )
    print(f"per-pair Python sets : {t_base:8.3f} s  {pairs / t_base:12,.0f} pairs/s")
    print(f"transferdx (sparse)  : {t_ours:8.3f} s  {pairs / t_ours:12,.0f} pairs/s")
    print(f"speed-up             : {t_base / t_ours:8.1f}x   (goal >= 20x)")
    print(f"results agree (max |diff| < 1e-9, same NaNs): {agree}")
    if not agree:
        raise SystemExit("implementations disagree")
    reuse = pairs / len({n.text for r in records for n in r.negatives})
    print(f"(end to end from raw text; each distinct negative text appears in {reuse:.1f} pairs on average)")

    s_base, s_ours, n_pairs = stage_comparison(records)
    print("\nscoring stage only (same token sets and idf given to both):")
    print(f"per-pair Python sets : {s_base:8.3f} s  {n_pairs / s_base:12,.0f} pairs/s")
    print(f"transferdx (sparse)  : {s_ours:8.3f} s  {n_pairs / s_ours:12,.0f} pairs/s")
    print(f"speed-up             : {s_base / s_ours:8.1f}x")


if __name__ == "__main__":
    main()
