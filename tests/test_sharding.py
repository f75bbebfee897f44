"""The sharded audit (issue 35): the encoder's work split into map tasks by a stable hash of each
distinct text (so no two maps encode the same text), one embedding cache shared, one reduce. Its
artifacts are the one-process audit's bytes over the same vectors, whatever the number of shards,
whichever launcher ran the maps (in this process, joblib, submitit's local processes, SLURM in
tests/test_slurm.py); a map killed mid-run is rerun alone and the result is the same bytes; a
finished shard is not run again (the command-line tests are in tests/test_sharding_cli.py, so that
pytest-xdist runs them beside these).

"Over the same vectors": a text's vector depends on the batch it was encoded in (which texts share
it), so a one-process audit on a cold cache differs from a sharded one in the float32 rounding of the
cosines (measured on the demo: ≤ 2.7e-7 in s(q,n), profile means ≤ 2e-8, the same suspects). The
comparisons below therefore audit once sharded on a cold cache and then in one process on the cache
the maps filled; the reduce itself must encode nothing."""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest

import transferdx as tdx
from transferdx.inputs.trec_dl import load_trec_dl
from transferdx.pipeline.sharding import (
    ShardsIncomplete,
    audit_shard,
    audit_sharded,
    collection_texts,
    encode_shard_work,
    reduce_shards,
    shard_of,
    shard_plan,
    text_shares,
    write_shard_work,
)

ARTIFACTS = ("profile.csv", "profile.json", "records.csv", "negatives.csv", "suspects.csv", "report.md")


def same_bytes(a: Path, b: Path) -> None:
    names = sorted(p.name for p in a.iterdir() if p.is_file() and not p.name.startswith("."))
    assert names == sorted(p.name for p in b.iterdir() if p.is_file() and not p.name.startswith("."))
    assert set(ARTIFACTS) <= set(names)
    for name in names:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


def reduce_summary(cache: Path, shards: int) -> dict:
    found = [json.loads(p.read_text()) for p in (cache / "audit-shards").glob("*/reduce.json")]
    return next(s for s in found if s["shards"] == shards)


def test_shard_of_is_a_stable_partition_of_the_distinct_texts():
    """Golden shards (SHA-256 of the string, first 8 bytes big-endian, mod N). Every distinct query
    and passage the audit encodes (positives[0], negatives, the background sample) is in exactly one
    map's share, the one ``shard_of`` names; the shares hold nothing else."""
    assert [shard_of(q, 4) for q in ("1037798", "104861", "q1", "é")] == [0, 2, 2, 3]
    assert [shard_of("1037798", n) for n in (1, 2, 3, 7)] == [0, 0, 1, 5]
    with pytest.raises(ValueError, match="shards must be"):
        shard_of("q", 0)
    prepared = tdx.pipeline.prepare_audit("demo", encoder=None, controls="none")
    queries, passages = collection_texts(prepared)
    records = prepared.loaded.records
    assert set(queries) == {r.query for r in records} and len(queries) == len(set(queries))
    assert set(passages) >= {t for r in records for t in (r.positives[0].text, *(n.text for n in r.negatives))}
    assert len(passages) == len(set(passages))
    for n in (1, 3, 4):
        shares = text_shares(prepared, n)
        assert sorted(q for s in shares for q in s.queries) == sorted(queries)
        assert sorted(p for s in shares for p in s.passages) == sorted(passages)
        for i, share in enumerate(shares):
            assert all(shard_of(t, n) == i for t in (*share.queries, *share.passages))


