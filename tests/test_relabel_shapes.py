"""Shapes that miners emit, counted not refused (issue 54, part 4).

- ``clean.action=relabel`` keeps every relabeled passage as a positive of the copy, in every shape
  and save form the package writes, and never as the query's first positive (a re-read takes a
  query's positives in order of first appearance: the input's p0 must stay first). Where the shape
  cannot hold it (a fixed-slot row needs negatives the query no longer has) the summary and
  ``rows.csv`` say so, and the copy is not claimed to hold it.
- A grouped file (labeled pairs, labeled lists) whose query has a positive and no negative is read
  with the default error policy: the query is a counted exclusion, named in the audit's summary;
  genuinely malformed rows keep their located error.
"""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest

import transferdx as tdx
from transferdx.display import exclusions_phrase
from transferdx.inputs.records import NO_NEGATIVE, InputError
from transferdx.inputs.writing import RELABEL_UNWRITTEN

from .fakes import FixedEncoder, vec
from .test_clean_shapes import ANSWER_VECTORS, ANSWERS, FORMS, answer_rows, copy_path, load_as_user, write_input

# Two queries. Under the fixed encoder (s(q,p) = 0.8, p on axis 1) "close" and "near" sit by the
# positive (near_duplicate_positive: relabeled); "hot" / "warm" outscore it on another axis (review
# list only). "close" is apple's first negative (its triplet row is the query's first row) and "near"
# comes before river's positive in the labeled shapes, where a careless writer makes it p0.
QUERIES = ANSWERS  # test_clean_shapes' two queries under the same fixed encoder
RELABELED = {"close", "near"}
POSITIVE = {q: p for q, p, _ in QUERIES}
# n-tuple: a second row of each query, other negatives, so a row short of its four slots refills
EXTRA = {"apple": ["pear", "plum", "fig", "lime"], "river": ["lake", "pond", "sea", "bay"]}
VECTORS = ANSWER_VECTORS


def shape_rows(shape: str) -> list[dict]:
    """The queries in one of the shapes the package writes back, as a miner (or a user) lays them out."""
    if shape in ("triplet", "flagembedding", "records"):
        return answer_rows(shape)  # laid out as test_clean_shapes lays them out
    rows: list[dict] = []
    for q, p, negs in QUERIES:
        if shape == "ntuple":
            for tail in (negs, EXTRA[q]):
                rows.append({"anchor": q, "positive": p, **{f"negative_{j}": n for j, n in enumerate(tail, 1)}})
        elif shape == "labeled_pair":  # river's relabeled row comes before its positive row
            pairs = [(p, 1), *((n, 0) for n in negs)]
            if q == "river":
                pairs = [pairs[1], pairs[0], *pairs[2:]]
            rows += [{"anchor": q, "positive": d, "label": label} for d, label in pairs]
        elif shape == "labeled_list":  # labels; river's relabeled document first in its list
            docs, labels = [p, *negs], [1] + [0] * len(negs)
            if q == "river":
                docs, labels = [negs[0], p, *negs[1:]], [0, 1] + [0] * (len(negs) - 1)
            rows.append({"anchor": q, "positive": docs, "labels": labels})
        elif shape == "labeled_list_scores":  # scores only: the positive first, as the miner writes it
            rows.append({"anchor": q, "positive": [p, *negs], "scores": [0.8] + [0.5] * len(negs)})
        else:
            raise ValueError(shape)
    return rows


SHAPES = ("triplet", "ntuple", "labeled_pair", "labeled_list", "labeled_list_scores", "flagembedding", "records")


def fixed_encoder() -> FixedEncoder:
    texts = {t for _, p, negs in QUERIES for t in (p, *negs)} | {t for tail in EXTRA.values() for t in tail}
    return FixedEncoder({t: vec(*VECTORS.get(t, (0.1, 3))) for t in texts})


@pytest.fixture(scope="module")
def audits(tmp_path_factory) -> dict[str, pd.DataFrame]:
    """Each shape's per-negative audit frame, once (the same records whatever the save form)."""
    from transferdx.auditing.audit import audit_records
    from transferdx.diagnostics.tokens import alnum

    out = {}
    for shape in SHAPES:
        src = write_input(shape_rows(shape), tmp_path_factory.mktemp(shape), "jsonl")
        out[shape] = audit_records(tdx.load(src), alnum, encoder=fixed_encoder(), resamples=20).negatives
    return out


