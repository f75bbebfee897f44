"""Console entry points: each turns its Hydra config into settings (``config``), calls one verb of
the library (``pipeline``) and prints what it did. No pipeline logic lives here.

``--help``/``-h``, the "did you mean" hints and the console-script wrapper live in
:mod:`transferdx.cli_help`."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from transferdx.cli_help import entry, run_guarded
from transferdx.display import exclusions_phrase

if TYPE_CHECKING:
    import pandas as pd
    from omegaconf import DictConfig


def _fmt(frame: pd.DataFrame, digits: int = 4) -> str:
    return frame.to_string(index=False, float_format=lambda v: f"{v:.{digits}f}")


def run_audit(cfg: DictConfig) -> Path:
    """Load, audit, write artifacts, print the profile. Returns the output folder."""
    from transferdx import config as c
    from transferdx.cli_shards import shard_settings, shard_work_file
    from transferdx.shards import encode_work_file, run_stage, shard_line

    started, out, options = time.perf_counter(), Path(cfg.output_dir), c.audit_options(cfg)
    if (work := shard_work_file(cfg)) is not None:  # a map task that audit.stage=all launched: its work file only
        return print(shard_line(encode_work_file(work, c.build_encoder(cfg) if options.semantic else None))) or out
    prepared = c.prepared_audit(cfg, options, out)
    if isinstance(result := run_stage(prepared, shard_settings(cfg)), dict):  # one map task: its marker
        return print(shard_line(result)) or out
    result.save(out)
    print(result.screen(out / "report.md"))  # the decision first, then the report's path, then the evidence
    excluded = exclusions_phrase(result.result.exclusions, result.result.profile.n_excluded_unattributed)
    n_sources, seconds = len(result.profile), time.perf_counter() - started
    print(f"\n{len(result.records)} records from {n_sources} sources; {excluded} (exclusions.csv); {seconds:.1f} s")
    return out


def run_clean(cfg: DictConfig) -> Path:
    """Copy the input with suspected false negatives removed or relabeled, plus removed.csv."""
    from transferdx import config as c
    from transferdx import pipeline as p

    started, call = time.perf_counter(), c.clean_call(cfg)
    # None: the records the data config names, each table kept so the copy is written in its own form
    records = call.pop("records") or p.load_inputs(c.input_settings(cfg), c.build_encoder(cfg), keep_tables=True)
    result = p.clean(records, **call)
    print(result.summary())
    print(f"{time.perf_counter() - started:.1f}s; cleaned copy: {call['out'].resolve()}  (removed.csv, emptied.csv)")
    return Path(call["out"])


def run_build(cfg: DictConfig) -> Path:
    """Build sources and controls from a query set and write them as records JSONL + sidecars."""
    from transferdx import config as c
    from transferdx import pipeline as p
    from transferdx.artifacts import atomic_write_text, csv_text, safe_join
    from transferdx.auditing.report import exclusions_frame
    from transferdx.inputs.registry import is_query_set, names
    from transferdx.inputs.transferdx_records import write_source_folder

    started, out, (fmt, _) = time.perf_counter(), Path(cfg.output_dir), c.data_options(cfg)
    if not is_query_set(fmt):
        raise ValueError(f"transferdx-build needs a query-set data config ({sorted(names('query_set'))}), got {fmt!r}")
    loaded = p.build_inputs(c.input_settings(cfg), c.build_encoder(cfg))
    written = write_source_folder(loaded, out)
    frame = exclusions_frame(tuple(loaded.exclusions))
    atomic_write_text(safe_join(out, "exclusions.csv"), csv_text(frame))
    for path in written:
        print(f"{path.name}: {sum(1 for r in loaded.records if f'{r.source}.jsonl' == path.name)} records")
    print(f"{len(loaded.exclusions)} exclusions (exclusions.csv); {time.perf_counter() - started:.1f}s")
    print(f"sources: {out.resolve()}  (audit them with: transferdx-audit input={out.resolve()})")
    return out


def run_train(cfg: DictConfig) -> Path:
    """``transferdx-train``: one retriever for ``source`` with ``backbone``; ``train.json`` names it."""
    from transferdx import config as c
    from transferdx import pipeline as p
    from transferdx.artifacts import atomic_write_text, canonical_json, safe_join

    started, out, call = time.perf_counter(), Path(cfg.output_dir), c.train_call(cfg)
    result = p.train(p.source_records(c.input_settings(cfg), c.build_encoder(cfg), call["source"]), **call)
    summary = {"backbone": call["encoder"].name, "source": cfg.source, "seed": call["seed"]}
    summary |= {"model_dir": str(result.model_dir.resolve()), "skipped_already_trained": result.skipped}
    summary |= {"n_examples": result.n_examples, "n_left_out": result.n_left_out, "n_padded": result.n_padded}
    atomic_write_text(safe_join(out, "train.json"), canonical_json(summary))
    verb = "already trained" if result.skipped else "trained"
    counts = f"{result.n_examples} examples, {result.n_left_out} records with too few negatives left out"
    counts += f", {result.n_padded} repeating their own negatives" if result.n_padded else ""
    print(f"{verb}: {result.model_dir}  ({counts}; {time.perf_counter() - started:.1f}s)")
    return out


def run_evaluate(cfg: DictConfig) -> Path:
    """``transferdx-evaluate``: a checkpoint (``model=PATH``) or the frozen backbone on the benchmark."""
    from transferdx import config as c
    from transferdx import pipeline as p
    from transferdx.training import checkpoint_spec

    started, out = time.perf_counter(), Path(cfg.output_dir)
    spec = checkpoint_spec(str(cfg.model)) if cfg.get("model") else c.check_encoder(c.backbone_spec(cfg))
    rows = p.evaluate(spec, c.benchmark_settings(cfg), out=out, cache_dir=str(cfg.paths.cache_dir), seed=int(cfg.seed))
    print(_fmt(rows))
    print(f"{time.perf_counter() - started:.1f}s; metrics: {out.resolve()}/<dataset>/metrics.json")
    return out


def run_study(cfg: DictConfig) -> Path:
    """``transferdx-study``: sources → audit → train → evaluate → agree → match → tables."""
    from transferdx import config as c
    from transferdx import pipeline as p

    started, call = time.perf_counter(), c.study_call(cfg)
    result = p.study(p.load_inputs(c.input_settings(cfg), c.build_encoder(cfg)), **call)
    print(_fmt(result.table.drop(columns=["model_dir"], errors="ignore")))
    for table in (result.tables[n] for n in ("table4", "uncertainty", "matching") if n in result.tables):
        print(table if isinstance(table, str) else table.to_markdown())
    print(f"{time.perf_counter() - started:.1f}s; study table: {call['out'].resolve()}/study.csv")
    return call["out"]


def run_agree(cfg: DictConfig) -> Path:
    """``transferdx-agree``: rank agreement of diagnostics with transfer, and its uncertainty."""
    from transferdx import config as c
    from transferdx import pipeline as p

    out, folder = p.agree(list(cfg.study_dirs), c.analysis_settings(cfg)), Path(cfg.output_dir)
    p.write_agreement(out, folder)
    print(_fmt(out["agreement"], 3), out["blocks_recovered"].to_string(), sep="\n")
    for block, u in out["uncertainty"].items():
        print(f"{block}: transfer ordering {' > '.join(u['ordering'])}, P(full ordering) = {u['p_full_ordering']:.3f}")
    return folder


def run_match(cfg: DictConfig) -> Path:
    """``transferdx-match``: ψ-matched samples per block."""
    from transferdx import config as c
    from transferdx import pipeline as p

    out, folder = p.match(list(cfg.study_dirs), c.analysis_settings(cfg)), Path(cfg.output_dir)
    p.write_matching(out, folder)
    if len(out["matched"]):
        shares = out["matched"].groupby(["backbone", "block", "statistic", "resolution"])["share_reproducing"].first()
        print(shares.to_string(), _fmt(out["balance"], 3), sep="\n")
    return folder


def run_tables(cfg: DictConfig) -> Path:
    """``transferdx-tables``: the study's tables from stored artifacts."""
    from transferdx import config as c
    from transferdx import pipeline as p

    started, folder, sens = time.perf_counter(), Path(cfg.output_dir), list(cfg.get("sensitivity_dirs") or [])
    rendered = p.render_tables(
        list(cfg.study_dirs), folder, c.analysis_settings(cfg), sensitivity_dirs=sens,
        agree_dir=cfg.get("agree_dir"), match_dir=cfg.get("match_dir"),
    )  # fmt: skip
    for name, table in rendered.items():
        print(table.to_markdown() if not isinstance(table, str) else f"{name}: not rendered ({table})\n")
    print(f"{time.perf_counter() - started:.1f}s; tables: {folder.resolve()}")
    return folder


def _script(config_name: str, run: Callable[[DictConfig], Path]) -> Callable[[], None]:
    def task(cfg: DictConfig) -> None:  # defined here: Hydra names the job (and cli.log) after this file
        run_guarded(run, cfg)

    return entry(config_name, run, task)


audit_main, build_main = _script("audit", run_audit), _script("build", run_build)
train_main, evaluate_main = _script("train", run_train), _script("evaluate", run_evaluate)
study_main, agree_main = _script("study", run_study), _script("agree", run_agree)
match_main, tables_main = _script("match", run_match), _script("tables", run_tables)
clean_main = _script("clean", run_clean)

if __name__ == "__main__":
    audit_main()
