"""The on-disk embedding cache, with its locking and healing.

:class:`EmbeddingCache` embeds each text once per (model id, revision, prompt). Vectors live in
``.npz`` chunk files (read with ``allow_pickle=False``) named by the sha256 of their content, keys
and vectors, and written atomically. A chunk whose content does not match its name (truncated,
corrupted, rewritten, or with no digest) is reported with a :class:`CacheWarning`, moved to
``damaged/`` and its texts re-encoded: unverified vectors are never used. Texts are encoded in
canonical units (the request's texts by length then hash, one model batch each), so a text's vector
never depends on where a run was interrupted; a chunk is written every ``chunk_size`` texts or
``flush_seconds``, whichever comes first, so a killed run keeps most of its work. Runs sharing a
cache claim each unit with an ``flock``-ed file before encoding it, so each text is encoded once;
the kernel drops a killed run's claims. The vectors come from an :class:`Encoder`
(:mod:`transferdx.embed.encoder`), which the cache holds and asks only for the texts it lacks.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import re
import socket
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

import transferdx.embed.backends as backends
from transferdx.artifacts import atomic_write_bytes, atomic_write_text, canonical_json, content_hash
from transferdx.embed.encoder import Encoder, normalise
from transferdx.embed.models import EncoderSpec
from transferdx.embed.pool import EncodePool

try:
    import fcntl
except ImportError:  # not POSIX: runs sharing a cache cannot claim texts (results stay correct)
    fcntl = None  # type: ignore[assignment]


def text_key(text: str) -> bytes:
    """sha256 digest of the UTF-8 text: the cache key of one text."""
    return hashlib.sha256(text.encode("utf-8")).digest()


class CacheWarning(UserWarning):
    """The embedding cache found a damaged file, discarded it and re-encodes its texts."""


CHUNK_NAME = re.compile(r"chunk-([0-9a-f]{64})\.npz")
_clock = time.monotonic  # the flush timer (tests replace it)
_POLL_SECONDS = 0.1  # how often a run waiting for another run's claimed texts looks again
_TEMP_MAX_AGE = 3600.0  # a write's temporary file older than this belongs to a killed run


def chunk_digest(keys: np.ndarray, vectors: np.ndarray) -> str:
    """sha256 of a chunk's content (shape, 32-byte keys, float32 vectors): the name it is stored under."""
    digest = hashlib.sha256(b"transferdx-embedding-chunk-v1\x00")
    digest.update(np.asarray(vectors.shape, dtype="<i8").tobytes())
    digest.update(np.ascontiguousarray(keys, dtype=np.uint8).tobytes())
    digest.update(np.ascontiguousarray(vectors, dtype="<f4").tobytes())
    return digest.hexdigest()


def _parse_chunk(data: bytes) -> tuple[np.ndarray, np.ndarray]:
    """(keys n × 32 uint8, vectors n × d float32) of a chunk file's bytes; ValueError when malformed."""
    if not data:
        raise ValueError("empty file")
    loaded = np.load(io.BytesIO(data), allow_pickle=False)
    if not isinstance(loaded, np.lib.npyio.NpzFile):
        raise ValueError("not an .npz archive")
    with loaded:
        keys, vectors = loaded["keys"], loaded["vectors"]
    if keys.dtype != np.uint8 or keys.ndim != 2 or keys.shape[1] != 32:
        raise ValueError(f"keys are {keys.dtype} {keys.shape}, not n × 32 uint8")
    if vectors.dtype != np.float32 or vectors.ndim != 2 or len(vectors) != len(keys):
        raise ValueError(f"vectors are {vectors.dtype} {vectors.shape} for {len(keys)} keys")
    return keys, vectors


