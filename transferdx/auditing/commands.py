"""The commands the verdict prints, written so that they run as printed when pasted into bash."""

from __future__ import annotations

import functools
import re
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from transferdx.inputs.hub import absolute_hub_spec, is_hub_spec
from transferdx.presets import preset_names

if TYPE_CHECKING:
    pass


IN_MEMORY = "(in memory)"  # the data label of records given in memory (pipeline.auditing)


# a value Hydra and bash both take unquoted; anything else is quoted for both
PLAIN_VALUE = re.compile(r"[A-Za-z0-9_./:@+-]+")
# a plain word Hydra would read as something other than a string (a number, a boolean, null)
NOT_A_STRING = re.compile(r"(?i)[+-]?(\d[\d_]*\.?\d*(e[+-]?\d+)?|\.\d+(e[+-]?\d+)?|true|false|null|nan|inf)")


@functools.cache
def _data_presets() -> frozenset[str]:
    return frozenset(preset_names("data"))


def _hydra_value(value: Any) -> str:
    """``value`` as Hydra's grammar reads it back as the same value: a string plain when safe, else in
    Hydra's double quotes (a backslash doubled only before a quote or at the end, as Hydra reads
    them); a number, a boolean, null and a list as they are written in YAML."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list | tuple):
        return "[" + ",".join(_hydra_value(v) for v in value) + "]"
    text = str(value)
    if PLAIN_VALUE.fullmatch(text) and not NOT_A_STRING.fullmatch(text):
        return text
    inner = re.sub(r'(\\*)("|$)', lambda m: m.group(1) * 2 + ("\\" + m.group(2) if m.group(2) else ""), text)
    return f'"{inner}"'


def override(key: str, value: Any) -> str:
    """``key=value`` as typed in bash: plain when safe, else Hydra's double quotes inside the shell's
    (:func:`_hydra_value`; a list, a number, a boolean keep their type)."""
    word = f"{key}={_hydra_value(value)}"
    return word if PLAIN_VALUE.fullmatch(word.split("=", 1)[1]) else shlex.quote(word)


def _absolute(label: str) -> str:
    """A path that exists, absolute (resolved), so the command runs from any folder (a Hub dataset,
    ``hf:…``, with its local repository folder absolute: :func:`absolute_hub_spec`); else as it is."""
    if is_hub_spec(label):
        return absolute_hub_spec(label)
    path = Path(label)
    return str(path.resolve()) if path.exists() else label


def clean_command(settings: Mapping[str, Any] | None, input_path: str | None = None, lexical: bool = False) -> str:
    """The command that cleans the input the audit read, as it runs when pasted into bash from any
    folder: ``transferdx-clean input=<input_path>`` (absolute; else the ``input`` the settings
    record, else the input's name as the artifacts record it), ``data=<name>`` for a bundled data
    set, with the settings the audit read the input with (``read_with``: its ``data.*`` overrides;
    ``on_error``) and ``diagnostics=lexical`` when the audit ran without an encoder (``lexical`` or
    ``read_with``); the Python call for records given in memory."""
    settings = settings or {}
    read_with = {str(k): v for k, v in (settings.get("read_with") or {}).items()}
    if "data" in read_with:  # read through a data preset: its name and overrides say what was read
        words = [override(k, v) for k, v in read_with.items() if k != "diagnostics"]
    else:
        label = str(input_path or settings.get("input") or settings.get("data") or IN_MEMORY)
        if label == IN_MEMORY:
            return "`transferdx.clean(records, audit)`"
        preset = label in _data_presets() and not Path(label).exists()
        words = [f"data={label}" if preset else override("input", _absolute(label))]
        words += [override(k, v) for k, v in read_with.items() if k not in ("input", "diagnostics")]
    on_error = settings.get("on_error")
    if on_error not in (None, "raise"):
        words.append(override("on_error", str(on_error)))
    if lexical or read_with.get("diagnostics") == "lexical":
        words.append("diagnostics=lexical")
    return f"`transferdx-clean {' '.join(words)}`"
