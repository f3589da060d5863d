"""The E1 ladder as data: cumulative rungs, named as documented, and the code each one runs."""
from dataclasses import fields

import pytest

from cs336_systems.training_step import rungs


def test_the_ladder_is_named_as_documented():
    assert rungs.RUNG_NAMES == ("fp32", "bf16", "flash", "compiled", "fused-adamw", "triton-adamw", "bf16-weights",
                                "cuda-graphs", "triton-rmsnorm", "triton-swiglu", "triton-rope", "triton-linear-ce",
                                "adamw-in-backward", "checkpointed")
    assert rungs.ANCHOR_NAMES == ("anchor-sdpa-flash", "anchor-sdpa-cudnn", "anchor-liger")
    for name in rungs.RUNG_NAMES + rungs.ANCHOR_NAMES:
        assert f"    {name}" in rungs.__doc__ or name.startswith("anchor-"), name


def test_each_rung_adds_one_technique_and_keeps_the_earlier_ones():
    first = rungs.LADDER[0].setup
    assert first == rungs.Setup() and first.optimizer == rungs.OUR_ADAMW
    seen = {}
    for after in rungs.LADDER[1:]:
        before = rungs.get(rungs.previous(after.name))
        changed = {f.name for f in fields(rungs.Setup) if getattr(before.setup, f.name) != getattr(after.setup, f.name)}
        assert len(changed) == 1, (after.name, changed)
        (field,) = changed
        assert getattr(after.setup, field) != getattr(first, field), after.name      # nothing taken back
        seen[field] = getattr(after.setup, field)
    assert seen == {"precision": "bf16", "attention": "flash", "compiled": True, "adamw": "triton",
                    "bf16_weights": True, "cuda_graphs": True, "ours": ("norm", "gate", "rope", "loss"),
                    "adamw_in_backward": True, "checkpointed": True}
    # our fused modules, one place more a rung, each keeping the ones before
    ours = [r.setup.ours for r in rungs.LADDER if r.name.startswith("triton-") and r.setup.ours]
    assert ours == [("norm",), ("norm", "gate"), ("norm", "gate", "rope"), ("norm", "gate", "rope", "loss")]
    # a line, but for the checkpointed rung: it is for where bf16-weights does not fit, so it
    # builds on that, not on the CUDA graphs (whose capture would only hold more memory)
    assert [rungs.previous(r.name) for r in rungs.LADDER] == [None, *rungs.RUNG_NAMES[:-2], "bf16-weights"]
    assert not rungs.get("checkpointed").setup.cuda_graphs


def test_anchors_are_plain_pytorch():
    for anchor in rungs.ANCHORS:
        s = anchor.setup
        assert anchor.anchor and rungs.previous(anchor.name) is None
        assert (s.precision, s.attention, s.compiled, s.adamw, s.bf16_weights, s.checkpointed) == (
            "bf16", "sdpa", True, "torch-fused", False, False)
        assert s.optimizer == "torch.optim.AdamW(fused=True)"
    assert [(a.setup.sdpa_kernel, a.setup.liger) for a in rungs.ANCHORS] == [("flash", False), ("cudnn", False),
                                                                             ("cudnn", True)]
    assert not any(r.setup.liger for r in rungs.LADDER)


def test_a_rung_depends_on_its_own_attention_optimizer_and_checkpointing_only():
    assert rungs.code_of("fp32") == ("cs336_basics.model",)
    assert rungs.code_of("flash") == rungs.code_of("fused-adamw") == ("cs336_systems.attention.flash_backend",)
    assert rungs.code_of("triton-adamw") == ("cs336_systems.attention.flash_backend", rungs.TRITON_ADAMW_MODULE)
    assert rungs.code_of("checkpointed") == ("cs336_systems.attention.flash_backend", rungs.TRITON_ADAMW_MODULE,
                                             "cs336_systems.memory.checkpointing")
    assert rungs.code_of("cuda-graphs") == ("cs336_systems.attention.flash_backend", rungs.TRITON_ADAMW_MODULE,
                                            rungs.CUDA_GRAPHS_MODULE)
    assert rungs.code_of("anchor-sdpa-cudnn") == ("cs336_systems.attention.sdpa_backend",)
    assert rungs.code_of("anchor-liger") == ("cs336_systems.attention.sdpa_backend", rungs.LIGER_MODULE)
    assert rungs.code_of("triton-rope") == rungs.code_of("cuda-graphs") + (
        "cs336_systems.training_step.triton_rmsnorm", "cs336_systems.training_step.triton_swiglu",
        "cs336_systems.training_step.triton_rope")
    assert rungs.code_of("adamw-in-backward") == rungs.code_of("triton-linear-ce") + (rungs.IN_BACKWARD_MODULE,)


def test_the_rungs_with_a_kernel_of_ours_say_they_run_triton():
    assert [n for n in rungs.RUNG_NAMES if not rungs.runs_triton(n)] == ["fp32", "bf16"]
    assert not any(rungs.runs_triton(n) for n in rungs.ANCHOR_NAMES)


def test_bf16_weights_come_only_with_our_adamw_and_autocast():
    with pytest.raises(ValueError, match="bf16 weights need bf16 autocast and our Triton AdamW"):
        rungs.Setup(precision="bf16", adamw="torch-fused", bf16_weights=True)
    with pytest.raises(ValueError, match="CUDA graphs need our Triton AdamW"):
        rungs.Setup(precision="bf16", adamw="torch-fused", cuda_graphs=True)
    with pytest.raises(ValueError, match="no fused module of ours for bias"):
        rungs.Setup(ours=("bias",))
    with pytest.raises(ValueError, match="Liger-Kernel's modules or ours, not both"):
        rungs.Setup(ours=("norm",), liger=True)
    with pytest.raises(ValueError, match="the update in backward is our Triton AdamW's"):
        rungs.Setup(adamw="torch-fused", adamw_in_backward=True)
    with pytest.raises(ValueError, match="unknown AdamW 'sgd'"):
        rungs.Setup(adamw="sgd")


def test_only_the_graphs_and_the_cudnn_and_liger_anchors_need_cuda():
    assert [n for n in rungs.BY_NAME if rungs.needs_cuda(n)] == ["cuda-graphs", "triton-rmsnorm", "triton-swiglu",
                                                                 "triton-rope", "triton-linear-ce", "adamw-in-backward",
                                                                 "anchor-sdpa-cudnn", "anchor-liger"]
    assert "Liger-Kernel" in rungs.needs_cuda("anchor-liger")
    assert rungs.needs_cuda("cuda-graphs") == "CUDA graphs need a CUDA GPU"
    with pytest.raises(ValueError, match="unknown E1 rung 'fp16'"):
        rungs.get("fp16")
