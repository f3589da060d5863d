"""What our kernels ran: the records say it (on the CPU, the kernels in Triton's interpreter), and for
records made before they did, ``flash_record.CODE_AT`` says what the code of their commit did, which
is checked here against that code (``git show``) where the history is at hand."""
import importlib.util
import json
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from cs336_systems.attention import bench, check, flash_record
from cs336_systems.attention.flash_record import CODE_AT, UNREADABLE, ran
from cs336_systems.records import make_record

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
ROOT = Path(__file__).resolve().parents[2]
KERNELS = "src/cs336_systems/attention/flash_triton.py"


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
        what = ran(r)
        assert set(what["source"].values()) == {"record"} and what["facts"]["products"] == launch["products"]


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


# --- records made before they said it: what the code of their commit did -------------------------

def _git(*args) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True)
    except FileNotFoundError:
        pytest.skip("no git here")


def _source_at(commit: str, path: str) -> str:
    shown = _git("show", f"{commit}:{path}")
    if shown.returncode:
        pytest.skip(f"{commit[:7]} is not in this checkout's history: {shown.stderr.strip()}")
    return shown.stdout


def _module_at(commit: str, path: str, tmp_path: Path, monkeypatch, replace: dict | None = None):
    """``path`` as it was at ``commit``, imported under a name of its own (its imports resolve to
    today's modules, or to ``replace``'s)."""
    name = f"{Path(path).stem}_at_{commit[:7]}"
    file = tmp_path / f"{name}.py"
    file.write_text(_source_at(commit, path))
    for module, value in (replace or {}).items():
        monkeypatch.setitem(sys.modules, module, value)
    spec = importlib.util.spec_from_file_location(name, file)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, name, module)
    spec.loader.exec_module(module)
    return module


BEFORE_PLANS = [c for c, facts in CODE_AT.items() if facts is flash_record._before_plans]


@pytest.mark.parametrize("commit", BEFORE_PLANS)
def test_what_the_kernels_before_plans_ran_is_their_code(commit, tmp_path, monkeypatch, seed):
    old = _module_at(commit, KERNELS, tmp_path, monkeypatch)
    monkeypatch.setenv("TRITON_INTERPRET", "0")          # choose_tiles as on a GPU
    for dtype_name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        for d in (16, 32, 64, 128):
            t = old.choose_tiles(d, dtype)
            facts = flash_record._before_plans({"dtype": dtype_name, "d": d, "seq": 1, "batch": 1, "causal": True,
                                                "compiled": False})
            expect = {"forward": (t.forward_q, t.forward_k), "dkdv": (t.backward, t.backward),
                      "dq": (t.backward, t.backward)}
            for kernel, (block_q, block_k) in expect.items():
                assert facts["tiles"][kernel] == {"block_q": block_q, "block_k": block_k, "num_warps": t.num_warps,
                                                  "num_stages": t.num_stages}, (dtype_name, d, kernel)
            assert facts["products"] == old._precision(dtype)
    # Programs in index order (no _tile_and_batch: the grid's first axis is the tile), no split
    # launches, D in PyTorch, and nothing that sets the float32 matmul precision.
    assert not hasattr(old, "_tile_and_batch") and "splits" not in old.flash_forward_triton.__code__.co_varnames
    source = _source_at(commit, KERNELS)
    assert "q_tile, b = tl.program_id(0), tl.program_id(1)" in source
    assert "delta = (grad_out.float() * out.float()).sum(-1)" in source
    assert _git("grep", "-q", "-e", "set_float32_matmul_precision", "-e", "allow_tf32", commit, "--", "src").returncode == 1
    backward = _module_at(commit, "src/cs336_systems/attention/backward.py", tmp_path, monkeypatch)
    _check_fp32_backward(backward.flash_backward, seed)


def test_what_the_kernels_of_6a1d6b0_ran_is_their_code(tmp_path, monkeypatch):
    commit = "6a1d6b007b78ec035b0702584f9aa9b66fc813c8"
    assert CODE_AT[commit] is flash_record._plans_longest_first
    tuned = _module_at(commit, "src/cs336_systems/attention/tuned_tiles.py", tmp_path, monkeypatch)
    old = _module_at(commit, KERNELS, tmp_path, monkeypatch,
                     replace={"cs336_systems.attention.tuned_tiles": tuned})
    assert "HEAVY_LAST" in old._tile_and_batch.arg_names
    for dtype_name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        for d in (16, 32, 64, 128):
            facts = flash_record._plans_longest_first({"dtype": dtype_name, "d": d, "seq": 1, "batch": 1,
                                                       "causal": True, "compiled": False})
            assert facts["tiles_from"] == ("tuned" if f"{dtype_name}_d{d}" in tuned.TUNED else "default")
            # The fused backward ran only for tiles without a dQ tile: none had none.
            assert old.default_tiles(d, dtype).dq is not None
    assert all(entry["tiles"].get("dq") for entry in tuned.TUNED.values())
    assert hasattr(old, "_delta_kernel") and "_delta_kernel" in _source_at(commit, KERNELS)
    # The compiled call's plain launches: no splits unless asked.
    import inspect
    assert inspect.signature(old.flash_forward_triton).parameters["splits"].default == 1
    assert inspect.signature(old.flash_backward_triton).parameters["splits"].default == (1, 1)


