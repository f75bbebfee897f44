"""Multi-process encoding through sentence-transformers' own multi-process pool.

``backbone.devices=[cuda:0,cuda:1]`` (one process per device) or ``backbone.processes=N`` (N
processes on ``backbone.device``) make the embedding cache encode in several processes. The cache
still decides *what* is encoded and claims it (each text once, across runs and processes); the pool
only computes vectors. Each unit of texts (one model batch, :meth:`EmbeddingCache._units`) is one
pool chunk, encoded as one batch exactly as one process would encode it, so the vectors are the
same bytes whichever process computed them (``tests/test_pool.py``).

CPU workers get ⌊cores / processes⌋ torch threads each (``OMP_NUM_THREADS`` while they start), so
two processes on two cores do not oversubscribe. A thread count can in principle change float bits;
on the tested CPU it does not, and the cache's key never included the thread count.

Multi-process encoding runs torch fp32 (the workers receive the torch model; an OpenVINO export or
an autocast context does not travel to them): :func:`transferdx.embed.backends.multi_process_runtime`.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from transferdx.embed.models import EncoderSpec, resolve_device

_THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")


def encode_devices(spec: EncoderSpec) -> list[str]:
    """The devices of the spec's encoding processes: ``devices`` as given (``auto`` resolved), else
    ``processes`` × ``device``; a single process gives ``[device]``. ValueError on a bad setting."""
    if spec.processes < 1:
        raise ValueError(f"backbone.processes must be ≥ 1, got {spec.processes}")
    if spec.devices:
        devices = [str(d) for d in spec.devices]
        if spec.processes not in (1, len(devices)):
            raise ValueError(
                f"backbone.processes={spec.processes} disagrees with backbone.devices={devices}"
                " (one process per device)"
            )
        return [resolve_device(d) for d in devices]
    return [resolve_device(spec.device)] * spec.processes


def is_multi_process(spec: EncoderSpec) -> bool:
    """Whether the spec asks for more than one encoding process."""
    return len(encode_devices(spec)) > 1


@contextlib.contextmanager
def _worker_threads(devices: Sequence[str]) -> Iterator[None]:
    """Thread-count variables for the workers while they start (spawned children read them once)."""
    cpu = sum(not d.startswith(("cuda", "npu", "mps")) for d in devices)
    saved = {k: os.environ.get(k) for k in _THREAD_VARIABLES}
    if cpu:
        threads = str(max(1, (os.cpu_count() or 1) // cpu))
        for key in _THREAD_VARIABLES:
            os.environ.setdefault(key, threads)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


class EncodePool:
    """A started sentence-transformers multi-process pool over ``devices`` for ``model``.

    :meth:`encode` takes units of equal size (each one model batch) and returns their vectors in
    order; :meth:`close` stops the workers (also at garbage collection: the workers are daemons)."""

    def __init__(self, model: Any, devices: Sequence[str]):
        self.model = model
        self.devices = list(devices)
        with _worker_threads(self.devices):
            self._pool: dict[str, Any] | None = model.start_multi_process_pool(self.devices)

    def encode(self, units: Sequence[Sequence[str]], prompt: str) -> list[np.ndarray]:
        """The float32 vectors of each unit (all units the same length: one pool chunk and one
        model batch each, so a text's vector is what a single process computes for the unit)."""
        if not units:
            return []
        size = len(units[0])
        if any(len(u) != size for u in units):
            raise ValueError("pool units must all have the same length (one model batch each)")
        if self._pool is None:
            raise RuntimeError("the encoding pool was closed")
        flat = [t for unit in units for t in unit]
        vectors = self.model.encode(
            flat,
            prompt=prompt or None,
            batch_size=size,
            chunk_size=size,
            pool=self._pool,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        vectors = np.asarray(vectors, dtype=np.float32).reshape(len(flat), -1)
        return [vectors[i * size : (i + 1) * size] for i in range(len(units))]

    def close(self) -> None:
        if self._pool is not None:
            pool, self._pool = self._pool, None
            with contextlib.suppress(Exception):
                self.model.stop_multi_process_pool(pool)

    def __del__(self) -> None:
        self.close()
