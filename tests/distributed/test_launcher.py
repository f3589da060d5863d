"""The launcher: results in rank order, a working process group, and failures that name the rank."""
import os
import time

import pytest
import torch
import torch.distributed as dist

from cs336_systems.distributed.launcher import RankFailed, run_on_ranks


def _sum_of_ranks(rank, world_size, scale):
    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t)
    return {"rank": rank, "world": dist.get_world_size(), "sum": t.item() * scale}


def _rank_one_raises(rank, world_size):
    if rank == 1:
        raise ValueError("deliberate failure on rank one")
    return rank


def _rank_one_runs_out_of_memory(rank, world_size):
    if rank == 1:
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB.\nsecond line")
    return rank


def _rank_zero_dies(rank, world_size):
    if rank == 0:
        os._exit(3)
    time.sleep(30)


def _rank_one_waits_forever(rank, world_size):
    # Both ranks finish joining the group first: under load rank 0 could otherwise return and exit
    # while rank 1's Gloo connections were still being made, and rank 1 would fail to connect
    # instead of running past the timeout this test is about.
    dist.barrier()
    if rank == 1:
        time.sleep(60)
    return rank


def test_values_come_back_in_rank_order_and_collectives_work():
    out = run_on_ranks(_sum_of_ranks, 3, args=(2.0,))
    assert [o["rank"] for o in out] == [0, 1, 2]
    assert {o["world"] for o in out} == {3}
    assert {o["sum"] for o in out} == {2.0 * (1 + 2 + 3)}


def test_an_exception_names_its_rank_and_carries_the_traceback():
    with pytest.raises(RankFailed) as info:
        run_on_ranks(_rank_one_raises, 2)
    assert info.value.rank == 1
    assert "deliberate failure on rank one" in str(info.value) and "Traceback" in info.value.detail


def test_a_ranks_oom_is_recorded_as_oom_with_its_own_line():
    from cs336_systems.timing import failure_status

    with pytest.raises(RankFailed) as info:
        run_on_ranks(_rank_one_runs_out_of_memory, 2)
    assert "Traceback" in info.value.detail
    assert failure_status(info.value) == (
        "oom", "RankFailed: rank 1 failed: OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.")


def test_a_dead_process_is_reported_not_waited_for():
    start = time.monotonic()
    with pytest.raises(RankFailed, match="rank 0 failed: process exited with code 3"):
        run_on_ranks(_rank_zero_dies, 2, timeout_s=60)
    assert time.monotonic() - start < 25


@pytest.mark.slow  # waits out its 4 s timeout
def test_a_rank_that_never_finishes_times_out():
    # Generous enough that rank 0 has started and answered even on a loaded machine.
    with pytest.raises(RankFailed, match=r"no result within 4 s \(ranks still running: \[(0, )?1\]\)"):
        run_on_ranks(_rank_one_waits_forever, 2, timeout_s=4)


def test_bad_arguments_are_refused_up_front():
    with pytest.raises(ValueError, match="world_size"):
        run_on_ranks(_sum_of_ranks, 0)
    with pytest.raises(ValueError, match="backend"):
        run_on_ranks(_sum_of_ranks, 2, backend="mpi")
    if torch.cuda.device_count() < 64:
        with pytest.raises(ValueError, match="needs 64 GPUs"):
            run_on_ranks(_sum_of_ranks, 64, backend="nccl")
