"""The commands the verdict prints, written so that they run as printed when pasted into bash."""

from __future__ import annotations

import functools
import re
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from transferdx.presets import preset_names

if TYPE_CHECKING:
    pass


IN_MEMORY = "(in memory)"  # the data label of records given in memory (pipeline.auditing)


# a value Hydra and bash both take unquoted; anything else is quoted for both
PLAIN_VALUE = re.compile(r"[A-Za-z0-9_./:@+-]+")


@functools.cache
def _data_presets() -> frozenset[str]:
    return frozenset(preset_names("data"))


def override(key: str, value: str) -> str:
    """``key=value`` as typed in bash: plain when safe, else Hydra's double quotes inside the shell's
    (a backslash doubled only before a quote or at the end, as Hydra reads them)."""
    if PLAIN_VALUE.fullmatch(value):
        return f"{key}={value}"
    inner = re.sub(r'(\\*)("|$)', lambda m: m.group(1) * 2 + ("\\" + m.group(2) if m.group(2) else ""), value)
    return shlex.quote(f'{key}="{inner}"')


def clean_command(settings: Mapping[str, Any] | None, input_path: str | None = None, lexical: bool = False) -> str:
    """The command that cleans the input the audit read, as it runs when pasted into bash:
    ``transferdx-clean input=<input_path>`` (else the input's name as the artifacts record it),
    ``data=<name>`` for a bundled data set, the Python call for records given in memory;
    ``diagnostics=lexical`` when the audit ran without an encoder."""
    label = str(input_path or (settings or {}).get("data") or IN_MEMORY)
    if label == IN_MEMORY:
        return "`transferdx.clean(records, audit)`"
    preset = label in _data_presets() and not Path(label).exists()
    argument = f"data={label}" if preset else override("input", label)
    return f"`transferdx-clean {argument}{' diagnostics=lexical' if lexical else ''}`"
