"""What our FlashAttention kernels ran, for the records that time or check them and the reports that
read those records.

A record of our kernels carries ``launch`` (``describe``): the path the call took, each kernel's
tiles and program count, the SM count, the forward's key splits, the backward's (dK/dV, dQ)
slices, how fp32 products were computed, the order the programs take their tiles in, how
D = rowsum(dO ∘ O) was computed and which backward ran. A report states a fact about our kernels
only as ``ran`` gives it, from the record; a fact the record does not give is one the report says it
does not know.

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


def shape_of(record: dict) -> dict:
    """(dtype, d, N, batch, causal, compiled) of a record of our kernels: a B5 grid point, the
    leaderboard case or a B3/B4 check."""
    p = record["params"]
    batch, seq, d = p["shape"] if "shape" in p else (p["batch"], p["seq"], p["d"])
    return {"dtype": p.get("dtype"), "d": d, "seq": seq, "batch": batch, "causal": bool(p.get("causal", True)),
            "compiled": bool(p.get("compiled", False))}


def commit_of(record: dict) -> str:
    """The commit whose kernels ran in ``record``: its provenance's."""
    return (record.get("provenance") or {}).get("commit") or ""


def ran(record: dict) -> dict:
    """What ran for one record of our kernels, as the record says it: ``facts`` (name -> value) and
    the record's ``commit``. Program counts follow from the tiles and splits where the record gives
    those alone."""
    commit = commit_of(record)
    launch = dict((record.get("metrics") or {}).get("launch") or {})
    params = record["params"]
    if params.get("function") in BACKWARD_OF:             # B3/B4 checks: the Function says which backward
        launch.setdefault("backward", BACKWARD_OF[params["function"]])
    if "float32_matmul_precision" in (record.get("metrics") or {}):
        launch.setdefault("float32_matmul_precision", record["metrics"]["float32_matmul_precision"])
    triton = params.get("function", "triton") != "pytorch"
    shape = shape_of(record)
    facts = {name: launch[name] for name in (*FACTS, "float32_matmul_precision") if launch.get(name) is not None}
    if triton and "programs" not in facts and {"tiles", "splits"} <= set(facts):
        facts["programs"] = programs_of(facts["tiles"], shape["batch"], shape["seq"], shape["seq"], facts["splits"],
                                        facts.get("backward_splits") or (1, 1))
    pytorch_backward = facts.get("backward") == "compiled-pytorch"
    # Facts of the backward that did not run: the Triton kernels' for the PyTorch backward and back.
    for name in ("delta", "backward_splits") if pytorch_backward else ("backward_arithmetic",):
        facts.pop(name, None)
    if pytorch_backward:
        for name in ("tiles", "programs"):
            if name in facts:
                facts[name] = {"forward": facts[name]["forward"]}
    return {"facts": facts, "commit": commit}
