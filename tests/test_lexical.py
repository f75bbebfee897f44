"""ψ and idf: closed forms on hand-countable cases, agreement with a per-pair reference, invariants."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from transferdx.diagnostics.lexical import IDF_CORPORA, get_idf_corpus, idf, negative_residuality
from transferdx.diagnostics.tokens import alnum, get_tokenizer, token_stream, whitespace

from .conftest import record


def test_idf_closed_form():
    # N = 4: df 0 → ln(1 + 4.5/0.5) = ln 10; df 4 → ln(1 + 0.5/4.5) = ln(10/9); df 2 → ln 2
    values = idf(np.array([0, 4, 2]), 4)
    assert values == pytest.approx([math.log(10), math.log(10 / 9), math.log(2)], abs=1e-15)


def test_idf_rejects_impossible_df():
    with pytest.raises(ValueError, match="document frequencies"):
        idf(np.array([5]), 4)


def test_psi_hand_counted_pooled():
    # Pooled corpus = unique texts {"pos text", "alpha beta", "beta gamma"}: N = 3.
    # Query tokens: alpha (df 1), beta (df 2), delta (df 0).
    recs = [record("q1", "Alpha beta delta", ["alpha beta", "beta gamma"])]
    out = negative_residuality(recs, alnum, "pooled")
    i_alpha, i_beta, i_delta = math.log(1 + 2.5 / 1.5), math.log(1 + 1.5 / 2.5), math.log(1 + 3.5 / 0.5)
    total = i_alpha + i_beta + i_delta
    assert out["psi"].tolist() == pytest.approx([i_delta / total, (i_alpha + i_delta) / total], abs=1e-12)


def test_psi_bounds_and_extremes():
    recs = [record("q", "red apple", ["a red apple today", "blue sky", "Red"])]
    psi = negative_residuality(recs, alnum)["psi"].to_numpy()
    assert psi[0] == 0.0  # every query token covered
    assert psi[1] == 1.0  # none covered
    assert 0.0 < psi[2] < 1.0


def test_psi_undefined_for_tokenless_query():
    recs = [record("q", "?!", ["anything"]), record("r", "word", ["word"])]
    psi = negative_residuality(recs, alnum)["psi"].to_numpy()
    assert math.isnan(psi[0]) and psi[1] == 0.0


def test_per_source_idf_differs_from_pooled():
    recs = [
        record("q", "alpha beta", ["alpha", "alpha x"], source="a", positive="p1"),
        record("q", "alpha beta", ["beta", "beta y"], source="b", positive="p2"),
    ]
    pooled = negative_residuality(recs, alnum, "pooled")
    per = negative_residuality(recs, alnum, "per_source")
    # Source a alone: N = 3 docs {p1, alpha, alpha x}; alpha df 2, beta df 0.
    ia, ib = math.log(1 + 1.5 / 2.5), math.log(1 + 3.5 / 0.5)
    assert per["psi"].iloc[0] == pytest.approx(ib / (ia + ib), abs=1e-12)
    # Pooled: N = 6, alpha df 2, beta df 2 → equal weights → ψ = 1/2.
    assert pooled["psi"].iloc[0] == pytest.approx(0.5, abs=1e-12)


def test_external_idf_uses_collection():
    recs = [record("q", "alpha beta", ["alpha"])]
    collection = ["alpha"] * 9 + ["beta"]
    out = negative_residuality(recs, alnum, "external", external_texts=collection)
    ia, ib = math.log(1 + 1.5 / 9.5), math.log(1 + 9.5 / 1.5)
    assert out["psi"].iloc[0] == pytest.approx(ib / (ia + ib), abs=1e-12)
    with pytest.raises(ValueError, match="external passage collection"):
        negative_residuality(recs, alnum, "external")


def test_unknown_variants_list_valid_names():
    with pytest.raises(ValueError, match="valid: \\['external', 'per_source', 'pooled'\\]"):
        get_idf_corpus("bogus")
    with pytest.raises(ValueError, match="alnum"):
        get_tokenizer("bogus")
    assert set(IDF_CORPORA) == {"pooled", "per_source", "external"}


def test_tokenizers():
    assert alnum("Don't STOP_me now, 3.14 Übung") == ["don", "t", "stop", "me", "now", "3", "14", "übung"]
    assert whitespace("Don't STOP_me now,") == ["don't", "stop_me", "now,"]


def test_backbone_tokenizer_strips_markers_and_specials():
    tok = get_tokenizer("backbone")  # offline all-MiniLM-L6-v2 tokenizer (WordPiece)
    tokens = tok("Unbelievable tokenization [SEP]")
    assert "[SEP]" not in tokens and "[sep]" not in tokens
    assert all(not t.startswith("##") for t in tokens)
    assert "un" in tokens or "unbelievable" in tokens


def _reference_psi(records, tokenizer):
    """Per-pair set implementation with pooled idf (the definition, written plainly)."""
    corpus = {p.text for r in records for p in (*r.positives, *r.negatives)}
    sets = {t: set(tokenizer(t)) for t in corpus}
    n = len(corpus)
    out = []
    for r in records:
        q = set(tokenizer(r.query))

        def w(t):
            df = sum(t in s for s in sets.values())
            return math.log(1 + (n - df + 0.5) / (df + 0.5))

        total = sum(w(t) for t in q)
        for neg in r.negatives:
            out.append(sum(w(t) for t in q - sets[neg.text]) / total if total else float("nan"))
    return out


WORDS = st.sampled_from(["apple", "Bär", "cat", "dog", "egg", "x_y", "9", "über", "fig", "ÉTÉ", "a.b"])
TEXT = st.lists(WORDS, min_size=0, max_size=6).map(" ".join)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(TEXT, st.lists(TEXT.filter(bool), min_size=1, max_size=4)), min_size=1, max_size=6))
def test_matches_reference_implementation(rows):
    recs = [record(f"q{i}", q or "-", negs, positive=f"positive {i}") for i, (q, negs) in enumerate(rows)]
    recs = [r for r in recs if all(n.text != r.positives[0].text for n in r.negatives)]
    for tokenizer in (alnum, whitespace):
        got = negative_residuality(recs, tokenizer)["psi"].to_numpy()
        ref = np.asarray(_reference_psi(recs, tokenizer))
        np.testing.assert_allclose(got, ref, rtol=0, atol=1e-12, equal_nan=True)
        finite = got[~np.isnan(got)]
        assert np.all((finite >= 0) & (finite <= 1))


def test_permuting_negatives_permutes_psi():
    negs = ["alpha beta", "gamma", "beta delta epsilon", "alpha"]
    a = negative_residuality([record("q", "alpha beta gamma", negs)], alnum)["psi"].to_numpy()
    b = negative_residuality([record("q", "alpha beta gamma", negs[::-1])], alnum)["psi"].to_numpy()
    np.testing.assert_array_equal(a, b[::-1])


@settings(max_examples=40, deadline=None)
@given(st.lists(st.text(alphabet=st.characters(codec="utf-8"), max_size=40), max_size=20))
def test_token_stream_equals_per_text_tokenizer(texts):
    tokens, owner = token_stream(texts, alnum)
    expected = [(i, t) for i, x in enumerate(texts) for t in alnum(x)]
    got = sorted(zip(owner.tolist(), tokens.tolist(), strict=True), key=lambda p: p[0])
    assert got == expected
