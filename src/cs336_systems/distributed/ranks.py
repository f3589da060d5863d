"""Where this process sits in a process group that a launcher started: torchrun's, or Slurm's srun.

A launcher starts every rank itself, on one host (``torchrun --standalone --nproc-per-node 2 -m ...``)
or across nodes (``srun --nodes 2 --ntasks-per-node 2 python -m ...``), and tells each process where
it stands through its environment. ``from_environment`` reads that into a ``Launch``:

- **torchrun** sets ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``
  and ``MASTER_PORT``.
- **srun** sets, in each task of a job step, ``SLURM_PROCID`` (the rank), ``SLURM_STEP_NUM_TASKS``
  (the world), ``SLURM_LOCALID`` (the rank on its node) and ``SLURM_STEP_NODELIST`` (the step's
  hosts, in Slurm's hostlist syntax); rank 0 runs on the first host, which is the rendezvous. The
  port is ``MASTER_PORT`` where the user set one, else one every task derives alike from the job and
  step ids (``srun_port``). A batch script's own shell is no task of a step (no ``SLURM_STEP_ID``, or
  the step "batch"): it is not read as one.

Neither set: ``None`` (the job starts its ranks itself, ``launcher.run_on_ranks``).

``run_launched`` runs one rank's part of a job in such a process: it joins the group, calls the
function, and gathers what every rank returned to rank 0; a rank's failure ends every rank at once,
named by its rank, after rank 0 has recorded it, as ``launcher.run_on_ranks`` does for the ranks it
spawns.
"""
from __future__ import annotations

import datetime
import json
import os
import re
import socket
import sys
import threading
import traceback
from dataclasses import asdict, dataclass
from typing import Any, Callable, Mapping

import torch
import torch.distributed as dist

from cs336_systems.distributed.launcher import RankFailed, cpu_threads_per_rank
from cs336_systems.timing import exception_line

TORCHRUN_KEYS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
SRUN_KEYS = ("SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_LOCALID", "SLURM_STEP_NODELIST", "SLURM_JOB_ID",
             "SLURM_STEP_ID")
# srun's rendezvous ports: one a job step, derived from its ids (ports below 20000 are often services')
SRUN_PORT_BASE, SRUN_PORT_SPAN = 20000, 20000


class LaunchError(ValueError):
    """The environment names a launcher but not all it must: the one line says what is missing."""


