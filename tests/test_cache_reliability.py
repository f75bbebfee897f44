"""Embedding-cache reliability: damaged chunks are reported, discarded and re-encoded (never used,
never a traceback); runs sharing a cache claim units so each text is encoded once; chunks are
flushed by size and by time, and a text's vector never depends on how a run was interrupted."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

from transferdx.embed import CacheWarning, EmbeddingCache, EncoderSpec, chunk_digest, text_key
from transferdx.embed import cache as embed_module

from .tiny import WORDS, tiny_model

SPEC = EncoderSpec(name="fake", model="memory:fake", source="memory", revision="fake", batch_size=4)
TEXTS = [f"passage number {i}" for i in range(10)]


class FakeModel:
    """Deterministic text → vector (sha256 bytes); counts what it encodes; can sleep, fail, or
    advance a fake clock on each call."""

    def __init__(self, fail_after: int | None = None, sleep: float = 0.0, clock: list[float] | None = None):
        self.calls: list[list[str]] = []
        self.fail_after, self.sleep, self.clock = fail_after, sleep, clock

    def encode(self, texts, prompt=None, **_):
        if self.fail_after is not None and len(self.calls) >= self.fail_after:
            raise KeyboardInterrupt("simulated interruption")
        self.calls.append(list(texts))
        if self.sleep:
            time.sleep(self.sleep)
        if self.clock is not None:
            self.clock[0] += 7.0
        return np.stack(
            [
                np.frombuffer(hashlib.sha256(t.encode()).digest(), dtype=np.uint8).astype(np.float32) - 127.5
                for t in texts
            ]
        )

    @property
    def encoded(self) -> int:
        return sum(len(c) for c in self.calls)


def make(tmp_path: Path, model, spec: EncoderSpec = SPEC, **kw) -> EmbeddingCache:
    kw.setdefault("chunk_size", 4)
    return EmbeddingCache(spec, tmp_path, progress=False, model_factory=lambda *_: model, **kw)


def chunks(cache: EmbeddingCache, role: str = "passage") -> list[Path]:
    return sorted(cache.folder(role).glob("chunk-*.npz"))


def chunk_sizes(cache: EmbeddingCache, role: str = "passage") -> list[int]:
    sizes = []
    for path in chunks(cache, role):
        with np.load(path, allow_pickle=False) as data:
            sizes.append(len(data["keys"]))
    return sorted(sizes)


@pytest.fixture
def filled(tmp_path):
    """A cache holding TEXTS in chunks of 4, 4, 2, and the reference vectors."""
    cache = make(tmp_path, FakeModel())
    reference = cache.embed(TEXTS, "passage")
    assert chunk_sizes(cache) == [2, 4, 4]
    return cache, reference


def heal(tmp_path: Path, damaged: Path, reference: np.ndarray, match: str) -> FakeModel:
    """A fresh run on the damaged cache: warns naming the file, re-encodes only that chunk's texts,
    returns the reference vectors, and moves the damaged file aside."""
    model = FakeModel()
    with pytest.warns(CacheWarning, match=match) as caught:
        vectors = make(tmp_path, model).embed(TEXTS, "passage")
    assert any(str(damaged) in str(w.message) for w in caught)
    np.testing.assert_array_equal(vectors, reference)
    assert list((damaged.parent / "damaged").iterdir())
    return model


def keys_of(path: Path) -> int:
    with np.load(path, allow_pickle=False) as data:
        return len(data["keys"])


def flip_in_vectors(path: Path, bit: int) -> bytearray:
    """The chunk's bytes with one bit flipped inside its stored vectors."""
    with np.load(path, allow_pickle=False) as loaded:
        payload = loaded["vectors"].tobytes()
    data = bytearray(path.read_bytes())
    at = data.find(payload)
    assert at >= 0
    data[at + len(payload) // 2] ^= bit
    return data


def test_truncated_chunk(tmp_path, filled):
    cache, reference = filled
    victim = chunks(cache)[0]
    rows = keys_of(victim)
    victim.write_bytes(victim.read_bytes()[: victim.stat().st_size // 2])
    model = heal(tmp_path, victim, reference, "damaged")
    assert model.encoded == rows


def test_byte_flipped_chunk(tmp_path, filled):
    cache, reference = filled
    victim = chunks(cache)[1]
    rows = keys_of(victim)
    data = flip_in_vectors(victim, 0x40)
    victim.write_bytes(bytes(data))
    model = heal(tmp_path, victim, reference, "damaged")
    assert model.encoded == rows


def test_empty_chunk(tmp_path, filled):
    cache, reference = filled
    victim = chunks(cache)[2]
    rows = keys_of(victim)
    victim.write_bytes(b"")
    model = heal(tmp_path, victim, reference, "empty file")
    assert model.encoded == rows


def test_well_formed_chunk_with_wrong_vectors(tmp_path, filled):
    """Same keys, plausible but wrong vectors, a valid .npz under the original name: never used."""
    cache, reference = filled
    victim = chunks(cache)[0]
    with np.load(victim, allow_pickle=False) as data:
        keys, vectors = data["keys"], data["vectors"]
    np.savez(victim, keys=keys, vectors=vectors[::-1].copy())  # rows swapped: each key gets another's vector
    model = heal(tmp_path, victim, reference, "does not match its recorded sha256")
    assert model.encoded == len(keys)


def test_missing_digest(tmp_path, filled):
    """A chunk whose name records no digest (the old ``chunk-<24 hex>.npz``) is not trusted."""
    cache, reference = filled
    victim = chunks(cache)[0]
    rows = keys_of(victim)
    legacy = victim.with_name("chunk-" + "0" * 24 + ".npz")
    victim.rename(legacy)
    model = heal(tmp_path, legacy, reference, "no recorded digest")
    assert model.encoded == rows


def test_heal_then_identical_vectors(tmp_path, filled):
    """After healing, the folder holds the same content-addressed chunks as before the damage, and
    a later run reads everything (encodes nothing) with byte-identical vectors."""
    cache, reference = filled
    names = [p.name for p in chunks(cache)]
    for victim in chunks(cache):
        victim.write_bytes(b"garbage")
    heal(tmp_path, chunks(cache)[0], reference, "damaged")
    assert [p.name for p in chunks(cache)] == names
    warm = make(tmp_path, FakeModel(fail_after=0))
    np.testing.assert_array_equal(warm.embed(TEXTS, "passage"), reference)
    assert warm.encoded_texts == 0


def test_damage_after_indexing_is_caught_when_read(tmp_path, filled):
    """A chunk damaged after a run indexed it (same size and mtime) is caught when its vectors are
    read, and re-encoded within the same call."""
    cache, reference = filled
    victim = chunks(cache)[0]
    st = victim.stat()
    data = flip_in_vectors(victim, 0x01)
    victim.write_bytes(bytes(data))
    os.utime(victim, ns=(st.st_atime_ns, st.st_mtime_ns))
    with pytest.warns(CacheWarning, match="damaged"):
        np.testing.assert_array_equal(cache.embed(TEXTS, "passage"), reference)


def hold_claim(path: Path) -> subprocess.Popen:
    """A separate process that takes the claim on ``path`` and keeps it until killed."""
    code = textwrap.dedent(
        f"""
        import fcntl, os, sys, time
        fd = os.open({str(path)!r}, os.O_CREAT | os.O_RDWR)
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.write(fd, b'{{"pid": %d, "host": "h", "time": 0}}' % os.getpid())
        print("held", flush=True)
        time.sleep(120)
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def first_claim(cache: EmbeddingCache, texts: list[str], role: str = "passage") -> Path:
    folder = cache.folder(role)
    folder.mkdir(parents=True, exist_ok=True)
    unit = cache._units({text_key(t): t for t in texts})[0]
    return cache._claim_path(folder, unit)


def test_stale_claim_taken_over(tmp_path):
    """A claim whose holder was killed (kill -9) is taken over at once, not waited for."""
    model = FakeModel()
    cache = make(tmp_path, model, claim_timeout=300)
    claim = first_claim(cache, TEXTS)
    holder = hold_claim(claim)
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    assert claim.exists()  # left behind by the killed holder
    started = time.monotonic()
    vectors = cache.embed(TEXTS, "passage")
    assert time.monotonic() - started < 30
    assert model.encoded == len(TEXTS) and vectors.shape == (10, 32)
    assert not list(cache.folder("passage").glob(".claim-*"))


def test_hung_claim_times_out(tmp_path):
    """A live holder that makes no progress is waited for at most ``claim_timeout`` seconds."""
    model = FakeModel()
    cache = make(tmp_path, model, claim_timeout=0.5)
    holder = hold_claim(first_claim(cache, TEXTS))
    try:
        with pytest.warns(CacheWarning, match=f"held by pid {holder.pid}"):
            cache.embed(TEXTS, "passage")
    finally:
        holder.kill()
        holder.wait()
    assert model.encoded == len(TEXTS)


def test_two_concurrent_embedders_encode_each_text_once(tmp_path):
    texts = [f"shared passage {i}" for i in range(60)]
    reference = make(tmp_path / "ref", FakeModel()).embed(texts, "passage")
    models = [FakeModel(sleep=0.02), FakeModel(sleep=0.02)]
    caches = [make(tmp_path / "shared", m, chunk_size=8) for m in models]
    barrier, results = threading.Barrier(2), [None, None]

    def run(i):
        barrier.wait()
        results[i] = caches[i].embed(texts, "passage")

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert sum(m.encoded for m in models) == len(texts)
    assert all(m.encoded > 0 for m in models)  # the work was shared, not serialised
    for vectors in results:
        np.testing.assert_array_equal(vectors, reference)


def test_flush_by_time(tmp_path, monkeypatch):
    """Each encode call takes 7 (fake) seconds: with flush_seconds=20 a chunk is written after the
    third unit, although the size limit is far away."""
    clock = [0.0]
    monkeypatch.setattr(embed_module, "_clock", lambda: clock[0])
    spec = EncoderSpec(**{**SPEC.__dict__, "batch_size": 2})
    cache = make(tmp_path, FakeModel(clock=clock), spec=spec, chunk_size=1000, flush_seconds=20)
    cache.embed(TEXTS, "passage")
    assert chunk_sizes(cache) == [4, 6]
    untimed = make(tmp_path / "untimed", FakeModel(clock=clock), spec=spec, chunk_size=1000, flush_seconds=1e9)
    untimed.embed(TEXTS, "passage")
    assert chunk_sizes(untimed) == [10]


def test_flush_by_size(tmp_path):
    spec = EncoderSpec(**{**SPEC.__dict__, "batch_size": 2})
    for chunk_size, sizes in [(4, [2, 4, 4]), (5, [2, 4, 4]), (10, [10])]:
        cache = make(tmp_path / str(chunk_size), FakeModel(), spec=spec, chunk_size=chunk_size, flush_seconds=1e9)
        cache.embed(TEXTS, "passage")
        assert chunk_sizes(cache) == sizes
    model = FakeModel()  # chunk_size below batch_size: encoding units shrink to the chunk size
    cache = make(tmp_path / "small", model, chunk_size=3, flush_seconds=1e9)
    cache.embed(TEXTS, "passage")
    assert chunk_sizes(cache) == [1, 3, 3, 3] and max(len(c) for c in model.calls) == 3


def test_chunk_names_are_content_digests(tmp_path, filled):
    cache, _ = filled
    for path in chunks(cache):
        with np.load(path, allow_pickle=False) as data:
            assert path.name == f"chunk-{chunk_digest(data['keys'], data['vectors'])}.npz"


class Interrupting:
    """A real model that raises KeyboardInterrupt on its ``fail_after``-th encode call."""

    def __init__(self, model, fail_after: int):
        self.model, self.fail_after, self.calls = model, fail_after, 0

    def encode(self, texts, **kw):
        if self.calls >= self.fail_after:
            raise KeyboardInterrupt("simulated interruption")
        self.calls += 1
        return self.model.encode(texts, **kw)


def test_interrupted_runs_give_byte_identical_vectors(tmp_path):
    """With a real (tiny) sentence-transformers model, where a batch's padding can change the
    numerics, vectors after interruptions and resumes at different points equal an uninterrupted
    run's byte for byte."""
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(tiny_model(tmp_path / "tiny")), device="cpu")
    rng = np.random.default_rng(0)
    texts = [" ".join(rng.choice(WORDS, size=rng.integers(1, 25))) for _ in range(60)]
    spec = EncoderSpec(name="tiny", model="memory:tiny", source="memory", revision="tiny", batch_size=8)
    reference = make(tmp_path / "ref", model, spec=spec, chunk_size=64).embed(texts, "passage")
    for fail_after, chunk_size, resume_chunk_size in [(1, 8, 8), (3, 16, 64), (5, 64, 16)]:
        folder = tmp_path / f"run-{fail_after}"
        broken = make(folder, Interrupting(model, fail_after), spec=spec, chunk_size=chunk_size)
        with pytest.raises(KeyboardInterrupt):
            broken.embed(texts, "passage")
        resumed = make(folder, model, spec=spec, chunk_size=resume_chunk_size)
        vectors = resumed.embed(texts, "passage")
        assert resumed.encoded_texts == len(set(texts)) - 8 * fail_after  # the finished units were kept
        assert vectors.tobytes() == reference.tobytes()


CHILD = """
import hashlib, os, sys, time
import numpy as np
from transferdx.embed import EmbeddingCache, EncoderSpec

class Slow:
    def encode(self, texts, prompt=None, **_):
        time.sleep(0.05)
        return np.stack([np.frombuffer(hashlib.sha256(t.encode()).digest(), np.uint8).astype(np.float32) - 127.5
                         for t in texts])

cache_dir, count, go = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
spec = EncoderSpec(name="fake", model="memory:fake", source="memory", revision="fake", batch_size=4)
cache = EmbeddingCache(spec, cache_dir, chunk_size=256, flush_seconds=0.2, progress=False,
                       model_factory=lambda *_: Slow())
while go and not os.path.exists(go[0]):
    time.sleep(0.01)
cache.embed([f"passage number {i}" for i in range(count)], "passage")
print(cache.encoded_texts, flush=True)
"""


def spawn(cache_dir: Path, count: int, go: Path | None = None) -> subprocess.Popen:
    """A separate process embedding ``count`` texts with a slow fake model (0.05 s per unit of 4)."""
    args = [sys.executable, "-c", CHILD, str(cache_dir), str(count), *([str(go)] if go else [])]
    return subprocess.Popen(args, stdout=subprocess.PIPE, text=True)


def test_two_concurrent_processes_encode_each_text_once(tmp_path):
    texts = [f"passage number {i}" for i in range(120)]
    reference = make(tmp_path / "ref", FakeModel()).embed(texts, "passage")
    go = tmp_path / "go"
    procs = [spawn(tmp_path / "shared", len(texts), go) for _ in range(2)]
    time.sleep(0.5)
    go.touch()
    encoded = [int(p.communicate(timeout=120)[0]) for p in procs]
    assert sum(encoded) == len(texts)
    warm = make(tmp_path / "shared", FakeModel(fail_after=0))
    np.testing.assert_array_equal(warm.embed(texts, "passage"), reference)


def test_kill_9_mid_run_keeps_flushed_chunks(tmp_path):
    """A run killed with SIGKILL leaves whole chunks (flushed every 0.2 s) that a resumed run reuses."""
    texts = [f"passage number {i}" for i in range(400)]
    reference = make(tmp_path / "ref", FakeModel()).embed(texts, "passage")
    proc = spawn(tmp_path / "run", len(texts))
    folder = make(tmp_path / "run", FakeModel()).folder("passage")
    deadline = time.monotonic() + 60
    while len(list(folder.glob("chunk-*.npz"))) < 3 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    model = FakeModel()
    resumed = make(tmp_path / "run", model)
    np.testing.assert_array_equal(resumed.embed(texts, "passage"), reference)
    assert 0 < model.encoded < len(texts)


def test_a_request_indexes_its_own_keys_only(tmp_path, filled, monkeypatch):
    """An embed call's index holds the keys of its request, not every key of the cache (a shard's
    task on a cache of millions of texts would otherwise build a dict of all of them)."""
    _, reference = filled
    made: list[embed_module._Index] = []

    class Recorded(embed_module._Index):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            made.append(self)

    monkeypatch.setattr(embed_module, "_Index", Recorded)
    fresh = make(tmp_path, FakeModel(fail_after=0))
    np.testing.assert_array_equal(fresh.embed(TEXTS[3:6], "passage"), reference[3:6])
    assert [sorted(i.rows) for i in made] == [sorted(text_key(t) for t in TEXTS[3:6])]


def test_a_damaged_chunk_no_request_reads_is_left_until_read(tmp_path, filled):
    """Indexing reads a chunk's keys, not its vectors: a chunk damaged inside its vectors is not
    looked at by a request that needs none of its texts, and is caught, discarded and re-encoded by
    the first request that reads it."""
    cache, reference = filled
    victim = chunks(cache)[0]
    with np.load(victim, allow_pickle=False) as data:
        inside = {bytes(k) for k in data["keys"]}
    outside = [i for i, t in enumerate(TEXTS) if text_key(t) not in inside]
    victim.write_bytes(bytes(flip_in_vectors(victim, 0x10)))
    with warnings.catch_warnings():
        warnings.simplefilter("error", CacheWarning)
        fresh = make(tmp_path, FakeModel(fail_after=0))
        np.testing.assert_array_equal(fresh.embed([TEXTS[i] for i in outside], "passage"), reference[outside])
    assert victim.exists()
    model = heal(tmp_path, victim, reference, "damaged")
    assert model.encoded == len(inside)


def test_wanted_keys_match_exactly_beyond_their_first_bytes():
    """The bulk match of a request's keys against a chunk's: the rows whose whole key is wanted,
    in order — keys sharing their first 8 bytes with a wanted one but not the rest do not match."""
    rng = np.random.default_rng(3)
    keys = rng.integers(0, 256, size=(200, 32), dtype=np.uint8)
    keys[100:150, :8] = keys[:50, :8]  # 50 keys share a prefix with another, differ after it
    picked = rng.choice(200, size=60, replace=False)
    wanted = embed_module._Wanted(keys[i].tobytes() for i in picked)
    assert wanted.rows(keys) == sorted(picked.tolist())
    assert wanted.rows(keys[:0]) == [] and embed_module._Wanted([]).rows(keys) == []
