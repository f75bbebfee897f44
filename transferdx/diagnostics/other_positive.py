"""Negatives that are another query's positive (docs/design.md §3.5, absolute flag
``copies_other_positive``; experiments/results/fn_years/PLAN.md, "The missed defect").

A passage the file itself labels relevant to another query is already an in-batch negative under
MNRL, and among neighbouring queries it carries their answer; a source whose negatives are mostly
such was assembled from the file's positives, not mined from the corpus. Not a false-negative
suspicion reason: it says nothing about whether the passage answers the record's own query.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from transferdx.inputs.records import Record, passage_key

# positive passage key → its qid, or the set of its qids when it is a positive of several
PositiveOwners = dict[str, str | set[str]]


class _Keys:
    """:func:`~transferdx.inputs.records.passage_key` with an id-less text normalised once."""

    def __init__(self) -> None:
        self.by_text: dict[str, str] = {}

    def __call__(self, pid: str, text: str) -> str:
        if pid:
            return passage_key(pid, text)
        out = self.by_text.get(text)
        if out is None:
            out = self.by_text[text] = passage_key(pid, text)
        return out


def positive_owners(records: Sequence[Record], key: _Keys | None = None) -> PositiveOwners:
    """Which qids each positive passage (by :func:`~transferdx.inputs.records.passage_key`) is a
    positive of, over every record given (any source, any kind): a qid, or a set of several."""
    key = key or _Keys()
    owners: PositiveOwners = {}
    for r in records:
        for p in r.positives:
            k = key(p.id, p.text)
            held = owners.get(k)
            if held is None:
                owners[k] = r.qid
            elif isinstance(held, str):
                if held != r.qid:
                    owners[k] = {held, r.qid}
            else:
                held.add(r.qid)
    return owners


def other_positive(records: Sequence[Record]) -> np.ndarray:
    """Per negative, in record order then negative order (the audit's per-negative rows): True when
    its passage is a positive of some record with a different qid and not a positive of its own
    record's qid. Range: a bool array of length Σ_i K_i.

    The passage is identified by :func:`~transferdx.inputs.records.passage_key`, for negatives and
    positives alike: its id, or its normalised text when the id is absent or empty (so a passage
    given with an id in one place and without in another is two passages). Positives are pooled over
    every record given (any source, any kind), and a qid means one query whatever its
    source: a negative that is a positive of its own qid in another source is its own positive,
    not counted.

    One hash join, O(Σ positives + Σ negatives) dictionary look-ups (an id-less text is normalised
    once), no embeddings."""
    key = _Keys()
    owners = positive_owners(records, key)

    def flag(qid: str, pid: str, text: str) -> bool:
        held = owners.get(key(pid, text))
        if held is None:
            return False
        return held != qid if isinstance(held, str) else qid not in held

    n = sum(len(r.negatives) for r in records)
    return np.fromiter((flag(r.qid, x.id, x.text) for r in records for x in r.negatives), dtype=bool, count=n)
