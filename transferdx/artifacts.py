"""Artifacts: atomic writes of files and folders, output-directory confinement, content hashes and
``.meta.json`` files."""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def safe_join(root: str | Path, name: str) -> Path:
    """``root / name``, refusing any name that would resolve outside ``root``."""
    root_path = Path(root).resolve()
    candidate = (root_path / name).resolve()
    if candidate != root_path and root_path not in candidate.parents:
        raise ValueError(f"path {name!r} escapes the output directory {str(root_path)!r}")
    return candidate


@contextmanager
def atomic_file(path: str | Path, mode: str = "wb") -> Iterator[Any]:
    """A handle to write ``path`` through: a temporary file in the same folder, flushed, synced and
    moved onto ``path`` with ``os.replace`` when the block ends (removed if it fails). ``mode``:
    ``wb``, or ``w`` for UTF-8 text with line ends as written."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.chmod(tmp, 0o666 & ~_umask())
        binary = "b" in mode
        with os.fdopen(fd, mode, encoding=None if binary else "utf-8", newline=None if binary else "") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        if exc.filename is None:  # a failed write or fsync (a full disk) names no file: name the one written
            raise OSError(exc.errno, exc.strerror or str(exc), str(path)) from exc
        raise
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` through a temporary file in the same folder and ``os.replace``."""
    with atomic_file(path) as handle:
        handle.write(data)
    return Path(path)


