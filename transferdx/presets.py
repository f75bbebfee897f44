"""Named presets shipped with the package: the ``conf/`` folder and its encoder configs, read as
plain YAML (``yaml.safe_load``) so that the Python API needs no Hydra."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml


def config_dir() -> Path:
    """The ``conf/`` folder: next to the package in a source checkout, or packaged inside it."""
    here = Path(__file__).resolve().parent
    for candidate in (here.parent / "conf", here / "conf"):
        if (candidate / "audit.yaml").is_file():
            return candidate
    raise FileNotFoundError(f"transferdx configuration folder not found next to {here}")


def preset_names(group: str) -> list[str]:
    """Names of the presets in a config group (``backbone``, ``benchmark``, …)."""
    return sorted(p.stem for p in (config_dir() / group).glob("*.yaml"))


def read_preset(group: str, name: str) -> dict[str, Any]:
    """One preset as a plain dict (``defaults`` lists are resolved within the group; ``${…}``
    interpolations are left as text: presets that need them are for the Hydra CLI)."""
    path = config_dir() / group / f"{name}.yaml"
    if not path.is_file():
        raise ValueError(f"unknown {group} preset {name!r}; valid: {preset_names(group)}")
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    merged: dict[str, Any] = {}
    for parent in data.pop("defaults", []) or []:
        if isinstance(parent, str) and parent != "_self_":
            merged.update(read_preset(group, parent))
    merged.update(data)
    return merged


def default_cache_dir() -> Path:
    """``TRANSFERDX_CACHE_DIR``, else ``~/.cache/transferdx`` (as ``conf/paths/default.yaml``)."""
    return Path(os.environ.get("TRANSFERDX_CACHE_DIR") or Path(os.environ.get("HOME", ".")) / ".cache/transferdx")


def default_data_dir() -> Path:
    """``TRANSFERDX_DATA_DIR``, else ``../shared/data`` (as ``conf/paths/default.yaml``)."""
    return Path(os.environ.get("TRANSFERDX_DATA_DIR") or "../shared/data")
