"""What our kernels ran: the records say it (on the CPU, the kernels in Triton's interpreter), and a
report knows only what they say."""
import json
import random

import torch

from cs336_systems.attention import bench, check, flash_record
from cs336_systems.attention.flash_record import ran
from cs336_systems.records import make_record

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


# --- new records say what ran ---------------------------------------------------------------------

def _assert_says_what_ran(launch: dict, backward: str = "dkdv+dq"):
    for fact in ("path", "tiles", "tiles_from", "programs", "order", "products", "splits", "backward"):
        assert launch.get(fact) is not None, fact
    assert launch["backward"] == backward
    if backward == "dkdv+dq":
        assert launch["delta"] == "triton" and len(launch["backward_splits"]) == 2
        assert set(launch["tiles"]) == set(launch["programs"]) == {"forward", "dkdv", "dq"}
    else:
        assert launch["backward_arithmetic"] == "fp32" and set(launch["tiles"]) == {"forward"}


def test_every_grid_record_of_ours_says_what_ran(tmp_path):
    out = tmp_path / "row.json"
    assert bench.main(["grid", "--impl", "ours", "--dtype", "fp32", "--d", "16", "--seqs", "24", "40",
                       "--device", DEVICE, "--out", str(out)]) == 0
    for r in json.loads(out.read_text()):
        launch = r["metrics"]["launch"]
        _assert_says_what_ran(launch)
        assert launch["order"] == "longest-first" and launch["path"] == "plan"
        # The program counts the record gives are what the tiles and splits make.
        assert launch["programs"] == flash_record.programs_of(launch["tiles"], 1, r["params"]["seq"], r["params"]["seq"],
                                                              launch["splits"], launch["backward_splits"])
        said = {k: v for k, v in launch.items() if k in flash_record.FACTS and v is not None}
        assert {k: v for k, v in ran(r)["facts"].items() if k in said} == said


def test_the_leaderboard_and_the_checks_say_what_ran(tmp_path):
    board = bench.leaderboard(DEVICE, shape=(1, 40, 16), warmup_ms=1, rep_ms=3)
    for r in board:
        if r["params"]["impl"] == "ours":
            _assert_says_what_ran(r["metrics"]["launch"])
            assert r["metrics"]["launch"]["path"] == ("compiled-plan" if r["params"]["compiled"] else "plan")
        else:
            assert "launch" not in r["metrics"]
    out = tmp_path / "checks.json"
    assert check.main(["--shape", "1", "24", "16", "--bench-shape", "1", "32", "16", "--dtypes", "fp32",
                       "--device", DEVICE, "--out", str(out)]) == 0
    for r in json.loads(out.read_text()):
        launch, function = r["metrics"]["launch"], r["params"]["function"]
        if function == "pytorch":
            assert launch["path"] == "pytorch" and launch["backward"] == "compiled-pytorch"
        else:
            _assert_says_what_ran(launch, flash_record.BACKWARD_OF[function])
            assert launch["order"] == flash_record.order(r["params"]["causal"])
        if r["params"]["kind"] == "time":
            assert r["metrics"]["float32_matmul_precision"] == torch.get_float32_matmul_precision()


def test_a_compiled_call_is_described_by_the_plan_its_custom_op_takes():
    # Under torch.compile the back end calls the op (attention.flash_op), whose body takes the
    # eager call's plan: the description is the eager one but for the path's name.
    q = torch.randn(2, 100, 32, device=DEVICE)
    eager, compiled = (flash_record.describe(q, q, q, True, compiled=c) for c in (False, True))
    assert compiled["path"] == "compiled-plan" and eager["path"] == "plan"
    assert {k: v for k, v in compiled.items() if k != "path"} == {k: v for k, v in eager.items() if k != "path"}
    assert compiled["programs"] == flash_record.programs_of(compiled["tiles"], 2, 100, 100, compiled["splits"],
                                                            compiled["backward_splits"])


def test_the_plain_path_counts_heads_as_entries():
    """A (batch, heads, N, d) input the plan does not take (a strided last dimension: the plain
    launches copy it): its programs are counted over batch x heads entries, as the kernels run them,
    and the plan's count of the same shape, contiguous, agrees."""
    q = torch.randn(2, 3, 100, 32, device=DEVICE)
    strided = q.transpose(-1, -2).contiguous().transpose(-1, -2)
    plain, planned = flash_record.describe(strided, strided, strided, True), flash_record.describe(q, q, q, True)
    assert plain["path"] == "plain" and planned["path"] == "plan"
    assert plain["programs"] == flash_record.programs_of(plain["tiles"], 6, 100, 100)
    assert planned["programs"] == flash_record.programs_of(planned["tiles"], 6, 100, 100, planned["splits"],
                                                           planned["backward_splits"])


def test_the_order_a_record_states_is_the_kernels():
    # The kernels take tiles through _tile_and_batch, which reverses the query tiles' order when
    # HEAVY_LAST (the forward and dQ pass CAUSAL): without that switch "longest-first" would be false.
    from cs336_systems.attention import flash_forward

    assert "HEAVY_LAST" in flash_forward._tile_and_batch.arg_names
    assert "HEAVY_LAST" in flash_forward._tile_split_and_batch.arg_names
    assert (flash_record.order(True), flash_record.order(False)) == ("longest-first", "index")