def test_maps_running_at_once_encode_each_text_once(tmp_path):
    """Three maps, each with a cache of its own (as if they ran at the same time and shared nothing):
    together they encode exactly the texts a one-process audit encodes on a cold cache — no passage
    twice, though the demo's passages recur across queries and sources."""
    kw = {"encoder": "static_minilm", "resamples": 20, "controls": "none"}
    one = tdx.pipeline.prepare_audit("demo", cache_dir=tmp_path / "one", **kw)
    tdx.pipeline.audit_prepared(one)
    plan = shard_plan(tdx.pipeline.prepare_audit("demo", cache_dir=tmp_path / "plan", **kw), 3)
    paths = write_shard_work(tdx.pipeline.prepare_audit("demo", cache_dir=tmp_path / "plan", **kw), plan, [0, 1, 2])
    encoded = []
    for i, path in enumerate(paths):
        own = tdx.pipeline.prepare_audit("demo", cache_dir=tmp_path / f"map{i}", **kw).encoder
        marker = encode_shard_work(path, own)
        assert marker["encoded_texts"] == marker["queries"] + marker["passages"] > 0
        encoded.append(marker["encoded_texts"])
    assert sum(encoded) == one.encoder.encoded_texts
    per_query = [  # what maps split by query (before) requested: a shard's queries and every passage they draw
        {r.query for r in one.loaded.records if shard_of(r.qid, 3) == i}
        | {
            t
            for r in one.loaded.records
            if shard_of(r.qid, 3) == i
            for t in (r.positives[0].text, *(n.text for n in r.negatives))
        }
        for i in range(3)
    ]
    assert sum(map(len, per_query)) > sum(encoded)  # the overlap this split removes


@pytest.mark.slow
def test_dl19_six_runs_in_1_3_4_shards_write_the_one_process_bytes(data, tmp_path):
    """The six TREC-DL19 runs (and the eight controls built from them), semantic audit with the
    static backbone: 1, 3 and 4 shards (maps here) write the bytes of the one-process audit — on the
    maps' cache, and on a cache of its own too, since a static model's vector (a mean of token
    embeddings) does not depend on its batch. The reduce encodes nothing; a rerun reuses every shard."""
    cache = tmp_path / "cache"
    loaded = load_trec_dl(data / "msmarco-dl19")
    kw = {"encoder": "static_minilm", "resamples": 20, "label": "msmarco-dl19"}
    for n in (3, 1, 4):
        result = audit_sharded(loaded, shards=n, cache_dir=cache, **kw)
        result.save(tmp_path / f"shards{n}")
        summary = reduce_summary(cache, n)
        assert summary["reduce_encoded_texts"] == 0
        queries, passages = collection_texts(tdx.pipeline.prepare_audit(loaded, cache_dir=cache, **kw))
        assert sum(m["queries"] for m in summary["markers"]) == len(queries)  # the controls' too
        assert sum(m["passages"] for m in summary["markers"]) == len(passages)
    assert sum(m["encoded_texts"] for m in reduce_summary(cache, 3)["markers"]) > 0  # the first maps encoded
    assert all(m["encoded_texts"] == 0 for m in reduce_summary(cache, 4)["markers"])  # the cache had them
    tdx.audit(loaded, cache_dir=cache, **kw).save(tmp_path / "one")
    tdx.audit(loaded, cache_dir=tmp_path / "own-cache", **kw).save(tmp_path / "one-cold")
    for n in (1, 3, 4):
        same_bytes(tmp_path / "one", tmp_path / f"shards{n}")
    same_bytes(tmp_path / "one", tmp_path / "one-cold")
    again = audit_shard(loaded, shard=2, shards=3, cache_dir=cache, **kw)
    assert again["reused"] is True
    # two shards through work files (what audit.stage=all hands a launched task): the same bytes
    prepared = tdx.pipeline.prepare_audit(loaded, cache_dir=cache, **kw)
    plan = shard_plan(prepared, 2)
    for path in write_shard_work(prepared, plan, [0, 1]):
        marker = encode_shard_work(path, prepared.encoder)
        assert marker["reused"] is False and marker["passages"] > 0
    reduce_shards(prepared, plan).save(tmp_path / "work2")
    same_bytes(tmp_path / "one", tmp_path / "work2")


