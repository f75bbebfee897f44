"""Has training stopped moving? Evaluate the second-to-last checkpoint of one seed of every trained source.

    python experiments/convergence.py STUDY_DIR [--seed 0] [--experiment validation_static]

For each source of ``STUDY_DIR/study.csv`` trained with ``--seed``, the run folder keeps its last two
checkpoints (``save_total_limit: 2``); the final model is the last. This evaluates the one before it on
the study's benchmark (the experiment's config, composed as the study was) and writes
``STUDY_DIR/convergence.csv``: per source and dataset the nDCG@10 at both steps and their difference,
plus the transfer T (mean over datasets) at both. Embeddings go through the content-addressed cache,
so a re-run encodes nothing and rewrites the same bytes.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import pandas as pd

from transferdx.artifacts import atomic_write_text, csv_text


def checkpoints(run: Path) -> list[tuple[int, Path]]:
    """(step, folder) of every ``checkpoint-<step>`` in a run folder, by step."""
    found = [(int(m.group(1)), p) for p in run.iterdir() if (m := re.fullmatch(r"checkpoint-(\d+)", p.name))]
    return sorted(found)


def main() -> None:
    from hydra import compose, initialize_config_dir

    import transferdx.config as c
    from transferdx.pipeline.evaluating import evaluate
    from transferdx.presets import config_dir

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("study", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--experiment", default="validation_static")
    args = parser.parse_args()
    with initialize_config_dir(str(config_dir()), version_base=None):
        cfg = compose("study", overrides=[f"+experiment={args.experiment}", f"output_dir={args.study}"])
    benchmark = c.benchmark_settings(cfg)
    cache_dir = str(cfg.paths.cache_dir)
    study = pd.read_csv(args.study / "study.csv")
    trained = study[(study["kind"] != "frozen") & (study["seed"] == args.seed)]
    rows = []
    for source in sorted(trained["source"].unique()):
        final = Path(trained[trained["source"] == source]["model_dir"].iloc[0])
        steps = checkpoints(final.parent)
        if len(steps) < 2:
            raise SystemExit(f"{final.parent}: needs two checkpoints, found {[s for s, _ in steps]}")
        (prev_step, prev), (last_step, _) = steps[-2], steps[-1]
        scores = evaluate(str(prev), benchmark, cache_dir=cache_dir, seed=int(cfg.seed))
        at_final = trained[trained["source"] == source].set_index("dataset")["ndcg@10"]
        for _, r in scores.iterrows():
            rows.append(
                {
                    "source": source,
                    "seed": args.seed,
                    "dataset": r["dataset"],
                    "step_previous": prev_step,
                    "step_final": last_step,
                    "ndcg10_previous": r["ndcg@10"],
                    "ndcg10_final": float(at_final[r["dataset"]]),
                }
            )
    frame = pd.DataFrame(rows)
    frame["change"] = frame["ndcg10_final"] - frame["ndcg10_previous"]
    means = frame.groupby("source")[["ndcg10_previous", "ndcg10_final", "change"]].mean().reset_index()
    means.insert(1, "dataset", "mean (T)")
    means["seed"], means["step_previous"], means["step_final"] = (
        args.seed,
        frame["step_previous"].iloc[0],
        frame["step_final"].iloc[0],
    )
    out = pd.concat([frame, means[frame.columns]], ignore_index=True)
    atomic_write_text(args.study / "convergence.csv", csv_text(out))
    summary = {
        "sources": int(means.shape[0]),
        "mean_abs_change_T": float(means["change"].abs().mean()),
        "max_abs_change_T": float(means["change"].abs().max()),
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
