"""Benchmark: memory and time of a lexical audit, and of a semantic one, as the input grows.

14 sources × N records × 8 negatives, synthetic and seeded: ~9,000 distinct passages (40–80 words)
and 25,000 distinct queries (4–9 words) drawn from a 2,000-word vocabulary; every source asks the
same queries with the same positive and draws its negatives near the positive (a source-specific
window) or at random. Each source is written to ``<source>.jsonl`` in a temporary folder, so the
loader path is exercised, and the public ``transferdx.audit(folder, encoder=None, controls="none")``
runs in a fresh subprocess per scale. One line per scale: records, negatives, peak RSS of that
subprocess (``ru_maxrss``), and wall and CPU seconds of the audit call (load included, import
excluded; CPU time is the steadier figure on a shared machine).

Goal at 25,000 records per source: peak RSS ≤ 2 GB and wall ≤ 60 s on 2 cores.

``--semantic 100000,1000000,5000000`` measures the **semantic** audit instead (issue 24): 4 sources
× K = 8 negatives over ``negatives / 5`` distinct passages (20–40 words; 5M negatives over 1M
passages), each source asking its own distinct queries. The encoder is :class:`HashEncoder`, in
process and fast (a text's vector is the sum of seeded random word vectors, d = 384 like MiniLM),
so the figures measure transferdx, not a model: load, ψ, encoding into a fresh embedding cache,
the frozen-encoder statistics chunk by chunk, suspicion, profile and bootstrap (1,000 resamples;
the composite's own bootstrap off, ``diagnostics.composite.resamples=0``, since its cost is
resamples × records × d² flops), and every artifact written (``Audit.save``). Each scale also
prints the vectors' share (distinct texts × d × 4 bytes) and the lexical audit's peak for the
same file, so the semantic stage's own working set can be read off. Goal: 5M negatives over 1M
passages within 8 GB.

``--shards N`` (with ``--semantic``) also audits each file in N shards (issue 35) as
``audit.stage=all`` does with a launcher, each step a fresh subprocess: the plan (load, write every
map's work file), N map tasks (each reads its work file, not the input, and encodes into a cache
folder the maps share, cold at first), then the reduce (the one-process audit over that cache,
which must encode nothing). It prints, beside the one-process audit, the plan's peak RSS and wall,
the largest map's, the maps' summed wall (one machine), and the reduce's; the texts all maps request
together against the distinct texts (maps split by text hash: equal, so maps run at once encode
nothing twice) and the largest map's share; and checks that the reduce wrote the one-process bytes
(HashEncoder's vectors do not depend on the batch, so here the caches may differ). Goal (issue 35):
the largest map and the reduce each within 1.5 GB beyond the vectors they hold (a map: its share of
the distinct queries and passages, from its marker; the reduce: every distinct text's, as the
one-process audit), one PASS/FAIL line each.

    python benchmarks/bench_scale.py [--scales 2500,10000,25000] [--sources 14] [--k 8]
    python benchmarks/bench_scale.py --semantic 100000,1000000,5000000
    python benchmarks/bench_scale.py --semantic 100000,1000000 --shards 8 --no-lexical
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

N_PASSAGES = 9_000
N_QUERIES = 25_000
VOCAB = 2_000
GOAL_RECORDS, GOAL_RSS_GB, GOAL_SECONDS = 25_000, 2.0, 60.0
SEM_SOURCES, SEM_K, SEM_DIM, SEM_GOAL_NEGATIVES, SEM_GOAL_GB = 4, 8, 384, 5_000_000, 8.0
SHARD_GOAL_GB = 1.5  # issue 35: a map's or the reduce's peak beyond the vectors it holds


class HashEncoder:
    """A fast deterministic in-process encoder with ``SentenceTransformer.encode``'s interface: a
    text's vector is the sum of seeded random vectors of its lower-cased words (hashed into a
    table of ``buckets`` rows), so texts sharing words are similar. Not a model; a benchmark aid."""

    def __init__(self, dim: int = SEM_DIM, buckets: int = 1 << 16, seed: int = 0):
        self.table = np.random.default_rng(seed).standard_normal((buckets, dim)).astype(np.float32)
        self.buckets = buckets
        self.max_seq_length = 256

    def encode(self, texts: list[str], **_kwargs: object) -> np.ndarray:
        import zlib

        ids, starts = [], []
        for text in texts:
            starts.append(len(ids))
            ids.extend(zlib.crc32(w.encode()) % self.buckets for w in text.lower().split() or [""])
        return np.add.reduceat(self.table[np.asarray(ids, dtype=np.int64)], np.asarray(starts, dtype=np.int64))


def write_semantic(folder: Path, n_negatives: int, seed: int = 0) -> dict[str, int]:
    """``SEM_SOURCES`` records files, ``SEM_K`` negatives per record over ``n_negatives / 5``
    distinct passages; returns the counts written."""
    rng = np.random.default_rng(seed)
    vocab = vocabulary(rng, VOCAB)
    n_passages = max(1000, n_negatives // 5)
    passage_json = [json.dumps(t) for t in texts(rng, vocab, n_passages, 20, 40)]
    per_source = n_negatives // (SEM_SOURCES * SEM_K)
    queries = texts(rng, vocab, per_source * SEM_SOURCES, 4, 9)
    used: set[int] = set()
    n_neg, source_texts = 0, 0
    for s in range(SEM_SOURCES):
        name = f"source{s}"
        own: set[int] = set()
        src_rng = np.random.default_rng([seed, s])
        positives = src_rng.integers(0, n_passages, size=per_source)
        near = positives[:, None] + src_rng.integers(1, 50 * (s + 1), size=(per_source, SEM_K))
        far = src_rng.integers(0, n_passages, size=(per_source, SEM_K))
        picks = np.where(src_rng.random((per_source, SEM_K)) < 0.5, near, far) % n_passages
        with open(folder / f"{name}.jsonl", "w", encoding="utf-8") as out:
            for i in range(per_source):
                p0 = int(positives[i])
                negs = [int(j) for j in dict.fromkeys(picks[i].tolist()) if j != p0]
                used.update(negs)
                used.add(p0)
                own.update(negs)
                own.add(p0)
                n_neg += len(negs)
                neg_json = ", ".join(f'{{"id": "D{j}", "text": {passage_json[j]}}}' for j in negs)
                q = queries[s * per_source + i]
                out.write(
                    f'{{"qid": "q{i}", "query": {json.dumps(q)}, "positives": [{{"id": "D{p0}", '
                    f'"text": {passage_json[p0]}}}], "negatives": [{neg_json}], "source": "{name}"}}\n'
                )
        source_texts = max(source_texts, len(own) + per_source)  # its passages and its queries
    return {
        "records": per_source * SEM_SOURCES,
        "negatives": n_neg,
        "passages": len(used),
        "source_texts_max": source_texts,
    }


def semantic_child(folder: str, lexical: bool, shard: str | None = None) -> None:
    """Runs in the measured subprocess: the public audit of ``folder`` (with :class:`HashEncoder`
    unless ``lexical``), artifacts written beside it. ``shard`` = ``"plan/N"``: load once and write
    the N work files; ``"i/N"``: map task i of N from its work file (cache ``folder/cache-sharded``);
    ``"reduce/N"``: the reduce of those maps (artifacts in ``out-sharded``)."""
    import dataclasses

    import transferdx as tdx
    from transferdx.auditing.values import SemanticSettings
    from transferdx.diagnostics.composite import CompositeSettings
    from transferdx.embed import EmbeddingCache, EncoderSpec
    from transferdx.shards import (
        ShardPlan,
        ShardSettings,
        encode_work_file,
        run_stage,
        shard_plan,
        text_shares,
        write_shard_work,
    )
    from transferdx.shards.plan import collection_texts

    t0, c0 = time.perf_counter(), time.process_time()
    encoder = None
    semantic = None
    cache = Path(folder) / ("cache-sharded" if shard else "cache")
    if not lexical:
        spec = EncoderSpec(name="hash384", model="memory:hash384", source="memory", revision="hash384")
        model = HashEncoder()
        encoder = EmbeddingCache(spec, cache, progress=False, model_factory=lambda _l, _s: model)
        semantic = SemanticSettings(composite=dataclasses.replace(CompositeSettings(), resamples=0))
    kw = {"semantic": semantic} if semantic else {}
    audited = 0  # negatives in the artifacts written (a plan or a map writes none)
    texts = 0  # a map: its share of distinct queries and passages (the vectors it holds); the plan: all
    if shard is None:
        result = tdx.audit(folder, encoder=encoder, controls="none", **kw)
        result.save(Path(folder) / ("out-lexical" if lexical else "out"))
        audited = len(result.result.negatives)  # the frame, not .negatives (which adds every text)
    elif (which := shard.split("/")[0]).isdigit():  # a map task as audit.stage=all launches one: its work file
        plan = ShardPlan(Path(Path(folder, "plan.txt").read_text().strip()), int(shard.split("/")[1]))
        marker = encode_work_file(plan.work(int(which)), encoder)
        texts = int(marker["queries"]) + int(marker["passages"])
    else:
        prepared = tdx.pipeline.prepare_audit(folder, encoder=encoder, controls="none", **kw)
        plan = shard_plan(prepared, int(shard.split("/")[1]), cache)
        if which == "plan":  # the work files of every map
            paths = write_shard_work(plan, text_shares(prepared, plan.shards), range(plan.shards))
            Path(folder, "plan.txt").write_text(str(paths[0].parent))
            texts = sum(map(len, collection_texts(prepared)))  # the distinct texts the maps share out
        else:
            result = run_stage(prepared, ShardSettings(shards=plan.shards, stage="reduce", cache_dir=cache))
            assert isinstance(result, tdx.Audit)
            summary = json.loads((plan.folder / "reduce.json").read_text())
            assert summary["reduce_encoded_texts"] == 0, "the reduce encoded texts the maps should have"
            result.save(Path(folder) / "out-sharded")
            audited = len(result.result.negatives)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(
        json.dumps(
            {"wall_s": wall, "cpu_s": cpu, "peak_mb": peak_kb / 1024, "negatives_audited": audited, "texts": texts}
        )
    )


def run_child(args: list[str]) -> dict[str, float]:
    proc = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        print(proc.stderr[-3000:], file=sys.stderr)
        raise SystemExit(f"{args} failed (exit {proc.returncode})")
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def sharded(tmp: str, shards: int) -> dict[str, float]:
    """The maps (one subprocess each, in turn) and the reduce of a ``shards``-way audit of ``tmp``;
    the reduce's artifacts must be the one-process audit's bytes."""
    plan = run_child(["--semantic-child", tmp, "--shard", f"plan/{shards}"])
    maps = [run_child(["--semantic-child", tmp, "--shard", f"{i}/{shards}"]) for i in range(shards)]
    reduce = run_child(["--semantic-child", tmp, "--shard", f"reduce/{shards}"])
    for name in ("profile.csv", "records.csv", "negatives.csv", "suspects.csv"):
        if (Path(tmp) / "out" / name).read_bytes() != (Path(tmp) / "out-sharded" / name).read_bytes():
            raise SystemExit(f"the {shards}-shard audit's {name} differs from the one-process audit's")
    largest = max(maps, key=lambda m: m["peak_mb"])
    return {
        "plan_peak_mb": plan["peak_mb"],
        "plan_wall_s": plan["wall_s"],
        "map_peak_mb": largest["peak_mb"],
        "map_texts": largest["texts"],
        "maps_texts_sum": sum(m["texts"] for m in maps),
        "distinct_texts": plan["texts"],
        "map_vectors_mb": largest["texts"] * SEM_DIM * 4 / 2**20,
        "map_wall_max_s": max(m["wall_s"] for m in maps),
        "map_wall_sum_s": sum(m["wall_s"] for m in maps),
        "reduce_peak_mb": reduce["peak_mb"],
        "reduce_wall_s": reduce["wall_s"],
    }


SHARD_COLUMNS = (
    "plan peak",
    "plan wall",
    "map peak",
    "map wall",
    "maps Σ",
    "reduce peak",
    "reduce",
)


def semantic_main(scales: list[int], with_lexical: bool, json_path: str | None, shards: int = 0) -> None:
    print(
        f"{'negatives':>10} {'records':>8} {'passages':>9} {'vectors':>8} {'peak RSS':>9} {'wall':>8} {'cpu':>8}"
        f" {'lexical peak':>12}"
        + (f" | {shards} shards: " + " ".join(f"{c:>11}" for c in SHARD_COLUMNS) if shards else "")
    )
    rows = []
    for n in scales:
        with tempfile.TemporaryDirectory(prefix="bench_scale_sem_") as tmp:
            counts = write_semantic(Path(tmp), n)
            out = run_child(["--semantic-child", tmp])
            lex = run_child(["--semantic-child", tmp, "--lexical"]) if with_lexical else None
            shard = sharded(tmp, shards) if shards else None
        if out["negatives_audited"] != counts["negatives"]:
            raise SystemExit(f"audited {out['negatives_audited']} negatives, wrote {counts['negatives']}")
        distinct = counts["passages"] + counts["records"]  # passages and queries, each one vector
        vectors_gb = distinct * SEM_DIM * 4 / 2**30
        row = {**counts, "vectors_gb": vectors_gb, **out, "lexical_peak_mb": lex["peak_mb"] if lex else None}
        row |= {"shards": shards, **shard} if shard else {}
        rows.append(row)
        lex_text = f"{lex['peak_mb'] / 1024:>9.2f} GB" if lex else f"{'-':>12}"
        shard_text = ""
        if shard:
            cells = [
                f"{shard['plan_peak_mb'] / 1024:.2f} GB",
                f"{shard['plan_wall_s']:.1f} s",
                f"{shard['map_peak_mb'] / 1024:.2f} GB",
                f"{shard['map_wall_max_s']:.1f} s",
                f"{shard['map_wall_sum_s']:.1f} s",
                f"{shard['reduce_peak_mb'] / 1024:.2f} GB",
                f"{shard['reduce_wall_s']:.1f} s",
            ]
            shard_text = f" | {'':>{len(str(shards)) + 8}}" + " ".join(f"{c:>11}" for c in cells)
        print(
            f"{counts['negatives']:>10,} {counts['records']:>8,} {counts['passages']:>9,} {vectors_gb:>6.2f} GB "
            f"{out['peak_mb'] / 1024:>6.2f} GB {out['wall_s']:>6.1f} s {out['cpu_s']:>6.1f} s {lex_text}{shard_text}",
            flush=True,
        )
    if json_path:
        Path(json_path).write_text(json.dumps(rows, indent=2) + "\n")
    goal = [r for r in rows if r["negatives"] >= SEM_GOAL_NEGATIVES * 0.99]
    for r in rows if shards else []:  # issue 35: each map and the reduce within 1.5 GB beyond its vectors
        print(
            f"{r['negatives']:,} negatives, maps: {r['maps_texts_sum']:,} texts requested in all"
            f" ({r['maps_texts_sum'] / r['distinct_texts']:.2f}x the {r['distinct_texts']:,} distinct texts: what maps"
            f" run at the same time encode), the largest map {r['map_texts']:,}"
            f" ({r['map_texts'] * shards / r['distinct_texts']:.3f}x an even share)"
        )
        for step, peak, vec in (
            ("largest map", r["map_peak_mb"], r["map_vectors_mb"]),
            ("reduce", r["reduce_peak_mb"], r["vectors_gb"] * 1024),
        ):
            beyond = (peak - vec) / 1024
            print(
                f"{'PASS' if beyond <= SHARD_GOAL_GB else 'FAIL'}: {r['negatives']:,} negatives, {step}: peak"
                f" {peak / 1024:.2f} GB, {beyond:.2f} GB beyond its vectors ({vec / 1024:.2f} GB;"
                f" goal <= {SHARD_GOAL_GB} GB)"
            )
    if goal:
        ok = goal[-1]["peak_mb"] / 1024 <= SEM_GOAL_GB
        print(
            f"{'PASS' if ok else 'FAIL'}: {goal[-1]['negatives']:,} negatives over {goal[-1]['passages']:,} passages: "
            f"peak {goal[-1]['peak_mb'] / 1024:.2f} GB (goal <= {SEM_GOAL_GB:.0f} GB)"
        )


def vocabulary(rng: np.random.Generator, size: int) -> list[str]:
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    words: dict[str, None] = {}
    while len(words) < size:
        words.setdefault("".join(rng.choice(letters, size=int(rng.integers(3, 10)))), None)
    return list(words)


def texts(rng: np.random.Generator, vocab: list[str], n: int, low: int, high: int) -> list[str]:
    """``n`` distinct texts of ``low``..``high`` words, words Zipf-distributed over ``vocab``."""
    weights = 1.0 / np.arange(1, len(vocab) + 1)
    weights /= weights.sum()
    out: dict[str, None] = {}
    while len(out) < n:
        words = rng.choice(len(vocab), size=int(rng.integers(low, high + 1)), p=weights)
        out.setdefault(" ".join(vocab[w] for w in words).capitalize() + ".", None)
    return list(out)


def write_sources(folder: Path, n_records: int, n_sources: int, k: int, seed: int = 0) -> dict[str, int]:
    """One ``<source>.jsonl`` records file per source; returns the counts written."""
    rng = np.random.default_rng(seed)
    vocab = vocabulary(rng, VOCAB)
    passages = texts(rng, vocab, N_PASSAGES, 40, 80)
    queries = texts(rng, vocab, N_QUERIES, 4, 9)
    passage_json = [json.dumps(t) for t in passages]
    positive = rng.integers(0, N_PASSAGES, size=N_QUERIES)
    used: set[int] = set()
    n_neg = 0
    for s in range(n_sources):
        name = f"source{s:02d}"
        src_rng = np.random.default_rng([seed, s])
        window = 20 * (s + 1)
        lines = []
        for i in range(n_records):
            q = i % N_QUERIES
            p0 = int(positive[q])
            near = p0 + src_rng.integers(1, window, size=k)
            far = src_rng.integers(0, N_PASSAGES, size=k)
            pick = np.where(src_rng.random(k) < 0.5, near, far) % N_PASSAGES
            negs = [int(j) for j in dict.fromkeys(pick.tolist()) if j != p0]
            used.update(negs)
            used.add(p0)
            n_neg += len(negs)
            neg_json = ", ".join(
                f'{{"id": "D{j}", "text": {passage_json[j]}, "rank": {r}}}' for r, j in enumerate(negs, 1)
            )
            lines.append(
                f'{{"qid": "q{i}", "query": {json.dumps(queries[q])}, '
                f'"positives": [{{"id": "D{p0}", "text": {passage_json[p0]}}}], '
                f'"negatives": [{neg_json}], "source": "{name}"}}\n'
            )
        (folder / f"{name}.jsonl").write_text("".join(lines), encoding="utf-8")
    return {"records": n_records * n_sources, "negatives": n_neg, "passages": len(used)}


def child(folder: str) -> None:
    """Runs in the measured subprocess: the public lexical audit of ``folder``."""
    import transferdx as tdx

    t0, c0 = time.perf_counter(), time.process_time()
    result = tdx.audit(folder, encoder=None, controls="none")
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # kilobytes on Linux
    negatives = len(result.result.negatives) if hasattr(result, "result") else -1
    print(json.dumps({"wall_s": wall, "cpu_s": cpu, "peak_mb": peak_kb / 1024, "negatives_audited": negatives}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scales", default="2500,10000,25000", help="records per source, comma-separated")
    parser.add_argument("--sources", type=int, default=14)
    parser.add_argument("--k", type=int, default=8, help="negatives drawn per record")
    parser.add_argument("--semantic", help="negatives per scale for the semantic audit, comma-separated")
    parser.add_argument("--no-lexical", action="store_true", help="--semantic: skip the lexical audit of each file")
    parser.add_argument("--json", help="--semantic: also write the rows here")
    parser.add_argument("--shards", type=int, default=0, help="--semantic: also audit each file in this many shards")
    parser.add_argument("--shard", help=argparse.SUPPRESS)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--semantic-child", help=argparse.SUPPRESS)
    parser.add_argument("--lexical", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child)
        return
    if args.semantic_child:
        semantic_child(args.semantic_child, args.lexical, args.shard)
        return
    if args.semantic:
        semantic_main([int(x) for x in args.semantic.split(",")], not args.no_lexical, args.json, args.shards)
        return

    print(f"{'records':>9} {'negatives':>10} {'passages':>9} {'peak RSS':>10} {'wall':>8} {'cpu':>8}")
    last: dict[str, float] = {}
    for n in (int(x) for x in args.scales.split(",")):
        with tempfile.TemporaryDirectory(prefix="bench_scale_") as tmp:
            counts = write_sources(Path(tmp), n, args.sources, args.k)
            proc = subprocess.run(
                [sys.executable, __file__, "--child", tmp], capture_output=True, text=True, check=False
            )
        if proc.returncode != 0:
            print(proc.stderr[-3000:], file=sys.stderr)
            raise SystemExit(f"audit of {n} records per source failed (exit {proc.returncode})")
        out = json.loads(proc.stdout.strip().splitlines()[-1])
        if out["negatives_audited"] != counts["negatives"]:
            raise SystemExit(f"audited {out['negatives_audited']} negatives, wrote {counts['negatives']}")
        print(
            f"{counts['records']:>9,} {counts['negatives']:>10,} {counts['passages']:>9,} "
            f"{out['peak_mb'] / 1024:>8.2f} GB {out['wall_s']:>6.1f} s {out['cpu_s']:>6.1f} s   "
            f"({args.sources} × {n:,} records)",
            flush=True,
        )
        if n == GOAL_RECORDS:
            last = out
    if last:
        ok = last["peak_mb"] / 1024 <= GOAL_RSS_GB and last["wall_s"] <= GOAL_SECONDS
        print(
            f"{'PASS' if ok else 'FAIL'}: {args.sources} × {GOAL_RECORDS:,} records: peak "
            f"{last['peak_mb'] / 1024:.2f} GB (goal <= {GOAL_RSS_GB} GB), {last['wall_s']:.1f} s "
            f"(goal <= {GOAL_SECONDS:.0f} s)"
        )


if __name__ == "__main__":
    main()