def reread(path: Path) -> dict[str, tuple[list[str], list[str]]]:
    """The copy as the package reads it back (what a re-audit sees): query → (positives, negatives)."""
    return {r.query: ([p.text for p in r.positives], [n.text for n in r.negatives]) for r in tdx.load(path).records}


# every shape in every save form, but records in CSV: pandas prints their lists of {id, text} objects
# as Python, which no reader parses (records are JSON lines or a table with list columns)
SHAPE_FORMS = [(shape, form) for shape in SHAPES for form in FORMS if (shape, form) != ("records", "csv")]


@pytest.mark.parametrize(("shape", "form"), SHAPE_FORMS)
def test_relabel_keeps_each_passage_a_positive_never_p0(tmp_path, audits, shape, form):
    """Kills: a relabeled passage missing from the copy's positives or left among its negatives (in
    any shape or save form: an n-tuple row short of its slots dropped with it, a FlagEmbedding line
    or a record dropped with it), a relabeled passage written before the query's own positive (a
    triplet's added row first, a label turned to 1 on a row before the positive's, a labelled-1
    document first in its list: a re-audit would take it as p0), and a summary that claims
    passages relabeled the copy does not hold."""
    src = write_input(shape_rows(shape), tmp_path, form)
    done = tdx.clean(src, audits[shape], action="relabel", reasons=["near_duplicate_positive"], out=tmp_path / "out")
    dest = copy_path(tmp_path / "out", src)
    assert done.descriptor["faithful"] and dest.exists()
    assert done.descriptor["n_relabeled"] == 2 and done.descriptor["n_relabeled_unwritten"] == 0
    assert "2 relabeled as positives" in done.summary()
    copy = reread(dest)
    assert set(copy) == set(POSITIVE)  # every query kept
    for query, (positives, negatives) in copy.items():
        assert positives[0] == POSITIVE[query], f"{query}: p0 of the copy is {positives[0]!r}"
        assert len(RELABELED & set(positives)) == 1 and not RELABELED & set(negatives)
    # the user's own view (datasets), where a relabeled passage is a positive by the shape's own rule
    rows = load_as_user(dest, form, tmp_path / "hf").to_list()
    if shape == "labeled_pair":
        assert {r["positive"] for r in rows if int(r["label"]) == 1} >= RELABELED
    elif shape in ("triplet", "ntuple"):
        assert {r["positive"] for r in rows} >= RELABELED


# what writes the rows the default cannot: an n-tuple query keeps three of its four negatives (the
# row's own, repeated); a triplet query keeps none (the next query's, lent: "castle" keeps "garden")
WRITES_IT = {"ntuple": "repeat", "triplet": "borrow"}


