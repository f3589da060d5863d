"""What the FlashAttention kernels are launched with: tiles, product precision and slice counts.

Each kernel's tiles, warps and stages come from the tuner's winners (``tuned_tiles.py``, written
by ``python -m cs336_systems.attention.tune``) or from defaults for shapes not tuned; under the
interpreter, small tiles so that tests cover many. On a GPU the plan (``flash_plan``) then fits
them to the grid (``fit_to_grid``) and splits short grids (``forward_splits``,
``backward_splits``): rules fitted to sweeps on the H100, whose measurements are in
lab/attention/NOTES.md. Host code only: nothing here launches a kernel.
"""
from __future__ import annotations

import functools
import os
from dataclasses import asdict, dataclass, replace

import torch
import triton

from cs336_systems.attention.tuned_tiles import TUNED


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


@dataclass(frozen=True)
class KernelTiles:
    """One kernel's launch: its query and key tile sizes, warps and software-pipelining stages."""
    block_q: int
    block_k: int
    num_warps: int = 4
    num_stages: int = 2


@dataclass(frozen=True)
class Tiles:
    """The kernels' launches: the forward's, the dK/dV kernel's and the dQ kernel's.

    The causal split needs BLOCK_Q to be a multiple of BLOCK_K in the forward and the dQ pass (they
    walk keys up to their own diagonal tile), and BLOCK_K a multiple of BLOCK_Q in the dK/dV pass
    (it walks queries from its own)."""
    forward: KernelTiles
    dkdv: KernelTiles
    dq: KernelTiles

    def __post_init__(self):
        for name, big, small in (("forward", "block_q", "block_k"), ("dq", "block_q", "block_k"),
                                 ("dkdv", "block_k", "block_q")):
            t = getattr(self, name)
            if getattr(t, big) % getattr(t, small):
                raise ValueError(f"{name} tiles {t}: {big} must be a multiple of {small} (the causal split)")

    def to_json(self) -> dict:
        return {name: asdict(getattr(self, name)) for name in ("forward", "dkdv", "dq")}

    @classmethod
    def from_json(cls, data: dict) -> "Tiles":
        return cls(**{name: KernelTiles(**data[name]) for name in ("forward", "dkdv", "dq")})


def _dtype_name(dtype: torch.dtype) -> str:
    return {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}[dtype]


@functools.lru_cache(maxsize=None)
def _tuned() -> dict[str, Tiles]:
    """The winners of ``python -m cs336_systems.attention.tune``, committed in ``tuned_tiles.py`` (a
    module, so a rule that runs these kernels depends on it) so that runs never re-tune."""
    return {key: Tiles.from_json(entry["tiles"]) for key, entry in TUNED.items()}


def padded_head_dim(d: int) -> int:
    """The width of the kernels' tiles along the head dimension: the next power of two (``tl.arange``
    takes only powers of two; the columns past d are masked), at least 16 (``tl.dot``'s smallest
    inner dimension)."""
    return max(16, triton.next_power_of_2(d))


def head_chunks(d: int) -> tuple[int, int]:
    """How the forward, dQ and dK/dV kernels lay their tiles along the head dimension: (the first
    chunk's width, the second's, or 0 for one chunk), each a power of two of at least 16. A head
    dimension that is not a power of two is cut in two where that makes fewer columns than padding
    it whole: d = 80 as 64 + 16 (37.5 % of the padded 128's products would be padding), 96 as 64 +
    32, 72 as 64 + 16 (its last 8 masked); d = 112 stays 128 (64 + 64 would be no narrower). Each
    product over d is then two ``tl.dot``s, and each accumulator two tiles."""
    whole = padded_head_dim(d)
    first = whole // 2
    second = max(16, triton.next_power_of_2(max(d - first, 1)))
    return (first, second) if d > first and first >= 16 and first + second < whole else (whole, 0)


def default_tiles(d: int, dtype: torch.dtype) -> Tiles:
    """Tiles for a shape the tuner has not measured. A head dimension takes its padded width's
    (``padded_head_dim``): padded, its tiles hold that width's registers and shared memory; cut in
    two chunks (``head_chunks``), fewer, so the width's tiles fit either way (if not fastest)."""
    d = padded_head_dim(d)
    if d == 256:
        return _wide_tiles(dtype)
    if dtype == torch.float32:
        # The fastest of a batch-1 sweep on the H100 with 3xTF32 products (lab/attention/NOTES.md);
        # at d = 128 every larger tile was slower or did not fit in shared memory.
        if d == 128:
            return Tiles(KernelTiles(32, 32), KernelTiles(32, 32), KernelTiles(32, 32))
        return Tiles(KernelTiles(64, 64), KernelTiles(32, 32), KernelTiles(64, 64))
    warps = 8 if d == 128 else 4
    bwd = 64 if d <= 64 else 32
    return Tiles(KernelTiles(128, 64, warps, 2), KernelTiles(bwd, bwd, warps, 2), KernelTiles(bwd, bwd, warps, 2))


