"""The tile tuner: its candidates obey the causal split, its check catches wrong launches, and
its committed config is what the kernels then use."""
import random

import pytest
import torch

from cs336_systems.attention import flash_triton as ft
from cs336_systems.attention import tune
from cs336_systems.attention.inputs import HEAD_DIMS


@pytest.mark.parametrize("kernel", tune.KERNELS)
def test_every_candidate_is_a_valid_launch(kernel):
    found = tune.candidates(kernel)
    assert len(found) == len({(t.block_q, t.block_k, t.num_warps, t.num_stages) for t in found}) > 10
    for t in found:
        big, small = (t.block_k, t.block_q) if kernel == "dkdv" else (t.block_q, t.block_k)
        assert big % small == 0


def test_tiles_refuse_a_split_the_kernels_cannot_walk():
    ok = ft.KernelTiles(64, 32)
    with pytest.raises(ValueError, match="dkdv tiles"):
        ft.Tiles(ok, ft.KernelTiles(64, 32), ok)           # dK/dV needs block_k a multiple of block_q
    with pytest.raises(ValueError, match="forward tiles"):
        ft.Tiles(ft.KernelTiles(32, 64), ft.KernelTiles(32, 64), ok)


def _problem():
    shape = (1, random.choice([96, 128]), 16)
    return tune.Problem(shape, torch.float32, True, torch.device("cuda" if torch.cuda.is_available() else "cpu"),
                        seed=random.randrange(1000))


def test_a_right_launch_passes_and_an_unwritten_output_fails(monkeypatch):
    problem = _problem()
    _, errors = problem.run("dq", ft.KernelTiles(64, 32))
    assert errors["dq"] < tune.TOLERANCE["fp32"]
    _, errors = problem.run("dkdv", ft.KernelTiles(32, 64))
    assert max(errors.values()) < tune.TOLERANCE["fp32"]
    monkeypatch.setattr(ft, "launch_dq", lambda *args, **kwargs: None)     # writes nothing
    _, errors = problem.run("dq", ft.KernelTiles(64, 32))
    assert errors["dq"] == float("inf")


def test_written_config_is_read_back_and_keeps_other_entries(tmp_path):
    path = tmp_path / "tuned_tiles.py"
    first = ft.Tiles(ft.KernelTiles(128, 64, 8, 3), ft.KernelTiles(32, 128, 4, 2), ft.KernelTiles(128, 32, 4, 4))
    tune.write_config("bf16_d64", first, {"ms": {"forward": 1.0}}, path)
    second = ft.Tiles(ft.KernelTiles(128, 64, 8, 3), ft.KernelTiles(64, 128, 8, 3), ft.KernelTiles(128, 64, 8, 3))
    tune.write_config("bf16_d128", second, {"ms": {}}, path)
    namespace = {}
    exec(path.read_text(), namespace)
    assert set(namespace["TUNED"]) == {"bf16_d64", "bf16_d128"}
    assert ft.Tiles.from_json(namespace["TUNED"]["bf16_d64"]["tiles"]) == first
    assert ft.Tiles.from_json(namespace["TUNED"]["bf16_d128"]["tiles"]) == second


def test_committed_config_entries_are_valid_tiles():
    from cs336_systems.attention.tuned_tiles import TUNED

    for key, entry in TUNED.items():
        dtype, d = key.split("_d")
        assert dtype in tune.DTYPES and int(d) in HEAD_DIMS
        ft.Tiles.from_json(entry["tiles"])


def test_the_tuner_refuses_a_head_dimension_the_kernels_do_not_take(tmp_path, capsys):
    with pytest.raises(SystemExit):
        tune.main(["--shape", "1", "64", "20", "--out", str(tmp_path / "t.json")])
    assert "a head dimension our kernels take" in capsys.readouterr().err