def test_the_reduce_names_missing_shards_and_a_changed_input_invalidates_its_shard(tmp_path):
    """Lexical audit (no encoder): markers still say which shards ran. Dropping a negative whose text
    occurs once in the collection makes the shard that held it missing again, the others are kept;
    reordering the records changes no share."""
    records = tdx.load("demo").records
    kw = {"encoder": None, "semantic": None, "resamples": 50, "cache_dir": tmp_path, "controls": "none"}
    prepared = tdx.pipeline.prepare_audit(records, **kw)
    plan = shard_plan(prepared, 3, tmp_path)
    with pytest.raises(ShardsIncomplete, match="3 of 3 shards"):
        reduce_shards(prepared, plan)
    one = tdx.audit(records, **kw)
    sharded = audit_sharded(records, shards=3, **kw)
    pd.testing.assert_frame_equal(one.profile, sharded.profile)
    reordered = tdx.pipeline.prepare_audit(list(reversed(records)), **kw)
    reduce_shards(reordered, shard_plan(reordered, 3, tmp_path))  # every marker still matches
    uses = Counter(
        t for r in records for t in (r.query, *(p.text for p in r.positives), *(n.text for n in r.negatives))
    )
    victim, k = next((i, k) for i, r in enumerate(records) for k, n in enumerate(r.negatives) if uses[n.text] == 1)
    changed = list(records)
    text = changed[victim].negatives[k].text
    changed[victim] = dataclasses.replace(
        changed[victim], negatives=[n for n in changed[victim].negatives if n.text != text]
    )
    prepared = tdx.pipeline.prepare_audit(changed, **kw)
    with pytest.raises(ShardsIncomplete, match=rf"1 of 3 shards .*: {shard_of(text, 3)};"):
        reduce_shards(prepared, shard_plan(prepared, 3, tmp_path))


def test_a_qid_ending_in_nul_is_split_by_the_qid_the_records_hold(tmp_path):
    """The loaders keep a qid "a\\x00" beside "a"; 3 shards put the two apart. The stat tasks split
    the values by each qid as the records hold it (a fixed-width NumPy copy dropped the NUL, and the
    check stopped the audit: "stat task 1: 66 records for 67 rows of values"), and the sharded audit
    equals the one-process audit."""
    assert shard_of("a", 3) != shard_of("a\x00", 3)
    names = {0: "a", 1: "a\x00"}
    records = [dataclasses.replace(r, qid=names.get(i, r.qid)) for i, r in enumerate(tdx.load("demo").records)]
    kw = {"encoder": None, "semantic": None, "resamples": 50, "cache_dir": tmp_path, "controls": "none"}
    one, sharded = tdx.audit(records, **kw), audit_sharded(records, shards=3, **kw)
    pd.testing.assert_frame_equal(one.profile, sharded.profile)
    pd.testing.assert_frame_equal(one.records, sharded.records)
    pd.testing.assert_frame_equal(one.negatives, sharded.negatives)
    assert {"a", "a\x00"} <= set(sharded.records["qid"].astype(str))


def test_in_batch_loss_cannot_be_sharded(tmp_path):
    from transferdx.auditing.core import SemanticSettings

    prepared = tdx.pipeline.prepare_audit(
        tdx.load("demo").records[:4], encoder=None, semantic=SemanticSettings(in_batch=True), controls="none"
    )
    with pytest.raises(ValueError, match="in-batch"):
        shard_plan(prepared, 2, tmp_path)


def test_one_audit_hashes_its_texts_into_shares_once(tmp_path, monkeypatch):
    """``audit.stage=all`` with every map to run: the digests, the maps and the reduce read one list
    of shares (each text's SHA-256 taken once, not once for the digests and again for the maps); a
    plan handed another prepared audit computes that one's. Kills: the shares recomputed per step."""
    import transferdx.pipeline.sharding as sharding

    calls = []
    real = sharding.text_shares
    monkeypatch.setattr(sharding, "text_shares", lambda prepared, n: calls.append(n) or real(prepared, n))
    kw = {"encoder": None, "semantic": None, "resamples": 20, "cache_dir": tmp_path, "controls": "none"}
    records = tdx.load("demo").records
    audit_sharded(records, shards=3, **kw)
    assert calls == [3]
    prepared = tdx.pipeline.prepare_audit(records[1:], **kw)
    plan = shard_plan(prepared, 3, tmp_path)
    assert plan.shares(prepared) is plan.shares(prepared) and calls == [3, 3]
    other = tdx.pipeline.prepare_audit(records[2:], **kw)
    assert sum(len(s.queries) for s in plan.shares(other)) == len({r.query for r in records[2:]})
    assert calls == [3, 3, 3]