@contextmanager
def atomic_folder(target: str | Path, keep: Callable[[Path], bool] | None = None) -> Iterator[Path]:
    """A fresh folder to fill, published as ``target`` when the block ends without an exception, and
    removed otherwise, so ``target`` is never half-written. A folder already at ``target`` is
    replaced, unless ``keep(target)`` says it is good: then another run published the same content
    first, ours is dropped and theirs stays, so a run reading it never sees it vanish (two jobs
    exporting one model at once). The yielded folder's parent is a private scratch folder."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    remove_abandoned_work(target)
    prefix = f".{target.name}.{_WORK_TAG}.{_host()}.{os.getpid()}."
    work = Path(tempfile.mkdtemp(prefix=prefix, dir=target.parent))
    try:
        folder = work / "folder"
        folder.mkdir()
        yield folder
        if target.exists():
            if keep is not None and keep(target):
                return
            os.replace(target, work / "replaced")  # out of the way in one step; removed with work
        os.replace(folder, target)
    finally:
        shutil.rmtree(work, ignore_errors=True)


_WORK_TAG = "work"  # marks atomic_folder's scratch folders: .<name>.work.<host>.<pid>.<random>


def remove_abandoned_work(target: str | Path) -> list[Path]:
    """Remove the scratch folders of :func:`atomic_folder` for ``target`` that a run on this host
    left behind when it was killed (its pid is gone): an interrupted OpenVINO export leaves ~90 MB.
    Another host's, or a live run's, are left alone. Returns what was removed."""
    target = Path(target)
    removed = []
    host = _host()
    for work in target.parent.glob(f".{target.name}.{_WORK_TAG}.*"):
        parts = work.name[len(target.name) + 2 :].split(".")  # work, host, pid, random
        if len(parts) < 4 or parts[1] != host or not parts[2].isdigit() or _alive(int(parts[2])):
            continue
        shutil.rmtree(work, ignore_errors=True)
        removed.append(work)
    return removed


def _host() -> str:
    return socket.gethostname().replace(".", "-")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_text(path: str | Path, text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


# a table of at least this many rows is written with a progress bar
PROGRESS_ROWS = 500_000
# rows a large table is written at a time (atomic_write_csv): its working set is one chunk's text
CSV_CHUNK_ROWS = 100_000


def atomic_write_csv(
    path: str | Path, frame: Any, chunk_rows: int | None = None, rows: Any = None, take: Any = None
) -> Path:
    """Write ``frame`` as :func:`csv_text` would (the same bytes) through :func:`atomic_file`,
    ``chunk_rows`` rows at a time, so a table of millions of rows is never one string (with a
    progress bar from :data:`PROGRESS_ROWS` rows; ``chunk_rows`` default :data:`CSV_CHUNK_ROWS`).
    ``rows``: the positions to write, in order (the bytes of ``csv_text(frame.iloc[rows])`` without
    that copy of the frame); default all. ``take``: positions → the frame of those rows, in place of
    ``frame.iloc`` (a table whose columns are read per chunk, e.g. the suspects' texts)."""
    from tqdm.auto import tqdm

    chunk_rows = chunk_rows or CSV_CHUNK_ROWS

    total = len(frame) if rows is None else len(rows)
    quiet = total < PROGRESS_ROWS
    with (
        atomic_file(path, "w") as handle,
        tqdm(total=total, desc=f"write {Path(path).name}", unit="row", disable=quiet, leave=False) as bar,
    ):
        for start in range(0, max(total, 1), chunk_rows):
            span = slice(start, start + chunk_rows)
            if take is not None:
                import numpy as np  # here, not at the top: the command line's fast paths import this module

                part = take(np.arange(total)[span] if rows is None else np.asarray(rows)[span])
            else:
                part = frame.iloc[span] if rows is None else frame.iloc[rows[span]]
            part.to_csv(handle, index=False, header=start == 0, lineterminator="\n")
            bar.update(len(part))
    return Path(path)


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


# ---------------------------------------------------------------------------------------------
# Run folders: one live run per output folder
# ---------------------------------------------------------------------------------------------

CLAIM_FILE = ".transferdx-run"


class FolderInUseError(RuntimeError):
    """Another live run owns the output folder."""


@contextmanager
def claim_folder(folder: str | Path) -> Iterator[Path]:
    """Own ``folder`` (created if missing) while the block runs: ``<folder>/.transferdx-run`` holds
    this process's pid, host and start time under an exclusive ``flock``. A second run that asks for
    the same folder while the first is alive gets :class:`FolderInUseError`; a claim left behind by a
    run that died holds no lock and is taken over. The file is removed when the block ends."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / CLAIM_FILE
    try:
        import fcntl
    except ImportError:  # no flock (Windows): no claim, as before
        yield folder
        return
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            owner = os.read(fd, 4096).decode("utf-8", "replace").strip()
            os.close(fd)
            raise FolderInUseError(
                f"output folder {folder.resolve()} is in use by another transferdx run ({owner or 'pid unknown'});"
                " give this run another output_dir= (or none, for a new folder of its own)"
            ) from None
        try:
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:  # not a file its previous owner removed between our open and our lock
            break
        os.close(fd)
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
    os.ftruncate(fd, 0)
    os.write(fd, f"pid {os.getpid()} on {socket.gethostname()}, started {stamp}\n".encode())
    finished = False
    try:
        with owned_folder(folder, since=os.fstat(fd).st_mtime):
            yield folder
        finished = True
    finally:
        path.unlink(missing_ok=True)
        os.close(fd)
        if not finished:
            _mark_incomplete(folder)


@contextmanager
def owned_folder(folder: str | Path, since: float | None = None) -> Iterator[Path]:
    """Write into ``folder`` as one run: the completion marker of the last finished run there is
    taken away at the start (the folder is being rewritten), and when the block ends without an
    exception the files that run wrote and this one did not are removed and a new
    :data:`COMPLETE_FILE` lists the files written (modified since the start, by the file system's
    own clock; ``since`` gives it). A user's own files, older than the last run, are never touched."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if since is None:
        probe = folder / f".start.{_host()}.{os.getpid()}.{secrets.token_hex(4)}"
        probe.touch()
        since = probe.stat().st_mtime
        probe.unlink()
    earlier = _take_marker(folder)
    yield folder
    written = _files_since(folder, since)
    for name in sorted(set(earlier) - set(written)):  # the previous run's, not rewritten: stale
        _remove_owned(folder, name)
    atomic_write_text(folder / COMPLETE_FILE, canonical_json({"files": written}) + "\n")
    (folder / INCOMPLETE_FILE).unlink(missing_ok=True)


COMPLETE_FILE = ".transferdx-complete"
INCOMPLETE_FILE = ".transferdx-incomplete"  # left by a run that failed or was interrupted after writing


def _mark_incomplete(folder: Path) -> None:
    """Mark a folder a failed or interrupted run wrote into (its claim is gone, so nothing else would
    say so); a folder holding nothing of the run's is left unmarked (and removed if the run made it)."""
    try:
        if any(not p.name.startswith(".") for p in folder.iterdir()):
            (folder / INCOMPLETE_FILE).touch()
    except OSError:  # a full or read-only disk: the missing completion marker still says it
        pass


class IncompleteOutputWarning(UserWarning):
    """Reading from an output folder whose run did not finish (no completion marker)."""


def _take_marker(folder: Path) -> list[str]:
    """The files a finished earlier run in ``folder`` wrote (its marker's list), removing the marker:
    from now on the folder is being rewritten, so it is not complete until this run ends."""
    marker = folder / COMPLETE_FILE
    try:
        files = json.loads(marker.read_text(encoding="utf-8"))["files"]
    except (OSError, ValueError, KeyError, TypeError):
        files = []
    marker.unlink(missing_ok=True)
    return [f for f in files if isinstance(f, str)]


def _files_since(folder: Path, started: float) -> list[str]:
    """Files under ``folder`` (relative, sorted) modified since ``started``; hidden files and folders
    (claims, scratch, Hydra's ``.hydra``) left out."""
    found = []
    for root, dirs, files in os.walk(folder):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        for name in files:
            full = Path(root) / name
            if name.startswith(".") or full.is_symlink():
                continue
            try:
                if full.stat().st_mtime >= started:
                    found.append(full.relative_to(folder).as_posix())
            except OSError:
                continue
    return sorted(found)


def _remove_owned(folder: Path, name: str) -> None:
    """Remove ``folder/name`` (a file an earlier finished run wrote there) and the folders it leaves
    empty, never anything outside ``folder``."""
    try:
        target = safe_join(folder, name)
    except ValueError:
        return
    if not target.is_file() or target.is_symlink():
        return
    target.unlink(missing_ok=True)
    root = folder.resolve()
    parent = target.parent
    while parent != root and root in parent.parents:
        try:
            parent.rmdir()
        except OSError:
            break
        parent = parent.parent


def incomplete_output(path: str | Path, levels: int = 3) -> Path | None:
    """The transferdx output folder holding ``path`` (itself or up to ``levels`` folders above it) when
    the run writing it has not finished or was cut short (no :data:`COMPLETE_FILE`); None otherwise.
    An output folder is one with ``clean.json``, ``profile.json``, a run's claim file or the mark
    :data:`INCOMPLETE_FILE` a failed or interrupted run leaves."""
    here = Path(path).resolve()
    for folder in [here, *here.parents][: levels + 1]:
        if not folder.is_dir():
            continue
        if any((folder / name).exists() for name in ("clean.json", "profile.json", CLAIM_FILE, INCOMPLETE_FILE)):
            finished = (folder / COMPLETE_FILE).is_file() and not (folder / CLAIM_FILE).exists()
            return None if finished and not (folder / INCOMPLETE_FILE).exists() else folder
    return None


def run_id() -> str:
    """A new run folder name, unique among runs started on this machine: the start time to the
    second, the pid and a random suffix, e.g. ``2026-03-01_14-02-09_4242-9f3a01c2`` (sorts by start time)."""
    return f"{time.strftime('%Y-%m-%d_%H-%M-%S')}_{os.getpid()}-{secrets.token_hex(4)}"
