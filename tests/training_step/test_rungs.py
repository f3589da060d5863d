"""The E1 ladder as data: cumulative rungs, named as documented, and the code each one runs."""
from dataclasses import asdict, fields

import pytest

from cs336_systems.training_step import rungs


def test_the_ladder_is_named_as_documented():
    assert rungs.RUNG_NAMES == ("fp32", "bf16", "flash", "compiled", "fused-adamw", "checkpointed")
    assert rungs.ANCHOR_NAMES == ("anchor-sdpa-flash", "anchor-sdpa-cudnn")
    for name in rungs.RUNG_NAMES + rungs.ANCHOR_NAMES:
        assert f"    {name}" in rungs.__doc__ or name.startswith("anchor-"), name


def test_each_rung_adds_one_technique_and_keeps_the_earlier_ones():
    first = rungs.LADDER[0].setup
    assert first == rungs.Setup() and first.optimizer == rungs.OUR_ADAMW
    seen = {}
    for before, after in zip(rungs.LADDER, rungs.LADDER[1:]):
        changed = {f.name for f in fields(rungs.Setup) if getattr(before.setup, f.name) != getattr(after.setup, f.name)}
        assert len(changed) == 1, (after.name, changed)
        seen |= {k: getattr(after.setup, k) for k in changed}
        assert {k: asdict(after.setup)[k] for k in seen} == seen, after.name     # nothing taken back
        assert rungs.previous(after.name) == before.name
    assert seen == {"precision": "bf16", "attention": "flash", "compiled": True, "fused_adamw": True,
                    "checkpointed": True}
    assert rungs.previous("fp32") is None


def test_anchors_are_plain_pytorch():
    for anchor in rungs.ANCHORS:
        s = anchor.setup
        assert anchor.anchor and rungs.previous(anchor.name) is None
        assert (s.precision, s.attention, s.compiled, s.fused_adamw, s.checkpointed) == ("bf16", "sdpa", True, True, False)
        assert s.optimizer == "torch.optim.AdamW(fused=True)"
    assert {a.setup.sdpa_kernel for a in rungs.ANCHORS} == {"flash", "cudnn"}


def test_a_rung_depends_on_its_own_attention_and_checkpointing_only():
    assert rungs.code_of("fp32") == ("cs336_basics.model",)
    assert rungs.code_of("flash") == ("cs336_systems.attention.flash_backend",)
    assert rungs.code_of("checkpointed") == ("cs336_systems.attention.flash_backend", "cs336_systems.memory.checkpointing")
    assert rungs.code_of("anchor-sdpa-cudnn") == ("cs336_systems.attention.sdpa_backend",)


def test_only_the_cudnn_anchor_needs_cuda():
    assert [n for n in rungs.BY_NAME if rungs.needs_cuda(n)] == ["anchor-sdpa-cudnn"]
    with pytest.raises(ValueError, match="unknown E1 rung 'fp16'"):
        rungs.get("fp16")
