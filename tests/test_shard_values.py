"""Per-shard statistics (issue 35, second part): a shard of the records split by query id — every
record of each of its qids, whatever the source — gets its per-negative and per-record values from
:func:`~transferdx.auditing.core.shard_values` given the whole collection's
:func:`~transferdx.auditing.core.audit_context` (ψ's vocabulary and IDF, η's background sample, the
positives' owners), and they are the one-process audit's values for those rows, bit for bit. What a
source pools (π̂, the flags it moves, the composite, the profile) is not a shard's."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

import transferdx as tdx
from transferdx.auditing.core import (
    Pooling,
    SemanticSettings,
    audit_context,
    audit_records,
    audit_values,
    merge_values,
    record_values,
    shard_values,
)
from transferdx.auditing.result import Audit
from transferdx.diagnostics.lexical import idf_tables, negative_residuality
from transferdx.diagnostics.tokens import alnum
from transferdx.inputs.trec_dl import load_trec_dl
from transferdx.pipeline.sharding import shard_of

from .conftest import record


def _split(records, shards: int) -> list[list]:
    parts: list[list] = [[] for _ in range(shards)]
    for r in records:
        parts[shard_of(r.qid, shards)].append(r)
    return parts


@pytest.mark.slow
def test_dl19_in_1_to_4_query_shards_gives_the_one_process_values(data, tmp_path):
    """The six DL19 runs and the eight controls built from them, semantic (static backbone): the
    shards' negatives and records frames, fn probabilities, other_positive flags and text reasons, put back in
    (source, qid) order, equal the whole collection's exactly (``check_exact``, NaN in place). Kills:
    ψ's IDF or vocabulary taken from the shard (its own passages, its own first-seen token order), the
    background sample drawn from the shard, other_positive or the sources' agreement on a query
    computed on the shard's positives only."""
    prepared = tdx.pipeline.prepare_audit(
        load_trec_dl(data / "msmarco-dl19"), encoder="static_minilm", cache_dir=tmp_path / "cache", resamples=20
    )
    loaded, options, cache = prepared.loaded, prepared.options, prepared.encoder
    semantic = options.semantic or SemanticSettings()
    kinds = dict(options.kinds)
    whole = record_values(loaded.records, alnum, encoder=cache, semantic=semantic, kinds=kinds)
    audited = audit_records(loaded, alnum, encoder=cache, semantic=semantic, kinds=kinds, resamples=20)
    # record_values is what the audit computes before it pools each source: the audit's own frames
    pd.testing.assert_frame_equal(audited.negatives[whole.negatives.columns], whole.negatives, check_exact=True)
    pd.testing.assert_frame_equal(audited.records[whole.records.columns], whole.records, check_exact=True)
    assert np.array_equal(audited.negatives["other_positive"].to_numpy(bool), whole.other_positive)
    # the text reasons come with the values; the pooled suspicion reads them, not the texts
    assert sorted(whole.text_hits) == ["duplicate_negative", "duplicate_positive"]
    for name, hit in whole.text_hits.items():
        assert hit.any(), name  # the controls copy positives and repeat negatives: not vacuous
        assert np.array_equal(audited.negatives[f"fn_{name}"].to_numpy(bool), hit)
    records = loaded.records
    context = audit_context(records, alnum, semantic=semantic)
    assert len(context.background) == semantic.background_size
    # taken in the audit's order whatever order the records come in (the vocabulary's order is ψ's sums')
    assert list(audit_context(records[::-1], alnum, semantic=semantic).idf.vocab) == list(context.idf.vocab)
    for shards in (1, 2, 3, 4):
        parts = [p for p in _split(records, shards) if p]
        assert len(parts) == shards  # DL19's 43 queries reach every shard
        values = [shard_values(p, alnum, context, encoder=cache, semantic=semantic, kinds=kinds) for p in parts]
        got = merge_values(values)
        pd.testing.assert_frame_equal(got.negatives, whole.negatives, check_exact=True)
        pd.testing.assert_frame_equal(got.records, whole.records, check_exact=True)
        assert whole.probability is not None and got.probability is not None
        np.testing.assert_array_equal(got.probability, whole.probability)
        np.testing.assert_array_equal(got.other_positive, whole.other_positive)
        for name, hit in whole.text_hits.items():
            np.testing.assert_array_equal(got.text_hits[name], hit)
    # the properties the context carries are not vacuous on this input: a shard alone differs
    alone = negative_residuality(parts[0], alnum)["psi"].to_numpy()
    given = values[0].negatives["psi"].to_numpy()
    assert not np.array_equal(alone, given, equal_nan=True)
    assert whole.other_positive.any() or not any(r.kind == "control" for r in records)


