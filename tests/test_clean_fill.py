"""The default clean keeps the training set (issue 56): an n-tuple row that lost negatives is filled
with its own remaining negatives, in order (``clean.fill=repeat``, the default), never with another
query's; a row of a query left with none is dropped and counted; the summary says how many rows and
slots were filled; :func:`~transferdx.pipeline.cleaning.plan.kept_rows` predicts, before cleaning,
what the clean keeps; and a re-read (or a re-audit, or a second clean) of the copy reads each filled
slot once, reporting no duplicate negative. Lexical audits only: no model."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

import transferdx as tdx
from transferdx.diagnostics.suspicion import acted_on
from transferdx.inputs.records import DUPLICATE_NEGATIVES_KEPT, FILLED_SLOTS, Passage
from transferdx.inputs.writing import filled_width, kept_cells
from transferdx.pipeline.cleaning.plan import kept_rows

# The default clean (a lexical audit: duplicate_positive) removes the copies of the positive.
# "apple" loses 2 of its 5 negatives, "river" all 5, "castle" none.
APPLE = ("apple engine", "apple engine info")
APPLE_NEGATIVES = ["violin planet", "APPLE  engine info", "garden castle", "Apple Engine Info", "pepper about"]
RIVER = ("river about", "river about what")
RIVER_NEGATIVES = [
    "River About What",
    "river   ABOUT what",
    "RIVER about what",
    "river about WHAT",
    "River  about What",
]
CASTLE = ("castle info", "castle info about")
CASTLE_NEGATIVES = ["engine apple", "about river", "what violin", "planet garden", "violin castle"]
QUERIES = [(APPLE, APPLE_NEGATIVES), (RIVER, RIVER_NEGATIVES), (CASTLE, CASTLE_NEGATIVES)]


def ntuple_file(folder: Path, form: str = "parquet") -> Path:
    rows = [
        {"anchor": q, "positive": p, **{f"negative_{i}": n for i, n in enumerate(negs, 1)}} for (q, p), negs in QUERIES
    ]
    path = folder / f"mined.{form}"
    frame = pd.DataFrame(rows)
    if form == "jsonl":
        frame.to_json(path, orient="records", lines=True, force_ascii=False)
    else:
        frame.to_parquet(path)
    return path


def lexical_audit(data):
    return tdx.audit(data, encoder=None, resamples=20, controls="none")


def negative_cells(row: dict) -> list[str]:
    return [row[f"negative_{i}"] for i in range(1, 6)]


@pytest.fixture(scope="module")
def cleaned(tmp_path_factory):
    folder = tmp_path_factory.mktemp("fill")
    src = ntuple_file(folder)
    audit = lexical_audit(src)
    return src, audit, tdx.clean(src, audit, out=folder / "out")


def test_a_row_losing_two_of_five_is_filled_with_its_own_three_in_order(cleaned):
    """Kills: dropping the row (the old default), filling it from another query, or in another order."""
    _, _, done = cleaned
    rows = {r["anchor"]: r for r in done.to_dataset().to_list()}
    kept = [n for n in APPLE_NEGATIVES if n.casefold().split() != APPLE[1].split()]
    assert len(kept) == 3
    assert negative_cells(rows[APPLE[0]]) == kept + kept[:2]
    assert negative_cells(rows[CASTLE[0]]) == CASTLE_NEGATIVES  # untouched
    change = done.rows.set_index("qid").loc[done.records[0].qid]
    assert (change["change"], int(change["n_lost"])) == ("repeated", 2)
    assert done.descriptor["fill"] == "repeat"


def test_a_row_losing_every_negative_is_dropped_and_counted(cleaned):
    _, _, done = cleaned
    anchors = [r["anchor"] for r in done.to_dataset().to_list()]
    assert anchors == [APPLE[0], CASTLE[0]]
    rows = done.descriptor["rows"]
    assert (rows["read"], rows["written"], rows["dropped"]) == (3, 2, 1)
    assert done.emptied["query"].tolist() == [RIVER[0]]
    assert "3 read = 2 written + 0 excluded on reading + 1 dropped" in done.summary()


def test_the_summary_states_the_fill(cleaned):
    _, _, done = cleaned
    rows = done.descriptor["rows"]
    assert (rows["filled_rows"], rows["filled_slots"]) == (1, 2)
    summary = done.summary()
    assert "clean.fill=repeat, the default" in summary
    assert f"{rows['filled_rows']} rows filled, {rows['filled_slots']} slots" in summary
    none = tdx.clean(cleaned[0], cleaned[1], fill="none")
    assert "clean.fill=none" in none.summary() and none.descriptor["rows"]["filled_slots"] == 0


@pytest.mark.parametrize("fill", ["repeat", "none", "borrow"])
def test_kept_rows_predicts_what_the_clean_keeps(cleaned, fill):
    """The prediction from the audit alone (per-negative removal decisions, negatives per record)
    equals the rows and queries the clean writes, for each fill."""
    src, audit, _ = cleaned
    frame = audit.result.negatives
    predicted = kept_rows(acted_on(frame), audit.result.records["n_negatives"], fill=fill)
    done = tdx.clean(src, audit, fill=fill)
    written = done.to_dataset().to_list()
    assert (predicted.rows, predicted.rows_in) == (done.descriptor["rows"]["written"], done.descriptor["rows"]["read"])
    assert (predicted.queries, predicted.queries_in) == (len({r["anchor"] for r in written}), len(QUERIES))
    assert str(predicted) == f"cleaning keeps {predicted.rows} of 3 rows ({predicted.queries} of 3 queries)"
    assert predicted.rows == {"repeat": 2, "none": 1, "borrow": 3}[fill]


def test_kept_rows_predicts_a_triplet_file_row_by_row(tmp_path):
    """One row per negative (``rows`` given): a removed triplet row is removed, a query left with
    none loses every row."""
    rows = [{"anchor": q, "positive": p, "negative": n} for (q, p), negs in QUERIES for n in negs]
    src = tmp_path / "triplets.parquet"
    pd.DataFrame(rows).to_parquet(src)
    audit = lexical_audit(src)
    counts = audit.result.records["n_negatives"]
    structure = [[("pair", [i]) for i in range(n)] for n in counts]
    predicted = kept_rows(acted_on(audit.result.negatives), counts, structure)
    done = tdx.clean(src, audit)
    assert predicted.rows == done.descriptor["rows"]["written"] == 3 + 5
    assert predicted.queries == len({r["anchor"] for r in done.to_dataset().to_list()}) == 2
    with pytest.raises(ValueError, match="removal decisions"):
        kept_rows([True], counts)


@pytest.mark.parametrize("form", ["parquet", "jsonl"])
def test_a_reread_of_the_filled_copy_reads_each_slot_once(tmp_path, form):
    """Kills: a re-read that keeps the filled slots as repeated negatives (duplicate_negative
    suspects, counted twice in every rate), and a second clean that calls them lost."""
    src = ntuple_file(tmp_path, form)
    done = tdx.clean(src, lexical_audit(src), out=tmp_path / "out")
    copy = tmp_path / "out" / "cleaned" / src.name
    again = tdx.load(copy)
    by_query = {r.query: r for r in again.records}
    assert [n.text for n in by_query[APPLE[0]].negatives] == [n.text for n in done.records[0].negatives]
    assert len(by_query[APPLE[0]].negatives) == 3
    (desc,) = again.descriptors.values()
    assert desc[FILLED_SLOTS] == done.descriptor["rows"]["filled_slots"] == 2
    assert DUPLICATE_NEGATIVES_KEPT not in desc
    negatives = lexical_audit(copy).result.negatives
    assert len(negatives) == 3 + 5 and not negatives["fn_duplicate_negative"].fillna(False).any()
    audited = lexical_audit(copy)  # the copy's audit names its source as the copy's (<source>_cleaned)
    assert all(s.endswith("_cleaned") for s in audited.profile["source"])
    second = tdx.clean(copy, audited)  # cleaned again where it lies, with that audit
    assert second.descriptor["n_removed"] == 0 and second.descriptor["rows"]["lost_negatives"] == 0
    assert second.to_dataset().to_list() == done.to_dataset().to_list()


def test_a_repeat_out_of_fill_order_is_still_a_duplicate_negative(tmp_path):
    """Only the fill's pattern is read once: another repeat within a row stays a kept, counted
    duplicate negative (the trainer sees it twice)."""
    negs = ["violin planet", "garden castle", "violin planet", "pepper about", "engine apple"]
    src = tmp_path / "dup.parquet"
    pd.DataFrame(
        [{"anchor": APPLE[0], "positive": APPLE[1], **{f"negative_{i}": n for i, n in enumerate(negs, 1)}}]
    ).to_parquet(src)
    loaded = tdx.load(src)
    (desc,) = loaded.descriptors.values()
    assert len(loaded.records[0].negatives) == 5 and desc[DUPLICATE_NEGATIVES_KEPT] == 1 and FILLED_SLOTS not in desc


@pytest.mark.parametrize(
    ("texts", "width"),
    [("abcab", 3), ("abcde", 5), ("aaaa", 1), ("abcda", 4), ("abacd", 5), ("abcabd", 6), ("abab", 2), ("", 0)],
)
def test_filled_width(texts, width):
    assert filled_width(list(texts)) == width


def test_kept_cells_keep_a_filled_cell_with_the_cell_it_repeats():
    passages = [Passage(t, t) for t in "ac"]
    assert kept_cells(list("abcab"), passages) == [True, False, True, True, False]
    assert kept_cells(list("abacd"), [Passage(t, t) for t in "abcd"]) == [True, True, False, True, True]
