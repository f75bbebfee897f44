"""The command line's side of the sharded audit (:mod:`transferdx.shards`): the ``audit.*`` keys as
:class:`~transferdx.shards.ShardSettings`, and the launcher the engine is handed — map tasks started
as ``transferdx-audit -m audit.stage=map …`` through the run's own Hydra launcher (joblib,
submitit local or SLURM). The engine never starts the command line itself."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from transferdx.shards import MapRunner, ShardPlan, ShardSettings, ShardsIncomplete, TextShare, run_maps_here
from transferdx.shards.run import write_shard_work

if TYPE_CHECKING:
    from omegaconf import DictConfig

    from transferdx.pipeline.auditing import PreparedAudit


def hydra_map_runner(task_overrides: Sequence[str], hydra_overrides: Sequence[str], launcher: str) -> MapRunner:
    """Map tasks through a Hydra launcher: ``transferdx-audit -m audit.stage=map audit.shard=<the
    missing ones>`` with the run's own overrides, its ``hydra/launcher`` choice and settings and
    ``audit.work_dir=<plan>``; each task reads its work file (:func:`~transferdx.shards.write_shard_work`),
    not the input. The basic launcher runs them here, in this process. The sweep's folder is
    ``<plan>/sweep``."""
    kept = ("hydra/launcher=", "hydra.launcher.", "hydra.searchpath")
    launcher_args = [o for o in hydra_overrides if o.startswith(kept)]
    dropped = ("audit.stage", "audit.shard", "audit.work_dir", "output_dir")  # each task's own; none writes artifacts
    own = [o for o in task_overrides if o.split("=", 1)[0].lstrip("+~") not in dropped]

    def run(prepared: PreparedAudit, plan: ShardPlan, shares: Sequence[TextShare], shards: list[int]) -> None:
        if launcher == "basic":
            run_maps_here(prepared, plan, shares, shards)
            return
        write_shard_work(plan, shares, shards)
        args = [
            sys.executable,
            "-m",
            "transferdx.cli",
            "-m",
            *own,
            *launcher_args,
            "audit.stage=map",
            f"audit.shard={','.join(map(str, shards))}",
            f"audit.work_dir={plan.folder}",
            f"hydra.sweep.dir={plan.folder / 'sweep'}",
        ]
        done = subprocess.run(args, check=False)
        if done.returncode != 0:
            raise ShardsIncomplete(f"the map sweep ({launcher}) exited with {done.returncode}: {' '.join(args[3:])}")

    return run


def shard_work_file(cfg: DictConfig) -> Path | None:
    """The work file of a map task that ``audit.stage=all`` launched (``audit.work_dir`` set): the
    task encodes its texts and does not load the input."""
    block = cfg.get("audit") or {}
    folder, shard = block.get("work_dir"), block.get("shard")
    if not folder or shard is None or str(block.get("stage")) != "map":
        return None
    return ShardPlan(Path(str(folder)), int(block.get("shards", 1))).work(int(shard))


def shard_settings(cfg: DictConfig) -> ShardSettings:
    """``audit.shards``, ``audit.stage``, ``audit.shard``; for ``stage: all`` over several shards, the
    maps go through the run's own ``hydra/launcher`` choice and settings (:func:`hydra_map_runner`)."""
    block = cfg.get("audit") or {}
    shard = block.get("shard")
    s = ShardSettings(
        shards=int(block.get("shards", 1)),
        stage=str(block.get("stage", "all")),
        shard=None if shard is None else int(shard),
        cache_dir=str(cfg.paths.cache_dir),
    )
    if s.shards > 1 and s.stage == "all":
        from hydra.core.hydra_config import HydraConfig

        hc = HydraConfig.get()
        launcher = str(hc.runtime.choices.get("hydra/launcher", "basic"))
        s = dataclasses.replace(
            s, run_maps=hydra_map_runner(list(hc.overrides.task), list(hc.overrides.hydra), launcher)
        )
    return s