def _wide_tiles(dtype: torch.dtype) -> Tiles:
    """Tiles for head dimensions 136 to 256 (256 wide), not yet timed: for each kernel the largest
    of the tiles we compiled for the H100 (sm_90, Triton 3.6) that ptxas builds without spilling
    registers, all within 101 KB of shared memory. Each row is twice d = 128's, and the fp32
    accumulators of one (64, 256) tile alone are 128 registers a thread at 4 warps: at 16-bit the
    forward with 64 x 64 tiles and dK/dV with 32 x 32 at 4 warps spilled 100-6600 bytes, and fp32
    tiles twice as long as these spilled too."""
    if dtype == torch.float32:
        return Tiles(KernelTiles(32, 16, 4, 1), KernelTiles(16, 32, 8, 2), KernelTiles(32, 16, 8, 2))
    return Tiles(KernelTiles(64, 32, 8, 2), KernelTiles(32, 32, 8, 2), KernelTiles(32, 32, 8, 2))


def tuned_key(d: int, dtype: torch.dtype) -> str | None:
    """The entry of the tuner's winners (``tuned_tiles.py``) that ``choose_tiles`` takes for this
    shape, if any: the head dimension's own, else its padded width's, whose tiles fit its chunks
    too (``default_tiles``). The d = 80 entry is tuned for its 64 + 16 chunks."""
    for width in (d, padded_head_dim(d)):
        key = f"{_dtype_name(dtype)}_d{width}"
        if key in TUNED:
            return key
    return None


def choose_tiles(d: int, dtype: torch.dtype) -> Tiles:
    if interpreting():
        small = KernelTiles(16, 16, 1, 1)      # small: many tiles per test
        return Tiles(KernelTiles(32, 16, 1, 1), small, small)
    key = tuned_key(d, dtype)
    return _tuned()[key] if key else default_tiles(d, dtype)


def _precision(dtype: torch.dtype) -> str:
    # fp32 inputs: fp32-accurate products. Where the GPU has TF32 tensor cores, as three TF32
    # products (the operands split into a high and a low TF32 part; the low x low term dropped):
    # on the H100 as accurate as FMA products against float64 (relative errors 3e-7 to 1e-6 both
    # ways) and many times faster (lab/attention/NOTES.md). Plain TF32 would cost accuracy.
    if dtype == torch.float32:
        return "tf32x3" if _tf32_tensor_cores() else "ieee"
    # Triton's CPU interpreter computes bf16 dot products wrongly (seen with Triton 3.9: garbage of
    # order 1e10), so there the bf16 tiles are multiplied in fp32. Every rounding to bf16 the GPU
    # kernel does (P before P·V, dS before dS·K) still happens before the product.
    if dtype == torch.bfloat16 and interpreting():
        return "upcast"
    return "tf32"


@functools.lru_cache(maxsize=None)
def _tf32_tensor_cores() -> bool:
    return not interpreting() and torch.cuda.is_available() and torch.cuda.get_device_capability()[0] >= 8


# Smallest tile fit_to_grid shrinks to: in a batch-1 sweep on the H100 (bf16, d = 64 and 128,
# N = 1024 to 16384; lab/attention/NOTES.md) 64 x 64 with 4 warps was fastest for every kernel,
# and 32- or 16-row tiles were slower from N = 4096 on.
MIN_FIT_BLOCK = 64


def fit_to_grid(tiles: Tiles, batch: int, n_q: int, n_k: int, sms: int) -> Tiles:
    """The tuned tiles (chosen at batch 16 or 4) with the dimension that sets a kernel's program
    count halved, and at most 4 warps, until the grid has a program for every SM or the tile
    reaches MIN_FIT_BLOCK. At batch 1 and N = 2048, the bf16 forward's 128-query tiles give 16
    programs on 132 SMs."""
    def fit(t: KernelTiles, n: int, big: str, small: str) -> KernelTiles:
        while batch * triton.cdiv(n, getattr(t, big)) < sms and getattr(t, big) > MIN_FIT_BLOCK:
            half = getattr(t, big) // 2
            t = replace(t, **{big: half, small: min(getattr(t, small), half)}, num_warps=min(t.num_warps, 4))
        return t
    return Tiles(fit(tiles.forward, n_q, "block_q", "block_k"), fit(tiles.dkdv, n_k, "block_k", "block_q"),
                 fit(tiles.dq, n_q, "block_q", "block_k"))


