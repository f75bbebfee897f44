"""Blocked exact top-k search by inner product (the miners, the controls and the evaluation use it).

The query × pool score matrix is never formed: it is scored one q_chunk × p_chunk block at a time,
each block's exact top-k is found by partition (ties kept) and merged into the running best, score
descending with ties broken by pool index, so the result does not depend on the block sizes.
"""

from __future__ import annotations

import numpy as np


def _block_topk(block: np.ndarray, offset: int, depth: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-``depth`` of each row of ``block`` (score desc, ties by column), as global indices.

    ``argpartition`` finds each row's depth-th score t in linear time; every entry ≥ t is a
    candidate (ties at t included), and only those few are sorted.
    """
    depth = min(depth, block.shape[1])
    kth = -np.partition(-block, depth - 1, axis=1)[:, depth - 1]
    rows, cols = np.nonzero(block >= kth[:, None])
    vals = block[rows, cols]
    order = np.lexsort((cols, -vals, rows))
    rows, cols, vals = rows[order], cols[order], vals[order]
    starts = np.searchsorted(rows, np.arange(block.shape[0]))
    rank = np.arange(len(rows)) - starts[rows]
    keep = rank < depth
    idx = np.empty((block.shape[0], depth), dtype=np.int64)
    val = np.empty((block.shape[0], depth), dtype=block.dtype)
    idx[rows[keep], rank[keep]] = cols[keep] + offset
    val[rows[keep], rank[keep]] = vals[keep]
    return idx, val


def topk_chunked(
    queries: np.ndarray, pool: np.ndarray, depth: int, q_chunk: int = 256, p_chunk: int = 8192
) -> tuple[np.ndarray, np.ndarray]:
    """Top-``depth`` pool rows by inner product for each query row, (indices, scores), score desc
    with ties by pool index. Holds one q_chunk × p_chunk block of scores at a time (plus the running
    q_chunk × depth best), never the full query × pool matrix."""
    n_q, n_p = len(queries), len(pool)
    depth = min(depth, n_p)
    best_idx = np.zeros((n_q, depth), dtype=np.int64)
    best_val = np.zeros((n_q, depth), dtype=np.float32)
    for qs in range(0, n_q, q_chunk):
        q = queries[qs : qs + q_chunk]
        run_idx = np.zeros((len(q), 0), dtype=np.int64)
        run_val = np.zeros((len(q), 0), dtype=np.float32)
        for ps in range(0, n_p, p_chunk):
            block_idx, block_val = _block_topk((q @ pool[ps : ps + p_chunk].T).astype(np.float32), ps, depth)
            idx = np.concatenate([run_idx, block_idx], axis=1)
            val = np.concatenate([run_val, block_val], axis=1)
            order = np.lexsort((idx, -val), axis=1)[:, :depth]
            run_idx = np.take_along_axis(idx, order, axis=1)
            run_val = np.take_along_axis(val, order, axis=1)
        best_idx[qs : qs + len(q)] = run_idx
        best_val[qs : qs + len(q)] = run_val
    return best_idx, best_val