def test_stat_tasks_keep_verified_values_and_a_damaged_one_is_recomputed_alone(tmp_path):
    """The statistics in 3 query shards (lexical demo): each stat task's values are on disk with a
    marker naming each file's SHA-256 and the collection's digest. A file cut short (values, or the
    rows' texts) makes that shard alone missing; the reduce recomputes it (the others' markers untouched) and writes the
    one-process profile again. ``audit.stage=stats`` on a finished shard reuses it; records in
    another order are the same collection; a changed record makes every stat task stale (the
    context — ψ's IDF — is the whole collection's)."""
    from transferdx.pipeline.sharding import ShardSettings, run_stage

    records = tdx.load("demo").records
    kw = {"encoder": None, "semantic": None, "resamples": 50, "cache_dir": tmp_path, "controls": "none"}
    one = tdx.audit(records, **kw)
    sharded = audit_sharded(records, shards=3, **kw)
    pd.testing.assert_frame_equal(one.profile, sharded.profile)
    pd.testing.assert_frame_equal(one.negatives, sharded.negatives)
    prepared = tdx.pipeline.prepare_audit(records, **kw)
    plan = shard_plan(prepared, 3, tmp_path)
    store = plan.store(prepared)
    summary = reduce_summary(tmp_path, 3)
    assert summary["reduce_stats_run"] == [0, 1, 2] and store.missing() == []
    assert sum(m["records"] for m in summary["value_markers"]) == len(records)
    assert sum(m["negatives"] for m in summary["value_markers"]) == sum(len(r.negatives) for r in records)
    kept = {i: store.marker(i).read_bytes() for i in (0,)}
    for shard, name in ((1, "records.parquet"), (2, "texts.bin")):  # the values, the rows' texts
        damaged = store.values(shard) / name
        damaged.write_bytes(damaged.read_bytes()[:-10])
    assert store.missing() == [1, 2]
    again = reduce_shards(prepared, plan)
    assert reduce_summary(tmp_path, 3)["reduce_stats_run"] == [1, 2]
    assert {i: store.marker(i).read_bytes() for i in (0,)} == kept
    pd.testing.assert_frame_equal(one.profile, again.profile)
    reused = run_stage(prepared, ShardSettings(shards=3, stage="stats", shard=0, cache_dir=tmp_path))
    assert isinstance(reused, dict) and reused["reused"] is True and reused["stage"] == "stats"
    reordered = tdx.pipeline.prepare_audit(list(reversed(records)), **kw)
    assert shard_plan(reordered, 3, tmp_path).store(reordered).missing() == []
    changed = list(records)
    changed[0] = dataclasses.replace(changed[0], query=changed[0].query + " again")
    other = tdx.pipeline.prepare_audit(changed, **kw)
    assert shard_plan(other, 3, tmp_path).store(other).missing() == [0, 1, 2]


