"""A job's ranks as a launcher starts them (tests/distributed/test_ranks.py): each rank all-reduces
its rank + 1 and returns the sum and its own rank; rank 0 prints what ``run_launched`` gathered as
one JSON line. ``FAIL_RANK`` makes that rank raise before the all-reduce, where the others wait in
it; rank 0 then prints the failure it was handed to record."""
import json
import os

import torch
import torch.distributed as dist

from cs336_systems.distributed.ranks import from_environment, run_launched


def part(rank, world_size, fail_rank):
    if rank == fail_rank:
        raise RuntimeError(f"rank {rank} was told to fail")
    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t)
    return {"rank": rank, "sum": t.item(), "world_size": world_size}


def record(failure):
    print(json.dumps({"failed_rank": failure.rank, "detail": failure.detail.splitlines()[0]}), flush=True)


if __name__ == "__main__":
    launch = from_environment()
    gathered = run_launched(part, launch, args=(int(os.environ.get("FAIL_RANK", "-1")),), collective_timeout_s=60,
                            on_failure=record)
    if launch.rank == 0:
        print(json.dumps({"gathered": gathered, "launch": launch.as_dict()}))
