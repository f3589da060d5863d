"""How the FlashAttention kernels are launched: their arguments, plain launches and cached plans.

The plain launch functions (``flash_forward_triton``, ``flash_backward_triton`` and the single
kernels' ``launch_*``) are what torch.compile traces and what odd layouts (a strided last
dimension, pointers off 16-byte alignment) take.

Eager calls of ``FlashAttentionTriton`` go through a plan cached per input layout (``_Plan``: tiles
fitted to the grid, buffer sizes, and each kernel's launch with its arguments fixed), so that a
small call costs little more host time than its launches.
"""
from __future__ import annotations

import functools
import math

import torch
import triton

from cs336_systems.attention.flash_backward import (_delta_kernel, _dkdv_combine_kernel, _dkdv_part_kernel,
                                                    _dq_combine_kernel, _dq_part_kernel, _flash_dkdv_kernel,
                                                    _flash_dq_kernel)
from cs336_systems.attention.flash_forward import (LOG2_E, _flash_forward_kernel, _forward_combine_kernel,
                                                   _forward_part_kernel)
from cs336_systems.attention.flash_tiles import (KernelTiles, Tiles, _precision, backward_splits, choose_tiles,
                                                 fit_to_grid, forward_splits, head_chunks, interpreting,
                                                 padded_head_dim)
from cs336_systems.attention.inputs import check_inputs


def _check_device(q: torch.Tensor) -> None:
    if q.device.type != "cuda" and not interpreting():
        raise ValueError(f"FlashAttentionTriton needs CUDA tensors (got {q.device}); on a CPU, set "
                         "TRITON_INTERPRET=1 before importing it to run the kernels in Triton's interpreter")
    if interpreting():
        _check_interpreter_numpy(triton.__version__)


def _check_interpreter_numpy(triton_version: str) -> None:
    """One clear line instead of the interpreter's 'only 0-dimensional arrays' deep in a kernel."""
    import numpy

    def major_minor(version: str) -> tuple[int, int]:
        return tuple(int(part) for part in version.split(".")[:2])

    if major_minor(triton_version) <= (3, 6) and major_minor(numpy.__version__) >= (2, 4):
        raise RuntimeError(f"Triton {triton_version}'s interpreter needs NumPy < 2.4 (this is {numpy.__version__}): "
                           "pip install 'numpy<2.4', or a newer Triton")


def _options(t: KernelTiles) -> dict:
    return dict(num_warps=t.num_warps, num_stages=t.num_stages)


def _head(d: int) -> dict:
    """The kernels' head-dimension constexprs: D, and D_PAD, the power of two their tiles are wide
    (``padded_head_dim``; the columns past D are masked)."""
    return dict(D=d, D_PAD=padded_head_dim(d))


def _head_chunks(d: int) -> dict:
    """The head-dimension constexprs of the kernels that take two column chunks (forward, dK/dV,
    dQ; ``head_chunks``): the first chunk [0, D_PAD) of which D columns exist, and where D_HI_PAD > 0
    a second [D_PAD, D_PAD + D_HI_PAD) of which D_HI exist."""
    first, second = head_chunks(d)
    if not second:
        return dict(**_head(d), D_HI=0, D_HI_PAD=0)
    return dict(D=first, D_PAD=first, D_HI=d - first, D_HI_PAD=second)


def _dims(shape: torch.Size) -> tuple[int, int, int, int]:
    """(batch entries, heads, rows, d) of a (batch, N, d) or a (batch, heads, N, d) shape: the
    kernels see batch x heads entries of N rows each (``flash_forward._entry``)."""
    if len(shape) == 4:
        return shape[0] * shape[1], shape[1], shape[2], shape[3]
    return shape[0], 1, shape[1], shape[2]


def _strides(name: str, t: torch.Tensor) -> dict:
    """One tensor's stride arguments, named as in the kernels: per batch element, per head (0 for
    a (batch, N, d) tensor), per row."""
    entry, head, row = (t.stride(0), t.stride(1), t.stride(2)) if t.dim() == 4 else (t.stride(0), 0, t.stride(1))
    return {f"stride_{name}b": entry, f"stride_{name}h": head, f"stride_{name}n": row}


