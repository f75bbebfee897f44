"""Artifacts: atomic writes, output-directory confinement, content hashes and ``.meta.json`` files."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def safe_join(root: str | Path, name: str) -> Path:
    """``root / name``, refusing any name that would resolve outside ``root``."""
    root_path = Path(root).resolve()
    candidate = (root_path / name).resolve()
    if candidate != root_path and root_path not in candidate.parents:
        raise ValueError(f"path {name!r} escapes the output directory {str(root_path)!r}")
    return candidate


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` through a temporary file in the same folder and ``os.replace``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.chmod(tmp, 0o666 & ~_umask())
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_text(path: str | Path, text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


def csv_text(frame: Any, index: bool = False) -> str:
    """A DataFrame as CSV text with ``\n`` line ends, so equal frames give equal bytes anywhere."""
    return str(frame.to_csv(index=index, lineterminator="\n"))


def canonical_json(obj: Any) -> str:
    """JSON with sorted keys and fixed separators, so equal content gives equal bytes."""
    return json.dumps(obj, sort_keys=True, indent=2, ensure_ascii=False, allow_nan=True) + "\n"


def content_hash(*parts: Any) -> str:
    """sha256 over the canonical JSON of ``parts`` (strings, numbers, mappings, lists)."""
    digest = hashlib.sha256()
    for part in parts:
        digest.update(json.dumps(part, sort_keys=True, ensure_ascii=False).encode("utf-8"))
        digest.update(b"\x00")
    return digest.hexdigest()


def file_hash(path: str | Path, chunk: int = 1 << 20) -> str:
    """sha256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def git_sha() -> str | None:
    """The package checkout's git commit, when it is one."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def versions() -> dict[str, str]:
    """Versions of the packages whose behaviour shapes the numbers."""
    from importlib.metadata import PackageNotFoundError, version

    names = ["transferdx", "numpy", "scipy", "pandas", "bm25s", "sentence-transformers", "torch"]
    found = {}
    for name in names:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            continue
    return found


def write_meta(path: str | Path, config: Mapping[str, Any], rows: int | None = None) -> Path:
    """Write ``<path>.meta.json``: the config, package versions, git SHA and row count."""
    path = Path(path)
    meta = {"artifact": path.name, "config": config, "rows": rows, "versions": versions(), "git_sha": git_sha()}
    return atomic_write_text(path.with_name(path.name + ".meta.json"), canonical_json(meta))
