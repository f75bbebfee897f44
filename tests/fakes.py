"""Small stand-ins shared by the tests: a fixed encoder whose similarities are chosen by hand."""

from __future__ import annotations

import math

import numpy as np


class FixedEncoder:
    """Queries are e_1; a passage gets the vector chosen for its text, so s(q, x) = x[0] (and with
    :func:`vec`, p on one axis and negatives on another, s(p, n) = s(q,p)·s(q,n))."""

    def __init__(self, vectors: dict[str, np.ndarray]):
        self.vectors = vectors

    def embed(self, texts, role):
        return np.stack([np.eye(4)[0] if role == "query" else self.vectors[t] for t in texts])

    def scorer(self):
        return {"encoder": "fixed"}


def vec(s: float, axis: int) -> np.ndarray:
    """A unit vector with s(q, ·) = s, the rest on ``axis`` (1–3)."""
    v = np.zeros(4)
    v[0], v[axis] = s, math.sqrt(1 - s * s)
    return v
