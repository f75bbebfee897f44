"""Rows of a matrix gathered on demand, so a per-negative view of the embeddings is never built.

An audit holds each distinct text's vector once (queries Q, passages P: distinct texts × d). Every
per-negative array the statistics need is a gather of those rows — e_n = P[n_index], e_q of each
negative = Q[q_index[owner]] — that would hold negatives × d floats if built whole (5M negatives ×
384 × 4 bytes = 7.7 GB, three times over). :class:`IndexedRows` stands for such a gather: it has the
shape of the whole and materialises only the rows asked for (a slice or an index array), which the
chunked kernels (:func:`transferdx.diagnostics.composite.weighted_scatter`, the record scatters,
:func:`transferdx.diagnostics.semantic.in_batch_scores`) take a block at a time.
"""

from __future__ import annotations

from typing import Any

import numpy as np


class IndexedRows:
    """``matrix[index]`` without building it: ``rows[key]`` = ``matrix[index[key]]`` for a slice or
    integer array ``key``; ``shape`` = (len(index), matrix.shape[1])."""

    def __init__(self, matrix: np.ndarray, index: np.ndarray):
        self.matrix = matrix
        self.index = np.asarray(index, dtype=np.int64)

    @property
    def shape(self) -> tuple[int, int]:
        return (len(self.index), int(self.matrix.shape[1]))

    @property
    def dtype(self) -> Any:
        return self.matrix.dtype

    def __len__(self) -> int:
        return len(self.index)

    def __getitem__(self, key: Any) -> np.ndarray:
        return self.matrix[self.index[key]]

    def take(self, key: Any) -> IndexedRows:
        """The rows ``key`` as another lazy gather (no vectors copied)."""
        return IndexedRows(self.matrix, self.index[key])


Rows = np.ndarray | IndexedRows
"""What the chunked kernels take as embeddings: an array, or a lazy gather of one."""
