"""What our FlashAttention kernels ran, for the records that time or check them and the reports that
read those records.

A record of our kernels carries ``launch`` (``describe``): the path the call took, each kernel's
tiles and program count, the SM count, the forward's key splits, the backward's (dK/dV, dQ)
slices, how fp32 products were computed, the order the programs take their tiles in, how
D = rowsum(dO ∘ O) was computed and which backward ran. A report states a fact about our kernels
only as ``ran`` gives it: from the record, or, for records made before records said it, from
``CODE_AT``: what the kernels of the record's commit did, as ``git show <commit>:<path>`` shows it
(the tests compare each entry with that source where the history is at hand). A fact neither
gives is one the report says it does not know.

The kernels are imported by name (``_module``), not by an import statement: ``attention.bench``
imports this module for every B5 row, and a static import would make plain attention's and SDPA's
rows depend on our kernels' source (``pipeline.sources`` follows import statements).
"""
from __future__ import annotations

import importlib
import math

# The facts a record of our kernels may carry in ``launch``, in the order reports list them.
FACTS = ("path", "tiles", "tiles_from", "programs", "sms", "order", "products", "splits", "backward_splits", "delta",
         "backward", "backward_arithmetic")
# The backward a Function runs, by the name attention.check gives it.
BACKWARD_OF = {"triton": "dkdv+dq", "triton-pytorch-backward": "compiled-pytorch", "pytorch": "compiled-pytorch"}


def _module(name: str):
    return importlib.import_module(f"cs336_systems.attention.{name}")


def head_dims() -> tuple[int, ...]:
    """The head dimensions our kernels take (``attention.inputs.HEAD_DIMS``), read by name so that
    the benchmark's rows of other implementations do not depend on our kernels' source."""
    return tuple(_module("inputs").HEAD_DIMS)


def describe_head_dims() -> str:
    return _module("inputs").HEAD_DIMS_TEXT


def order(is_causal: bool) -> str:
    """How the kernels order their programs' tiles: under the causal mask the longest tiles first
    (``flash_forward._tile_and_batch``: the forward and dQ passes from the last query tile, dK/dV
    from the first key tile); without it every tile is as long, and tiles go in index order."""
    return "longest-first" if is_causal else "index"


def programs_of(tiles: dict, batch: int, n_q: int, n_k: int, splits: int = 1,
                backward_splits=(1, 1)) -> dict[str, int]:
    """Each kernel's program count for tiles in ``Tiles.to_json`` form (as ``_Plan.programs``):
    the forward one per query tile and key slice, dK/dV one per key tile and query slice, dQ one
    per query tile and key slice."""
    out = {"forward": math.ceil(n_q / tiles["forward"]["block_q"]) * batch * splits}
    if tiles.get("dkdv"):
        out["dkdv"] = math.ceil(n_k / tiles["dkdv"]["block_k"]) * batch * backward_splits[0]
    if tiles.get("dq"):
        out["dq"] = math.ceil(n_q / tiles["dq"]["block_q"]) * batch * backward_splits[1]
    return out


def tiles_from(d: int, dtype) -> str:
    """Where ``choose_tiles`` takes this shape's tiles from: the tuner's committed winners
    ("tuned", for this head dimension or the power of two it is padded to: ``tuned_key``), the
    defaults ("default"), or the interpreter's small tiles ("interpreter")."""
    tiles = _module("flash_tiles")
    if tiles.interpreting():
        return "interpreter"
    return "tuned" if tiles.tuned_key(d, dtype) else "default"