@dataclass(frozen=True)
class Launch:
    launcher: str               # "torchrun" or "srun"
    rank: int
    world_size: int
    local_rank: int             # the rank among this host's ranks: its GPU is cuda:local_rank
    master_addr: str
    master_port: int
    hosts: tuple[str, ...]      # the hosts the ranks run on, where the launcher says (srun); else this one
    job: str = ""               # the same in every rank of the launch: torchrun's run id, srun's job.step

    @property
    def init_method(self) -> str:
        host = f"[{self.master_addr}]" if ":" in self.master_addr else self.master_addr
        return f"tcp://{host}:{self.master_port}"

    def as_dict(self) -> dict:
        """What a record keeps of where its ranks ran."""
        return asdict(self) | {"hosts": list(self.hosts), "nodes": len(self.hosts)}

    def where(self) -> dict:
        """Where a job's ranks ran, for its records: the launcher, hosts, nodes and ranks per node
        (None where the ranks do not split evenly over the nodes)."""
        nodes = len(self.hosts)
        return {"launcher": self.launcher, "hosts": list(self.hosts), "nodes": nodes,
                "ranks_per_node": self.world_size // nodes if self.world_size % nodes == 0 else None}


def spawned(world_size: int) -> dict:
    """``Launch.where`` for ranks a job started itself on this host (``launcher.run_on_ranks``)."""
    return {"launcher": "spawn", "hosts": [socket.gethostname()], "nodes": 1, "ranks_per_node": world_size}


def expand_hostlist(hostlist: str) -> list[str]:
    """Slurm's hostlist syntax to host names, in order: ``gpu[01-03,07],login`` -> gpu01, gpu02,
    gpu03, gpu07, login (zero padding kept, several bracketed ranges in one name expanded left to right)."""
    hosts: list[str] = []
    for item in _split_top_level(hostlist.strip()):
        if not item:
            continue
        names = [""]
        for literal, ranges in re.findall(r"([^\[\]]*)(?:\[([^\]]*)\])?", item):
            if not literal and not ranges:
                continue
            expanded = [literal]
            if ranges:
                expanded = [literal + n for n in _expand_ranges(ranges, item)]
            names = [n + e for n in names for e in expanded]
        hosts.extend(names)
    if not hosts:
        raise LaunchError(f"no host in the host list {hostlist!r}")
    return hosts


def _split_top_level(text: str) -> list[str]:
    """Split at the commas outside brackets."""
    parts, depth, current = [], 0, ""
    for char in text:
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
            if depth < 0:
                raise LaunchError(f"unbalanced brackets in the host list {text!r}")
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    if depth:
        raise LaunchError(f"unbalanced brackets in the host list {text!r}")
    return parts + [current]


def _expand_ranges(ranges: str, item: str) -> list[str]:
    out = []
    for part in ranges.split(","):
        match = re.fullmatch(r"(\d+)(?:-(\d+))?", part.strip())
        if not match:
            raise LaunchError(f"cannot read {part!r} in the host list item {item!r}")
        first, last = match.group(1), match.group(2) or match.group(1)
        if int(last) < int(first):
            raise LaunchError(f"the range {part!r} in {item!r} runs backwards")
        out += [str(n).zfill(len(first)) for n in range(int(first), int(last) + 1)]
    return out


def srun_port(job_id: int, step_id: int) -> int:
    """The rendezvous port of one job step, the same in every task of it."""
    return SRUN_PORT_BASE + (job_id * 97 + step_id) % SRUN_PORT_SPAN


def _int(env: Mapping[str, str], key: str) -> int:
    try:
        return int(env[key])
    except ValueError:
        raise LaunchError(f"{key}={env[key]!r} is not a number") from None


def from_environment(env: Mapping[str, str] | None = None) -> Launch | None:
    """The launch this process is part of, from torchrun's or srun's environment; None where neither
    set one. Raises ``LaunchError`` (one line) where a launcher's variables are there only in part."""
    env = os.environ if env is None else env
    if "RANK" in env or "TORCHELASTIC_RUN_ID" in env:
        missing = [k for k in TORCHRUN_KEYS if k not in env]
        if missing:
            raise LaunchError(f"torchrun's environment lacks {', '.join(missing)}")
        launch = Launch("torchrun", _int(env, "RANK"), _int(env, "WORLD_SIZE"), _int(env, "LOCAL_RANK"),
                        env["MASTER_ADDR"], _int(env, "MASTER_PORT"), (socket.gethostname(),),
                        env.get("TORCHELASTIC_RUN_ID") or f"{env['MASTER_ADDR']}:{env['MASTER_PORT']}")
    elif "SLURM_STEP_ID" in env and env["SLURM_STEP_ID"] not in ("batch", "extern", "interactive") \
            and "SLURM_PROCID" in env:
        missing = [k for k in SRUN_KEYS if k not in env]
        if missing:
            raise LaunchError(f"srun's environment lacks {', '.join(missing)}")
        hosts = tuple(expand_hostlist(env["SLURM_STEP_NODELIST"]))
        port = _int(env, "MASTER_PORT") if "MASTER_PORT" in env else srun_port(_int(env, "SLURM_JOB_ID"),
                                                                                 _int(env, "SLURM_STEP_ID"))
        launch = Launch("srun", _int(env, "SLURM_PROCID"), _int(env, "SLURM_STEP_NUM_TASKS"),
                        _int(env, "SLURM_LOCALID"), env.get("MASTER_ADDR", hosts[0]), port, hosts,
                        f"{env['SLURM_JOB_ID']}.{env['SLURM_STEP_ID']}")
    else:
        return None
    if not 0 <= launch.rank < launch.world_size or launch.local_rank < 0:
        raise LaunchError(f"{launch.launcher} says rank {launch.rank} of {launch.world_size}, "
                          f"local rank {launch.local_rank}")
    return launch


def launch_for(world_size: int, env: Mapping[str, str] | None = None) -> Launch | None:
    """``from_environment``, held to the world size a job was asked for: a launch of another size
    is a ``LaunchError`` (one line), as a partial environment is."""
    launch = from_environment(env)
    if launch is not None and launch.world_size != world_size:
        raise LaunchError(f"--world-size {world_size}, but {launch.launcher} started {launch.world_size} ranks")
    return launch


FAILED, RECORDED = "cs336/failed", "cs336/failure-recorded"     # the group's store keys for a failure
WATCH_S = 0.2                   # how often each rank looks for another's failure


def run_launched(fn: Callable[..., Any], launch: Launch, args: tuple = (), *, backend: str = "gloo",
                 collective_timeout_s: float = 120,
                 on_failure: Callable[[RankFailed], None] | None = None) -> list[Any] | None:
    """This rank's part of a job a launcher started: join the process group at ``launch``, call
    ``fn(rank, world_size, *args)``, and gather every rank's value to rank 0, which gets them in rank
    order (the others get None). Under NCCL a rank computes on ``cuda:local_rank``.

    A failure ends every rank at once, as ``launcher.run_on_ranks`` ends the ranks it spawned: the
    rank that raised puts its traceback in the group's store (the first failure wins), and each
    rank's watcher, which looks for one every ``WATCH_S``, ends its process, wherever its main thread
    waits (a collective the failed rank will never join). Rank 0 first calls ``on_failure`` with the
    ``RankFailed`` naming the rank, so the job records it; then every rank exits, with status 0 where
    ``on_failure`` recorded it, else 1. A rank that dies without a word leaves the others' next
    collective to end at ``collective_timeout_s``, which is a failure of theirs."""
    if backend not in ("gloo", "nccl"):
        raise ValueError(f"backend must be gloo or nccl, got {backend!r}")
    device_id = None
    if backend == "nccl":
        device_id = torch.device("cuda", launch.local_rank)
        torch.cuda.set_device(device_id)
    else:           # the ranks on this host share its cores
        torch.set_num_threads(cpu_threads_per_rank(max(1, launch.world_size // max(1, len(launch.hosts)))))
    timeout = datetime.timedelta(seconds=collective_timeout_s)
    dist.init_process_group(backend, init_method=launch.init_method, rank=launch.rank,
                            world_size=launch.world_size, timeout=timeout,
                            **({"device_id": device_id} if device_id is not None else {}))
    store = dist.distributed_c10d._get_default_store()      # the group's own rendezvous store
    stop = threading.Event()
    watcher = threading.Thread(target=_watch, args=(store, launch.rank, stop, on_failure, collective_timeout_s),
                               daemon=True)
    watcher.start()
    try:
        value = fn(launch.rank, launch.world_size, *args)
    except Exception as exc:  # noqa: BLE001 - every rank must hear which one failed, and why
        _report(store, launch.rank, f"{exception_line(exc)}\n{traceback.format_exc()}")
        watcher.join()          # it ends the process
        raise
    gathered: list[Any] = [None] * launch.world_size
    try:
        dist.all_gather_object(gathered, value)
    except Exception as exc:  # noqa: BLE001
        _report(store, launch.rank, f"{exception_line(exc)}\n{traceback.format_exc()}")
        watcher.join()
        raise
    dist.barrier()              # nobody leaves (and takes the store down) before every rank has gathered
    stop.set()
    watcher.join()
    dist.destroy_process_group()
    return gathered if launch.rank == 0 else None


def _report(store, rank: int, message: str) -> None:
    """Put this rank's failure in the store, unless another's is there first."""
    store.compare_set(FAILED, "", json.dumps([rank, message]))


def _watch(store, rank: int, stop: threading.Event, on_failure, timeout_s: float) -> None:
    """Until ``stop``: look for a failure; on one, record it (rank 0) and end this process."""
    while not stop.wait(WATCH_S):
        try:
            if not store.check([FAILED]):
                continue
            failed_rank, message = json.loads(store.get(FAILED))
        except Exception:  # noqa: BLE001 - the store went with rank 0 at the job's end
            return
        failure = RankFailed(failed_rank, message)
        recorded = False
        if rank == 0:
            if on_failure is not None:
                try:
                    on_failure(failure)
                    recorded = True
                except Exception:  # noqa: BLE001 - the failure is what must come out
                    traceback.print_exc()
            print(f"{failure}".splitlines()[0], file=sys.stderr)
            store.set(RECORDED, "1" if recorded else "0")
        else:
            try:
                store.wait([RECORDED], datetime.timedelta(seconds=timeout_s))
                recorded = store.get(RECORDED) == b"1"
            except Exception:  # noqa: BLE001 - rank 0 is gone: nothing recorded the failure
                pass
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0 if recorded else 1)


def leave(code: int = 0) -> None:
    """End a launched rank once its work is written, without the interpreter's teardown: clearing
    torch's and Triton's modules took about a second a rank (``launcher._leave`` says the same of
    spawned ones) and printed nanobind's leak warnings into every job's log."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