def test_launched_stat_tasks_read_their_records_and_the_context_not_the_input(tmp_path):
    """What ``audit.stage=all`` hands a launched stat task: its records (every record of its qids)
    and the collection's context as data — read back, the context is the same (ψ's vocabulary in its
    order, each corpus's df with its dtype, N, the background sample, the positives' owners); three
    tasks run from those files alone give the reduce nothing to compute, and the one-process bytes
    (demo with its controls, static backbone)."""
    import numpy as np

    from transferdx.pipeline.stat_tasks import prepared_context, read_context, write_stats_work

    cache = tmp_path / "cache"
    kw = {"encoder": "static_minilm", "resamples": 20, "cache_dir": cache, "label": "demo"}
    records = tdx.load("demo").records
    records = [*records, dataclasses.replace(records[0], qid=records[0].qid + "-twin")]  # a positive of two qids
    prepared = tdx.pipeline.prepare_audit(records, **kw)
    plan = shard_plan(prepared, 3)
    for i in range(3):
        tdx.pipeline.sharding.encode_shard(prepared, plan, i)
    store = plan.store(prepared)
    paths = write_stats_work(prepared, store, [0, 1, 2])
    context, back = prepared_context(prepared), read_context(store.context())
    assert list(back.idf.vocab.items()) == list(context.idf.vocab.items())
    assert list(back.idf.corpora) == list(context.idf.corpora)
    for name, (df, n) in context.idf.corpora.items():
        assert back.idf.corpora[name][1] == n and back.idf.corpora[name][0].dtype == df.dtype
        np.testing.assert_array_equal(back.idf.corpora[name][0], df)
    assert back.background == context.background and back.positives == context.positives
    assert any(isinstance(v, set) for v in context.positives.values())
    markers = [tdx.pipeline.run_shard_work(path, prepared.options, prepared.encoder) for path in paths]
    assert [m["reused"] for m in markers] == [False] * 3
    assert sum(m["records"] for m in markers) == len(prepared.loaded.records)
    reduce_shards(prepared, plan).save(tmp_path / "sharded")
    assert reduce_summary(cache, 3)["reduce_stats_run"] == []
    tdx.audit(records, **kw).save(tmp_path / "one")
    same_bytes(tmp_path / "one", tmp_path / "sharded")
    assert tdx.pipeline.run_shard_work(paths[1], prepared.options, prepared.encoder)["reused"] is True


def test_the_reduce_computes_each_sources_composite_from_its_own_rows_of_their_columns(tmp_path, monkeypatch):
    """The reduce reads each shard's values once per source — only ``COMPOSITE_COLUMNS`` and only
    that source's rows (its composite, with its vectors) — then once whole. Each source's composite
    from its rows alone is the one the whole values give, and the sharded profile is the
    one-process profile over the same cache. Kills: a composite that reads a column the projection
    drops (KeyError), the projection keeping every column or every source's rows (the vectors would
    sit beside them again), a source's rows in another order, the shards' texts read back for the
    wrong span of records."""
    from transferdx.auditing.core import COMPOSITE_COLUMNS, merge_values, record_source_texts, source_composites
    from transferdx.pipeline.auditing import pooling
    from transferdx.pipeline.sharding import store_composites
    from transferdx.pipeline.stat_tasks import ValueStore

    kw = {"encoder": "static_minilm", "resamples": 30, "controls": "none", "cache_dir": tmp_path}
    reads: list[tuple[int, str | None, tuple[str, ...] | None, set[str]]] = []
    inner = ValueStore.read

    def read(self, shard, columns=None, source=None):
        got = inner(self, shard, columns, source)
        cols = None if columns is None else tuple(got.negatives.columns)
        reads.append((shard, source, cols, set(got.negatives["source"].astype(str))))
        return got

    monkeypatch.setattr(ValueStore, "read", read)
    sharded = audit_sharded("demo", shards=3, **kw)
    prepared = tdx.pipeline.prepare_audit("demo", **kw)
    names = sorted({r.source for r in prepared.loaded.records})
    assert len(names) > 1
    assert [(s, name) for s, name, _, _ in reads] == [(s, n) for n in names for s in range(3)] + [
        (s, None) for s in range(3)
    ]
    thin = [(name, cols, seen) for _, name, cols, seen in reads if name is not None]
    assert all(set(cols) == set(COMPOSITE_COLUMNS["negatives"]) for _, cols, _ in thin)
    assert all(seen <= {name} for name, _, seen in thin)  # a source's rows alone
    assert set().union(*(seen for _, name, _, seen in reads if name is None)) == set(names)
    store = shard_plan(prepared, 3, tmp_path).store(prepared)
    whole = merge_values(inner(store, i) for i in range(3))
    # the reduce's texts (the stat tasks' files) and the records' give the same composites
    records = sorted(prepared.loaded.records, key=lambda r: (r.source, r.qid))
    got = store_composites(store, store.texts(), pooling(prepared))
    assert list(got) == names
    assert got == source_composites(record_source_texts(records), whole, pooling(prepared))
    assert all(row["composite_logdet"] > 0 for row in got.values())
    one = tdx.pipeline.audit_prepared(prepared)
    pd.testing.assert_frame_equal(one.profile, sharded.profile)