def new_output(shape: torch.Size, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """An empty O of q's ``shape``: (batch, N, d) contiguous, or (batch, heads, N, d) laid out as
    (batch, N, heads, d), which the model's output projection reads as (batch, N, heads·d) without
    a copy."""
    if len(shape) == 4:
        batch, heads, n, d = shape
        return torch.empty(batch, n, heads, d, dtype=dtype, device=device).transpose(1, 2)
    return torch.empty(shape, dtype=dtype, device=device)


def new_row_stats(shape: torch.Size, device: torch.device) -> torch.Tensor:
    """An empty fp32 tensor of one value per row of a tensor of ``shape``, contiguous: L, and
    D = rowsum(dO ∘ O)."""
    return torch.empty(shape[:-1], dtype=torch.float32, device=device)


# Each kernel's launch is described once, by a function of the tensors and tiles that returns the
# grid, the arguments after the tensors (strides, sizes, scales) and the constexprs, both as
# keyword arguments named as in the kernel's signature. The plain launch functions below and the
# cached per-shape plans (``_Launch``, ``_Plan``) both build their launches from these. L and D are
# contiguous, one row of N values per batch entry: their entry stride is N (``stride(-2)``).

def _forward_args(q, k, v, out, lse, is_causal: bool, t: KernelTiles):
    batch, heads, n_q, d = _dims(q.shape)
    scalars = dict(**_strides("q", q), **_strides("k", k), **_strides("v", v), **_strides("o", out),
                   stride_lb=lse.stride(-2), n_batch=batch, n_heads=heads, n_queries=n_q, n_keys=k.shape[-2],
                   qk_scale=LOG2_E.value / math.sqrt(d))
    constexprs = dict(**_head_chunks(d), BLOCK_Q=t.block_q, BLOCK_K=t.block_k, CAUSAL=is_causal,
                      PRECISION=_precision(q.dtype))
    return (triton.cdiv(n_q, t.block_q) * batch,), scalars, constexprs


def _forward_part_args(q, k, v, is_causal: bool, t: KernelTiles, splits: int):
    batch, heads, n_q, d = _dims(q.shape)
    scalars = dict(**_strides("q", q), **_strides("k", k), **_strides("v", v), n_batch=batch, n_heads=heads,
                   n_queries=n_q, n_keys=k.shape[-2], qk_scale=LOG2_E.value / math.sqrt(d))
    constexprs = dict(**_head(d), BLOCK_Q=t.block_q, BLOCK_K=t.block_k, SPLITS=splits, CAUSAL=is_causal,
                      PRECISION=_precision(q.dtype))
    return (triton.cdiv(n_q, t.block_q) * splits * batch,), scalars, constexprs


def _combine_args(out, lse, splits: int):
    batch, heads, n_q, d = _dims(out.shape)
    block = max(16, 4096 // padded_head_dim(d))
    scalars = dict(**_strides("o", out), stride_lb=lse.stride(-2), n_batch=batch, n_heads=heads, n_queries=n_q)
    return (triton.cdiv(n_q, block) * batch,), scalars, dict(**_head(d), BLOCK=block, SPLITS=splits)


def _part_numel(q, splits: int) -> int:
    batch, _, n_q, d = _dims(q.shape)
    return splits * batch * n_q * (d + 2)


def _delta_args(out, grad_out, delta):
    batch, heads, n_q, d = _dims(out.shape)
    block = max(16, 8192 // padded_head_dim(d))
    scalars = dict(**_strides("o", out), **_strides("do", grad_out), stride_db=delta.stride(-2), n_batch=batch,
                   n_heads=heads, n_rows=n_q)
    return (triton.cdiv(n_q, block) * batch,), scalars, dict(**_head(d), BLOCK=block)


def _dkdv_args(q, k, v, grad_out, lse, grad_k, grad_v, is_causal: bool, t: KernelTiles):
    batch, heads, n_q, d = _dims(q.shape)
    n_k = k.shape[-2]
    scale = 1.0 / math.sqrt(d)
    scalars = dict(**_strides("q", q), **_strides("k", k), **_strides("v", v), **_strides("do", grad_out),
                   stride_lb=lse.stride(-2), **_strides("dk", grad_k), **_strides("dv", grad_v), n_batch=batch,
                   n_heads=heads, n_queries=n_q, n_keys=n_k, scale=scale, qk_scale=scale * LOG2_E.value)
    constexprs = dict(**_head_chunks(d), BLOCK_Q=t.block_q, BLOCK_K=t.block_k, CAUSAL=is_causal,
                      PRECISION=_precision(q.dtype))
    return (triton.cdiv(n_k, t.block_k) * batch,), scalars, constexprs


def _dq_args(q, k, v, grad_out, lse, grad_q, is_causal: bool, t: KernelTiles):
    batch, heads, n_q, d = _dims(q.shape)
    scale = 1.0 / math.sqrt(d)
    scalars = dict(**_strides("q", q), **_strides("k", k), **_strides("v", v), **_strides("do", grad_out),
                   stride_lb=lse.stride(-2), **_strides("dq", grad_q), n_batch=batch, n_heads=heads, n_queries=n_q,
                   n_keys=k.shape[-2], scale=scale, qk_scale=scale * LOG2_E.value)
    constexprs = dict(**_head_chunks(d), BLOCK_Q=t.block_q, BLOCK_K=t.block_k, CAUSAL=is_causal,
                      PRECISION=_precision(q.dtype))
    return (triton.cdiv(n_q, t.block_q) * batch,), scalars, constexprs


def _backward_part_args(q, k, v, grad_out, lse, is_causal: bool, t: KernelTiles, splits: int, n_tiles: int):
    """The launch of either split backward kernel (their signatures are the same): ``n_tiles`` tiles
    (key tiles for dK/dV, query tiles for dQ), each over ``splits`` programs."""
    batch, heads, n_q, d = _dims(q.shape)
    scalars = dict(**_strides("q", q), **_strides("k", k), **_strides("v", v), **_strides("do", grad_out),
                   stride_lb=lse.stride(-2), n_batch=batch, n_heads=heads, n_queries=n_q, n_keys=k.shape[-2],
                   qk_scale=LOG2_E.value / math.sqrt(d))
    constexprs = dict(**_head(d), BLOCK_Q=t.block_q, BLOCK_K=t.block_k, SPLITS=splits, CAUSAL=is_causal,
                      PRECISION=_precision(q.dtype))
    return (n_tiles * splits * batch,), scalars, constexprs


def _dkdv_part_args(q, k, v, grad_out, lse, is_causal: bool, t: KernelTiles, splits: int):
    return _backward_part_args(q, k, v, grad_out, lse, is_causal, t, splits, triton.cdiv(k.shape[-2], t.block_k))


def _dq_part_args(q, k, v, grad_out, lse, is_causal: bool, t: KernelTiles, splits: int):
    return _backward_part_args(q, k, v, grad_out, lse, is_causal, t, splits, triton.cdiv(q.shape[-2], t.block_q))


def _dkdv_combine_args(grad_k, grad_v, splits: int):
    batch, heads, n_k, d = _dims(grad_k.shape)
    block = max(16, 2048 // padded_head_dim(d))        # two outputs: half the forward combine's rows
    scalars = dict(**_strides("dk", grad_k), **_strides("dv", grad_v), n_batch=batch, n_heads=heads, n_keys=n_k,
                   scale=1.0 / math.sqrt(d))
    return (triton.cdiv(n_k, block) * batch,), scalars, dict(**_head(d), BLOCK=block, SPLITS=splits)


def _dq_combine_args(grad_q, splits: int):
    batch, heads, n_q, d = _dims(grad_q.shape)
    block = max(16, 4096 // padded_head_dim(d))
    scalars = dict(**_strides("dq", grad_q), n_batch=batch, n_heads=heads, n_queries=n_q, scale=1.0 / math.sqrt(d))
    return (triton.cdiv(n_q, block) * batch,), scalars, dict(**_head(d), BLOCK=block, SPLITS=splits)


# --- plain launches ---------------------------------------------------------------------------

def flash_forward_triton(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, is_causal: bool,
                         tiles: Tiles | None = None, splits: int = 1):
    """Launch the forward kernel, or with ``splits`` > 1 the split-key forward and its combine;
    returns (O in q's dtype, laid out as ``new_output`` lays it, and L fp32 of q's shape but d)."""
    q, k, v = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, v))
    t = (tiles or choose_tiles(q.shape[-1], q.dtype)).forward
    out, lse = new_output(q.shape, q.dtype, q.device), new_row_stats(q.shape, q.device)
    if splits > 1:
        part = torch.empty(_part_numel(q, splits), dtype=torch.float32, device=q.device)
        grid, scalars, constexprs = _forward_part_args(q, k, v, is_causal, t, splits)
        _forward_part_kernel[grid](Q=q, K=k, V=v, PART=part, **scalars, **constexprs, **_options(t))
        grid, scalars, constexprs = _combine_args(out, lse, splits)
        _forward_combine_kernel[grid](PART=part, O=out, L=lse, **scalars, **constexprs)
        return out, lse
    grid, scalars, constexprs = _forward_args(q, k, v, out, lse, is_causal, t)
    _flash_forward_kernel[grid](Q=q, K=k, V=v, O=out, L=lse, **scalars, **constexprs, **_options(t))
    return out, lse


def backward_delta(out: torch.Tensor, grad_out: torch.Tensor) -> torch.Tensor:
    """D = rowsum(dO ∘ O) in fp32, of O's shape but d; both inputs with unit last stride."""
    delta = new_row_stats(out.shape, out.device)
    grid, scalars, constexprs = _delta_args(out, grad_out, delta)
    _delta_kernel[grid](O=out, DO=grad_out, DELTA=delta, **scalars, **constexprs)
    return delta


def launch_dkdv(q, k, v, grad_out, lse, delta, grad_k, grad_v, is_causal: bool, t: KernelTiles) -> None:
    grid, scalars, constexprs = _dkdv_args(q, k, v, grad_out, lse, grad_k, grad_v, is_causal, t)
    _flash_dkdv_kernel[grid](Q=q, K=k, V=v, DO=grad_out, L=lse, DELTA=delta, DK=grad_k, DV=grad_v, **scalars,
                             **constexprs, **_options(t))


def launch_dq(q, k, v, grad_out, lse, delta, grad_q, is_causal: bool, t: KernelTiles) -> None:
    grid, scalars, constexprs = _dq_args(q, k, v, grad_out, lse, grad_q, is_causal, t)
    _flash_dq_kernel[grid](Q=q, K=k, V=v, DO=grad_out, L=lse, DELTA=delta, DQ=grad_q, **scalars, **constexprs,
                           **_options(t))


def launch_dkdv_split(q, k, v, grad_out, lse, delta, grad_k, grad_v, is_causal: bool, t: KernelTiles,
                      splits: int) -> None:
    """The dK/dV kernel with each key tile's query tiles split over ``splits`` programs, then their sum."""
    _split_dkdv_launch(q, k, v, grad_out, lse, grad_k, grad_v, is_causal, t, splits)(
        Q=q, K=k, V=v, DO=grad_out, L=lse, DELTA=delta, DK=grad_k, DV=grad_v)


def launch_dq_split(q, k, v, grad_out, lse, delta, grad_q, is_causal: bool, t: KernelTiles, splits: int) -> None:
    """The dQ kernel with each query tile's key tiles split over ``splits`` programs, then their sum."""
    _split_dq_launch(q, k, v, grad_out, lse, grad_q, is_causal, t, splits)(Q=q, K=k, V=v, DO=grad_out, L=lse,
                                                                           DELTA=delta, DQ=grad_q)


def backward_kernels(q, k, v, grad_out, lse, delta, is_causal: bool, tiles: Tiles, splits: tuple[int, int] = (1, 1)):
    """dQ, dK, dV from the dK/dV kernel and then the dQ kernel, with ``tiles``. ``splits``: (dK/dV,
    dQ) slices for the split kernels (``backward_splits``)."""
    grad_k, grad_v, grad_q = torch.empty_like(k), torch.empty_like(v), torch.empty_like(q)
    dkdv_splits, dq_splits = splits
    if dkdv_splits > 1:
        launch_dkdv_split(q, k, v, grad_out, lse, delta, grad_k, grad_v, is_causal, tiles.dkdv, dkdv_splits)
    else:
        launch_dkdv(q, k, v, grad_out, lse, delta, grad_k, grad_v, is_causal, tiles.dkdv)
    if dq_splits > 1:
        launch_dq_split(q, k, v, grad_out, lse, delta, grad_q, is_causal, tiles.dq, dq_splits)
    else:
        launch_dq(q, k, v, grad_out, lse, delta, grad_q, is_causal, tiles.dq)
    return grad_q, grad_k, grad_v


def flash_backward_triton(q, k, v, out, grad_out, lse, is_causal: bool, tiles: Tiles | None = None,
                          splits: tuple[int, int] = (1, 1)):
    """dQ, dK, dV by recomputation: D = rowsum(dO ∘ O), then the backward kernels."""
    q, k, v, grad_out = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, v, grad_out))
    tiles = tiles or choose_tiles(q.shape[-1], q.dtype)
    return backward_kernels(q, k, v, grad_out, lse, backward_delta(out, grad_out), is_causal, tiles, splits)


# --- per-shape plans: the eager hot path ------------------------------------------------------

class _Launch:
    """One kernel with its grid and every argument but the tensors fixed: its launch for one input
    layout, called with the tensors by the kernel's names for them. The first call goes through
    Triton's dispatcher, which compiles the kernel or finds it; later calls go straight to the
    compiled kernel's launcher, because the dispatcher re-derives the specialisation key from every
    argument on every call (lab/attention/NOTES.md measures that). Valid only for tensors with the
    layout and 16-byte alignment of the first call's."""

    def __init__(self, kernel, grid: tuple, scalars: dict, constexprs: dict, options: dict):
        fixed = [*scalars, *constexprs]
        # The compiled launcher takes every argument positionally: the tensors (named at each
        # call), then the fixed ones, which must therefore be the signature's last, in order.
        if fixed != kernel.arg_names[-len(fixed):]:
            raise ValueError(f"{fixed} are not the last arguments of {kernel.arg_names}, in order")
        self.kernel, self.grid, self.scalars, self.constexprs, self.options = kernel, grid, scalars, constexprs, options
        self.tensor_names = tuple(kernel.arg_names[:-len(fixed)])
        self.tail = (*scalars.values(), *constexprs.values())
        self.launcher = None

    def __call__(self, **tensors) -> None:
        if self.launcher is not None:
            self.launcher(*(tensors[name] for name in self.tensor_names), *self.tail)
            return
        compiled = self.kernel[self.grid](**tensors, **self.scalars, **self.constexprs, **self.options)
        if not interpreting():
            self.launcher = direct_launcher(compiled, (*self.grid, 1, 1)[:3])    # all three sizes


def direct_launcher(compiled, grid: tuple[int, int, int]):
    """A compiled kernel's launch for a fixed grid, with the tensors and the fixed arguments
    positionally. Triton's own (``compiled[grid]``) asks the driver for the current device and
    stream, builds launch metadata and has the launcher call the enter and exit hook chains, empty
    or not, on every call: microseconds a launch, which an eager backward of five launches at small
    N pays in full (lab/attention/NOTES.md). This one binds the device of the first launch (the one
    the kernel was loaded on), reads only that device's current stream per call and calls the same
    launcher (``CompiledKernel.run``, whose call shape Triton 3.6 and 3.9 share) without hooks;
    while a hook is registered (Triton's profiler adds some), it hands the call to Triton's own."""
    from triton import knobs

    runner = compiled[grid]
    enter, leave = knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook
    chains = [h for h in (enter, leave) if h is not None]
    if not all(hasattr(h, "calls") for h in chains):     # a hook set as a plain function
        return runner
    calls = [h.calls for h in chains]    # the chains' own lists, which adding a hook changes in place
    run, function, metadata = compiled.run, compiled.function, compiled.packed_metadata
    device, current_stream = torch.cuda.current_device(), torch._C._cuda_getCurrentRawStream
    grid_x, grid_y, grid_z = grid

    def launch(*args) -> None:
        if any(calls):                   # a hook registered since: Triton's own launch calls it
            runner(*args)
        else:
            run(grid_x, grid_y, grid_z, current_stream(device), function, metadata, None, None, None, *args)
    return launch


def _sm_count(device: torch.device) -> int:
    return _sm_count_of(device.index if device.index is not None else torch.cuda.current_device())


@functools.lru_cache(maxsize=None)
def _sm_count_of(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


class _SplitForward:
    """The split-key forward as one launch for a plan: the partials' buffer, the part kernel, the
    combine kernel (called like the one-program forward's ``_Launch``)."""

    def __init__(self, q, k, v, out, lse, is_causal: bool, t: KernelTiles, splits: int):
        self.new_part = dict(size=(_part_numel(q, splits),), dtype=torch.float32, device=q.device)
        self.part = _Launch(_forward_part_kernel, *_forward_part_args(q, k, v, is_causal, t, splits), _options(t))
        self.combine = _Launch(_forward_combine_kernel, *_combine_args(out, lse, splits), {})

    def __call__(self, Q, K, V, O, L) -> None:  # noqa: N803 - the kernels' names for them
        part = torch.empty(**self.new_part)
        self.part(Q=Q, K=K, V=V, PART=part)
        self.combine(PART=part, O=O, L=L)


class _SplitLaunch:
    """A split backward kernel and its combine as one launch for a plan, called like the one-program
    kernel's ``_Launch`` with the tensors by the kernels' names (each of the two gets those it
    takes): a fresh fp32 buffer for the partials, the part kernel, then the combine."""

    def __init__(self, part: _Launch, combine: _Launch, part_numel: int, device: torch.device):
        self.part, self.combine = part, combine
        self.new_part = dict(size=(part_numel,), dtype=torch.float32, device=device)

    def __call__(self, **tensors) -> None:
        part = torch.empty(**self.new_part)
        self.part(**{name: tensors[name] for name in self.part.tensor_names if name != "PART"}, PART=part)
        self.combine(**{name: tensors[name] for name in self.combine.tensor_names if name != "PART"}, PART=part)


def _split_dkdv_launch(q, k, v, grad_out, lse, grad_k, grad_v, is_causal: bool, t: KernelTiles,
                       splits: int) -> _SplitLaunch:
    return _SplitLaunch(_Launch(_dkdv_part_kernel, *_dkdv_part_args(q, k, v, grad_out, lse, is_causal, t, splits),
                                _options(t)),
                        _Launch(_dkdv_combine_kernel, *_dkdv_combine_args(grad_k, grad_v, splits), {}),
                        2 * splits * k.numel(), q.device)


def _split_dq_launch(q, k, v, grad_out, lse, grad_q, is_causal: bool, t: KernelTiles, splits: int) -> _SplitLaunch:
    return _SplitLaunch(_Launch(_dq_part_kernel, *_dq_part_args(q, k, v, grad_out, lse, is_causal, t, splits),
                                _options(t)),
                        _Launch(_dq_combine_kernel, *_dq_combine_args(grad_q, splits), {}),
                        splits * q.numel(), q.device)


class _Plan:
    """Everything about one call of FlashAttentionTriton that depends only on the inputs' shapes,
    strides, dtype, device and causality: the tiles fitted to the grid, the output buffers' sizes
    and the kernels' launches (the backward's are made on its first call, per layout of dO)."""

    def __init__(self, q, k, v, is_causal: bool, splits: int | None = None,
                 split_backward: tuple[int, int] | None = None):
        batch, _, n_q, d = _dims(q.shape)
        n_k = k.shape[-2]
        tiles = choose_tiles(d, q.dtype)
        if not interpreting():
            sms = _sm_count(q.device)
            tiles = fit_to_grid(tiles, batch, n_q, n_k, sms)
            if splits is None:
                splits = forward_splits(tiles.forward, batch, n_q, n_k, d, q.dtype, sms)
            if split_backward is None:
                split_backward = backward_splits(tiles, batch, n_q, n_k, d, q.dtype, sms)
        self.tiles, self.is_causal, self.splits, self.n_k = tiles, is_causal, splits or 1, n_k
        # (dK/dV, dQ) slices of the split backward; forced by the caller, or 1 where the rule does
        # not run (the interpreter, which has no SM count).
        self.backward_splits = tuple(split_backward or (1, 1))
        self.shape, self.dtype, self.device = q.shape, q.dtype, q.device
        out, lse = self.new_out(), self.new_lse()
        if self.splits > 1:
            self.forward = _SplitForward(q, k, v, out, lse, is_causal, tiles.forward, self.splits)
        else:
            self.forward = _Launch(_flash_forward_kernel, *_forward_args(q, k, v, out, lse, is_causal, tiles.forward),
                                   _options(tiles.forward))
        self.backwards: dict = {}

    def new_out(self) -> torch.Tensor:
        """An empty O, laid out as this plan's launches write it (``new_output``)."""
        return new_output(self.shape, self.dtype, self.device)

    def new_lse(self) -> torch.Tensor:
        return new_row_stats(self.shape, self.device)

    def programs(self) -> dict[str, int]:
        """Each kernel's program count (the grid) for this layout."""
        batch, _, n_q, _ = _dims(self.shape)
        t = self.tiles
        return {"forward": triton.cdiv(n_q, t.forward.block_q) * batch * self.splits,
                "dkdv": triton.cdiv(self.n_k, t.dkdv.block_k) * batch * self.backward_splits[0],
                "dq": triton.cdiv(n_q, t.dq.block_q) * batch * self.backward_splits[1]}

    def backward(self, q, k, v, out, grad_out, lse):
        """dQ, dK, dV through the launches for this layout of dO and O (made on first use)."""
        layout = (grad_out.stride(), out.stride())
        launches = self.backwards.get(layout)
        if launches is None:
            launches = self.backwards[layout] = self._backward_launches(q, k, v, out, grad_out, lse)
        delta_launch, dkdv, dq = launches
        delta = self.new_lse()
        delta_launch(O=out, DO=grad_out, DELTA=delta)
        grad_q, grad_k, grad_v = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        dkdv(Q=q, K=k, V=v, DO=grad_out, L=lse, DELTA=delta, DK=grad_k, DV=grad_v)
        dq(Q=q, K=k, V=v, DO=grad_out, L=lse, DELTA=delta, DQ=grad_q)
        return grad_q, grad_k, grad_v

    def _backward_launches(self, q, k, v, out, grad_out, lse):
        t, causal = self.tiles, self.is_causal
        delta = self.new_lse()
        grad_q, grad_k, grad_v = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        dkdv_splits, dq_splits = self.backward_splits
        if dkdv_splits > 1:
            dkdv = _split_dkdv_launch(q, k, v, grad_out, lse, grad_k, grad_v, causal, t.dkdv, dkdv_splits)
        else:
            dkdv = _Launch(_flash_dkdv_kernel, *_dkdv_args(q, k, v, grad_out, lse, grad_k, grad_v, causal, t.dkdv),
                           _options(t.dkdv))
        if dq_splits > 1:
            dq = _split_dq_launch(q, k, v, grad_out, lse, grad_q, causal, t.dq, dq_splits)
        else:
            dq = _Launch(_flash_dq_kernel, *_dq_args(q, k, v, grad_out, lse, grad_q, causal, t.dq), _options(t.dq))
        return _Launch(_delta_kernel, *_delta_args(out, grad_out, delta), {}), dkdv, dq


_PLANS: dict = {}


def _plan(q, k, v, is_causal: bool) -> _Plan | None:
    """The cached plan for these inputs, or None where the plain path must run them: under
    torch.compile (which traces the plain launches), for a strided last dimension (the plain
    path copies it), and for pointers off 16-byte alignment (the compiled kernels assume it)."""
    if (torch.compiler.is_compiling() or not all(isinstance(t, torch.Tensor) for t in (q, k, v))
            or (q.data_ptr() | k.data_ptr() | v.data_ptr()) % 16):
        return None
    key = (q.shape, k.shape, v.shape, q.stride(), k.stride(), v.stride(), q.dtype, k.dtype, v.dtype, q.device,
           k.device, v.device, is_causal)
    plan = _PLANS.get(key)
    if plan is None:
        check_inputs(q, k, v, is_causal)
        _check_device(q)
        if q.stride(-1) != 1 or k.stride(-1) != 1 or v.stride(-1) != 1:
            return None
        if len(_PLANS) >= 4096:       # many distinct shapes (varying lengths): start afresh
            _PLANS.clear()
        plan = _PLANS[key] = _Plan(q, k, v, is_causal)
    return plan


def describe_launch(q, k, v, is_causal: bool) -> dict:
    """What ``FlashAttentionTriton`` launches for these inputs (for benchmark records): each
    kernel's tiles and program count, the SM count, the key splits of the forward, the (dK/dV, dQ)
    slices of the backward and how fp32 products are computed."""
    plan = _plan(q, k, v, is_causal)
    if plan is None:
        return {}
    sms = _sm_count(q.device) if q.device.type == "cuda" else None
    return {"tiles": plan.tiles.to_json(), "splits": plan.splits, "backward_splits": list(plan.backward_splits),
            "programs": plan.programs(), "sms": sms,
            "products": _precision(q.dtype)}
