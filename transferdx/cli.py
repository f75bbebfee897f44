"""Console entry points: each turns its Hydra config into settings (``config``), calls one verb of
the library (``pipeline``) and prints what it did. No pipeline logic lives here.

The edges of the command line live here too: ``--help``/``-h`` prints ``hydra.help.template`` of
``conf/<verb>.yaml`` without starting Hydra (and without importing the pipeline), and a mistyped key,
a mistyped preset or a bare path gets a "did you mean" in its one-line error."""

from __future__ import annotations

import difflib
import os
import re
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from transferdx.presets import config_dir, preset_names

if TYPE_CHECKING:
    import pandas as pd
    from omegaconf import DictConfig


def _fmt(frame: pd.DataFrame, digits: int = 4) -> str:
    return frame.to_string(index=False, float_format=lambda v: f"{v:.{digits}f}")


def run_audit(cfg: DictConfig) -> Path:
    """Load, audit, write artifacts, print the profile. Returns the output folder."""
    from transferdx import config as c
    from transferdx import pipeline as p

    started, out, encoder = time.perf_counter(), Path(cfg.output_dir), c.build_encoder(cfg)
    options = c.audit_options(cfg)
    loaded = p.load_inputs(c.input_settings(cfg), encoder)
    p.require_records(loaded, options.label, out)
    result = p.audit(loaded, options, encoder=encoder if options.semantic else None, controls=c.self_controls(cfg))
    result.save(out)
    print(result.summary())
    catch, flags = result.catch_rate, result.flags
    if catch.get("n_controls"):
        genuine = catch["genuine_flagged"] or "none"
        print(f"controls flagged: {catch['n_controls_flagged']}/{catch['n_controls']}; genuine flagged: {genuine}")
    for row in flags.itertuples():
        print(f"flag {row.source}: {row.flag_reasons}")
    n_records, n_sources, n_excluded = len(result.records), len(result.profile), len(result.result.exclusions)
    unattributed = result.result.profile.n_excluded_unattributed
    of_which = f" ({unattributed} records of no known source)" if unattributed else ""
    print(
        f"\n{n_records} records from {n_sources} sources; {n_excluded} exclusions{of_which} (see exclusions.csv);",
        end="",
    )
    print(f" {len(flags)} flagged; {time.perf_counter() - started:.1f}s")
    print(f"artifacts: {out.resolve()}\n")
    print(result.verdict())
    return out


def run_clean(cfg: DictConfig) -> Path:
    """Copy the input with suspected false negatives removed or relabeled, plus removed.csv."""
    from transferdx import config as c
    from transferdx import pipeline as p

    started, call = time.perf_counter(), c.clean_call(cfg)
    records = call.pop("records") or p.load_inputs(c.input_settings(cfg), c.build_encoder(cfg))  # None: from data
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
    summary |= {"n_examples": result.n_examples, "n_left_out": result.n_left_out}
    atomic_write_text(safe_join(out, "train.json"), canonical_json(summary))
    verb = "already trained" if result.skipped else "trained"
    counts = f"{result.n_examples} examples, {result.n_left_out} records with too few negatives left out"
    print(f"{verb}: {result.model_dir}  ({counts}; {time.perf_counter() - started:.1f}s)")
    return out


def run_evaluate(cfg: DictConfig) -> Path:
    """``transferdx-evaluate``: a checkpoint (``model=PATH``) or the frozen backbone on the benchmark."""
    from transferdx import config as c
    from transferdx import pipeline as p
    from transferdx.training import checkpoint_spec

    started, out = time.perf_counter(), Path(cfg.output_dir)
    spec = checkpoint_spec(str(cfg.model)) if cfg.get("model") else c.check_encoder(c.encoder_spec(cfg))
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
    print(_fmt(out["agreement"], 3))
    print(out["blocks_recovered"].to_string())
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
        print(shares.to_string())
        print(_fmt(out["balance"], 3))
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


# ---------------------------------------------------------------------------------------------
# --help without Hydra
# ---------------------------------------------------------------------------------------------