class _Claim:
    """One run's exclusive claim on a unit of texts: an ``flock``-ed file in the chunk folder. The
    kernel drops the lock when its holder dies (even by kill -9), so a claim never outlives its run;
    the file holds the holder's pid, host and start time for messages."""

    def __init__(self, path: Path, fd: int | None):
        self.path, self.fd = path, fd

    @classmethod
    def try_acquire(cls, path: Path) -> _Claim | None:
        """The claim, or None while another live run holds it. Where locks are unsupported, an
        unlocked claim (runs may then encode the same texts; results stay correct)."""
        for _ in range(100):
            try:
                fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o666)
            except OSError:
                return cls(path, None)
            if fcntl is None:
                os.close(fd)
                return cls(path, None)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                return None
            except OSError:
                os.close(fd)
                return cls(path, None)
            try:  # the holder unlinks the file before unlocking: make sure we locked the current one
                current = os.stat(path).st_ino
            except FileNotFoundError:
                current = -1
            if current == os.fstat(fd).st_ino:
                info = {"pid": os.getpid(), "host": socket.gethostname(), "time": time.time()}
                os.ftruncate(fd, 0)
                os.write(fd, json.dumps(info).encode("utf-8"))
                return cls(path, fd)
            os.close(fd)
        return None

    def release(self) -> None:
        if self.fd is not None:
            self.path.unlink(missing_ok=True)
            os.close(self.fd)
            self.fd = None

    @staticmethod
    def holder(path: Path) -> str:
        try:
            info = json.loads(path.read_text(encoding="utf-8"))
            started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(info["time"])))
            return f"pid {info['pid']} on {info['host']} since {started}"
        except (OSError, ValueError, KeyError, TypeError):
            return "another run"


class _Wanted:
    """A request's keys, matched against a chunk's keys in bulk: by their first 8 bytes (sorted,
    searched), then exactly."""

    def __init__(self, keys: Iterable[bytes]):
        self.keys = frozenset(keys)
        rows = np.frombuffer(b"".join(self.keys), dtype=np.uint8).reshape(len(self.keys), 32)
        self.prefixes = np.sort(_prefixes(rows))

    def rows(self, keys: np.ndarray) -> list[int]:
        """The rows of ``keys`` (n × 32 uint8) that are wanted, in order."""
        if not len(self.prefixes) or not len(keys):
            return []
        prefixes = _prefixes(keys)
        at = np.minimum(np.searchsorted(self.prefixes, prefixes), len(self.prefixes) - 1)
        near = np.flatnonzero(self.prefixes[at] == prefixes).tolist()
        return [i for i in near if keys[i].tobytes() in self.keys]


def _prefixes(keys: np.ndarray) -> np.ndarray:
    """The first 8 bytes of each key (n × 32 uint8) as big-endian unsigned integers."""
    return np.ascontiguousarray(keys[:, :8]).view(">u8").reshape(len(keys))


@dataclass
class _Index:
    """Where each key of a request (``wanted``) lies (chunk path, row), and the chunk names already
    looked at: the index grows with the request, not with the cache."""

    wanted: _Wanted
    rows: dict[bytes, tuple[Path, int]] = field(default_factory=dict)
    seen: dict[str, int] = field(default_factory=dict)  # chunk name → inode looked at

    def drop(self, chunk: Path) -> None:
        self.rows = {k: v for k, v in self.rows.items() if v[0] != chunk}
        self.seen.pop(chunk.name, None)


_STORED = [0]  # texts this process has written to any cache (for the message of an interrupted run)


def texts_stored() -> int:
    """How many texts this process has encoded and written to an embedding cache."""
    return _STORED[0]


