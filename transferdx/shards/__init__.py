"""The sharded audit: a collection too big for one machine's encoder time, audited in N map tasks
and one reduce.

The maps split the frozen encoder, the part of a semantic audit that grows with the collection and
needs an accelerator: each encodes its share of the distinct texts (:mod:`transferdx.shards.plan`)
into the embedding cache every task shares. The reduce is the one-process audit over that filled
cache (:mod:`transferdx.shards.run`): the same code, so the same bytes whatever N. ``transferdx-audit
audit.shards=N`` does the same from the command line, the maps through the Hydra launcher chosen
(``hydra/launcher=joblib|submitit_local|submitit_slurm``; :mod:`transferdx.cli_shards`)."""

from transferdx.shards.plan import ShardPlan, TextShare, shard_of, shard_plan, text_shares
from transferdx.shards.run import (
    MapRunner,
    ShardSettings,
    ShardsIncomplete,
    audit_shard,
    audit_sharded,
    encode_work_file,
    reduce_shards,
    run_maps_here,
    run_stage,
    shard_line,
    write_shard_work,
)

__all__ = [
    "MapRunner",
    "ShardPlan",
    "ShardSettings",
    "ShardsIncomplete",
    "TextShare",
    "audit_shard",
    "audit_sharded",
    "encode_work_file",
    "reduce_shards",
    "run_maps_here",
    "run_stage",
    "shard_line",
    "shard_of",
    "shard_plan",
    "text_shares",
    "write_shard_work",
]
