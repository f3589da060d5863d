"""distributed.placement: the Slurm profile's `launch` block read, a job's ranks split over nodes,
and what the job asks of Slurm and runs."""
import pytest

from cs336_systems.distributed import placement
from cs336_systems.distributed.placement import Placement, PlacementError, Settings, Unplaced, place


def test_no_block_is_torchs_launcher_on_one_node():
    assert placement.settings(None) == Settings("torchrun", 1, 0)
    assert placement.command(4, Settings()) == "python -m torch.distributed.run --standalone --nproc-per-node 4"
    assert placement.rule_resources(lambda w: 4, lambda w: False, Settings()) == {}


def test_config_strings_are_read_as_numbers():
    """`--config launch={nodes: 2}` arrives as strings (Snakemake reads --config with YAML's base loader)."""
    assert placement.settings({"launcher": "srun", "nodes": "2", "ranks_per_node": "2"}) == Settings("srun", 2, 2)


@pytest.mark.parametrize("block, says", [
    ({"nodes": 0, "launcher": "srun"}, "launch.nodes: 0 is not a whole number of at least 1"),
    ({"nodes": "two", "launcher": "srun"}, "launch.nodes: 'two'"),
    ({"nodes": True, "launcher": "srun"}, "launch.nodes: True"),
    ({"ranks_per_node": -1, "launcher": "srun"}, "launch.ranks_per_node: -1 is not a whole number of at least 0"),
    ({"launcher": "mpirun"}, "launch.launcher: 'mpirun' is not allowed (allowed: torchrun, srun)"),
    ({"node": 2}, "unknown key 'node' (allowed: launcher, nodes, ranks_per_node)"),
    ({"nodes": 2}, "2 nodes need launch.launcher srun"),
    ([2], "is not a mapping"),
])
def test_a_bad_block_is_one_line_naming_the_key(block, says):
    with pytest.raises(PlacementError) as error:
        placement.settings(block)
    assert says in str(error.value) and "\n" not in str(error.value)


@pytest.mark.parametrize("world, nodes, per_node, expected", [
    (2, 2, 0, Placement(2, 1)),       # one rank a node
    (4, 2, 0, Placement(2, 2)),       # two a node
    (6, 2, 0, Placement(2, 3)),
    (3, 2, 0, Placement(1, 3)),       # an odd world stays on one node
    (6, 4, 0, Placement(3, 2)),       # as many of the nodes as split it evenly
    (2, 4, 0, Placement(2, 1)),       # never more nodes than ranks
    (4, 1, 0, Placement(1, 4)),
    (4, 2, 2, Placement(2, 2)),
])
def test_ranks_split_evenly_over_the_most_nodes(world, nodes, per_node, expected):
    assert place(world, Settings("srun", nodes, per_node)) == expected


def test_a_world_the_nodes_cannot_hold_is_unplaced_with_why():
    where = place(6, Settings("srun", 2, 2))
    assert isinstance(where, Unplaced)
    assert where.reason == ("6 ranks do not fit evenly on at most 2 nodes of at most 2 ranks each "
                            "(launch.nodes, launch.ranks_per_node)")
    assert placement.unplaced_reason(6, Settings("srun", 2, 2)) == where.reason
    assert placement.unplaced_reason(4, Settings("srun", 2, 2)) is None
    assert placement.unplaced_reason(6, Settings()) is None
    assert placement.command(6, Settings("srun", 2, 2)) == "python"
    assert placement.skip_option(6, Settings("srun", 2, 2)) == f"--skip '{where.reason}'"
    assert placement.skip_option(4, Settings("srun", 2, 2)) == ""
    assert placement.slurm_resources(where, gpus=True) == {
        "mpi": "", "nodes": 1, "tasks": 0, "tasks_per_node": 0, "tasks_per_gpu": 0, "gres": ""}


def test_srun_starts_one_task_a_rank_in_the_jobs_shape():
    chosen = Settings("srun", 2, 0)
    assert placement.command(4, chosen, cpus_per_task=4) == (
        "srun --nodes 2 --ntasks-per-node 2 --cpus-per-task 4 --kill-on-bad-exit=1 python")
    assert placement.command(2, chosen) == "srun --nodes 2 --ntasks-per-node 1 --kill-on-bad-exit=1 python"


def test_the_plugins_resources():
    """Several ranks a node: tasks_per_node (the plugin refuses one); one a node: tasks. GPUs a node."""
    assert placement.slurm_resources(Placement(2, 2), gpus=True) == {
        "mpi": "srun", "nodes": 2, "tasks": 0, "tasks_per_node": 2, "tasks_per_gpu": 0, "gres": "gpu:2"}
    assert placement.slurm_resources(Placement(2, 1), gpus=False) == {
        "mpi": "srun", "nodes": 2, "tasks": 2, "tasks_per_node": 0, "tasks_per_gpu": 0, "gres": ""}
    found = placement.rule_resources(lambda w: w["world"], lambda w: w["backend"] == "nccl", Settings("srun", 2, 0))
    assert set(found) == set(placement.SLURM_KEYS)
    assert {k: f({"world": "4", "backend": "nccl"}) for k, f in found.items()} == placement.slurm_resources(
        Placement(2, 2), gpus=True)
