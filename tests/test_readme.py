"""The README and the docs pages stay true as written: their cheap commands (demo scale or lexical)
run when pasted into bash, the README's user path (mine → audit → clean → train) runs end to end,
its links point at files that exist, and overrides they document parse the way bash hands them to Hydra."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from transferdx import config
from transferdx.presets import config_dir

from .conftest import REPO

# Commands that run in seconds with the lexical diagnostics (the rest train, encode SciFact, or need
# a network or outputs of earlier steps).
CHEAP = re.compile(r"transferdx-(audit|build) .*(data=msmarco_dl19(?!_pool)|data=demo_pool|tokenizer=)")


# The pages whose cheap commands are tested here: the docs site's other pages (docs/design.md holds no
# commands); the README, docs/inputs.md and docs/cleaning.md run whole in tests/test_docs_blocks.py.
PAGES = [p for p in sorted((REPO / "docs").glob("*.md")) if p.name not in ("inputs.md", "cleaning.md")]


def readme_commands() -> list[str]:
    text = "\n".join(page.read_text(encoding="utf-8") for page in PAGES)
    lines = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        for line in block.splitlines():
            command = line.split("  #", 1)[0].strip()
            # mpnet is slow on a CPU and optional (five PyPI parts): its commands are documented, not run
            cheap = CHEAP.search(command) and "backbone=mpnet" not in command
            if command.startswith(".venv/bin/transferdx-") and "<" not in command and cheap:
                lines.append(command)
    return lines


def test_readme_has_cheap_commands():
    assert len(readme_commands()) >= 3, readme_commands()


@pytest.mark.slow
@pytest.mark.parametrize("command", readme_commands())
def test_readme_command_runs_in_bash(command, tmp_path, data):
    """Pasted into bash (quotes and all), each command exits 0; outputs go to a temporary folder."""
    bin_dir = Path(sys.executable).parent
    line = command.replace(".venv/bin/", f"{bin_dir}/")
    line = re.sub(r"output_dir=\S+", "", line)
    extra = "diagnostics=lexical bootstrap.resamples=20"
    if " -m " in line:
        extra += f" hydra.sweep.dir={tmp_path / 'sweep'}"
    else:
        extra += f" output_dir={tmp_path / 'out'} hydra.run.dir={tmp_path / 'run'}"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFERDX_DATA_DIR": str(data), "TRANSFERDX_CACHE_DIR": str(tmp_path)}
    proc = subprocess.run(["bash", "-c", f"{line} {extra}"], cwd=REPO, capture_output=True, text=True, env=env)
    assert proc.returncode == 0, f"{command}\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"


def overrides(*items: str):
    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        return compose(config_name="audit", overrides=list(items))


def test_slice_as_bash_hands_it_over():
    """``data.slice='[2:10]'`` reaches Hydra as ``data.slice=[2:10]``, a one-item list."""
    cfg = overrides("data=msmarco_dl19", "data.slice=[2:10]")
    _, options = config.data_options(cfg)
    from transferdx.inputs.reading import parse_slice

    assert parse_slice(options["slice_spec"]) == slice(2, 10) == parse_slice("[2:10]")
    with pytest.raises(ValueError, match="negative slice"):
        parse_slice(["2:10", "3:4"])


def test_kinds_override_as_a_dict_and_a_key():
    assert config.audit_options(overrides("kinds={handwritten: control}")).kinds == {"handwritten": "control"}
    assert config.audit_options(overrides("+kinds.bm25=control")).kinds == {"bm25": "control"}
    assert config.audit_options(overrides()).kinds == {}


def test_backbone_model_alone_infers_the_source(tmp_path):
    """``backbone.model=<folder>`` or ``=org/name`` without ``backbone.source=`` (the preset says
    ``package``) names a folder or a hub model; anything else is a one-line error."""
    folder = tmp_path / "my-encoder"
    folder.mkdir()
    spec = config.backbone_spec(overrides(f"backbone.model={folder}"))
    assert (spec.source, spec.name, spec.model) == ("path", "my-encoder", str(folder))
    hub = config.backbone_spec(overrides("backbone.model=intfloat/e5-base-v2"))
    assert (hub.source, hub.name) == ("hub", "intfloat__e5-base-v2")
    assert config.backbone_spec(overrides()).source == "package"
    with pytest.raises(ValueError, match="neither a model folder, a hub id"):
        config.backbone_spec(overrides("backbone.model=no_such_model_package"))


def test_readme_links_exist():
    """Every relative link of the README names a file or folder of the repository (the docs site's
    own links are checked by its strict build, ``make docs``)."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    links = [t.split("#", 1)[0] for t in re.findall(r"\]\(([^)\s]+)\)", text) if "://" not in t]
    assert len(links) >= 5 and "docs/index.md" in links
    assert [t for t in links if not (REPO / t).exists()] == []


def readme_path_commands() -> list[str]:
    """The README's commands from "Audit your mined file" to "Train", in order."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    path = text.split("## Audit your mined file", 1)[1].split("\n## More", 1)[0]
    blocks = re.findall(r"```bash\n(.*?)```", path, flags=re.S)
    return [line.split("  #", 1)[0].strip() for block in blocks for line in block.splitlines() if line.strip()]


def test_readme_path_is_audit_clean_train():
    verbs = [command.split()[0].removeprefix(".venv/bin/") for command in readme_path_commands()]
    assert verbs == ["transferdx-audit", "transferdx-clean", "transferdx-train"]
    _, docs_commands, _ = mining_section()
    assert readme_path_commands()[0] in docs_commands  # the docs' mining example audits the same file


def mining_section() -> tuple[str, list[str], str]:
    text = (REPO / "docs" / "inputs.md").read_text(encoding="utf-8")
    section = text.split("## Audit negatives you mined with sentence-transformers", 1)[1].split("\n## ", 1)[0]
    python = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    bash = re.findall(r"```bash\n(.*?)```", section, flags=re.S)[0]
    commands = [line.split("  #", 1)[0].strip() for line in bash.splitlines() if line.strip()]
    return python[0], commands, python[1]
