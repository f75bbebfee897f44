"""The cleaning experiment's arms (issue 34, experiments/cleaning.py): each arm's K negatives and
relabelled positives on a hand-made pool with known judgments, and the peers' margin filters equal to
sentence-transformers' own ``mine_hard_negatives`` on a pool where it can run."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from transferdx.inputs.records import Passage, Record

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def cleaning():
    spec = importlib.util.spec_from_file_location("cleaning_experiment", REPO / "experiments" / "cleaning.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["cleaning_experiment"] = module
    spec.loader.exec_module(module)
    return module


# A pool of 8 candidates in rank order: (id, text, judgment, s(q,n)); s(q,p) = 0.60.
POOL = [
    ("n0", "a passage that answers", 3, 0.70),  # a false negative, above the positive
    ("n1", "the positive text", None, 0.62),  # a copy of the positive (unjudged): duplicate_positive
    ("n2", "another answer", 2, 0.58),  # a false negative below the positive
    ("n3", "unrelated one", 0, 0.50),
    ("n4", "unrelated two", 1, 0.45),
    ("n5", "unrelated three", None, 0.40),
    ("n6", "unrelated four", 0, 0.30),
    ("n7", "unrelated five", 0, 0.20),
]
S_QP = 0.60


def record() -> Record:
    return Record(
        qid="dl19:1:p",
        query="the query",
        positives=(Passage("p", "The  positive TEXT", judgment=3),),
        negatives=tuple(Passage(i, t, "BM25", rank=r + 1, judgment=j) for r, (i, t, j, _s) in enumerate(POOL)),
        source="BM25",
    )


def frame(probabilities: list[float]) -> pd.DataFrame:
    """The audit's per-negative frame as select() reads it: n1 copies the positive (a text reason),
    and fn_probability as given."""
    return pd.DataFrame(
        {
            "source": "BM25",
            "qid": "dl19:1:p",
            "neg_index": range(len(POOL)),
            "s_qp": S_QP,
            "s_qn": [s for *_, s in POOL],
            "fn_duplicate_positive": [i == 1 for i in range(len(POOL))],
            "fn_near_duplicate_positive": [False] * len(POOL),
            "fn_duplicate_negative": [False] * len(POOL),
            "fn_positive_aware": [s > 0.95 * S_QP for *_, s in POOL],
            "fn_reasons": [
                ";".join(r for r, hit in (("positive_aware", s > 0.95 * S_QP), ("duplicate_positive", i == 1)) if hit)
                for i, (*_, s) in enumerate(POOL)
            ],
            "fn_probability": probabilities,
        }
    )


def test_take_keeps_rank_order_and_counts_the_skips(cleaning):
    sel = cleaning.take(6, [False, True, True, False, True, False], 2)
    assert sel.taken == (0, 3) and sel.skipped == (1, 2)  # stops at the K-th, n4 is never reached


def test_each_arm_on_a_hand_made_pool(cleaning):
    """Kills: an oracle that skips unjudged candidates, a relabel arm that moves what it did not
    skip, margins with the sign the other way, the cleaner's arm not acting on the copy of the
    positive or on fn_probability ≥ 0.80, a random arm skipping a different number."""
    design = cleaning.Design(k=3)
    probs = [0.90, 0.10, 0.50, 0.10, 0.10, 0.10, 0.10, 0.10]  # only n0 is above the 0.80 cut
    chosen = cleaning.select([record()], frame(probs), design)
    got = {arm: chosen[arm]["dl19:1:p"] for arm in design.arms}
    assert got["raw"].taken == (0, 1, 2) and got["raw"].skipped == ()
    assert got["oracle"].taken == (1, 3, 4) and got["oracle"].skipped == (0, 2)  # n1 is unjudged: kept
    assert got["oracle_relabel"].relabelled == (0, 2) and got["oracle_relabel"].taken == (1, 3, 4)
    assert got["tdx_default"].skipped == (0, 1) and got["tdx_default"].taken == (2, 3, 4)
    assert got["tdx_relabel"].relabelled == (0,)  # the copy of the positive is removed, not relabelled
    # relative 0.05: skip s > 0.60 − 0.03 = 0.57 → n0, n1, n2; absolute 0.1: skip s > 0.50 → n0, n1, n2
    assert got["relative_margin"].skipped == (0, 1, 2) and got["relative_margin"].taken == (3, 4, 5)
    assert got["absolute_margin"].skipped == (0, 1, 2)
    assert len(got["random_skip"].skipped) == len(got["tdx_default"].skipped) == 2
    assert set(got["random_skip"].skipped) <= set(range(3 + 2))
    acc = cleaning.skip_accounting([record()], chosen["tdx_default"], 3)
    # skipped n0 (judged 3) and n1 (unjudged: apart); relevant in reach (n0..n4): n0, n2
    assert (acc["n_skipped"], acc["n_skipped_judged"], acc["n_skipped_relevant"]) == (2, 1, 1)
    assert acc["precision"] == 1.0 and acc["recall"] == 0.5 and acc["distinct_mean"] == 3.0
    rows = cleaning.training_records([record()], chosen["oracle_relabel"])
    assert [r.positives[0].id for r in rows] == ["p", "n0", "n2"]
    assert all([n.id for n in r.negatives] == ["n1", "n3", "n4"] for r in rows)


def test_both_removes_the_review_list(cleaning):
    """``both`` relabels what ``relabel`` relabels and also removes the suspects listed for review
    (here n2: positive_aware is not a default reason and its probability is under the cut)."""
    probs = [0.90, 0.10, 0.50, 0.10, 0.10, 0.10, 0.10, 0.10]
    f = frame(probs)
    f.loc[2, "fn_reasons"] = "positive_aware"
    design = cleaning.Design(k=3)
    chosen = cleaning.select([record()], f, design)
    assert chosen["tdx_relabel"]["dl19:1:p"].skipped == (0, 1)
    both = chosen["tdx_both"]["dl19:1:p"]
    assert both.skipped == (0, 1, 2) and both.relabelled == (0,) and both.taken == (3, 4, 5)


def test_random_skips_are_seeded_and_in_reach(cleaning):
    a = cleaning.random_skips(20, 3, 8, 7)
    assert a.sum() == 3 and not a[11:].any() and (a == cleaning.random_skips(20, 3, 8, 7)).all()


@pytest.mark.parametrize("rule", ["relative", "absolute"])
def test_margins_equal_sentence_transformers(cleaning, tmp_path, rule):
    """On a pool where ``mine_hard_negatives`` can run (the corpus is the pool, ranked by the same
    model), the margin rule picks the same K negatives it does (the margin chosen so that it skips
    some of this tiny model's candidates and leaves K)."""
    from datasets import Dataset
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.util import mine_hard_negatives

    from .tiny import tiny_model

    model = SentenceTransformer(str(tiny_model(tmp_path / "m")), device="cpu")
    words = ["apple", "river", "engine", "violin", "planet", "garden", "castle", "pepper"]
    corpus = [f"{a} {b}" for a in words for b in words[:4] if a != b]
    query, positive = "apple info", "apple river"
    pool = [t for t in corpus if t != positive]
    k = 5
    q, p = model.encode([query, positive], normalize_embeddings=True)
    vectors = model.encode(pool, normalize_embeddings=True)
    s_qn, s_qp = vectors @ q, float(q @ p)
    ranked = np.sort(s_qn)[::-1]
    fourth = float(ranked[2] + ranked[3]) / 2  # skip the top three: a cut midway, no float ties
    relative = (s_qp - fourth) / abs(s_qp) if rule == "relative" else None
    absolute = s_qp - fourth if rule == "absolute" else None
    mined = mine_hard_negatives(
        Dataset.from_dict({"anchor": [query], "positive": [positive]}),
        model,
        corpus=corpus,
        num_negatives=k,
        range_max=len(corpus),
        relative_margin=relative,
        absolute_margin=absolute,
        sampling_strategy="top",
        output_format="n-tuple",
        use_faiss=False,
        verbose=False,
    )
    theirs = [mined[0][f"negative_{i}"] for i in range(1, k + 1)]
    order = np.argsort(-s_qn, kind="stable")
    skip = cleaning.margin_skips(s_qp, s_qn[order], relative, absolute)
    assert skip.any()  # the rule bites on this pool
    ours = [pool[order[i]] for i in cleaning.take(len(pool), skip, k).taken]
    assert ours == theirs
