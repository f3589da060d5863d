"""Kernel (or CPU operator) categories for the A2 tables: GEMM, attention-softmax, elementwise,
optimizer, other.

Two kinds of evidence, in this order:

1. Where a kernel ran. Everything inside the "computing softmax" range is attention-softmax and
   everything inside the "optimizer step" range is optimizer, whatever its name: our softmax and
   our AdamW are plain PyTorch ops whose kernels are generic reductions and elementwise kernels.
2. Its name, by ``RULES``: an ordered list of regular expressions, first match wins, matched
   case-insensitively anywhere in the name. The GEMM rule covers cuBLAS (``sm80_xmma_gemm_*``,
   ``ampere_sgemm_*``, ``gemv``, cuBLASLt's split-K reduction), CUTLASS, cuBLAS's ``nvjet`` kernels
   and Triton's matmul templates; on the CPU, ``aten::mm``-like operators. "elementwise" holds the
   memory-bound pointwise *and reduction* kernels (``elementwise_kernel``, ``reduce_kernel``, Triton
   ``poi``/``red``/``per`` kernels, ``aten::add``...): the non-matmul work that moves every element.
   Indexing, sorting, random numbers, views and allocations are "other".

The rules were checked against kernel names captured on an H100 (tests/profiling/data/).
"""
from __future__ import annotations

import re

from cs336_systems.profiling.ranges import SOFTMAX

CATEGORIES = ("GEMM", "attention-softmax", "elementwise", "optimizer", "other")
RANGE_CATEGORIES = {SOFTMAX: "attention-softmax", "optimizer step": "optimizer"}

_VIEWS_AND_ALLOCS = (r"empty|empty_like|empty_strided|zeros|ones|ones_like|zeros_like|view|reshape|_reshape_alias|"
                     r"as_strided|transpose|permute|t|numpy_t|expand|unsqueeze|squeeze|slice|select|detach|alias|"
                     r"resize_|flatten|unflatten|contiguous|to|_to_copy|lift_fresh|result_type|split|chunk|"
                     r"unbind|arange|randint|random_|tril|triu|index|index_select|embedding|gather|scatter|"
                     r"_unsafe_view|is_nonzero|item|_local_scalar_dense|set_")

RULES: tuple[tuple[str, re.Pattern], ...] = tuple((category, re.compile(pattern, re.IGNORECASE)) for category, pattern in (
    # optimizer by name: PyTorch's fused / foreach optimizers and the profiler's optimizer range
    ("optimizer", r"multi_tensor_apply|foreach|fused_adam|adamw?_|Optimizer\.step"),
    # fused attention and softmax kernels (naive softmax is caught by its range instead)
    ("attention-softmax", r"softmax|flash|fmha|attention|^aten::_?scaled_dot_product|cudnn.*sdpa"),
    # matrix products: cuBLAS / cuBLASLt, CUTLASS, nvjet, Triton templates, CPU aten ops
    ("GEMM", r"gemm|xmma|cutlass|nvjet|gemv|splitKreduce|cublas|triton_tem_fused_.*mm|_mm_|"
             r"^aten::(mm|bmm|addmm|baddbmm|addbmm|matmul|linear|einsum|dot|mv|_scaled_mm)$"),
    # indexing, sorting, random numbers, views and allocations
    ("other", r"gather|scatter|index|sort|distribution|random|uniform|normal|triu_tril|embedding|memcpy|"
              r"memset|^aten::(" + _VIEWS_AND_ALLOCS + r")$"),
    # memory-bound pointwise and reduction work
    ("elementwise", r"elementwise|vectorized|unrolled|reduce_kernel|triton_(poi|red|per)_|Functor|"
                    r"fill|copy|^aten::|"
                    # E1's fused Triton kernels (training_step.triton_*): norms, gates, rotations, the loss
                    r"^_(rms_norm|swiglu|rope|cross_entropy)_"),
))


def classify(name: str, range_name: str | None = None) -> str:
    """The category of the kernel ``name`` found inside the range ``range_name`` (None: unknown)."""
    if range_name in RANGE_CATEGORIES:
        return RANGE_CATEGORIES[range_name]
    for category, pattern in RULES:
        if pattern.search(name):
            return category
    return "other"


_GENERIC = {"gpu_kernel_impl", "gpu_kernel_impl_nocast", "BinaryFunctor", "AUnaryFunctor", "BUnaryFunctor",
            "UnaryFunctor", "func_wrapper_t", "elementwise_kernel", "vectorized_elementwise_kernel"}
_INNER = re.compile(r"[A-Za-z0-9_]+(?:Functor(?:OnSelf_[a-z]+|_[a-z]+)?|_kernel_cuda|_kernel_impl|_cuda_kernel|_kernel|Ops|_functor)\b")


def short_name(name: str, width: int = 90) -> str:
    """A readable kernel name: the function without its template arguments, plus the functor or
    inner kernel that tells PyTorch's generic kernels apart (``elementwise_kernel[MulFunctor]``)."""
    text = name.removeprefix("void ").replace("<unnamed>::", "").replace("(anonymous namespace)::", "").strip()
    cut = min([i for i in (text.find("<"), text.find("(")) if i > 0] or [len(text)])
    base, rest = text[:cut], text[cut:]
    inner = [m for m in _INNER.findall(rest) if m not in _GENERIC and m != base.rsplit("::", 1)[-1]]
    # the innermost functor names the operation (BinaryFunctor<..., MulFunctor>); else the first op kernel
    functors = [m for m in inner if "Functor" in m or m.endswith("_functor")]
    out = f"{base}[{functors[-1] if functors else inner[0]}]" if inner else base
    # CUTLASS's launch wrapper (cutlass::Kernel2<cutlass_80_simt_sgemm_...>) is named by its argument
    wrapped = re.match(r"<\s*(cutlass\w+)", rest) if base.startswith("cutlass::Kernel") else None
    if wrapped:
        out = f"{base}[{wrapped.group(1)}]"
    return out if len(out) <= width else out[: width - 1] + "…"
