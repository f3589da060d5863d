"""What E1's Triton kernels write: bf16 rounded as PyTorch rounds, compiled and interpreted alike, in
the dtype the matmul that reads it computes in.

Triton's interpreter truncates in ``.to(tl.bfloat16)`` whatever rounding is asked for, so a kernel
tested on a CPU would compute another function than on a GPU (truncation is biased: in E1's step on
a CPU it doubled a rung's gradient error against fp32). Rounding on the bits costs a few integer
operations an element, nothing beside the memory traffic of the kernels that use it.
"""
import torch
import triton
import triton.language as tl


def matmul_dtype(x: torch.Tensor) -> torch.dtype:
    """The dtype a matmul reading ``x`` computes in: autocast's where it is on for ``x``'s device, so a
    kernel writing in it spares the cast autocast would make."""
    kind = x.device.type
    return torch.get_autocast_dtype(kind) if torch.is_autocast_enabled(kind) else x.dtype


@triton.jit
def to_bf16_nearest_even(x):
    """fp32 -> bf16 rounded to nearest, ties to even, as PyTorch rounds (finite values)."""
    bits = x.to(tl.uint32, bitcast=True)
    bits = bits + 0x7FFF + ((bits >> 16) & 1)
    return (bits >> 16).to(tl.uint16).to(tl.bfloat16, bitcast=True)


@triton.jit
def rounded(x, dtype: tl.constexpr):
    """fp32 ``x`` in ``dtype``, bf16 rounded to nearest even (module doc)."""
    if dtype == tl.bfloat16:
        return to_bf16_nearest_even(x)
    return x.to(dtype)
