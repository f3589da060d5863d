"""The split backward (dK/dV over slices of each key tile's query tiles, dQ over slices of each
query tile's key tiles, then the combine kernels) against float64 attention and its autograd
gradients, and the rule that chooses the slices.

On a CPU the kernels run under TRITON_INTERPRET=1 with 16-row tiles; on a GPU (marked ``gpu``) with
the tuned tiles, on lengths five times as long so that the 64-row tiles are ragged too.
"""
from __future__ import annotations

import pytest
import torch

from cs336_systems.attention import flash_plan as fp
from cs336_systems.attention import flash_triton as ft
from cs336_systems.attention.flash_triton import FlashAttentionTriton

from .test_flash import DEVICES, GRAD_TOLERANCE, check_against_reference, random_qkv, reference

# (batch, Nq, Nk, d, (dK/dV slices, dQ slices)): ragged lengths; Nq != Nk non-causal only (causal
# uses Nk = Nq); more slices than some tiles have tiles to walk (the last causal key tiles see one
# or two query tiles, so some of their slices are empty and must add nothing); one kernel split
# and the other not.
SHAPES = [(2, 45, 45, 16, (2, 3)), (1, 77, 77, 64, (4, 4)), (2, 37, 70, 16, (8, 1)), (1, 50, 23, 64, (1, 8))]


def _lengths(shape, device, is_causal):
    batch, n_q, n_k, d, splits = shape
    scale = 5 if device == "cuda" else 1
    n_q, n_k = n_q * scale, n_k * scale
    return batch, n_q, (n_q if is_causal else n_k), d, splits


