"""How long a card's device memory takes to move what a step or a call must move: the floors the
reports set measured times against (``hardware.Accelerator.hbm_bandwidth``, the datasheet's).

    adamw_floor_ms(1.5e9, H200_SXM)        # one-pass AdamW over 1.5 B parameters: 8.75 ms
    cold_cache_ms(3 * 2**20, 50 * 2**20, H200_SXM)
"""
from __future__ import annotations

from cs336_systems.accounting.hardware import Accelerator

# Bytes a one-pass AdamW step moves per parameter: it reads the parameter, its gradient and both
# moments (4 x 4 B) and writes the parameter and both moments back (3 x 4 B). With bf16 weights
# (training_step.triton_adamw) the gradient read is 2 B and the bf16 copy written 2 B more: 28 still.
ADAMW_BYTES_PER_PARAMETER = 28


def adamw_floor_ms(parameters: float, card: Accelerator) -> float:
    """The least time (ms) one pass of AdamW over ``parameters`` takes: its bytes at the card's
    memory bandwidth."""
    return ADAMW_BYTES_PER_PARAMETER * parameters / card.hbm_bandwidth * 1e3


def cold_cache_ms(resident_bytes: float, l2_bytes: float, card: Accelerator) -> float:
    """The most a cold L2 cache can add to one call's time (ms): every byte resident before the call
    read once from device memory, plus a whole L2 of dirty lines (do_bench's flush is a memset)
    written back, at the card's memory bandwidth."""
    return (resident_bytes + l2_bytes) / card.hbm_bandwidth * 1e3
