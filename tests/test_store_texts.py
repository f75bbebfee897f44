"""The rows' texts a sharded audit's stat tasks keep beside their values (issue 35: a reduce that
holds no record). Each stat task writes its rows' distinct texts and codes into them; the reduce
reads back a source's texts for its composite, the suspects' texts and ``Audit.negatives``' texts
from those files. Properties: what comes back is the records' own texts for the same rows, in any
number of shards; a text read from several shards is one string object; the reduce lets go of the
records before it pools, and its result still carries every text."""

from __future__ import annotations

import gc

import numpy as np
import pytest

import transferdx as tdx
from transferdx.auditing.core import SUSPECT_TEXT_COLUMNS, record_negative_texts, record_source_texts, record_texts
from transferdx.inputs.records import Passage, Record
from transferdx.pipeline import sharding
from transferdx.pipeline.sharding import audit_sharded, reduce_shards, shard_plan
from transferdx.pipeline.store_texts import row_texts

LEXICAL = {"encoder": None, "semantic": None, "resamples": 20}


def _record(qid: str, query: str, positive: str, negatives: list[str], source: str = "s") -> Record:
    negs = tuple(Passage(f"n{i}", t) for i, t in enumerate(negatives))
    return Record(qid, query, (Passage("p", positive),), negs, source)


def test_row_texts_codes_give_back_every_text_and_hold_each_once():
    """Closed form: ``distinct[code]`` is the row's text, ``distinct`` has each text once, first
    seen (queries, then positives[0], then negatives), and a text used as query and negative has
    one code."""
    records = [_record("1", "a", "b", ["c", "a", "c"]), _record("2", "d", "b", []), _record("3", "c", "e", ["b"])]
    got = row_texts(records)
    assert got.distinct == ["a", "d", "c", "b", "e"]
    assert [got.distinct[i] for i in got.query] == ["a", "d", "c"]
    assert [got.distinct[i] for i in got.positive] == ["b", "b", "e"]
    assert [got.distinct[i] for i in got.negative] == ["c", "a", "c", "b"]
    assert got.negative.dtype == np.int64 and len(got.negative) == 4


