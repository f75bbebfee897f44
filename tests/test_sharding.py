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
from transferdx.auditing.values import SemanticSettings
from transferdx.inputs.trec_dl import load_trec_dl
from transferdx.shards import (
    ShardsIncomplete,
    audit_shard,
    audit_sharded,
    encode_work_file,
    reduce_shards,
    shard_of,
    shard_plan,
    text_shares,
    write_shard_work,
)
from transferdx.shards.plan import collection_texts

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
    planned = tdx.pipeline.prepare_audit("demo", cache_dir=tmp_path / "plan", **kw)
    plan = shard_plan(planned, 3)
    paths = write_shard_work(plan, text_shares(planned, 3), [0, 1, 2])
    encoded = []
    for i, path in enumerate(paths):
        own = tdx.pipeline.prepare_audit("demo", cache_dir=tmp_path / f"map{i}", **kw).encoder
        marker = encode_work_file(path, own)
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
    plan, shares = shard_plan(prepared, 2), text_shares(prepared, 2)
    for path in write_shard_work(plan, shares, [0, 1]):
        marker = encode_work_file(path, prepared.encoder)
        assert marker["reused"] is False and marker["passages"] > 0
    reduce_shards(prepared, plan, shares).save(tmp_path / "work2")
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
        reduce_shards(prepared, plan, text_shares(prepared, 3))
    one = tdx.audit(records, **kw)
    sharded = audit_sharded(records, shards=3, **kw)
    pd.testing.assert_frame_equal(one.profile, sharded.profile)
    reordered = tdx.pipeline.prepare_audit(list(reversed(records)), **kw)
    reduce_shards(reordered, shard_plan(reordered, 3, tmp_path), text_shares(reordered, 3))  # every marker matches
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
        reduce_shards(prepared, shard_plan(prepared, 3, tmp_path), text_shares(prepared, 3))


def test_a_qid_ending_in_nul_is_kept_apart_from_the_same_qid_without_it(tmp_path):
    """The loaders keep a qid "a\\x00" beside "a"; the sharded audit (3 shards) equals the one-process
    audit and keeps both."""
    names = {0: "a", 1: "a\x00"}
    records = [dataclasses.replace(r, qid=names.get(i, r.qid)) for i, r in enumerate(tdx.load("demo").records)]
    kw = {"encoder": None, "semantic": None, "resamples": 50, "cache_dir": tmp_path, "controls": "none"}
    one, sharded = tdx.audit(records, **kw), audit_sharded(records, shards=3, **kw)
    pd.testing.assert_frame_equal(one.profile, sharded.profile)
    pd.testing.assert_frame_equal(one.records, sharded.records)
    pd.testing.assert_frame_equal(one.negatives, sharded.negatives)
    assert {"a", "a\x00"} <= set(sharded.records["qid"].astype(str))


def test_the_in_batch_loss_is_scored_in_a_sharded_audit_as_in_one_process(tmp_path):
    """The reduce is the one-process audit over the filled cache, so what one process scores a
    sharded audit scores too — the in-batch loss included (the split statistics could not)."""
    kw = {"encoder": "static_minilm", "resamples": 20, "controls": "none", "cache_dir": tmp_path}
    records = tdx.load("demo").records
    plain = tdx.audit(records, **kw)
    kw["semantic"] = SemanticSettings(in_batch=True, batch_size=4)
    sharded = audit_sharded(records, shards=2, **kw)
    one = tdx.audit(records, **kw)
    assert (sharded.profile["loss_mean"] > plain.profile["loss_mean"]).all()
    pd.testing.assert_frame_equal(one.profile, sharded.profile)
    pd.testing.assert_frame_equal(one.records, sharded.records)


def test_one_audit_hashes_its_texts_into_shares_once(tmp_path, monkeypatch):
    """``audit.stage=all`` with every map to run: the digests, the maps and the reduce read one list
    of shares, and each share's digest is taken once (each text's SHA-256 not again for the missing
    shards, each map's work and the reduce's check). Kills: the shares or their digests recomputed
    per step."""
    import transferdx.shards.run as run

    calls = []
    real = run.text_shares
    monkeypatch.setattr(run, "text_shares", lambda prepared, n: calls.append(n) or real(prepared, n))
    kw = {"encoder": None, "semantic": None, "resamples": 20, "cache_dir": tmp_path, "controls": "none"}
    import transferdx.shards.plan as plan_module

    hashed = []
    real_hash = plan_module.content_hash
    monkeypatch.setattr(plan_module, "content_hash", lambda *a: hashed.append(a) or real_hash(*a))
    audit_sharded(tdx.load("demo").records, shards=3, **kw)
    assert calls == [3]
    assert len(hashed) == 1 + 3  # the plan's key, then each share's digest once (not once per step)
    prepared = tdx.pipeline.prepare_audit(tdx.load("demo").records, **kw)
    run.run_stage(prepared, run.ShardSettings(shards=3, cache_dir=tmp_path))
    assert calls == [3, 3]