@pytest.mark.parametrize("commit", sorted(UNREADABLE))
def test_an_unreadable_commit_is_not_in_the_history(commit):
    if _git("rev-parse", "--is-inside-work-tree").returncode:
        pytest.skip("no git history here")
    assert _git("cat-file", "-e", f"{commit}^{{commit}}").returncode != 0


# --- the conditioning rule on synthetic records -----------------------------------------------------

def _record(commit: str, launch: dict | None, dirty=False, rng=None, **params) -> dict:
    p = {"impl": "ours", "dtype": rng.choice(["fp32", "bf16"]), "d": rng.choice([16, 32, 64, 128]),
         "seq": rng.choice([128, 1024, 8192]), "batch": 1, "causal": True, "pass": "forward", **params}
    record = make_record("B5", p, "ok", {"ms": 1.0, **({"launch": launch} if launch else {})})
    record["provenance"].update(commit=commit, dirty=dirty)
    return record


def test_a_fact_comes_from_the_record_else_from_its_commits_code_else_nowhere(seed):
    rng = random.Random(seed)
    old = BEFORE_PLANS[0]
    said = {"tiles": {"forward": {"block_q": 64, "block_k": 64}, "dkdv": {"block_q": 32, "block_k": 32},
                      "dq": {"block_q": 64, "block_k": 64}}, "products": "tf32x3", "splits": 2,
            "backward_splits": [1, 4], "sms": 132}
    # The record says tiles, products and splits; the order and the backward come from the commit.
    what = ran(_record("6a1d6b007b78ec035b0702584f9aa9b66fc813c8", said, rng=rng))
    assert {k: what["source"][k] for k in ("tiles", "products", "splits", "order", "backward")} == {
        "tiles": "record", "products": "record", "splits": "record",
        "order": "6a1d6b007b78ec035b0702584f9aa9b66fc813c8", "backward": "6a1d6b007b78ec035b0702584f9aa9b66fc813c8"}
    assert what["facts"]["products"] == "tf32x3" and what["facts"]["order"] == "longest-first"
    # A record that says nothing, from a commit the table knows: every fact from that code, and the
    # grid counted from its tiles.
    record = _record(old, None, rng=rng)
    what = ran(record)
    assert set(what["source"].values()) == {old} and what["facts"]["order"] == "index"
    n, tiles = record["params"]["seq"], what["facts"]["tiles"]
    assert what["facts"]["programs"] == {"forward": -(-n // tiles["forward"]["block_q"]),
                                         "dkdv": -(-n // tiles["dkdv"]["block_k"]), "dq": -(-n // tiles["dq"]["block_q"])}
    # From a work tree with uncommitted changes, or an unknown commit: nothing is known.
    assert ran(_record(old, None, dirty=True, rng=rng))["facts"] == {}
    unknown = ran(_record(sorted(UNREADABLE)[0], None, rng=rng))
    assert unknown["facts"] == {} and unknown["unreadable"] == UNREADABLE[sorted(UNREADABLE)[0]]


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
    from cs336_systems.report import b5

    rng = random.Random(seed)
    old = [_record(BEFORE_PLANS[0], None, rng=rng, dtype="fp32") for _ in range(3)]
    for r in old:
        r["provenance"]["gpu"] = "NVIDIA H200"
    differs = {x["fact"]: x for x in b5.what_ran(old)["tree"]["differs"]}
    assert set(differs) == {"order", "tiles_from", "products", "delta"}
    assert differs["products"]["ran"] == ["IEEE FMA"] and differs["products"]["tree"] == ["3xTF32"]
    # The tree's own facts, said by the records: nothing differs; on a card without a TF32 peak in
    # the table, the fp32 products are not compared.
    said = {"order": "longest-first", "tiles_from": "tuned", "products": "tf32x3", "delta": "triton", "backward": "dkdv+dq",
            "tiles": {"forward": {"block_q": 64, "block_k": 64}}, "splits": 1}
    same = b5.what_ran([_record("0" * 40, said, rng=rng, dtype="fp32")])["tree"]
    assert same["differs"] == [] and "fp32 products" not in same["compared"]
    assert b5.what_ran([_record("0" * 40, None, rng=rng)])["tree"] is None