class _Pending:
    """Encoded vectors not yet written, the claims they hold, and when the last chunk was written."""

    def __init__(self, cache: EmbeddingCache, folder: Path, index: _Index):
        self.cache, self.folder, self.index = cache, folder, index
        self.keys: list[bytes] = []
        self.vectors: list[np.ndarray] = []
        self.claims: list[_Claim] = []
        self.since = _clock()

    def add(self, keys: list[bytes], vectors: np.ndarray, claim: _Claim) -> None:
        self.keys.extend(keys)
        self.vectors.append(vectors)
        self.claims.append(claim)

    def due(self) -> bool:
        return len(self.keys) >= self.cache.chunk_size or _clock() - self.since >= self.cache.flush_seconds

    def flush(self) -> None:
        """Write what is pending as one chunk, then release its claims (others now find it on disk)."""
        if self.keys:
            vectors = np.concatenate(self.vectors)
            chunk = self.cache._store(self.folder, self.keys, vectors)
            for row, key in enumerate(self.keys):
                self.index.rows[key] = (chunk, row)
            self.keys, self.vectors = [], []
        self.release()
        self.since = _clock()

    def release(self) -> None:
        for claim in self.claims:
            claim.release()
        self.claims = []


class EmbeddingCache:
    """Embeds texts with one encoder, each (text, prompt) once, in verified on-disk chunks.

    ``chunk_size``: at most this many texts per chunk file; ``flush_seconds``: a chunk is written at
    least this often while encoding, so a killed run loses little; ``claim_timeout``: how long a run
    waits for texts another live run has claimed before encoding them itself. ``model_factory``: see
    :class:`Encoder`."""

    def __init__(
        self,
        spec: EncoderSpec,
        cache_dir: str | Path,
        chunk_size: int = 256,
        progress: bool = True,
        model_factory: Callable[[str, EncoderSpec], Any] | None = None,
        flush_seconds: float = 10.0,
        claim_timeout: float = 600.0,
    ):
        if chunk_size < 1:
            raise ValueError(f"chunk_size must be ≥ 1, got {chunk_size}")
        self.cache_dir = Path(cache_dir)
        self.chunk_size = chunk_size
        self.flush_seconds = flush_seconds
        self.claim_timeout = claim_timeout
        self.progress = progress
        self.encoder = Encoder(spec, self.cache_dir, model_factory)
        self.encoded_texts = 0  # texts encoded by this object (not served from disk)
        self.pooled_texts = 0  # of which encoded by the multi-process pool
        # chunk → (stat, keys): the keys of each chunk looked at (its vectors are verified when read)
        self._keys: dict[Path, tuple[tuple[int, int, int], np.ndarray]] = {}

    @classmethod
    def from_model(
        cls, model: Any, cache_dir: str | Path, name: str | None = None, auto_runtime: bool = True, **kw: Any
    ) -> EmbeddingCache:
        """Wrap an already-loaded ``SentenceTransformer`` (:meth:`Encoder.from_model`: its cache
        identity is the sha256 of its weights, so a fine-tuned copy never reuses the original's
        vectors). ``auto_runtime``: a transformer model may run on the faster CPU runtime
        (:func:`backends.resolve_runtime`); False keeps torch fp32."""
        encoder = Encoder.from_model(model, cache_dir, name, auto_runtime)
        cache = cls(encoder.spec, cache_dir, model_factory=lambda _location, _spec: model, **kw)
        cache.encoder = encoder
        return cache

    # -- the encoder ----------------------------------------------------------------------------
    @property
    def spec(self) -> EncoderSpec:
        """The encoder's spec."""
        return self.encoder.spec

    @property
    def revision(self) -> str:
        """The encoder's model revision (part of every cache key)."""
        return self.encoder.revision

    @property
    def runtime(self) -> backends.Runtime:
        """The encoder's runtime (part of the cache key, except torch fp32)."""
        return self.encoder.runtime

    @property
    def model(self) -> Any:
        """The loaded model, with the runtime applied (an OpenVINO export is made or re-used here)."""
        return self.encoder.model

    @property
    def _context(self) -> backends.EncodeContext | None:
        """The runtime's encode context, once :attr:`model` was loaded (benchmarks time under it)."""
        return self.encoder._context

    @property
    def models_dir(self) -> Path:
        """Where exported models are cached: ``$TRANSFERDX_MODEL_DIR``, else ``<cache_dir>/models``."""
        return self.encoder.models_dir

    def close(self) -> None:
        """Stop the encoding processes, if any were started (a later encode starts them again)."""
        self.encoder.close()

    def __enter__(self) -> EmbeddingCache:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # -- identity -------------------------------------------------------------------------------
    def scorer(self) -> dict[str, Any]:
        """What identifies the embedding space: model id, revision, prompts, metric."""
        return self.encoder.scorer()

    def folder(self, role: str) -> Path:
        """The role's chunk folder, keyed by model, revision, prompt, max length and (except torch
        fp32, whose key predates backends) the runtime, so vectors of different runtimes never mix."""
        prompt = self.encoder.prompt(role)
        parts: list[Any] = [self.spec.model, self.revision, prompt, self.spec.max_seq_length]
        if not self.runtime.is_reference:
            parts += [self.runtime.backend, self.runtime.precision]
        return self.cache_dir / "embeddings" / content_hash(*parts)[:24]

    # -- storage --------------------------------------------------------------------------------
    @staticmethod
    def _write_chunk(folder: Path, keys: list[bytes], vectors: np.ndarray) -> Path:
        """Write keys + vectors atomically as ``chunk-<sha256 of the content>.npz``."""
        buffer = io.BytesIO()
        # keys as raw uint8 rows: numpy "S" strings would drop a digest's trailing NUL bytes
        digests = np.frombuffer(b"".join(keys), dtype=np.uint8).reshape(len(keys), 32)
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        np.savez(buffer, keys=digests, vectors=vectors)
        return atomic_write_bytes(folder / f"chunk-{chunk_digest(digests, vectors)}.npz", buffer.getvalue())

    def _store(self, folder: Path, keys: list[bytes], vectors: np.ndarray) -> Path:
        chunk = self._write_chunk(folder, keys, vectors)
        _STORED[0] += len(keys)
        st = chunk.stat()
        digests = np.frombuffer(b"".join(keys), dtype=np.uint8).reshape(len(keys), 32)
        self._keys[chunk] = ((st.st_ino, st.st_size, st.st_mtime_ns), digests)
        return chunk

    def _load_chunk(self, path: Path) -> tuple[np.ndarray, np.ndarray, tuple[int, int, int]] | None:
        """(keys, vectors, stat) of a chunk whose content matches the digest in its name. A chunk
        that does not (truncated, corrupted, rewritten, no digest) is discarded with a
        :class:`CacheWarning` naming it; None then, and when the file has vanished."""
        match = CHUNK_NAME.fullmatch(path.name)
        if match is None:
            self._discard(path, None, "no recorded digest in its name (written by an older transferdx?)")
            return None
        try:
            with open(path, "rb") as handle:
                st = os.fstat(handle.fileno())
                data = handle.read()
        except FileNotFoundError:
            return None
        except OSError as exc:
            self._discard(path, None, f"unreadable ({exc})")
            return None
        try:
            keys, vectors = _parse_chunk(data)
        except Exception as exc:  # zipfile, numpy and zlib raise many kinds; all mean "damaged"
            self._discard(path, st.st_ino, f"damaged ({type(exc).__name__}: {exc})")
            return None
        if chunk_digest(keys, vectors) != match.group(1):
            self._discard(path, st.st_ino, "damaged (content does not match its recorded sha256)")
            return None
        return keys, vectors, (st.st_ino, st.st_size, st.st_mtime_ns)

    def _discard(self, path: Path, inode: int | None, reason: str) -> None:
        """Move a damaged chunk into ``damaged/`` (unless another run already did) and warn."""
        self._keys.pop(path, None)
        target = path.parent / "damaged" / f"{path.name}.{os.getpid()}-{time.time_ns()}"
        try:
            if inode is not None and os.stat(path).st_ino != inode:
                return  # replaced since we read it: another run healed it
            target.parent.mkdir(exist_ok=True)
            os.replace(path, target)
            outcome = f"moved to {target}"
        except FileNotFoundError:
            return  # another run discarded it
        except OSError:
            try:
                path.unlink()
                outcome = "deleted"
            except OSError as exc:
                outcome = f"could not be removed ({exc}), ignored"
        warnings.warn(
            f"embedding cache: {path}: {reason}; discarded ({outcome}), its texts will be re-encoded",
            CacheWarning,
            stacklevel=2,
        )

    def _refresh(self, folder: Path, index: _Index) -> None:
        """Index the chunk files not looked at yet, verifying each (damaged ones are discarded)."""
        try:
            with os.scandir(folder) as found:
                entries = [(e.name, e.inode()) for e in found if e.name.startswith("chunk-")]
        except FileNotFoundError:
            return
        for name, inode in sorted(entries):
            # looked at already, unless rewritten since (a new file, a new inode)
            if not name.endswith(".npz") or index.seen.get(name) == inode:
                continue
            index.seen[name] = inode
            path = folder / name
            try:
                st = path.stat()
            except FileNotFoundError:
                continue
            known = self._keys.get(path)
            if known is not None and known[0] == (st.st_ino, st.st_size, st.st_mtime_ns):
                keys = known[1]
            else:
                read = self._read_keys(path)
                if read is None:
                    continue
                keys = read[0]
                self._keys[path] = (read[1], keys)
            for row in index.wanted.rows(keys):
                index.rows.setdefault(keys[row].tobytes(), (path, row))

    def _read_keys(self, path: Path) -> tuple[np.ndarray, tuple[int, int, int]] | None:
        """(keys, stat) of a chunk, its ``keys`` member read alone: indexing reads 32 bytes a text,
        not its vector. The chunk's content is verified when its vectors are read (:meth:`_gather`),
        so unverified vectors are still never used. A chunk with no digest in its name, or whose keys
        cannot be read, is discarded as :meth:`_load_chunk` discards it (None then, and when the file
        has vanished)."""
        keys = None
        if CHUNK_NAME.fullmatch(path.name) is not None:
            try:
                with open(path, "rb") as handle:
                    st = os.fstat(handle.fileno())
                    archive = np.load(handle, allow_pickle=False)
                    if isinstance(archive, np.lib.npyio.NpzFile):
                        with archive:
                            keys = archive["keys"]
            except FileNotFoundError:
                return None
            except Exception:  # zipfile, numpy and zlib raise many kinds: _load_chunk names it
                keys = None
        if keys is None or keys.dtype != np.uint8 or keys.ndim != 2 or keys.shape[1] != 32:
            loaded = self._load_chunk(path)  # discards it (with the reason) unless it reads whole
            return None if loaded is None else (loaded[0], loaded[2])
        return keys, (st.st_ino, st.st_size, st.st_mtime_ns)

    @staticmethod
    def _sweep(folder: Path) -> None:
        """Remove what killed runs left: claims nobody holds, old temporary files."""
        now = time.time()
        with os.scandir(folder) as entries:
            found = list(entries)
        for entry in found:
            try:
                if entry.name.startswith(".claim-"):
                    claim = _Claim.try_acquire(Path(entry.path))
                    if claim is not None:
                        claim.release()
                elif entry.name.startswith(".chunk-") and entry.name.endswith(".tmp"):
                    if now - entry.stat().st_mtime > _TEMP_MAX_AGE:
                        os.unlink(entry.path)
            except OSError:
                continue

    # -- embedding ------------------------------------------------------------------------------
    def embed(self, texts: Sequence[str], role: str) -> np.ndarray:
        """Unit-normalised embeddings (n × d, float32) of ``texts`` in order, encoding only the
        texts the cache does not hold yet."""
        prompt = self.encoder.prompt(role)
        folder = self.folder(role)
        folder.mkdir(parents=True, exist_ok=True)
        meta = folder / "encoder.json"
        if not meta.is_file():
            atomic_write_text(meta, canonical_json({**self.scorer(), "role": role, "prompt": prompt}))
        keys = [text_key(t) for t in texts]
        first: dict[bytes, str] = {}
        for key, text in zip(keys, texts, strict=True):
            first.setdefault(key, text)
        self._sweep(folder)
        index = _Index(_Wanted(first))
        for _attempt in range(5):
            self._refresh(folder, index)
            self._fill(folder, first, index, prompt, role)
            vectors = self._gather(keys, index)
            if vectors is not None:
                return normalise(vectors)
        raise RuntimeError(f"embedding cache {folder}: chunks keep failing verification right after being written")

    def _units(self, first: dict[bytes, str]) -> list[list[bytes]]:
        """The request's texts in canonical order (length, then key) cut into encoding units of
        min(batch_size, chunk_size): each unit is one model batch, so a text's vector depends only
        on the request and the settings, never on when a run was interrupted or who encoded what."""
        order = sorted(first, key=lambda k: (len(first[k]), k))
        size = max(1, min(self.spec.batch_size, self.chunk_size))
        return [order[i : i + size] for i in range(0, len(order), size)]

    def _fill(self, folder: Path, first: dict[bytes, str], index: _Index, prompt: str, role: str) -> None:
        """Encode the texts of ``first`` missing from ``index``, unit by unit, each under a claim."""
        if all(k in index.rows for k in first):  # all cached: no need to order them into units
            return
        units = [u for u in self._units(first) if any(k not in index.rows for k in u)]
        if not units:
            return
        bar = tqdm(
            total=sum(k not in index.rows for u in units for k in u),
            desc=f"encode {self.spec.name} {role}s",
            unit="text",
            disable=not self.progress or len(units) < 2,
            leave=False,
        )
        pending = _Pending(self, folder, index)
        pool = self.encoder.pool() if len(units) > 1 else None
        group = 4 * len(pool.devices) if pool is not None else 1  # units in flight per pool round trip
        try:
            deferred = []
            for start in range(0, len(units), group):
                claimed = []
                for unit in units[start : start + group]:
                    claim = _Claim.try_acquire(self._claim_path(folder, unit))
                    if claim is None:
                        deferred.append(unit)
                    else:
                        claimed.append((unit, claim))
                if pool is not None:
                    bar.update(self._fill_pooled(folder, claimed, first, index, prompt, pending, pool))
                    continue
                for unit, claim in claimed:
                    bar.update(self._fill_unit(folder, unit, first, index, prompt, claim, pending))
            pending.flush()
            self._await(folder, deferred, first, index, prompt, pending, bar)
        except BaseException:
            with contextlib.suppress(Exception):  # keep what was encoded before the interruption
                pending.flush()
            raise
        finally:
            pending.release()
            bar.close()

    def _fill_unit(
        self,
        folder: Path,
        unit: list[bytes],
        first: dict[bytes, str],
        index: _Index,
        prompt: str,
        claim: _Claim,
        pending: _Pending,
    ) -> int:
        """Encode a claimed unit's missing texts into ``pending`` (written when due); returns how
        many texts of the unit were missing."""
        before = sum(k not in index.rows for k in unit)
        try:
            self._refresh(folder, index)  # another run may have written it before we claimed it
            todo = [k for k in unit if k not in index.rows]
            if not todo:
                claim.release()
                return before
            if len(pending.keys) + len(todo) > self.chunk_size:
                pending.flush()
            vectors = self.encoder.encode([first[k] for k in todo], prompt)
        except BaseException:
            claim.release()
            raise
        self.encoded_texts += len(todo)
        pending.add(todo, vectors, claim)
        if pending.due():
            pending.flush()
        return before

    def _fill_pooled(
        self,
        folder: Path,
        claimed: list[tuple[list[bytes], _Claim]],
        first: dict[bytes, str],
        index: _Index,
        prompt: str,
        pending: _Pending,
        pool: EncodePool,
    ) -> int:
        """Encode claimed units through the multi-process pool: each full unit whose texts are all
        missing is one pool chunk (one model batch, as in one process); any other unit (the short
        last one, one partly written by another run) is encoded here by :meth:`_fill_unit`.
        Returns how many texts of the units were missing."""
        size = max(1, min(self.spec.batch_size, self.chunk_size))
        try:
            self._refresh(folder, index)
            full = [(u, c) for u, c in claimed if len(u) == size and not any(k in index.rows for k in u)]
            vectors = pool.encode([[first[k] for k in u] for u, _ in full], prompt)
        except BaseException:
            for _, claim in claimed:
                claim.release()
            raise
        done = 0
        pooled = {id(u): v for (u, _), v in zip(full, vectors, strict=True)}
        for unit, claim in claimed:
            if id(unit) not in pooled:
                done += self._fill_unit(folder, unit, first, index, prompt, claim, pending)
                continue
            if len(pending.keys) + len(unit) > self.chunk_size:
                pending.flush()
            self.encoded_texts += len(unit)
            self.pooled_texts += len(unit)
            pending.add(list(unit), pooled[id(unit)], claim)
            done += len(unit)
            if pending.due():
                pending.flush()
        return done

    def _await(
        self,
        folder: Path,
        deferred: list[list[bytes]],
        first: dict[bytes, str],
        index: _Index,
        prompt: str,
        pending: _Pending,
        bar: Any,
    ) -> None:
        """Wait for units other runs claimed: read them once written; encode them here when their
        claim is dropped unwritten (holder died) or nothing moved for ``claim_timeout`` seconds."""
        progress_at = time.monotonic()
        while deferred:
            self._refresh(folder, index)
            waiting = []
            for unit in deferred:
                missing = sum(k not in index.rows for k in unit)
                if missing:
                    path = self._claim_path(folder, unit)
                    claim = _Claim.try_acquire(path)
                    if claim is None:
                        if time.monotonic() - progress_at < self.claim_timeout:
                            waiting.append(unit)
                            continue
                        warnings.warn(
                            f"embedding cache: {path} held by {_Claim.holder(path)} with no progress for "
                            f"{self.claim_timeout:.0f} s; encoding its texts here",
                            CacheWarning,
                            stacklevel=2,
                        )
                        claim = _Claim(path, None)
                    self._fill_unit(folder, unit, first, index, prompt, claim, pending)
                    pending.flush()
                bar.update(missing)
                progress_at = time.monotonic()
            deferred = waiting
            if deferred:
                time.sleep(_POLL_SECONDS)

    @staticmethod
    def _claim_path(folder: Path, unit: list[bytes]) -> Path:
        return folder / f".claim-{hashlib.sha256(b''.join(unit)).hexdigest()[:32]}"

    def _gather(self, keys: list[bytes], index: _Index) -> np.ndarray | None:
        """The vectors of ``keys`` read from verified chunks; None when a chunk failed verification
        (it is discarded and dropped from ``index``, so the caller re-encodes its texts)."""
        by_chunk: dict[Path, list[tuple[int, int]]] = {}
        for i, key in enumerate(keys):
            if key not in index.rows:
                return None
            chunk, row = index.rows[key]
            by_chunk.setdefault(chunk, []).append((i, row))
        out: np.ndarray | None = None
        for chunk, pairs in sorted(by_chunk.items()):
            loaded = self._load_chunk(chunk)
            dst, src = np.array(pairs).T
            expected = np.frombuffer(b"".join(keys[i] for i in dst), dtype=np.uint8).reshape(len(dst), 32)
            if loaded is None or not np.array_equal(loaded[0][src], expected):
                self._keys.pop(chunk, None)
                index.drop(chunk)
                return None
            vectors = loaded[1]
            if out is None:
                out = np.empty((len(keys), vectors.shape[1]), dtype=np.float32)
            out[dst] = vectors[src]
        return out if out is not None else np.zeros((0, 0), dtype=np.float32)
