"""The sharded audit's stages: N map tasks fill the embedding cache, one reduce audits.

A **map** encodes its share of the collection's distinct texts (:mod:`transferdx.shards.plan`) into
the content-addressed embedding cache every task shares, then leaves its marker. The **reduce**
checks that every map's marker matches the share it computes from the records it loads, then runs
the one-process audit (:func:`~transferdx.pipeline.auditing.audit_prepared`), whose encoder finds
every vector in the cache and encodes nothing: the artifacts are the one-process audit's bytes for
any N, because they are made by the same code from the same vectors. A re-submission runs only the
maps without a valid marker; a map killed mid-run keeps the cache chunks it flushed, so its rerun
encodes only the rest.

How maps are launched is the caller's: :func:`audit_sharded` runs them in this process (or through
the ``run_maps`` callable given); the command line hands in one that starts them through the Hydra
launcher chosen (:mod:`transferdx.cli_shards`)."""

from __future__ import annotations

import dataclasses
import gzip
import json
import os
import resource
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from transferdx.artifacts import atomic_write_bytes, atomic_write_text, canonical_json
from transferdx.auditing.result import Audit
from transferdx.embed.cache import EmbeddingCache
from transferdx.pipeline.auditing import PreparedAudit, audit_prepared, prepare_audit
from transferdx.pipeline.encoders import EncoderLike
from transferdx.pipeline.settings import AuditOptions
from transferdx.shards.plan import MARKER_VERSION, ShardPlan, TextShare, shard_plan, text_shares


class ShardsIncomplete(ValueError):
    """The reduce found shards without a valid marker (not run, killed, or run on other texts)."""


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def shard_work(plan: ShardPlan, shard: int, share: TextShare) -> dict[str, Any]:
    """What map task ``shard`` encodes, as a JSON-able dict: the digest of its share and two requests
    to the cache — its queries and its passages. The same requests give the same vectors wherever
    they run. A lexical audit's maps encode nothing but still mark their share."""
    return {
        "version": MARKER_VERSION,
        "shard": shard,
        "shards": plan.shards,
        "digest": share.digest,
        "queries": share.queries,
        "passages": share.passages,
    }


def write_shard_work(plan: ShardPlan, shares: Sequence[TextShare], shards: Sequence[int]) -> list[Path]:
    """Write each map task's :func:`shard_work` to ``plan.work(i)`` (gzip JSON, atomically), so that a
    task launched elsewhere reads its own texts instead of loading the whole input."""
    paths = []
    for shard in shards:
        data = json.dumps(shard_work(plan, shard, shares[shard]), ensure_ascii=False).encode("utf-8")
        paths.append(atomic_write_bytes(plan.work(shard), gzip.compress(data, mtime=0)))
    return paths


def encode_work(cache: EmbeddingCache | None, plan: ShardPlan, work: dict[str, Any]) -> dict[str, Any]:
    """One map: encode ``work``'s two requests (unless its marker says they were done: returned with
    ``"reused": true``) and write the marker."""
    started, shard = time.perf_counter(), int(work["shard"])
    if (done := plan.done(shard, work["digest"])) is not None:
        return {**done, "reused": True}
    before = cache.encoded_texts if cache is not None else 0
    if cache is not None:
        for texts, role in ((work["queries"], "query"), (work["passages"], "passage")):
            if texts:
                cache.embed(texts, role)
    record = {
        "version": MARKER_VERSION,
        "shard": shard,
        "shards": plan.shards,
        "digest": work["digest"],
        "queries": len(work["queries"]),
        "passages": len(work["passages"]),
        "encoded_texts": (cache.encoded_texts - before) if cache is not None else 0,
        "seconds": round(time.perf_counter() - started, 3),
        "peak_mb": round(_peak_mb(), 1),
        "host": os.uname().nodename,
    }
    atomic_write_text(plan.marker(shard), canonical_json(record))
    return {**record, "reused": False}


def encode_work_file(path: str | Path, encoder: EmbeddingCache | None) -> dict[str, Any]:
    """A map launched by ``audit.stage=all``, from its work file (:func:`write_shard_work`) alone: the
    texts only, never the whole input, so the task's memory is its share's texts and vectors. The
    marker goes beside it."""
    try:
        work = json.loads(gzip.decompress(Path(path).read_bytes()))
    except (OSError, ValueError) as exc:
        raise ShardsIncomplete(f"{path}: the shard's work file cannot be read ({exc}); rerun audit.stage=all") from None
    return encode_work(encoder, ShardPlan(Path(path).parent, int(work["shards"])), work)


MapRunner = Callable[[PreparedAudit, ShardPlan, Sequence[TextShare], list[int]], None]


def run_maps_here(prepared: PreparedAudit, plan: ShardPlan, shares: Sequence[TextShare], shards: list[int]) -> None:
    """Run the map tasks ``shards`` one after another in this process."""
    for shard in shards:
        encode_work(prepared.encoder, plan, shard_work(plan, shard, shares[shard]))