def _dtype(device):
    return torch.float32 if device == "cpu" else torch.bfloat16


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s[:4])) + f"-s{s[4][0]}{s[4][1]}")
def test_split_backward_through_plan(device, is_causal, shape, monkeypatch):
    """FlashAttentionTriton through a plan that forces the slices, against float64 autograd; twice,
    with new inputs, since on a GPU the second call goes through the compiled kernels' launchers."""
    batch, n_q, n_k, d, splits = _lengths(shape, device, is_causal)
    q, k, v = random_qkv(batch, n_q, n_k, d, _dtype(device), device)
    plan = fp._Plan(q, k, v, is_causal, split_backward=splits)
    assert plan.backward_splits == splits
    monkeypatch.setattr(ft, "_plan", lambda *_: plan)      # the plan FlashAttentionTriton takes
    check_against_reference(FlashAttentionTriton, q, k, v, is_causal)
    check_against_reference(FlashAttentionTriton, *random_qkv(batch, n_q, n_k, d, _dtype(device), device), is_causal)
    for i, kernel in enumerate(("dkdv", "dq")):
        assert isinstance(plan.backwards[(q.stride(), q.stride())][1 + i], fp._SplitLaunch) == (splits[i] > 1), kernel  # (dO, O)
    programs = plan.programs()
    assert programs["dkdv"] == -(-n_k // plan.tiles.dkdv.block_k) * batch * splits[0]
    assert programs["dq"] == -(-n_q // plan.tiles.dq.block_q) * batch * splits[1]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("shape", SHAPES[:2], ids=lambda s: "x".join(map(str, s[:4])))
def test_split_backward_plain_path(device, is_causal, shape):
    """``flash_backward_triton(splits=...)`` (the path torch.compile and odd layouts take) against
    float64, with strided dO."""
    batch, n_q, n_k, d, splits = _lengths(shape, device, is_causal)
    q, k, v = (t.detach() for t in random_qkv(batch, n_q, n_k, d, _dtype(device), device))
    grad_out = torch.randn(batch, d, n_q, dtype=q.dtype, device=device).transpose(1, 2)   # strided rows
    out, lse = ft.flash_forward_triton(q, k, v, is_causal)
    grads = ft.flash_backward_triton(q, k, v, out, grad_out, lse, is_causal, splits=splits)
    _, _, want = reference(q, k, v, is_causal, grad_out)
    tol = GRAD_TOLERANCE[q.dtype]
    for name, got, ref in zip("qkv", grads, want):
        assert got.dtype == q.dtype
        torch.testing.assert_close(got.double(), ref, atol=tol, rtol=tol, msg=lambda m: f"d{name}: {m}")  # noqa: B023


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("is_causal", [False, True])
def test_split_backward_with_diagonals_of_several_tiles(device, is_causal, monkeypatch):
    """Tiles whose causal diagonal spans two tiles of the walked range (dQ: 32-query tiles over
    16-key tiles; dK/dV: 32-key tiles over 16-query tiles), so a slice boundary can cut through
    the diagonal: each slice must mask its part of it. Interpreter-sized tiles on a CPU, twice
    those on a GPU."""
    scale = 2 if device == "cuda" else 1
    tiles = ft.Tiles(ft.KernelTiles(32 * scale, 16 * scale, 1 if device == "cpu" else 4, 1),
                     ft.KernelTiles(16 * scale, 32 * scale, 1 if device == "cpu" else 4, 1),
                     ft.KernelTiles(32 * scale, 16 * scale, 1 if device == "cpu" else 4, 1))
    monkeypatch.setattr(fp, "choose_tiles", lambda *_: tiles)       # what _Plan reads
    monkeypatch.setattr(fp, "fit_to_grid", lambda t, *_: t)
    n = 83 * scale
    q, k, v = random_qkv(1, n, n, 16, _dtype(device), device)
    plan = fp._Plan(q, k, v, is_causal, split_backward=(3, 5))
    monkeypatch.setattr(ft, "_plan", lambda *_: plan)
    check_against_reference(FlashAttentionTriton, q, k, v, is_causal)


@pytest.mark.gpu
@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("d", [16, 32, 64, 128])
def test_chosen_split_backward_at_batch_one(is_causal, d, monkeypatch):
    """At batch 1 and N = 1000 (ragged) the rule splits both kernels on an H100 (16 programs
    each); the chosen plan's gradients against float64."""
    monkeypatch.setattr(fp, "_PLANS", {})
    q, k, v = random_qkv(1, 1000, 1000, d, torch.bfloat16, "cuda")
    check_against_reference(FlashAttentionTriton, q, k, v, is_causal)
    plan = fp._plan(q, k, v, is_causal)
    sms = fp._sm_count(q.device)
    assert plan.backward_splits == ft.backward_splits(plan.tiles, 1, 1000, 1000, d, q.dtype, sms)
    if sms >= 64:
        assert min(plan.backward_splits) > 1, plan.backward_splits


def test_backward_splits_fill_short_grids_only():
    """The rule's counts against its fit (lab/attention/tuning/backward_splits_*): 16-bit d <= 32 fills to 32
    warps per SM (dK/dV at most 8 slices, dQ 16), d = 64 to 16 (at most 4), d = 128 to 8 (at most
    4); slices down to one tile; no 16-bit split under 16 walked tiles; fp32 to 16 warps per SM, at
    most 8 slices, from the shortest length (dQ slices of two tiles or more)."""
    bf16, fp32 = torch.bfloat16, torch.float32
    t = ft.KernelTiles(64, 64, 4, 3)
    fitted = ft.Tiles(t, t, t)
    leaderboard = ft.Tiles(ft.KernelTiles(128, 64, 8, 3), t, ft.KernelTiles(128, 64, 4, 4))
    assert ft.backward_splits(leaderboard, 16, 16384, 16384, 64, bf16, 132) == (1, 1)  # 4096 and 2048 programs
    assert ft.backward_splits(fitted, 1, 1024, 1024, 64, bf16, 132) == (4, 4)        # at most 4 at d = 64
    assert ft.backward_splits(fitted, 1, 4096, 4096, 16, bf16, 132) == (8, 16)       # 64 x 16 x 4 warps = 4096
    assert ft.backward_splits(fitted, 1, 8192, 8192, 16, bf16, 132) == (8, 8)        # 32 warps per SM: 4096 <= 4224
    assert ft.backward_splits(fitted, 1, 16384, 16384, 64, bf16, 132) == (2, 2)      # 16 per SM: 2048 <= 2112
    assert ft.backward_splits(fitted, 1, 32768, 32768, 16, bf16, 132) == (2, 2)
    assert ft.backward_splits(fitted, 1, 65536, 65536, 16, bf16, 132) == (1, 1)      # 1024 programs fill it
    assert ft.backward_splits(fitted, 1, 8192, 8192, 128, bf16, 132) == (2, 2)       # 8 warps per SM at d = 128
    assert ft.backward_splits(fitted, 1, 2048, 2048, 64, fp32, 132) == (8, 8)        # at most 8
    assert ft.backward_splits(fitted, 1, 256, 256, 64, fp32, 132) == (4, 2)          # 4 tiles: dQ slices of 2
    assert ft.backward_splits(fitted, 1, 960, 960, 16, bf16, 132) == (1, 1)          # 15 tiles: no split
    # Each kernel by its own tiles: dQ's 32-key tiles give twice the tiles to cut.
    own = ft.Tiles(t, t, ft.KernelTiles(64, 32, 4, 3))
    assert ft.backward_splits(own, 1, 960, 960, 16, bf16, 132) == (1, 16)        # 15 and 30 tiles



# Compiles every split kernel for sm_90 and prints, per part kernel, whether its PTX has wgmma.
_COMPILE_FOR_SM90 = """
import torch, triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from cs336_systems.attention import flash_backward as fb
from cs336_systems.attention import flash_plan as fp
from cs336_systems.attention.flash_tiles import KernelTiles

def compile_sm90(kernel, args, tensors, t=None):
    _, scalars, constexprs = args
    types = {name: tensors.get(name) or ("fp32" if isinstance(scalars.get(name), float) else "i32")
             for name in kernel.arg_names if name not in constexprs}
    signature = {name: types.get(name, "constexpr") for name in kernel.arg_names}
    options = fp._options(t) if t else {}
    source = ASTSource(kernel, signature, constexprs=constexprs)
    return triton.compile(source, target=GPUTarget("cuda", 90, 32), options=options).asm["ptx"]

t = KernelTiles(64, 64, 4, 3)
inputs = {name: "*bf16" for name in ("Q", "K", "V", "DO")} | {"L": "*fp32", "DELTA": "*fp32", "PART": "*fp32"}
for d in (64, 128):
    q, lse = torch.empty(1, 1000, d, dtype=torch.bfloat16), torch.empty(1, 1000)
    for causal in (False, True):
        for name, kernel, args in (("dkdv", fb._dkdv_part_kernel, fp._dkdv_part_args(q, q, q, q, lse, causal, t, 4)),
                                   ("dq", fb._dq_part_kernel, fp._dq_part_args(q, q, q, q, lse, causal, t, 4))):
            print(name, d, causal, "wgmma" in compile_sm90(kernel, args, inputs, t))
    compile_sm90(fb._dkdv_combine_kernel, fp._dkdv_combine_args(q, q, 4), {"PART": "*fp32", "DK": "*bf16", "DV": "*bf16"})
    compile_sm90(fb._dq_combine_kernel, fp._dq_combine_args(q, 4), {"PART": "*fp32", "DQ": "*bf16"})
"""


@pytest.mark.slow
@pytest.mark.skipif(not __import__("triton").__version__.startswith("3.6"), reason="the GPU machines' Triton (3.6)")
def test_split_kernels_compile_for_sm90():
    """The split kernels compile for the H100 (sm_90) with the GPU machines' Triton, on a CPU, and
    the part kernels' products are Hopper wgmma. In a subprocess without TRITON_INTERPRET: under
    the interpreter (this suite's CPU setting) the kernels cannot be compiled."""
    import os
    import subprocess
    import sys

    env = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"}
    run = subprocess.run([sys.executable, "-c", _COMPILE_FOR_SM90], env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-3000:]
    lines = run.stdout.split("\n")[:-1]
    assert len(lines) == 8 and all(line.endswith("True") for line in lines), run.stdout