@pytest.mark.parametrize("shards", [1, 3])
def test_the_shards_texts_are_the_records_texts(tmp_path, shards):
    """The demo with its eight controls (they copy positives and repeat the sources' passages), its
    stat tasks run in ``shards``: for every record and negative, the texts read back from the
    stat tasks' files equal the records' — per suspect (record, negative index), per source (the
    composite's), per negative row (``Audit.negatives``) — and a text is one object however many
    shards it was read from. Kills: a row placed in the wrong shard or at the wrong row there, the
    negatives' offsets off by a record, texts read in the shard's order instead of the audit's."""
    prepared = tdx.pipeline.prepare_audit("demo", cache_dir=tmp_path, controls="all", **LEXICAL)
    plan = shard_plan(prepared, shards, tmp_path)
    sharding.run_maps_here(prepared, plan, list(range(shards)))
    sharding.run_stats_here(prepared, plan, list(range(shards)))
    texts = plan.store(prepared).texts()
    records = sorted(prepared.loaded.records, key=lambda r: (r.source, r.qid))
    assert len({r.source for r in records}) > 8
    owner = np.repeat(np.arange(len(records)), [len(r.negatives) for r in records])
    k = np.concatenate([np.arange(len(r.negatives)) for r in records])
    rng = np.random.default_rng(0)
    pick = rng.permutation(len(owner))  # any order, as the suspects come
    got, want = texts.records(owner[pick], k[pick]), record_texts(records)(owner[pick], k[pick])
    for a, b in zip(got, want, strict=True):
        assert list(a) == list(b)
    sources = np.array([r.source for r in records])
    for name in sorted(set(sources.tolist())):
        rows = np.flatnonzero(sources == name)
        for a, b in zip(texts.source(rows), record_source_texts(records)(rows), strict=True):
            assert list(a) == list(b)
    rows = rng.choice(len(owner), size=len(owner) // 2, replace=False)
    for a, b in zip(texts.negatives(rows), record_negative_texts(records)(rows), strict=True):
        assert list(a) == list(b)
    negatives = texts.records(owner, k)[2]
    assert len({id(t) for t in negatives}) == len(set(negatives))  # one object per distinct text


def test_the_stores_records_are_checked_and_spanned_before_any_value(tmp_path):
    """The reduce checks the stat tasks' records against the input's keys on the records alone
    (before any value or vector is read) and knows each source's span of records in the audit's
    order (first row, count: the rows of its composite's texts). Closed form from the sorted records;
    another input's keys stop it; the reduce's suspects (texts read on request) are the one-process
    audit's. Kills: spans in the shards' order, a span off by one, a key check
    that passes another input (a qid changed, a record missing)."""
    import dataclasses

    from transferdx.auditing.core import record_keys

    prepared = tdx.pipeline.prepare_audit("demo", cache_dir=tmp_path, controls="all", **LEXICAL)
    plan = shard_plan(prepared, 3, tmp_path)
    sharding.run_maps_here(prepared, plan, [0, 1, 2])
    sharding.run_stats_here(prepared, plan, [0, 1, 2])
    store = plan.store(prepared)
    records = sorted(prepared.loaded.records, key=lambda r: (r.source, r.qid))
    want: dict[str, list[int]] = {}
    for i, r in enumerate(records):
        want.setdefault(r.source, [i, 0])[1] += 1
    assert len(want) > 8 and store.texts(record_keys(records)).spans == {k: tuple(v) for k, v in want.items()}
    changed = [dataclasses.replace(records[0], qid=records[0].qid + "x"), *records[1:]]
    with pytest.raises(ValueError, match="not the input's records"):
        store.texts(record_keys(changed))
    with pytest.raises(ValueError, match="a shard is missing"):
        store.texts(record_keys(records[1:]))
    # the reduce's suspects, their texts read from these files when asked, are the one-process ones
    sharded, one = reduce_shards(prepared, plan), tdx.pipeline.audit_prepared(prepared)
    assert not set(SUSPECT_TEXT_COLUMNS) & set(sharded.result.suspect_values.columns)
    assert len(one.suspects_of("all")) > 100 and sharded.suspects_of("all").equals(one.suspects_of("all"))


def test_the_reduce_lets_the_records_go_and_its_audit_keeps_every_text(tmp_path, monkeypatch):
    """``audit_sharded`` owns its prepared audit: once the reduce has read the digests, the
    descriptors and the keys, no ``Record`` or ``Passage`` is alive when the composites start
    (counted among the objects the garbage collector tracks, less those alive before the audit —
    earlier tests' — that it cannot have made; the loaders' pools of distinct
    passages and texts swept); ``reduce_shards`` on a prepared audit its caller keeps
    (``let_go`` false) leaves them. Either way the audit's negatives carry the one-process texts.
    Kills: the records still held (by the prepared audit, or ``audit_sharded`` not letting them
    go), their passages still pooled, the pools swept while the plan's text shares still hold every
    text (then none is dropped), texts that come from the records, the suspects' texts held by the
    result (or read for the wrong rows)."""
    counts: list[int] = []
    inner = sharding.store_composites
    gc.collect()
    before = [o for o in gc.get_objects() if type(o) in (Record, Passage)]  # earlier tests' (held: ids stay theirs)
    earlier = {id(o) for o in before}

    def counted(*args, **kwargs):
        gc.collect()  # type(), not isinstance(): torch's proxies warn when asked
        counts.append(sum(type(o) in (Record, Passage) and id(o) not in earlier for o in gc.get_objects()))
        return inner(*args, **kwargs)

    monkeypatch.setattr(sharding, "store_composites", counted)
    shares_at_sweep: list[int] = []  # the plan's text shares hold every text: gone before the pools' sweep
    sweep = tdx.pipeline.auditing.sweep

    def swept() -> None:
        gc.collect()
        shares_at_sweep.append(sum(type(o) is sharding.TextShare for o in gc.get_objects()))
        sweep()

    monkeypatch.setattr(tdx.pipeline.auditing, "sweep", swept)
    kw = {"cache_dir": tmp_path, "controls": "none", **LEXICAL}
    sharded = audit_sharded("demo", shards=3, **kw)
    assert counts == [0] and shares_at_sweep == [0]
    one = tdx.audit("demo", **kw)
    # the suspects' texts are not held by the result (read from the stat tasks' files when asked)
    assert not set(SUSPECT_TEXT_COLUMNS) & set(sharded.result.suspect_values.columns)
    assert list(sharded.negatives["text"]) == list(one.negatives["text"])
    assert list(sharded.negatives["query"]) == list(one.negatives["query"])
    prepared = tdx.pipeline.prepare_audit("demo", **kw)
    kept = reduce_shards(prepared, shard_plan(prepared, 3, tmp_path))
    assert counts[1] >= len(prepared.loaded.records) > 0
    assert list(kept.negatives["text"]) == list(one.negatives["text"])