# How many programs share one query tile's keys (the split-key forward). From batch-1 sweeps on the
# H100 (lab/attention/NOTES.md: bf16 d = 16 to 128 and fp32 d = 16, 64, 128, N = 1024 to 65536,
# 1 to 16 slices): the fastest count filled the GPU to about 32 resident warps per SM (16 for bf16
# at d = 128, whose tiles hold the most registers), with at most 8 slices (4 for bf16 at d = 64 and
# 128), each at least MIN_SLICE_TILES key tiles long.
MIN_SLICE_TILES = 4


def _split_limits(d: int, dtype: torch.dtype) -> tuple[int, int]:
    """(warps per SM to fill to, most slices) for the forward at this head dimension and dtype."""
    if dtype == torch.float32 or d <= 32:
        return 32, 8
    return (32, 4) if d == 64 else (16, 4)


def forward_splits(t: KernelTiles, batch: int, n_q: int, n_k: int, d: int, dtype: torch.dtype, sms: int) -> int:
    """The largest power of two of slices that keeps the grid's warps within ``_split_limits``'s
    per SM and its slices, each slice at least MIN_SLICE_TILES key tiles long: 1 for grids that
    already fill the GPU (the leaderboard case: 2048 programs of 8 warps)."""
    warps_per_sm, most = _split_limits(padded_head_dim(d), dtype)
    return _power_of_two_slices(triton.cdiv(n_q, t.block_q) * batch, triton.cdiv(n_k, t.block_k), t.num_warps,
                                warps_per_sm, most, sms)


def _power_of_two_slices(programs: int, walked_tiles: int, num_warps: int, warps_per_sm: int, most: int,
                         sms: int, min_tiles: int = MIN_SLICE_TILES) -> int:
    """The largest power of two of slices, at most ``most``, that keeps a grid of ``programs``
    (times the slices) of ``num_warps`` warps within ``warps_per_sm`` per SM, each slice at least
    ``min_tiles`` of the ``walked_tiles`` that one program walks."""
    splits = 1
    while (splits * 2 <= most and programs * splits * 2 * num_warps <= warps_per_sm * sms
           and walked_tiles // (splits * 2) >= min_tiles):
        splits *= 2
    return splits


# How many programs share one key tile's query tiles (dK/dV) or one query tile's key tiles (dQ) in
# the split backward, per kernel: (warps per SM to fill to, most slices, fewest tiles per slice,
# fewest tiles a program walks for any split at all). Fitted to batch-1 sweeps on the H100
# (``lab/attention/probe.py --backward-splits``; the sweeps are lab/attention/tuning/backward_splits_*):
# - 16-bit, d = 16 to 128, N = 256 to 16384: small head dimensions take the most slices (dQ, with
#   one accumulator, up to 16), slices as short as one tile pay, but below 16 tiles (N < 1024 at
#   64-row tiles) no split did: the backward is a few microseconds and the combine launch costs more.
# - fp32, d = 16 to 128, N = 256 to 4096: splitting pays from the shortest length on (its 32-row
#   tiles and 3xTF32 products make each tile long), dQ with slices of at least two tiles.
# With these limits the chosen count's time is within 2 % of the best count's at 16-bit d >= 64 and
# within 17 % at every measured point.
def _backward_split_limits(d: int, dtype: torch.dtype) -> dict[str, tuple[int, int, int, int]]:
    if dtype == torch.float32:
        return {"dkdv": (16, 8, 1, 1), "dq": (16, 8, 2, 1)}
    if d <= 32:
        return {"dkdv": (32, 8, 1, 16), "dq": (32, 16, 1, 16)}
    limits = (16, 4, 1, 16) if d == 64 else (8, 4, 1, 16)
    return {"dkdv": limits, "dq": limits}


def backward_splits(tiles: Tiles, batch: int, n_q: int, n_k: int, d: int, dtype: torch.dtype,
                    sms: int) -> tuple[int, int]:
    """(slices of each key tile's query tiles in dK/dV, slices of each query tile's key tiles in
    dQ): powers of two as in ``forward_splits``, with ``_backward_split_limits``; (1, 1) for grids
    that already fill the GPU."""
    limits = _backward_split_limits(padded_head_dim(d), dtype)

    def slices(kernel: str, t: KernelTiles, programs: int, walked: int) -> int:
        warps_per_sm, most, min_tiles, from_tiles = limits[kernel]
        if walked < from_tiles:
            return 1
        return _power_of_two_slices(programs, walked, t.num_warps, warps_per_sm, most, sms, min_tiles)

    dkdv, dq = tiles.dkdv, tiles.dq
    return (slices("dkdv", dkdv, triton.cdiv(n_k, dkdv.block_k) * batch, triton.cdiv(n_q, dkdv.block_q)),
            slices("dq", dq, triton.cdiv(n_q, dq.block_q) * batch, triton.cdiv(n_k, dq.block_k)))