HELP_FLAGS = frozenset({"--help", "-h"})


def _verb_yaml(config_name: str) -> dict[str, Any]:
    import yaml

    return yaml.safe_load((config_dir() / f"{config_name}.yaml").read_text(encoding="utf-8")) or {}


def _groups(config_name: str) -> list[str]:
    """The config groups ``conf/<config_name>.yaml`` composes (its defaults list), in order."""
    out = []
    for entry in _verb_yaml(config_name).get("defaults") or []:
        if isinstance(entry, dict):
            group = str(next(iter(entry))).split("@", 1)[0].lstrip("+")
            if (config_dir() / group).is_dir():
                out.append(group)
    return out


def help_text(config_name: str) -> str:
    """``transferdx-<config_name> --help``: ``hydra.help.template`` of ``conf/<config_name>.yaml``
    with ``${hydra.help.app_name}`` and ``$APP_CONFIG_GROUPS`` filled in, read as plain YAML."""
    block = (_verb_yaml(config_name).get("hydra") or {}).get("help") or {}
    app = str(block.get("app_name") or f"transferdx-{config_name}")
    template = str(block.get("template") or f"{app}: see README.md")
    groups = "\n".join(f"  {g}: {', '.join(preset_names(g))}" for g in _groups(config_name))
    return template.replace("${hydra.help.app_name}", app).replace("$APP_CONFIG_GROUPS", groups)


# ---------------------------------------------------------------------------------------------
# "Did you mean": a mistyped key or preset, a bare path
# ---------------------------------------------------------------------------------------------

# The setting a bare path on the command line most likely meant, per verb: (key, takes a list).
PATH_KEYS: dict[str, tuple[str, bool]] = {
    "audit": ("input", False),
    "clean": ("input", False),
    "train": ("input", False),
    "evaluate": ("model", False),
    "agree": ("study_dirs", True),
    "match": ("study_dirs", True),
    "tables": ("study_dirs", True),
}


def _closest(word: str, candidates: Sequence[str]) -> str | None:
    found = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.6)
    return found[0] if found else None


def _dotted_keys(node: Any, prefix: str = "") -> list[str]:
    """Every key path of a plain nested dict (``diagnostics``, ``diagnostics.tau``, …)."""
    out: list[str] = []
    if isinstance(node, dict):
        for key, value in node.items():
            path = f"{prefix}{key}"
            out.append(path)
            out.extend(_dotted_keys(value, path + "."))
    return out