@pytest.mark.parametrize("corpus", ["pooled", "per_source", "external"])
def test_psi_of_any_query_split_under_the_whole_idf_is_the_whole_psi(corpus):
    """ψ alone, every IDF corpus: records sharing passages across queries and sources, split three
    ways by qid; each part's ψ under :func:`idf_tables` of the whole equals the whole's, bit for bit,
    while a part's own IDF gives other values (so the test can fail)."""
    rng = np.random.default_rng(7)
    words = [f"w{i}" for i in range(60)]
    pool = [" ".join(rng.choice(words, size=8)) for _ in range(40)]
    recs = []
    for q in range(30):
        for source in ("bm25", "dense"):
            negs = [pool[i] for i in rng.choice(len(pool), size=5, replace=False)]
            recs.append(
                record(str(q), " ".join(rng.choice(words, size=4)), negs, positive=pool[q % len(pool)], source=source)
            )
    external = [" ".join(rng.choice(words, size=6)) for _ in range(25)] if corpus == "external" else None
    whole = negative_residuality(recs, alnum, corpus, external_texts=external)
    tables = idf_tables(recs, alnum, corpus, external)
    parts = _split(recs, 3)
    got = pd.concat([negative_residuality(p, alnum, tables=tables) for p in parts], ignore_index=True)
    key = ["source", "qid", "neg_index"]
    merged = got.sort_values(key, kind="stable").reset_index(drop=True)
    expected = whole.sort_values(key, kind="stable").reset_index(drop=True)
    pd.testing.assert_frame_equal(merged, expected, check_exact=True)
    if corpus != "external":  # an external corpus is the same for any part
        own = pd.concat([negative_residuality(p, alnum, corpus) for p in parts], ignore_index=True)
        assert not np.array_equal(own.sort_values(key, kind="stable")["psi"].to_numpy(), expected["psi"].to_numpy())


def test_shard_values_refuses_the_in_batch_loss_and_tables_without_a_source():
    recs = [record("1", "a b", ["c d"], source="s")]
    context = audit_context(recs, alnum, semantic=None)
    with pytest.raises(ValueError, match="in-batch"):
        shard_values(recs, alnum, context, semantic=SemanticSettings(in_batch=True))
    other = [dataclasses.replace(recs[0], source="t")]
    with pytest.raises(ValueError, match=r"no corpus for sources \['t'\]"):
        shard_values(other, alnum, context)


def _artifacts(folder) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.slow
def test_audit_from_query_shards_values_writes_the_one_process_artifacts(data, tmp_path):
    """The reduce's half: DL19's six runs and eight controls, values of 3 query shards merged, then
    :func:`audit_values` (π̂, flags, the composite from each source's vectors read back from the
    cache, the profile, the suspects) — every artifact the same bytes as :func:`audit_records`'."""
    prepared = tdx.pipeline.prepare_audit(
        load_trec_dl(data / "msmarco-dl19"), encoder="static_minilm", cache_dir=tmp_path / "cache", resamples=20
    )
    loaded, options, cache = prepared.loaded, prepared.options, prepared.encoder
    semantic = options.semantic or SemanticSettings()
    kinds = dict(options.kinds)
    pooling = Pooling(cache, semantic, seed=options.seed, resamples=20, kinds=kinds, settings=prepared.settings)
    whole = audit_records(
        loaded, alnum, encoder=cache, semantic=semantic, kinds=kinds, resamples=20, settings=prepared.settings
    )
    context = audit_context(loaded.records, alnum, semantic=semantic)
    parts = _split(loaded.records, 3)
    values = merge_values(
        [shard_values(p, alnum, context, encoder=cache, semantic=semantic, kinds=kinds) for p in parts]
    )
    got = audit_values(loaded, values, pooling)
    texts = {(r.source, r.qid): r for r in loaded.records}
    Audit(whole, prepared.settings, texts).save(tmp_path / "whole")
    Audit(got, prepared.settings, texts).save(tmp_path / "merged")
    expected, merged = _artifacts(tmp_path / "whole"), _artifacts(tmp_path / "merged")
    assert sorted(merged) == sorted(expected) and len(expected) > 5
    assert [name for name in expected if merged[name] != expected[name]] == []
    composites = [v for row in got.profile.rows for k, v in row.items() if k.startswith("composite_")]
    assert composites and not all(np.isnan(float(v)) for v in composites)  # the composite was computed
    short = dataclasses.replace(values, records=values.records.iloc[1:])
    with pytest.raises(ValueError, match="a shard is missing"):
        audit_values(loaded, short, pooling)
