"""The names of the ranges an A2 profile marks, and the two ways of marking them.

Phase ranges ("forward", "backward", "optimizer step") enclose one phase of a measured step; the
attention ranges enclose the three steps of one attention call. Under Nsight Systems they are NVTX
ranges in a domain named after the mode, so the three modes profiled in one process (and the
warm-up before each) stay apart in the report; under torch.profiler they are ``record_function``
ranges with the same names, one profiler session per mode.
"""
from __future__ import annotations

import contextlib
from typing import Callable, ContextManager

WARMUP = "warm-up"
MEASURED = "measured steps"
SCORES, SOFTMAX, FINAL = "computing attention scores", "computing softmax", "final matmul"
ATTENTION_RANGES = (SCORES, SOFTMAX, FINAL)
# workload.step's phase names -> the range names the tables use
PHASE_RANGES = {"forward": "forward", "backward": "backward", "optimizer": "optimizer step"}
# the phase ranges each mode has, in step order
MODE_PHASES = {"forward": ("forward",), "forward-backward": ("forward", "backward"),
               "train-step": ("forward", "backward", "optimizer step")}

Mark = Callable[[str], ContextManager]


def nvtx_mark(domain: str | None) -> Mark:
    """``name -> NVTX range`` in ``domain`` (None: NVTX's default domain)."""
    import nvtx

    return lambda name: nvtx.annotate(name, domain=domain)


def torch_mark(name: str) -> ContextManager:
    import torch

    return torch.profiler.record_function(name)


def no_mark(name: str) -> ContextManager:
    return contextlib.nullcontext()
