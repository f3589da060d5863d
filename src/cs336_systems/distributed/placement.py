"""Where a C job's ranks run, and what starts them: torch's launcher on one host, or Slurm's srun
across nodes.

C1's rows and the data-parallel job are one process a rank. On one machine (and by default) torch's
launcher starts them on the job's host: ``python -m torch.distributed.run --standalone
--nproc-per-node N``. Under the Slurm profile (``profiles/slurm/launch.yaml``: ``launch.launcher:
srun``) each rank is one srun task and a job's ranks split evenly over up to ``launch.nodes`` nodes:
the job asks sbatch for those nodes and tasks, and its command starts them with ``srun``, which
``ranks.from_environment`` reads in every rank.

The ``launch`` block is the Slurm profile's, not the grid's:

    launch:
      launcher: srun        # or torchrun: every job's ranks on one node, started inside the job
      nodes: 2              # the most nodes one job's ranks spread over
      ranks_per_node: 2     # the most ranks a node runs (its GPUs, under NCCL); 0: no limit

A job of ``world`` ranks runs on as many of the ``nodes`` as its ranks split over evenly, within
``ranks_per_node`` (``place``): 2 ranks on 2 nodes are one a node, 4 are two. A world that cannot be
split so is ``Unplaced``: C1 records that row as skipped, with the reason.
"""
from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any, Callable, Mapping

LAUNCHERS = ("torchrun", "srun")
KEYS = ("launcher", "nodes", "ranks_per_node")
# The executor plugin's resources a job launched by srun sets (``slurm_resources``).
SLURM_KEYS = ("mpi", "nodes", "tasks", "tasks_per_node", "tasks_per_gpu", "gres")


class PlacementError(ValueError):
    """A ``launch`` block that cannot be read: the one line names the key and what it takes."""


@dataclass(frozen=True)
class Settings:
    launcher: str = "torchrun"
    nodes: int = 1
    ranks_per_node: int = 0         # 0: as many as a job's split gives


@dataclass(frozen=True)
class Placement:
    nodes: int
    ranks_per_node: int

    @property
    def world_size(self) -> int:
        return self.nodes * self.ranks_per_node


@dataclass(frozen=True)
class Unplaced:
    """A world size the settings cannot split evenly over their nodes: why, in words."""
    reason: str


def _count(block: Mapping[str, Any], key: str, least: int) -> int:
    value = block[key]
    # `--config launch={nodes: 2}` reaches us as the string "2" (Snakemake reads --config with YAML's base loader)
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise PlacementError(f"config error at launch.{key}: {value!r} is not a whole number of at least {least}")
    return value


def settings(block: Mapping[str, Any] | None) -> Settings:
    """The ``launch`` block read and checked; no block is torch's launcher on one node."""
    if block is None:
        return Settings()
    if not isinstance(block, Mapping):
        raise PlacementError(f"config error at launch: {block!r} is not a mapping of {', '.join(KEYS)}")
    unknown = sorted(set(block) - set(KEYS))
    if unknown:
        raise PlacementError(f"config error at launch: unknown key {unknown[0]!r} (allowed: {', '.join(KEYS)})")
    launcher = block.get("launcher", Settings.launcher)
    if launcher not in LAUNCHERS:
        raise PlacementError(f"config error at launch.launcher: {launcher!r} is not allowed (allowed: {', '.join(LAUNCHERS)})")
    nodes = _count(block, "nodes", 1) if "nodes" in block else Settings.nodes
    per_node = _count(block, "ranks_per_node", 0) if "ranks_per_node" in block else Settings.ranks_per_node
    if launcher == "torchrun" and nodes > 1:
        raise PlacementError(f"config error at launch.nodes: {nodes} nodes need launch.launcher srun "
                             "(torch's launcher starts one node's ranks)")
    return Settings(launcher, nodes, per_node)


