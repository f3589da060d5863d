"""Achieved FLOP/s and model FLOP utilisation (MFU) of a timed step.

    mfu = model_step_flops(...) / step seconds / peak FLOP/s of the card for that precision

The peak is the card's datasheet number (``accounting.hardware``, looked up by the GPU name the
record's provenance holds) for the arithmetic the step's matrix products ran in:

- bf16 autocast: the dense bf16 tensor-core peak;
- fp32 with PyTorch's float32 matmul precision "highest" (its default; the benchmark keeps it):
  the fp32 peak of the CUDA cores, since no tensor core is used; with "high", TF32 tensor cores;
  with "medium", bf16 ones.

A CPU run, or a card not in the table, has no peak: its MFU is ``None`` and ``why`` says so.
"""
from __future__ import annotations

from dataclasses import dataclass

from cs336_systems.accounting.hardware import BY_DEVICE_NAME

# What PyTorch runs an fp32 matmul in, by ``torch.get_float32_matmul_precision()``.
FP32_MATMUL = {"highest": "fp32", "high": "tf32", "medium": "bf16"}
DEFAULT_FP32_MATMUL_PRECISION = "highest"


@dataclass(frozen=True)
class Peak:
    flops: float | None     # FLOP/s, None when unknown
    basis: str              # what the number is ("H200 SXM dense bf16, 989 TFLOP/s") or why there is none


def peak(gpu: str | None, precision: str, float32_matmul_precision: str | None = None) -> Peak:
    """The peak a step in ``precision`` ("fp32" or "bf16") can reach on the card named ``gpu``."""
    if not gpu:
        return Peak(None, "a CPU run: no peak")
    card = BY_DEVICE_NAME.get(gpu)
    if card is None:
        return Peak(None, f"{gpu}: not in the peak table (accounting.hardware.BY_DEVICE_NAME)")
    if precision == "bf16":
        arithmetic = "bf16"
    elif precision == "fp32":
        setting = float32_matmul_precision or DEFAULT_FP32_MATMUL_PRECISION
        if setting not in FP32_MATMUL:
            raise ValueError(f"unknown float32 matmul precision {setting!r}; one of {', '.join(FP32_MATMUL)}")
        arithmetic = FP32_MATMUL[setting]
    else:
        raise ValueError(f"unknown precision {precision!r}; one of fp32, bf16")
    flops = {"bf16": card.bf16_flops, "tf32": card.tf32_flops, "fp32": card.fp32_flops}[arithmetic]
    if flops is None:
        return Peak(None, f"{card.name}: no {arithmetic} peak in the table")
    label = {"bf16": "dense bf16 tensor cores", "tf32": "dense TF32 tensor cores", "fp32": "fp32 CUDA cores, no TF32"}
    return Peak(flops, f"{card.name} {label[arithmetic]}, {flops / 1e12:g} TFLOP/s")


@dataclass(frozen=True)
class AttentionPeak:
    """The peak that bounds one attention implementation's useful rate: the arithmetic its products
    run in (``unit``: "bf16" tensor cores, "tf32" tensor cores, "tf32x3": three TF32 products per
    useful one, so a third of that peak, or "fp32" CUDA cores) and its FLOP/s; ``lowest``: ours where
    a record does not say how its fp32 products ran, so the lowest peak they could run at."""
    unit: str
    flops: float
    lowest: bool = False


def attention_peak(gpu: str | None, impl: str, dtype: str, fp32_products: str | None) -> AttentionPeak | None:
    """The peak that bounds ``impl``'s useful rate in ``dtype`` on the card named ``gpu`` (None for a
    card the table does not list). A 16-bit dtype: the dense tensor-core peak. fp32: plain attention's
    matmuls follow PyTorch's float32 matmul precision (``FP32_MATMUL``; its default "highest" runs on
    the CUDA cores); ours' products are 3xTF32 or FMA on the CUDA cores ("ieee"), and where a record
    does not say, the CUDA-core peak, the lowest of the two: a rate far below it is far below either."""
    card = BY_DEVICE_NAME.get(gpu or "")
    if card is None or card.fp32_flops is None or card.tf32_flops is None:
        return None
    if dtype != "fp32":
        return AttentionPeak("bf16", peak(gpu, "bf16").flops)
    if fp32_products == "tf32x3":
        return AttentionPeak("tf32x3", peak(gpu, "fp32", "high").flops / 3)
    setting = fp32_products if fp32_products in FP32_MATMUL else DEFAULT_FP32_MATMUL_PRECISION
    lowest = impl == "ours" and fp32_products not in FP32_MATMUL and fp32_products != "ieee"
    return AttentionPeak(FP32_MATMUL[setting], peak(gpu, "fp32", setting).flops, lowest)


def achieved(flops: int | float, seconds: float) -> float:
    """FLOP/s of ``flops`` done in ``seconds``."""
    if not seconds > 0:
        raise ValueError(f"a step takes a positive time, got {seconds} s")
    return flops / seconds


def utilisation(flops: int | float, seconds: float, peak_flops: float | None) -> float | None:
    """MFU: the share of ``peak_flops`` the step's ``flops`` in ``seconds`` reached (None without a peak)."""
    return None if peak_flops is None else achieved(flops, seconds) / peak_flops
