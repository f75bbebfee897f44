"""A dataset on the Hugging Face Hub as an input: ``hf:OWNER/NAME[:CONFIG][@SPLIT]``.

:func:`load_hub` reads the spec through ``datasets.load_dataset(OWNER/NAME, CONFIG, split=SPLIT)``
(default split ``train``), so the user's Hugging Face cache and offline mode (``HF_HUB_OFFLINE``,
``HF_DATASETS_OFFLINE``) apply as they do to any ``load_dataset`` call; ``OWNER/NAME`` may also be a
local dataset repository folder (data files with a ``README.md`` declaring its ``configs:``), as
``load_dataset`` takes one. The split may carry ``load_dataset``'s slicing (``@train[:1000]``).
What it cannot load is one line (:class:`~transferdx.inputs.records.InputError`): no such dataset,
no such config (the configs it has), no such split (the splits it has), or not in the cache while
offline (how to cache it). The records are read from the ``Dataset`` by its columns, as any table in
memory (:func:`transferdx.inputs.registry.read`), as the source :func:`hub_source` names.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from transferdx.inputs.records import InputError

PREFIX = "hf:"
DEFAULT_SPLIT = "train"
_SPLIT_NAME = re.compile(r"[\w.-]+")  # a split's name, without load_dataset's slicing ([:1000], [10%:])


@dataclass(frozen=True)
class HubSpec:
    """``hf:OWNER/NAME[:CONFIG][@SPLIT]`` taken apart: ``path`` (``OWNER/NAME`` or a local folder),
    ``config`` (None: the dataset's only or default one) and ``split`` (``train`` when not given)."""

    text: str
    path: str
    config: str | None
    split: str


def is_hub_spec(data: Any) -> bool:
    """Whether ``data`` is a Hub dataset spec: a string starting with ``hf:`` that names no existing
    file or folder (a local path that happens to begin so stays a path)."""
    return isinstance(data, str) and data.startswith(PREFIX) and not Path(data).exists()


def parse_hub(spec: str) -> HubSpec:
    """``spec`` taken apart (see :class:`HubSpec`). A ``:`` names the config and an ``@`` the split
    (after the config) only after the last ``/`` (a local path may hold either). A spec without a
    dataset, or with an empty config or split, is a one-line ``ValueError`` giving the form."""
    if not is_hub_spec(spec):
        raise ValueError(f"{spec!r} is no Hub dataset spec: expected hf:OWNER/NAME[:CONFIG][@SPLIT]")
    rest, split = spec[len(PREFIX) :], DEFAULT_SPLIT
    if "@" in rest and "/" not in rest.rsplit("@", 1)[1]:  # an '@' before the last '/' is the path's
        rest, split = rest.rsplit("@", 1)
    head, slash, name = rest.rpartition("/")
    config = None
    if ":" in name:
        name, config = name.split(":", 1)
    path = head + slash + name
    if not name or config == "" or not split:
        raise ValueError(
            f"{spec!r}: expected hf:OWNER/NAME[:CONFIG][@SPLIT], e.g. hf:sentence-transformers/msmarco-bm25:triplet"
        )
    return HubSpec(spec, path, config, split)


def hub_source(spec: str) -> str:
    """The source a Hub dataset's records are named after: the dataset's ``NAME`` (the last part of
    its path), with ``_CONFIG`` when a config is given (``msmarco-bm25_triplet-50``); the split is
    not part of it."""
    parsed = parse_hub(spec)
    name = parsed.path.rstrip("/").rsplit("/", 1)[-1]
    return f"{name}_{parsed.config}" if parsed.config else name


def _offline() -> bool:
    """Whether offline mode is on (``HF_HUB_OFFLINE`` or ``HF_DATASETS_OFFLINE``), as ``datasets`` reads it."""
    import datasets

    return bool(getattr(datasets.config, "HF_HUB_OFFLINE", False))


def _names(lister: Any, *args: Any) -> list[str] | None:
    """What ``lister`` (``get_dataset_config_names`` / ``get_dataset_split_names``) says, or None when
    it cannot say."""
    try:
        return [str(n) for n in lister(*args)]
    except Exception:  # the dataset's own error is reported instead
        return None


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _load_error(parsed: HubSpec, exc: Exception) -> InputError:
    """What ``load_dataset`` raised for ``parsed``, as one line naming what to do."""
    import datasets

    spec, path = parsed.text, parsed.path
    if isinstance(exc, datasets.exceptions.DatasetNotFoundError):
        why = f"no dataset {path!r} on the Hub (or it is private or gated: log in with `hf auth login`)"
        return InputError(spec, None, "<dataset>", why)
    if isinstance(exc, ConnectionError):
        if _offline():
            why = (
                f"{path!r} is not in the local Hugging Face cache and offline mode is on: run once online to"
                " cache it, or set HF_HUB_OFFLINE=0 (and HF_DATASETS_OFFLINE=0)"
            )
        else:
            why = (
                f"cannot reach the Hub for {path!r} and it is not in the local Hugging Face cache: check the"
                " network (or HF_ENDPOINT), or run once where the Hub is reachable to cache it"
            )
        return InputError(spec, None, "<dataset>", why)
    if isinstance(exc, FileNotFoundError):
        return InputError(spec, None, "<dataset>", f"no dataset {path!r}: {_one_line(str(exc))}")
    if isinstance(exc, ValueError):
        configs = _names(datasets.get_dataset_config_names, path)
        if configs is not None and parsed.config is not None and parsed.config not in configs:
            return InputError(
                spec, None, "<config>", f"{path!r} has no config {parsed.config!r}; it has: {', '.join(configs)}"
            )
        if (
            configs is not None
            and parsed.config is None
            and len(configs) > 1
            and "config name is missing" in str(exc).lower()
        ):
            why = f"{path!r} has several configs; name one (hf:{path}:CONFIG): {', '.join(configs)}"
            return InputError(spec, None, "<config>", why)
        splits = _names(datasets.get_dataset_split_names, path, parsed.config)
        base = _SPLIT_NAME.match(parsed.split)
        if splits is not None and (base is None or base.group(0) not in splits):
            where = f"{path!r}" + (f" (config {parsed.config!r})" if parsed.config else "")
            return InputError(
                spec, None, "<split>", f"{where} has no split {parsed.split!r}; it has: {', '.join(splits)}"
            )
    return InputError(spec, None, "<dataset>", f"cannot load: {type(exc).__name__}: {_one_line(str(exc))}")


def load_hub(spec: str) -> Any:
    """The ``datasets.Dataset`` a Hub spec (``hf:OWNER/NAME[:CONFIG][@SPLIT]``, see
    :func:`parse_hub`) names, through ``datasets.load_dataset`` (the user's cache and offline mode);
    what cannot be loaded is a one-line :class:`~transferdx.inputs.records.InputError`."""
    parsed = parse_hub(spec)
    import datasets

    try:
        loaded = datasets.load_dataset(parsed.path, parsed.config, split=parsed.split)
    except (ValueError, ConnectionError, FileNotFoundError) as exc:
        raise _load_error(parsed, exc) from None
    return loaded


def absolute_hub_spec(spec: str) -> str:
    """``spec`` as it reads the same dataset from any folder: a local repository folder made absolute,
    a Hub ``OWNER/NAME`` as given."""
    parsed = parse_hub(spec)
    if not Path(parsed.path).exists():
        return spec
    return PREFIX + str(Path(parsed.path).resolve()) + spec[len(PREFIX) + len(parsed.path) :]


def hub_label(spec: str) -> str:
    """``spec`` as artifacts name it, the same wherever the data lives: a local repository folder by
    its name (``hf:<folder>[:CONFIG][@SPLIT]``), a Hub ``OWNER/NAME`` as given."""
    parsed = parse_hub(spec)
    if not Path(parsed.path).exists():
        return spec
    return PREFIX + Path(parsed.path).resolve().name + spec[len(PREFIX) + len(parsed.path) :]