def place(world_size: int, chosen: Settings) -> Placement | Unplaced:
    """The most nodes, up to ``chosen.nodes``, over which ``world_size`` ranks split evenly, each
    node running at most ``chosen.ranks_per_node`` (any number where it is 0)."""
    if world_size < 1:
        raise ValueError(f"a job needs at least one rank, not {world_size}")
    for nodes in range(min(chosen.nodes, world_size), 0, -1):
        per_node = world_size // nodes
        if world_size % nodes == 0 and (chosen.ranks_per_node == 0 or per_node <= chosen.ranks_per_node):
            return Placement(nodes, per_node)
    nodes, per_node = chosen.nodes, chosen.ranks_per_node
    return Unplaced(f"{world_size} ranks do not fit evenly on at most {nodes} node{'s' * (nodes > 1)} of at most "
                    f"{per_node} rank{'s' * (per_node > 1)} each (launch.nodes, launch.ranks_per_node)")


def slurm_resources(where: Placement | Unplaced, gpus: bool) -> dict[str, int | str]:
    """What the job asks of Slurm through the executor plugin's resources: ``mpi`` makes the plugin
    run the rule's command as it is, so the command's own srun starts the ranks; nodes and tasks
    (``tasks_per_node`` where a node runs several, else ``tasks``: the plugin takes a
    ``tasks_per_node`` only above 1); under NCCL a node's GPUs as ``gres`` (per node; the plugin's
    ``gpu`` would be the job's total, which Slurm may split unevenly). Zero and "" are the plugin's
    "not set". An unplaced job is one plain task that records why it did not run."""
    if isinstance(where, Unplaced):
        return {"mpi": "", "nodes": 1, "tasks": 0, "tasks_per_node": 0, "tasks_per_gpu": 0, "gres": ""}
    several = where.ranks_per_node > 1
    return {"mpi": "srun", "nodes": where.nodes,
            "tasks": 0 if several else where.nodes, "tasks_per_node": where.ranks_per_node if several else 0,
            # the plugin would otherwise read `tasks` as tasks per GPU
            "tasks_per_gpu": 0,
            "gres": f"gpu:{where.ranks_per_node}" if gpus else ""}


def rule_resources(world: Callable[[Any], int | str], gpus: Callable[[Any], bool],
                   chosen: Settings) -> dict[str, Callable[[Any], int | str]]:
    """A rule's Slurm resources, one function of the job's wildcards a key, for a job of
    ``world(wildcards)`` ranks, under NCCL where ``gpus(wildcards)``; none under torch's launcher."""
    if chosen.launcher != "srun":
        return {}

    def one(key: str):
        return lambda wildcards: slurm_resources(place(int(world(wildcards)), chosen), gpus(wildcards))[key]
    return {key: one(key) for key in SLURM_KEYS}


def command(world_size: int, chosen: Settings, cpus_per_task: int | None = None) -> str:
    """What starts a job's ranks, followed by ``-m <module> ...``: torch's launcher on this host, or
    srun with the job's shape. Inside a batch job the executor plugin takes Slurm's variables from the
    command's environment, so srun is told the shape instead of reading it; ``--kill-on-bad-exit``
    ends the step where a rank dies without a word (``ranks.run_launched`` ends them where one raises)."""
    if chosen.launcher == "torchrun":
        return f"python -m torch.distributed.run --standalone --nproc-per-node {world_size}"
    where = place(world_size, chosen)
    if isinstance(where, Unplaced):
        return "python"
    cpus = f" --cpus-per-task {cpus_per_task}" if cpus_per_task and cpus_per_task > 0 else ""
    return (f"srun --nodes {where.nodes} --ntasks-per-node {where.ranks_per_node}{cpus}"
            " --kill-on-bad-exit=1 python")


def unplaced_reason(world_size: int, chosen: Settings) -> str | None:
    """Why a job of ``world_size`` ranks is not started under these settings, or None."""
    if chosen.launcher != "srun":
        return None
    where = place(world_size, chosen)
    return where.reason if isinstance(where, Unplaced) else None


def skip_option(world_size: int, chosen: Settings) -> str:
    """C1's ``--skip REASON`` (quoted for the shell) for a row these settings cannot place, else ""."""
    reason = unplaced_reason(world_size, chosen)
    return f"--skip {shlex.quote(reason)}" if reason else ""