@pytest.mark.parametrize("shape", list(WRITES_IT))
def test_a_fixed_slot_row_the_query_cannot_fill_says_so(tmp_path, shape):
    """The issue's n-tuple file: one row per query, its negatives all the query has, so a row of the
    relabeled passage falls short of its slots (a triplet query whose one negative is relabeled:
    none left). Kills: a copy without the relabeled passages whose summary says "2 relabeled as
    positives", a relabeled passage gone without a line in rows.csv, and, with the ``clean.fill``
    that writes such rows, a relabeled passage that becomes p0, stays a negative or is missing."""
    from transferdx.auditing.audit import audit_records
    from transferdx.diagnostics.tokens import alnum

    if shape == "ntuple":
        rows = [
            {"anchor": q, "positive": p, **{f"negative_{j}": n for j, n in enumerate(negs, 1)}}
            for q, p, negs in QUERIES
        ]
    else:
        rows = [{"anchor": q, "positive": p, "negative": negs[0]} for q, p, negs in QUERIES]
        rows.append({"anchor": "castle", "positive": "the answer three", "negative": "garden"})
    src = write_input(rows, tmp_path, "parquet")
    encoder = fixed_encoder()
    encoder.vectors |= {"the answer three": vec(0.8, 1), "garden": vec(0.1, 3)}
    frame = audit_records(tdx.load(src), alnum, encoder=encoder, resamples=20).negatives
    outs = {}
    for fill in ("none", WRITES_IT[shape]):
        out = tmp_path / fill
        done = tdx.clean(src, frame, action="relabel", reasons=["near_duplicate_positive"], fill=fill, out=out)
        outs[fill] = (done, copy_path(out, src))
    done, dest = outs["none"]
    assert done.descriptor["n_relabeled"] == 2 and done.descriptor["n_relabeled_unwritten"] == 2
    summary = done.summary()
    assert "relabeled as positives" not in summary and "2 relabeled (0 of them positives in the copy)" in summary
    assert "2 relabeled passages are not in the copy" in summary
    unwritten = done.rows[done.rows["change"] == RELABEL_UNWRITTEN]
    ids = set(done.removed.loc[done.removed["action"] == "relabeled", "neg_id"])
    assert len(unwritten) == 2 and all(any(i in d for i in ids) for d in unwritten["detail"])
    texts = {v for r in pd.read_parquet(dest).to_dict("records") for v in r.values()}
    assert not RELABELED & texts  # the copy holds neither: said above, not claimed
    written, dest = outs[WRITES_IT[shape]]
    assert written.descriptor["n_relabeled_unwritten"] == 0 and "2 relabeled as positives" in written.summary()
    copy = reread(dest)
    for query, p in POSITIVE.items():
        positives, negatives = copy[query]
        assert positives[0] == p and len(RELABELED & set(positives)) == 1 and not RELABELED & set(negatives)


@pytest.mark.parametrize("shape", ["flagembedding", "records"])
def test_list_shapes_move_or_list_a_relabeled_passage_of_an_emptied_line(tmp_path, shape):
    """A FlagEmbedding line or a record needs a negative. Kills: a relabeled passage lost with the
    line that held it when another line of its query is written (it joins that line's ``pos``), and
    one lost without a rows.csv line when no line of its query is left (river: its only negative)."""
    from transferdx.auditing.audit import audit_records
    from transferdx.diagnostics.tokens import alnum

    if shape == "flagembedding":
        rows = [
            {"query": "apple", "pos": ["the answer"], "neg": ["close"]},
            {"query": "apple", "pos": ["the answer"], "neg": ["hot", "low"]},
            {"query": "river", "pos": ["the answer two"], "neg": ["near"]},
        ]
    else:
        mined = {"source": "mined"}
        rows = [
            {"qid": "q0", "query": "apple", "positives": ["the answer"], "negatives": ["close", "hot"], **mined},
            {"qid": "q1", "query": "river", "positives": ["the answer two"], "negatives": ["near"], **mined},
        ]
    src = write_input(rows, tmp_path, "jsonl")
    frame = audit_records(tdx.load(src), alnum, encoder=fixed_encoder(), resamples=20).negatives
    done = tdx.clean(src, frame, action="relabel", reasons=["near_duplicate_positive"], out=tmp_path / "out")
    assert done.descriptor["n_relabeled"] == 2 and done.descriptor["n_relabeled_unwritten"] == 1
    assert "2 relabeled (1 of them positives in the copy)" in done.summary()
    (unwritten,) = done.rows.loc[done.rows["change"] == RELABEL_UNWRITTEN, "qid"]
    assert unwritten == (tdx.load(src).records[-1].qid)  # river's
    copy = reread(copy_path(tmp_path / "out", src))
    kept = ["hot", "low"] if shape == "flagembedding" else ["hot"]
    assert list(copy) == ["apple"] and copy["apple"] == (["the answer", "close"], kept)


# A labeled-pair file as mine_hard_negatives writes it when some queries got no negative under the
# miner's settings: their positive rows only ("pear" twice: a query with two positives).
LABELED = [
    ("apple", "the answer", ["hot", "low"]),
    ("pear", "pear answer", []),
    ("river", "the answer two", ["warm", "far two"]),
    ("plum", "plum answer", []),
]