def describe(q, k, v, is_causal: bool, *, compiled: bool = False, backward: str = "dkdv+dq") -> dict:
    """What ``FlashAttentionTriton`` (``backward`` "dkdv+dq") or the Triton forward with the compiled
    PyTorch backward ("compiled-pytorch") runs for these (batch, N, d) or (batch, heads, N, d) inputs: the cached plan
    where the shape takes one ("plan": tiles fitted to the grid, split launches for short grids),
    else the plain launches ("plain": the tuned or default tiles, no splits). Under
    ``torch.compile`` the model back end calls the same launches through its custom op
    (``attention.flash_op``), so a compiled call takes the same plan ("compiled-plan") or plain
    launches ("compiled")."""
    plan = _module("flash_plan")
    launch = plan.describe_launch(q, k, v, is_causal)
    path = ("compiled-plan" if compiled else "plan") if launch else ("compiled" if compiled else "plain")
    if not launch:
        tiles = _module("flash_tiles").choose_tiles(q.shape[-1], q.dtype).to_json()
        launch = {"tiles": tiles, "splits": 1, "backward_splits": [1, 1],
                  # batch x heads entries where the inputs have a heads axis (the kernels' entries)
                  "programs": programs_of(tiles, math.prod(q.shape[:-2]), q.shape[-2], k.shape[-2]),
                  "sms": plan._sm_count(q.device) if q.device.type == "cuda" else None,
                  "products": plan._precision(q.dtype)}
    launch.update(path=path, tiles_from=tiles_from(q.shape[-1], q.dtype), order=order(is_causal), backward=backward)
    if backward == "dkdv+dq":
        launch["delta"] = "triton"          # flash_plan.backward_delta and the plan's delta launch
    else:                                   # the Triton backward's kernels do not run
        launch["tiles"] = {"forward": launch["tiles"]["forward"]}
        launch["programs"] = {"forward": launch["programs"]["forward"]}
        launch["backward_splits"] = None
        launch["backward_arithmetic"] = PYTORCH_BACKWARD_ARITHMETIC
    return launch


# ``attention.backward.flash_backward`` upcasts its inputs and runs every matmul in fp32, whatever
# their dtype; its matmuls then run as PyTorch's float32 matmul precision says.
PYTORCH_BACKWARD_ARITHMETIC = "fp32"


def describe_pytorch() -> dict:
    """What ``FlashAttentionPytorch`` runs: its forward's tiles in PyTorch, the compiled backward."""
    tiles = _module("flash_pytorch")
    return {"path": "pytorch", "tiles": {"forward": {"block_q": tiles.TILE_Q, "block_k": tiles.TILE_K}},
            "backward": "compiled-pytorch", "backward_arithmetic": PYTORCH_BACKWARD_ARITHMETIC}


# What this tree's kernels run, in the facts by which reports compare a record's kernels with them:
# causal tiles longest first, tiles from the tuner or the defaults, fp32 products as 3xTF32 on GPUs
# with TF32 tensor cores, D in a Triton kernel, then dK/dV and dQ (the tests hold each to the code).
TREE = {"order": order(True), "tiles_from": ("tuned", "default"), "products": "tf32x3", "delta": "triton",
        "backward": "dkdv+dq"}


# --- records made before they said what ran ------------------------------------------------------

def _fixed_tiles(dtype: str, d: int) -> dict:
    """``choose_tiles`` of 493df71 / 24a6f99 on a GPU: one tile set per (dtype, head dimension), a
    square tile for both backward kernels."""
    if dtype == "fp32":
        forward, backward, warps = (64, 32 if d == 128 else 64), 32, 4
    else:
        forward, backward, warps = (128, 64), 64 if d <= 64 else 32, 8 if d == 128 else 4

    def tile(block_q, block_k):
        return {"block_q": block_q, "block_k": block_k, "num_warps": warps, "num_stages": 2}
    return {"forward": tile(*forward), "dkdv": tile(backward, backward), "dq": tile(backward, backward)}


def _before_plans(shape: dict) -> dict:
    """The kernels of 493df71 and 24a6f99 (flash_triton.py): a (tiles, batch) grid whose programs
    take tiles in index order, ``_fixed_tiles``, fp32 products as IEEE FMA (``_precision``), no
    split launches, D = rowsum(dO ∘ O) in PyTorch, then the dK/dV and the dQ kernels. Nothing in
    the package sets PyTorch's float32 matmul precision, so it was the default, "highest"; the
    compiled PyTorch backward (``attention/backward.py``) upcasts to fp32."""
    return {"path": "plain", "tiles": _fixed_tiles(shape["dtype"], shape["d"]), "tiles_from": "fixed", "order": "index",
            "products": "ieee" if shape["dtype"] == "fp32" else "tf32", "splits": 1, "backward_splits": [1, 1],
            "delta": "pytorch", "backward": "dkdv+dq", "backward_arithmetic": "fp32",
            "float32_matmul_precision": "highest"}


