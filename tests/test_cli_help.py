"""The command line's own words: each ``--help`` (a description, the main options, examples, printed
without starting Hydra), and the "did you mean" of a mistyped key, a mistyped preset or a bare path."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

from transferdx import cli_help
from transferdx.presets import config_dir

from .conftest import REPO, run_cli


def console_scripts() -> dict[str, str]:
    """``[project.scripts]`` of pyproject.toml (read by hand: ``tomllib`` needs Python 3.11)."""
    block = (REPO / "pyproject.toml").read_text(encoding="utf-8").split("[project.scripts]\n", 1)[1].split("\n[", 1)[0]
    return dict(re.findall(r'^(\S+) = "([^"]+)"$', block, flags=re.M))


SCRIPTS = console_scripts()
VERBS = sorted(name.removeprefix("transferdx-") for name in SCRIPTS)


def section(text: str, title: str) -> list[str]:
    """The lines of a help section (``Main options:``, ``Examples:``) up to the next blank line."""
    lines = text.split(f"\n{title}\n", 1)[1].split("\n\n", 1)[0].splitlines()
    return [line for line in lines if line.strip()]


def option_keys(text: str) -> list[str]:
    """The keys the ``Main options`` lines start with (``+external_sources.NAME`` → ``external_sources``)."""
    keys = []
    for line in section(text, "Main options:"):
        if found := re.match(r"  \+?([a-z_.]+)(?:\.[A-Z]+)?=", line):
            keys.append(found.group(1))
    return keys


def test_every_script_has_a_verb():
    assert set(SCRIPTS.values()) == {f"transferdx.cli:{v}_main" for v in VERBS}
    assert len(VERBS) >= 9


@pytest.mark.parametrize("verb", VERBS)
def test_help_has_description_options_and_examples(verb):
    text, app = cli_help.help_text(verb), f"transferdx-{verb}"
    first = text.splitlines()[0]
    assert first.startswith(f"{app}: ") and len(first) > len(app) + 20  # a sentence, not the name alone
    assert "$APP_CONFIG_GROUPS" not in text and "${" not in text and "powered by Hydra" not in text
    assert len(option_keys(text)) >= 2 and "output_dir" in option_keys(text)
    examples = section(text, "Examples:")
    assert len(examples) >= 2 and all(line.strip().startswith(app) for line in examples)
    for group in cli_help._groups(verb):  # the groups it composes, each with its presets
        assert re.search(rf"^  {group}: \w", text, flags=re.M), group


@pytest.mark.parametrize("verb", VERBS)
def test_help_names_real_settings_and_runnable_examples(verb):
    """Every key in ``Main options`` is a setting or a config group of the verb, and every example
    without a placeholder composes (so the help cannot drift from the config)."""
    text, keys = cli_help.help_text(verb), cli_help.valid_keys(verb)
    unknown = [k for k in option_keys(text) if k not in keys]
    assert not unknown, unknown
    for line in section(text, "Examples:"):
        words = [w.strip("'") for w in line.split("  #", 1)[0].split()[1:] if w != "-m"]
        if any("<" in w for w in words):
            continue
        GlobalHydra.instance().clear()
        with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
            compose(config_name=verb, overrides=[w.split(",")[0] if "[" not in w else w for w in words])


def test_help_does_not_start_hydra():
    """``--help`` and ``-h`` print the help text and exit 0 without importing Hydra (which composes
    the whole config to print its own help): what makes it fast, checked without timing it."""
    for flag in ("--help", "-h"):
        code = (
            f"import sys; sys.argv = ['transferdx-clean', 'input=x.jsonl', {flag!r}]\n"
            "from transferdx.cli import clean_main; clean_main()\n"
            "assert 'hydra' not in sys.modules, 'hydra imported'\n"
        )
        proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout == cli_help.help_text("clean") + "\n"


# What the pipeline imports and the command line's edges must not: each costs a second or more.
HEAVY = ("torch", "transformers", "sentence_transformers", "datasets", "pandas", "numpy", "scipy", "sklearn")


@pytest.mark.parametrize(
    ("argv", "status", "expected"),
    [
        (["--help"], 0, "transferdx-audit: audit a file"),
        (["backbone.batch_sizee=16"], 2, "did you mean backbone.batch_size=16?"),
        (["input=nope.parquet"], 2, "nope.parquet: field '<path>': no such file or folder"),
    ],
)
def test_help_and_error_exits_import_no_heavy_library(tmp_path, argv, status, expected):
    """``--help`` and the one-line error exits (an unknown setting with its "did you mean", a missing
    input file) say their piece before torch, pandas or the pipeline are imported: what makes them
    fast, checked by what is in ``sys.modules`` rather than by a clock."""
    code = (
        "import sys\n"
        f"sys.argv = ['transferdx-audit', *{argv!r}, 'paths.output_root={tmp_path / 'root'}']\n"
        "from transferdx.cli import audit_main\n"
        "try:\n"
        "    audit_main()\n"
        "    status = 0\n"
        "except SystemExit as exc:\n"
        "    status = exc.code\n"
        f"heavy = [m for m in {HEAVY!r} + ('transferdx.pipeline',) if m in sys.modules]\n"
        "print('status', status, 'imported', heavy)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert expected in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[-1] == f"status {status} imported []", proc.stdout + proc.stderr


def test_package_names_are_imported_on_first_use():
    """``import transferdx`` imports none of the pipeline; ``tdx.audit`` and ``from transferdx import
    audit`` still give the verb, and every name of ``__all__`` resolves."""
    code = (
        "import sys\n"
        "import transferdx as tdx\n"
        f"assert not [m for m in {HEAVY!r} + ('transferdx.pipeline',) if m in sys.modules]\n"
        "from transferdx import audit\n"
        "from transferdx.pipeline import audit as verb\n"
        "assert tdx.audit is audit is verb and all(getattr(tdx, n) is not None for n in tdx.__all__)\n"
        "assert set(tdx.__all__) <= set(dir(tdx))\n"
        "try:\n"
        "    tdx.no_such_name\n"
        "except AttributeError as exc:\n"
        "    print(exc)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "module 'transferdx' has no attribute 'no_such_name'"


@pytest.mark.parametrize(
    ("verb", "token", "expected"),
    [
        ("audit", "data/x.parquet", "did you mean transferdx-audit input=data/x.parquet?"),
        ("clean", "mined.jsonl", "did you mean transferdx-clean input=mined.jsonl?"),
        ("tables", "outputs/study/r1", "did you mean transferdx-tables 'study_dirs=[outputs/study/r1]'?"),
        ("audit", "scifact", "did you mean data=scifact?"),
        ("audit", "output_di", "did you mean output_dir=...?"),
    ],
)
def test_bare_argument_hint(verb, token, expected):
    message = cli_help.bare_argument_hint(verb, token)
    assert expected in message and "settings are key=value" in message and "quote" not in message


def test_valid_keys_follow_the_chosen_presets():
    """``data=ntuple`` has ``data.path``; the default ``data=demo`` has not."""
    assert "data.path" in cli_help.valid_keys("audit", ["data=ntuple"])
    assert "data.path" not in cli_help.valid_keys("audit") and "output_dir" in cli_help.valid_keys("audit")
    assert "diagnostics.suspicion.alpha" in cli_help.valid_keys("audit") and "tokenizer" in cli_help.valid_keys("audit")


def one_line_error(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("transferdx: error: "), proc.stderr
    return lines[0]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (["outptu_dir=x"], "unknown setting 'outptu_dir': did you mean output_dir=x?"),
        (["diagnostics.tua=0.1"], "did you mean diagnostics.tau=0.1?"),
        (["data=ntuple", "data.pth=x.tsv"], "did you mean data.path=x.tsv?"),
        (["tokenizer=whitspace"], "no tokenizer preset 'whitspace': did you mean tokenizer=whitespace?"),
        (["data/x.parquet"], "did you mean transferdx-audit input=data/x.parquet?"),
    ],
)
def test_command_line_mistakes_suggest_the_fix(tmp_path, overrides, expected):
    """As a user types them: one line, exit 2, the suggestion, and no run folder left behind."""
    root = tmp_path / "root"
    line = one_line_error(run_cli("audit", f"paths.output_root={root}", *overrides, check=False))
    assert expected in line, line
    assert "+outptu_dir" not in line.split("(")[0]  # the fix comes first, Hydra's "+key" advice after
    assert not root.exists() or not any(root.rglob("*"))


@pytest.mark.slow
def test_console_script_help_is_the_help_text():
    proc = run_cli("audit", "--help")
    assert proc.stdout == cli_help.help_text("audit") + "\n" and not proc.stderr


@pytest.mark.parametrize(
    ("argv", "fixes"),
    [
        (["--output_dir", "x"], ["output_dir=x"]),
        (["input=a.jsonl", "--output-dir=out", "--diagnostics", "lexical"], ["output_dir=out", "diagnostics=lexical"]),
        (["--on_error", "--output_dir", "my out"], ["on_error=...", "'output_dir=my out'"]),
        (["--multirun", "--config-name", "audit", "-m", "--cfg", "job", "--info", "defaults", "--multi", "a=b"], []),
        (["--hydra-help", "-cn", "audit", "--config-dir=conf", "--resolve", "--", "x=1"], []),
    ],
)
def test_settings_typed_as_flags_are_named_as_settings(argv, fixes):
    """Issue 56 (6): ``--name value`` (or ``--name=value``) is a setting typed as a flag: each is
    written back as ``name=value``; Hydra's own flags (shortened as argparse takes them) are not."""
    assert cli_help.dashed_settings(argv) == fixes
    hint = cli_help.dashed_settings_hint("audit", argv)
    assert (hint is None) == (not fixes)
    if fixes:
        assert hint == f"transferdx-audit: write settings as name=value, not --name value: {' '.join(fixes)}"


def test_a_flag_for_a_setting_is_one_line_before_hydra():
    """``transferdx-audit --output_dir x`` says how to write it, in one line, exit 2, without
    argparse's usage and without starting Hydra."""
    code = (
        "import sys; sys.argv = ['transferdx-audit', '--output_dir', 'x']\n"
        "from transferdx.cli import audit_main\n"
        "try:\n"
        "    audit_main()\n"
        "except SystemExit as exc:\n"
        "    print('status', exc.code, 'hydra' in sys.modules)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert proc.stdout.strip() == "status 2 False", proc.stdout + proc.stderr
    assert proc.stderr.splitlines() == [
        "transferdx: error: transferdx-audit: write settings as name=value, not --name value: output_dir=x"
    ]