def labeled_pair_with_empty_queries() -> list[dict]:
    rows = []
    for q, p, negs in LABELED:
        rows.append({"anchor": q, "positive": p, "label": 1})
        if q == "pear":
            rows.append({"anchor": q, "positive": "pear answer two", "label": 1})
        rows += [{"anchor": q, "positive": n, "label": 0} for n in negs]
    return rows


@pytest.mark.parametrize("form", ["parquet", "csv"])
def test_labeled_pair_queries_without_negatives_are_counted_exclusions(tmp_path, form):
    """Kills: the default policy refusing the file (``…: field 'negatives': record has no
    negatives``), a negative-less query read as a record, one dropped without an exclusion, rows of
    it unaccounted for, and an audit summary (and command line) that does not name them."""
    rows = labeled_pair_with_empty_queries()
    src = write_input(rows, tmp_path, form)
    loaded = tdx.load(src)  # on_error="raise", the default
    assert sorted(r.query for r in loaded.records) == ["apple", "river"]
    first = 2 if form == "csv" else 1  # a CSV file's first row is its line 2 (after the header)
    pear, pear_two, plum = (str(first + i) for i in (3, 4, 8))
    empty = [e for e in loaded.exclusions if e.no_negative]
    assert sorted((e.line for e in empty), key=int) == [pear, plum] and {e.reason for e in empty} == {NO_NEGATIVE}
    assert {e.unit for e in empty} == {"record"} and {e.field for e in empty} == {"negatives"}
    # pear's second row is listed with the record it belongs to: every row read is in a record or excluded
    assert [(e.line, e.unit) for e in loaded.exclusions if not e.no_negative] == [(pear_two, "line")]
    (desc,) = loaded.descriptors.values()
    assert desc["rows"] == {"read": len(rows), "in_records": 6, "excluded": 3, "records": 2}
    assert exclusions_phrase(loaded.exclusions) == "3 exclusions (2 queries with a positive and no negative)"
    audit = tdx.audit(src, encoder=None, resamples=20)
    assert audit.profile.set_index("source").loc[src.stem, "n_excluded_records"] == 2
    assert "3 exclusions (2 queries with a positive and no negative)" in audit.summary()
    assert sorted(audit.exclusions["reason"]) == sorted(
        [NO_NEGATIVE, NO_NEGATIVE, f"row of the record excluded at line {pear} ({NO_NEGATIVE})"]
    )


def test_labeled_list_query_without_negatives_is_counted(tmp_path):
    """Any grouped shape: a labeled-list row whose documents are all labelled 1."""
    rows = [
        {"anchor": "apple", "positive": ["the answer", "hot"], "labels": [1, 0]},
        {"anchor": "pear", "positive": ["pear answer", "pear answer two"], "labels": [1, 1]},
    ]
    loaded = tdx.load(write_input(rows, tmp_path, "jsonl"))
    assert [r.query for r in loaded.records] == ["apple"]
    assert [(e.line, e.reason) for e in loaded.exclusions] == [("2", NO_NEGATIVE)]


@pytest.mark.parametrize(
    ("bad", "field", "message"),
    [
        ({"anchor": "fig", "positive": "fig text", "label": 0}, "positives", "record has no positive"),
        ({"anchor": "fig", "positive": "fig text", "label": 2}, "label", "expected 1 (positive) or 0 (negative)"),
        ({"anchor": "fig", "positive": "", "label": 1}, "positive", "empty string"),
    ],
    ids=["no positive", "bad label", "empty text"],
)
def test_malformed_labeled_pairs_keep_their_located_error(tmp_path, bad, field, message):
    """Kills: the new exclusion swallowing real errors (a query with negatives and no positive, a
    label that is neither 1 nor 0, an empty text): each stays one located error under the default
    policy, and a counted exclusion under ``on_error=skip``."""
    rows = [*labeled_pair_with_empty_queries(), bad]
    src = write_input(rows, tmp_path, "jsonl")
    with pytest.raises(InputError, match=re.escape(message)) as err:
        tdx.load(src)
    assert err.value.line == len(rows) and err.value.field == field
    skipped = tdx.load(src, on_error="skip")
    assert sorted(r.query for r in skipped.records) == ["apple", "river"]
    assert [e.line for e in skipped.exclusions if message in e.reason] == [str(len(rows))]