def _plans_longest_first(shape: dict) -> dict:
    """The kernels of 6a1d6b0 (flash_triton.py), for what its records do not say: the longest causal
    tiles first (``_tile_and_batch``), tiles from the tuner for the two entries of its
    ``tuned_tiles.py`` (bf16, d = 64 and 128) and from ``default_tiles`` elsewhere, D by
    ``_delta_kernel``, and dK/dV then dQ (the fused backward ran only for tiles without a dQ tile,
    and neither the tuned nor the default tiles lacked one); the eager path's plan, the compiled
    call's plain launches without splits; the compiled PyTorch backward in fp32."""
    return {"path": "compiled" if shape["compiled"] else "plan", "order": order(shape["causal"]),
            "tiles_from": "tuned" if (shape["dtype"], shape["d"]) in (("bf16", 64), ("bf16", 128)) else "default",
            "delta": "triton", "backward": "dkdv+dq", "backward_arithmetic": "fp32",
            **({"splits": 1, "backward_splits": [1, 1]} if shape["compiled"] else {})}


# Commits of committed records of our kernels that predate the facts they lack, by full hash.
CODE_AT = {
    "493df71ec1f7c7342a59764da58f2a0ae4871231": _before_plans,
    "24a6f999d755f49243561872a5123685552b9bbb": _before_plans,
    "6a1d6b007b78ec035b0702584f9aa9b66fc813c8": _plans_longest_first,
}
# Commits of committed records whose code cannot be read here, and why.
UNREADABLE = {
    "9f0266d95a5b0cbb3ac3e0d6e2b5bd0ec03ba5d6": "not in this repository's history",
}


def shape_of(record: dict) -> dict:
    """(dtype, d, N, batch, causal, compiled) of a record of our kernels: a B5 grid point, the
    leaderboard case or a B3/B4 check."""
    p = record["params"]
    batch, seq, d = p["shape"] if "shape" in p else (p["batch"], p["seq"], p["d"])
    return {"dtype": p.get("dtype"), "d": d, "seq": seq, "batch": batch, "causal": bool(p.get("causal", True)),
            "compiled": bool(p.get("compiled", False))}


def ran(record: dict) -> dict:
    """What ran for one record of our kernels: ``facts`` (name -> value), ``source`` (name ->
    "record", or the commit whose code gave it), the record's ``commit``, and ``unreadable`` (why
    its commit's code cannot be read) where that is known. A commit's code is used only for a
    record made from a clean work tree; program counts follow from the tiles and splits."""
    prov = record.get("provenance") or {}
    commit = prov.get("commit") or ""
    launch = dict((record.get("metrics") or {}).get("launch") or {})
    params = record["params"]
    if params.get("function") in BACKWARD_OF:             # B3/B4 checks: the Function says which backward
        launch.setdefault("backward", BACKWARD_OF[params["function"]])
    if "float32_matmul_precision" in (record.get("metrics") or {}):
        launch.setdefault("float32_matmul_precision", record["metrics"]["float32_matmul_precision"])
    triton = params.get("function", "triton") != "pytorch"
    shape = shape_of(record)
    known = triton and commit in CODE_AT and not prov.get("dirty") and shape["dtype"] is not None
    from_code = CODE_AT[commit](shape) if known else {}
    facts, source = {}, {}
    for name in (*FACTS, "float32_matmul_precision"):
        if launch.get(name) is not None:
            facts[name], source[name] = launch[name], "record"
        elif from_code.get(name) is not None:
            facts[name], source[name] = from_code[name], commit
    if triton and "programs" not in facts and {"tiles", "splits"} <= set(facts):
        facts["programs"] = programs_of(facts["tiles"], shape["batch"], shape["seq"], shape["seq"], facts["splits"],
                                        facts.get("backward_splits") or (1, 1))
        source["programs"] = source["tiles"]
    pytorch_backward = facts.get("backward") == "compiled-pytorch"
    # Facts of the backward that did not run: the Triton kernels' for the PyTorch backward and back.
    for name in ("delta", "backward_splits") if pytorch_backward else ("backward_arithmetic",):
        facts.pop(name, None)
        source.pop(name, None)
    if pytorch_backward:
        for name in ("tiles", "programs"):
            if name in facts:
                facts[name] = {"forward": facts[name]["forward"]}
    return {"facts": facts, "source": source, "commit": commit, "unreadable": UNREADABLE.get(commit)}
