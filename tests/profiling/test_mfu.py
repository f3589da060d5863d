"""A step's FLOPs in closed form against PyTorch's own count, and MFU on a step of known FLOPs."""
import math
import random

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from cs336_systems.accounting.hardware import H100_SXM, H200_SXM
from cs336_systems.models import MODES, ModelSize
from cs336_systems.profiling.flops import model_step_flops
from cs336_systems.profiling.mfu import peak, utilisation
from cs336_systems.workload import build_workload


def counted_flops(size, *, batch, context, mode, vocab_size):
    """PyTorch's FlopCounterMode over one real step of the workload A1 times."""
    torch.manual_seed(0)
    workload = build_workload(size, context=context, batch=batch, mode=mode, vocab_size=vocab_size)
    with FlopCounterMode(display=False) as counter:
        workload.step()
    return counter.get_total_flops()


@pytest.mark.parametrize("mode", MODES)
def test_closed_form_matches_torch_flop_counter(mode):
    rng = random.Random(random.getrandbits(32))
    heads = rng.choice([1, 2, 4])
    size = ModelSize(d_model=heads * rng.choice([4, 8]), d_ff=rng.randint(8, 40), num_layers=rng.randint(1, 3),
                     num_heads=heads)
    batch, context, vocab = rng.randint(1, 3), rng.randint(2, 17), rng.randint(11, 60)
    assert model_step_flops(size, batch=batch, context=context, mode=mode, vocab_size=vocab) == \
        counted_flops(size, batch=batch, context=context, mode=mode, vocab_size=vocab)


def test_unknown_mode_is_one_line():
    with pytest.raises(ValueError, match="unknown mode 'sideways'"):
        model_step_flops(ModelSize(8, 16, 1, 2), batch=1, context=4, mode="sideways")


def test_mfu_of_a_step_of_known_flops():
    """A step whose FLOPs PyTorch counts, given a time that makes it a quarter of the H200's bf16 peak."""
    size = ModelSize(d_model=16, d_ff=40, num_layers=2, num_heads=4)
    flops = counted_flops(size, batch=2, context=8, mode="forward-backward", vocab_size=50)
    seconds = flops / (0.25 * 989e12)
    card = peak("NVIDIA H200", "bf16")
    assert card.flops == H200_SXM.bf16_flops == 989e12
    assert utilisation(flops, seconds, card.flops) == pytest.approx(0.25)
    # fp32 without TF32 (PyTorch's default) is measured against the CUDA cores' 67 TFLOP/s
    assert peak("NVIDIA H100 80GB HBM3", "fp32").flops == H100_SXM.fp32_flops == 67e12
    assert peak("NVIDIA H100 80GB HBM3", "fp32", "highest").flops == 67e12
    assert peak("NVIDIA H100 80GB HBM3", "fp32", "high").flops == H100_SXM.tf32_flops


@pytest.mark.parametrize("gpu, why", [(None, "CPU"), ("NVIDIA GeForce RTX 4090", "not in the peak table")])
def test_no_peak_no_mfu(gpu, why):
    card = peak(gpu, "bf16")
    assert card.flops is None and why in card.basis
    assert utilisation(1e12, 1.0, card.flops) is None


def test_bad_inputs_are_one_line():
    with pytest.raises(ValueError, match="unknown precision 'fp8'"):
        peak("NVIDIA H200", "fp8")
    with pytest.raises(ValueError, match="positive time"):
        utilisation(1, 0.0, 1e12)
    assert math.isclose(utilisation(2e12, 2.0, 1e12), 1.0)