def test_the_pytorch_backward_computes_in_fp32_whatever_the_dtype(seed):
    from cs336_systems.attention.backward import flash_backward

    _check_fp32_backward(flash_backward, seed)


def _check_fp32_backward(flash_backward, seed):
    g = torch.Generator().manual_seed(seed)
    q, k, v, o, do = (torch.randn(1, 24, 16, generator=g).bfloat16() for _ in range(5))
    lse = torch.randn(1, 24, generator=g)
    low = flash_backward(q, k, v, o, do, lse, True)
    high = flash_backward(*(t.float() for t in (q, k, v, o, do)), lse, True)
    assert all(torch.equal(a, b.bfloat16()) for a, b in zip(low, high))


# --- what a report knows, on synthetic records ------------------------------------------------------

def _record(commit: str, launch: dict | None, rng=None, **params) -> dict:
    p = {"impl": "ours", "dtype": rng.choice(["fp32", "bf16"]), "d": rng.choice([16, 32, 64, 128]),
         "seq": rng.choice([128, 1024, 8192]), "batch": 1, "causal": True, "pass": "forward", **params}
    record = make_record("B5", p, "ok", {"ms": 1.0, **({"launch": launch} if launch else {})})
    record["provenance"].update(commit=commit, dirty=False)
    return record


def test_a_fact_comes_from_the_record_else_nowhere(seed):
    rng = random.Random(seed)
    said = {"tiles": {"forward": {"block_q": 64, "block_k": 64}, "dkdv": {"block_q": 32, "block_k": 32},
                      "dq": {"block_q": 64, "block_k": 64}}, "products": "tf32x3", "splits": 2,
            "backward_splits": [1, 4], "sms": 132}
    record = _record("6a1d6b007b78ec035b0702584f9aa9b66fc813c8", said, rng=rng)
    facts = ran(record)["facts"]
    assert {k: facts[k] for k in said} == said
    assert "order" not in facts and "backward" not in facts           # the record does not say them
    # the grid, which the record does not give, counted from its tiles and splits: a query tile's
    # keys over two programs in the forward, the dQ pass's over four
    n = record["params"]["seq"]
    assert facts["programs"] == {"forward": 2 * -(-n // 64), "dkdv": -(-n // 32), "dq": 4 * -(-n // 64)}
    assert ran(_record("6a1d6b007b78ec035b0702584f9aa9b66fc813c8", None, rng=rng))["facts"] == {}


def test_what_the_tree_runs_is_its_code(monkeypatch):
    # flash_record.TREE, against which reports compare the kernels of older records.
    from cs336_systems.attention import flash_plan, flash_tiles
    from cs336_systems.attention.tuned_tiles import TUNED

    tree = flash_record.TREE
    assert tree["order"] == flash_record.order(True)
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    monkeypatch.setattr(flash_tiles, "_tf32_tensor_cores", lambda: True)
    assert flash_tiles._precision(torch.float32) == tree["products"]
    for dtype, name in ((torch.float32, "fp32"), (torch.bfloat16, "bf16")):
        for d in (16, 32, 64, 128):
            chosen = flash_tiles.choose_tiles(d, dtype)
            tuned = TUNED.get(f"{name}_d{d}")
            expect = flash_tiles.Tiles.from_json(tuned["tiles"]) if tuned else flash_tiles.default_tiles(d, dtype)
            assert chosen == expect and flash_record.tiles_from(d, dtype) in tree["tiles_from"]
    # D in a Triton kernel, then the dK/dV and the dQ kernels.
    assert "_delta_kernel" in flash_plan.backward_delta.__code__.co_names and tree["delta"] == "triton"
    assert {"launch_dkdv", "launch_dq"} <= set(flash_plan.backward_kernels.__code__.co_names)
    assert tree["backward"] == "dkdv+dq"


def test_older_kernels_are_named_as_not_the_trees(seed):
    from cs336_systems.report import what_ran

    rng = random.Random(seed)
    # records that say what kernels from before the plans ran: tiles in index order, from one fixed set
    # per shape, IEEE fp32 products, D in PyTorch
    before = {"order": "index", "tiles_from": "fixed", "products": "ieee", "delta": "pytorch", "backward": "dkdv+dq",
              "splits": 1, "tiles": {"forward": {"block_q": 64, "block_k": 64}}}
    old = [_record("1" * 40, before, rng=rng, dtype="fp32") for _ in range(3)]
    for r in old:
        r["provenance"]["gpu"] = "NVIDIA H200"
    differs = {x.fact: x for x in what_ran.what_ran(old).tree.differs}
    assert set(differs) == {"order", "tiles_from", "products", "delta"}
    assert differs["products"].ran == ["IEEE FMA"] and differs["products"].tree == ["3xTF32"]
    # The tree's own facts, said by the records: nothing differs; on a card without a TF32 peak in
    # the table, the fp32 products are not compared.
    said = {"order": "longest-first", "tiles_from": "tuned", "products": "tf32x3", "delta": "triton", "backward": "dkdv+dq",
            "tiles": {"forward": {"block_q": 64, "block_k": 64}}, "splits": 1}
    same = what_ran.what_ran([_record("0" * 40, said, rng=rng, dtype="fp32")]).tree
    assert same.differs == [] and "fp32 products" not in same.compared
    assert what_ran.what_ran([_record("0" * 40, None, rng=rng)]).tree is None
