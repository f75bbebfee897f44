"""The edges of the command line, apart from the verbs: ``--help``/``-h`` prints
``hydra.help.template`` of ``conf/<verb>.yaml`` without starting Hydra (and without importing the
pipeline), and a mistyped key, a mistyped preset or a bare path gets a "did you mean" in its one-line
error (:func:`command_line_hint`); :func:`entry` wraps a verb into a console script."""

from __future__ import annotations

import difflib
import os
import re
import shlex
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from transferdx.presets import config_dir, preset_names

if TYPE_CHECKING:
    from omegaconf import DictConfig

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
    text = template.replace("${hydra.help.app_name}", app).replace("$APP_CONFIG_GROUPS", groups)
    if config_name == "audit":  # what each diagnostic means, which way: here and in report.md, not on every run
        from transferdx.auditing.legend import DIRECTIONS, legend_lines

        text = text.rstrip("\n") + "\n" + "\n".join(legend_lines([dict.fromkeys(DIRECTIONS, 0.0)])).rstrip("\n")
    return text


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
# --name value: a setting typed as a flag
# ---------------------------------------------------------------------------------------------

# Hydra's own flags (hydra._internal.utils.get_args_parser); argparse also takes a long one shortened
HYDRA_FLAGS = frozenset(
    {
        *("--help", "--hydra-help", "--version", "--cfg", "--resolve", "--package", "--run", "--multirun"),
        *("--shell-completion", "--config-path", "--config-name", "--config-dir", "--experimental-rerun", "--info"),
        *("-h", "-c", "-p", "-r", "-m", "-sc", "-cp", "-cn", "-cd", "-i"),
    }
)


def _is_hydra_flag(token: str) -> bool:
    flag = token.split("=", 1)[0]
    return flag in HYDRA_FLAGS or any(f.startswith(flag) for f in HYDRA_FLAGS if f.startswith("--"))


def dashed_settings(argv: Sequence[str]) -> list[str]:
    """``name=value`` for each setting typed as a flag, ``--name value`` or ``--name=value`` (a
    dash in the name read as ``_``, as the settings are named; ``name=...`` when no value follows),
    in order; Hydra's own flags (``--multirun``, ``--config-name x``, …) are not settings."""
    fixes, i = [], 0
    while i < len(argv):
        token = argv[i]
        if token.startswith("--") and len(token) > 2 and not _is_hydra_flag(token):
            name, equals, value = token[2:].partition("=")
            following = argv[i + 1] if i + 1 < len(argv) else None
            if not equals and following is not None and not following.startswith("-") and "=" not in following:
                value, i = following, i + 1
            key = name.replace("-", "_")
            fixes.append(shlex.quote(f"{key}={value}") if value else f"{key}=...")
        i += 1
    return fixes


def dashed_settings_hint(config_name: str, argv: Sequence[str]) -> str | None:
    """The one-line error for settings typed as flags (:func:`dashed_settings`), or None."""
    fixes = dashed_settings(argv)
    if not fixes:
        return None
    return f"transferdx-{config_name}: write settings as name=value, not --name value: {' '.join(fixes)}"


# ---------------------------------------------------------------------------------------------
# Entry points
# ---------------------------------------------------------------------------------------------


def run_guarded(run: Callable[[DictConfig], Path], cfg: DictConfig) -> None:
    """``run(cfg)`` owning its output folder (:func:`transferdx.artifacts.claim_folder`), once the
    ``input=`` file is known to exist (:func:`transferdx.runs.require_input`); a user error ends with
    one line and exit status 2."""
    from transferdx.artifacts import claim_folder
    from transferdx.runs import fail, require_input, user_error

    try:
        with claim_folder(cfg.output_dir):
            require_input(cfg)
            run(cfg)
    except Exception as exc:
        message = user_error(exc)
        if message is None:
            raise
        fail(message)


def entry(
    config_name: str, run: Callable[[DictConfig], Path], task: Callable[[DictConfig], None]
) -> Callable[[], None]:
    """A console script: ``--help``/``-h`` prints :func:`help_text` at once; otherwise Hydra parses the
    command line into ``conf/<config_name>.yaml`` and calls ``task`` (which calls :func:`run_guarded`;
    Hydra names the job, and its log file, after the module ``task`` is defined in); bad input, a bad
    setting or a bad command line ends with one line, ``transferdx: error: …`` (with a "did you mean"
    where one fits), and exit status 2. Third-party libraries' notices are kept off the console
    (:func:`transferdx.runs.quiet_libraries`). Neither path imports the pipeline (pandas, torch…)
    before it has to."""

    def main() -> None:
        argv = sys.argv[1:]
        if HELP_FLAGS & set(argv):
            print(help_text(config_name))
            return
        if (hint := dashed_settings_hint(config_name, argv)) is not None:  # before argparse's usage
            print(f"transferdx: error: {hint}", file=sys.stderr)
            sys.exit(2)
        import hydra

        from transferdx.runs import Interrupted, catch_signals, fail, interrupted, quiet_libraries, user_error

        catch_signals()
        quiet_libraries()
        _main = hydra.main(config_path=str(config_dir()), config_name=config_name, version_base="1.3")(task)

        # Hydra prints its own errors (several lines, exit status 1) unless HYDRA_FULL_ERROR is set, in
        # which case it raises them: set it for the call, and keep the user's choice of full tracebacks.
        full = os.environ.get("HYDRA_FULL_ERROR")
        os.environ["HYDRA_FULL_ERROR"] = "1"
        try:
            _main()
        except (KeyboardInterrupt, Interrupted) as exc:
            interrupted(exc)
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