def reduce_shards(prepared: PreparedAudit, plan: ShardPlan, shares: Sequence[TextShare]) -> Audit:
    """The reduce: every map's marker must match its share of the texts (else
    :class:`ShardsIncomplete` naming the missing ones and how to run them); then the one-process
    audit over the filled cache (:func:`~transferdx.pipeline.auditing.audit_prepared`): its bytes,
    whatever N. A summary (``reduce.json``: shards, texts the reduce encoded — 0 when the maps
    covered every text —, seconds, peak memory) is written beside the markers, not among the
    artifacts."""
    missing = plan.missing([share.digest for share in shares])
    if missing:
        shown = ",".join(map(str, missing[:20])) + (",…" if len(missing) > 20 else "")
        raise ShardsIncomplete(
            f"{len(missing)} of {plan.shards} shards have not finished (no valid marker in {plan.folder}): "
            f"{shown}; run them with transferdx-audit -m audit.stage=map audit.shards={plan.shards} "
            f"audit.shard={shown} (same options), or audit.stage=all"
        )
    started, cache = time.perf_counter(), prepared.encoder
    before = cache.encoded_texts if cache is not None else 0
    audit = audit_prepared(prepared)
    summary = {
        "shards": plan.shards,
        "reduce_encoded_texts": (cache.encoded_texts - before) if cache is not None else 0,
        "reduce_seconds": round(time.perf_counter() - started, 3),
        "reduce_peak_mb": round(_peak_mb(), 1),
        "markers": [json.loads(plan.marker(i).read_text(encoding="utf-8")) for i in range(plan.shards)],
    }
    atomic_write_text(plan.folder / "reduce.json", canonical_json(summary))
    return audit


def shard_line(marker: dict[str, Any]) -> str:
    """One line on a map task: its shard, its share of queries and passages, texts encoded, time (or
    that it was done)."""
    head = f"shard {marker['shard']} of {marker['shards']}: {marker['queries']} queries, {marker['passages']} passages"
    if marker.get("reused"):
        return f"{head}; already done ({marker['encoded_texts']} texts encoded then), nothing to do"
    return f"{head}; {marker['encoded_texts']} texts encoded, {marker['seconds']:.1f}s, peak {marker['peak_mb']:.0f} MB"


STAGES = ("all", "map", "reduce")


@dataclasses.dataclass(frozen=True)
class ShardSettings:
    """How an audit is split: ``shards`` (1: the one-process audit), ``stage`` (``all``: the maps
    still missing, through ``run_maps``, then the reduce; ``map``: map ``shard`` only; ``reduce``:
    the reduce alone), and the cache folder that keeps a lexical audit's markers."""

    shards: int = 1
    stage: str = "all"
    shard: int | None = None
    run_maps: MapRunner = run_maps_here
    cache_dir: str | Path | None = None


def run_stage(prepared: PreparedAudit, s: ShardSettings) -> Audit | dict[str, Any]:
    """One stage of an audit of ``prepared`` split as ``s`` says: the audit (``all``, ``reduce``) or
    the map's marker (``map``). One shard and ``all`` is the one-process audit, with no markers."""
    if s.stage not in STAGES:
        raise ValueError(f"audit.stage must be one of {sorted(STAGES)}, got {s.stage!r}")
    if s.shards == 1 and s.stage == "all":
        return audit_prepared(prepared)
    plan = shard_plan(prepared, s.shards, s.cache_dir)
    shares = text_shares(prepared, s.shards)
    if s.stage == "map":
        if s.shard is None:
            raise ValueError(f"audit.stage=map runs one shard: give audit.shard=0…{s.shards - 1} (or a list with -m)")
        plan.marker(int(s.shard))  # ValueError when out of range
        return encode_work(prepared.encoder, plan, shard_work(plan, int(s.shard), shares[int(s.shard)]))
    return _maps_then_reduce(prepared, plan, shares, s.run_maps if s.stage == "all" else None)


def _maps_then_reduce(
    prepared: PreparedAudit, plan: ShardPlan, shares: Sequence[TextShare], run_maps: MapRunner | None
) -> Audit:
    """The maps without a valid marker through ``run_maps`` (None: none run), then the reduce."""
    if run_maps is not None and (missing := plan.missing([share.digest for share in shares])):
        run_maps(prepared, plan, shares, missing)
    return reduce_shards(prepared, plan, shares)


def audit_shard(
    records: Any,
    options: AuditOptions | None = None,
    *,
    shard: int,
    shards: int,
    encoder: EncoderLike | None = "minilm_l6",
    cache_dir: str | Path | None = None,
    controls: str | Sequence[str] = "auto",
    **overrides: Any,
) -> dict[str, Any]:
    """One map task (e.g. one SLURM array task): prepare as :func:`~transferdx.pipeline.auditing.audit`
    does, encode shard ``shard`` of ``shards``; returns its marker (``"reused": true`` when it was
    already done)."""
    prepared = prepare_audit(records, options, encoder=encoder, cache_dir=cache_dir, controls=controls, **overrides)
    result = run_stage(prepared, ShardSettings(shards, "map", shard, cache_dir=cache_dir))
    assert isinstance(result, dict)
    return result


def audit_sharded(
    records: Any,
    options: AuditOptions | None = None,
    *,
    shards: int,
    encoder: EncoderLike | None = "minilm_l6",
    cache_dir: str | Path | None = None,
    controls: str | Sequence[str] = "auto",
    run_maps: MapRunner = run_maps_here,
    **overrides: Any,
) -> Audit:
    """The audit of :func:`~transferdx.pipeline.auditing.audit` in ``shards`` map tasks and one
    reduce: the maps without a valid marker go to ``run_maps`` (default: this process, one after
    another), then :func:`reduce_shards`. Same arguments and the same result as ``audit``."""
    prepared = prepare_audit(records, options, encoder=encoder, cache_dir=cache_dir, controls=controls, **overrides)
    return _maps_then_reduce(prepared, shard_plan(prepared, shards, cache_dir), text_shares(prepared, shards), run_maps)