def valid_keys(config_name: str, overrides: Sequence[str] = ()) -> list[str]:
    """The settings ``transferdx-<config_name>`` accepts (composed with ``overrides`` where they
    compose, else with none) and its config groups. Composes the config: for error messages only."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    from transferdx import config as c  # registers the tdx_* resolvers

    del c
    groups = sorted(p.name for p in config_dir().iterdir() if p.is_dir())
    for attempt in (list(overrides), []):
        GlobalHydra.instance().clear()
        try:
            with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
                cfg = compose(config_name=config_name, overrides=attempt)
        except Exception:
            continue
        return sorted(set(_dotted_keys(OmegaConf.to_container(cfg, resolve=False))) | set(groups))
    return groups


def _other_overrides(argv: Sequence[str], bad: str) -> list[str]:
    return [a for a in argv if "=" in a and not a.startswith(("-", "+", "~")) and a.split("=", 1)[0] != bad]


def bare_argument_hint(config_name: str, token: str) -> str:
    """The message for a command-line word without ``=``: the setting it most likely meant."""
    app, usage = f"transferdx-{config_name}", "settings are key=value"
    key, is_list = PATH_KEYS.get(config_name, (None, False))
    looks_like_path = "/" in token or "." in token or Path(token).exists()
    if key and looks_like_path:
        value = f"'{key}=[{token}]'" if is_list else f"{key}={token}"
        return f"{token!r} is not a setting ({usage}): did you mean {app} {value}?"
    for group in _groups(config_name):
        if token in preset_names(group):
            return f"{token!r} is not a setting ({usage}): did you mean {group}={token}?"
    guess = _closest(token, valid_keys(config_name))
    hint = f": did you mean {guess}=...?" if guess else f"; see {app} --help"
    return f"{token!r} is not a setting ({usage}){hint}"


def command_line_hint(config_name: str, exc: BaseException, argv: Sequence[str]) -> str | None:
    """A one-line message with a suggestion for a command-line mistake Hydra reports (a bare word, an
    unknown key, an unknown preset); None for anything else (:func:`transferdx.runs.user_error` says it)."""
    from hydra.errors import OverrideParseException

    app = f"transferdx-{config_name}"
    if isinstance(exc, OverrideParseException) and "=" not in exc.override and not exc.override.startswith("-"):
        return bare_argument_hint(config_name, exc.override)
    text = str(exc)
    if found := re.search(r"Could not override '([^']+)'", text):
        key = found.group(1)
        guess = _closest(key, valid_keys(config_name, _other_overrides(argv, key)))
        value = next((a.split("=", 1)[1] for a in argv if a.split("=", 1)[0] == key), "...")
        advice = f"did you mean {guess}={value}?" if guess else f"see {app} --help for the settings"
        return f"unknown setting {key!r}: {advice} (a new key needs a leading +: +{key}={value})"
    if found := re.search(r"Could not find '([^'/]+)/([^']+)'", text):
        group, option = found.groups()
        options = preset_names(group) if (config_dir() / group).is_dir() else []
        guess = _closest(option, options)
        advice = f"did you mean {group}={guess}? " if guess else ""
        return f"no {group} preset {option!r}: {advice}(options: {', '.join(options)})"
    return None


# ---------------------------------------------------------------------------------------------
# Entry points
# ---------------------------------------------------------------------------------------------


def _entry(config_name: str, run: Callable[[DictConfig], Path]) -> Callable[[], None]:
    """A console script: ``--help``/``-h`` prints :func:`help_text` at once; otherwise Hydra parses the
    command line into ``conf/<config_name>.yaml``; bad input, a bad setting or a bad command line ends
    with one line, ``transferdx: error: …`` (with a "did you mean" where one fits), and exit status 2.
    Each run owns its output folder while it runs (:func:`transferdx.artifacts.claim_folder`)."""

    def main() -> None:
        argv = sys.argv[1:]
        if HELP_FLAGS & set(argv):
            print(help_text(config_name))
            return
        import hydra

        from transferdx.artifacts import claim_folder
        from transferdx.runs import fail, user_error

        @hydra.main(config_path=str(config_dir()), config_name=config_name, version_base="1.3")
        def _main(cfg: DictConfig) -> None:
            try:
                with claim_folder(cfg.output_dir):
                    run(cfg)
            except Exception as exc:
                message = user_error(exc)
                if message is None:
                    raise
                fail(message)

        # Hydra prints its own errors (several lines, exit status 1) unless HYDRA_FULL_ERROR is set, in
        # which case it raises them: set it for the call, and keep the user's choice of full tracebacks.
        full = os.environ.get("HYDRA_FULL_ERROR")
        os.environ["HYDRA_FULL_ERROR"] = "1"
        try:
            _main()
        except Exception as exc:
            message = None if full == "1" else (command_line_hint(config_name, exc, argv) or user_error(exc))
            if message is None:
                raise
            fail(message)
        finally:
            if full is None:
                os.environ.pop("HYDRA_FULL_ERROR", None)
            else:
                os.environ["HYDRA_FULL_ERROR"] = full

    main.__doc__ = f"``transferdx-{config_name}``: {(run.__doc__ or '').splitlines()[0]}"
    return main


audit_main, build_main = _entry("audit", run_audit), _entry("build", run_build)
train_main, evaluate_main = _entry("train", run_train), _entry("evaluate", run_evaluate)
study_main, agree_main = _entry("study", run_study), _entry("agree", run_agree)
match_main, tables_main = _entry("match", run_match), _entry("tables", run_tables)
clean_main = _entry("clean", run_clean)

if __name__ == "__main__":
    audit_main()
