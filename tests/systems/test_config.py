"""cs336_systems.pipeline.config: schema validation, one-line errors, preset resolution."""

import copy
import random
from pathlib import Path

import pytest
import yaml

from cs336_systems.models import MODEL_SIZES
from cs336_systems.pipeline import config as cfg
from cs336_systems.pipeline.config import ConfigError
from cs336_systems.pipeline.config import resolve as resolve_with
from cs336_systems.pipeline.config import validate as validate_with

REPO = Path(__file__).resolve().parents[2]
SCHEMA = REPO / "workflow" / "schemas" / "config.schema.yaml"     # what common.smk hands over


def resolve(config):
    return resolve_with(config, SCHEMA)


def validate(config):
    validate_with(config, SCHEMA)
    cfg.check_names(config)


@pytest.fixture
def shipped():
    return yaml.safe_load((REPO / "config.yaml").read_text())


def _error(config) -> str:
    with pytest.raises(ConfigError) as info:
        resolve(config)
    msg = str(info.value)
    assert "\n" not in msg and msg.startswith("config error at ")
    return msg


def test_shipped_config_validates(shipped):
    validate(shipped)
    for preset in ("full", "smoke"):
        r = resolve({**shipped, "preset": preset})
        assert (r.preset, r.run, r.why) == (preset, preset, "chosen in the config")
        assert r.grid == shipped["presets"][preset]


def test_the_schema_lists_no_names_our_tables_define():
    # Sizes, modes, back ends, B5 implementations and DDP variants are checked against their tables.
    text = SCHEMA.read_text()
    for name in [*MODEL_SIZES, "train-step", "sdpa-cudnn", "overlap-sharded", "fsdp-bf16"]:
        assert f" {name}," not in text and f"[{name}," not in text and f", {name}]" not in text, name


def test_schema_defaults_are_filled_in(shipped):
    c = copy.deepcopy(shipped)
    del c["presets"]["full"]["compile_backend"]
    assert resolve({**c, "preset": "full"}).grid["compile_backend"] == "inductor"


@pytest.mark.parametrize("where,value,what", [
    (("full", "DDP", "variants"), "zero3", "data-parallel variant"),
    (("smoke", "A1", "modes"), "backward", "a mode"),
    (("full", "B5", "impls"), "flash3", "B5 implementation"),
    (("full", "E1", "rungs"), "fp8", "a rung of the E1 ladder"),
    (("full", "E1", "anchors"), "anchor-xformers", "an E1 anchor"),
    (("full", "E1", "profiled"), "fused", "an E1 rung or anchor"),
])
def test_unknown_name_in_a_list(shipped, where, value, what):
    c = copy.deepcopy(shipped)
    preset, block, key = where
    c["presets"][preset][block][key].append(value)
    i = len(c["presets"][preset][block][key]) - 1
    msg = _error(c)
    assert msg.startswith(f"config error at presets.{preset}.{block}.{key}.{i}:") and repr(value) in msg and what in msg


def test_unknown_attention_back_end(shipped):
    c = copy.deepcopy(shipped)
    c["presets"]["full"]["A1"]["attention"] = "flash3"
    msg = _error(c)
    assert msg.startswith("config error at presets.full.A1.attention:") and all(b in msg for b in ("sdpa", "flash"))


def test_any_bucket_size_is_a_variant_and_b1_variants_are_not_ddp_names(shipped):
    c = copy.deepcopy(shipped)
    c["presets"]["full"]["DDP"]["variants"].append(f"bucketed-{random.randint(2, 500)}.5")
    validate(c)                                   # B1's own `variants` (eager, compiled) stay allowed


def test_a_traced_variant_must_run(shipped):
    c = copy.deepcopy(shipped)
    c["presets"]["smoke"]["DDP"]["traced"] = ["naive", "bucketed-1000"]
    msg = _error(c)
    assert msg.startswith("config error at presets.smoke.DDP.traced:") and "'bucketed-1000'" in msg


@pytest.mark.parametrize("elsewhere,error", [
    (["cuda-graphs", "checkpointed"], "'checkpointed' runs only where 'bf16-weights' runs out of memory"),
    (["cuda-graphs", "triton-rope"], "'triton-rope' not in E1.rungs"),
])
def test_the_rungs_away_from_e1_s_goal_are_the_ladder_s_and_keep_the_gate(shipped, elsewhere, error):
    c = copy.deepcopy(shipped)
    c["presets"]["full"]["E1"]["rungs_elsewhere"] = elsewhere
    if "triton-rope" in elsewhere:
        c["presets"]["full"]["E1"]["rungs"].remove("triton-rope")
    msg = _error(c)
    assert msg.startswith("config error at presets.full.E1.rungs_elsewhere:") and error in msg


@pytest.mark.parametrize("batch,error", [
    ({"fp32": 8, "bf16": 32}, None),
    (8, None),
    ({"fp32": 8}, "presets.full.DDP.global_batch: no batch for 'bf16'"),
    ({"fp32": 8, "bf16": 0}, "presets.full.DDP.global_batch: {'fp32': 8, 'bf16': 0} is not allowed (expected sequences"),
    ({"fp32": 8, "fp16": 8}, "presets.full.DDP.global_batch"),
])
def test_the_data_parallel_batch_is_one_number_or_one_per_precision(shipped, batch, error):
    c = copy.deepcopy(shipped)
    c["presets"]["full"]["DDP"]["global_batch"] = batch
    if error is None:
        validate(c)
    else:
        assert _error({**c, "preset": "full"}).startswith(f"config error at {error}")


def test_the_data_parallel_batch_per_precision():
    from cs336_systems.distributed.variants import global_batch
    assert [global_batch(8)(p) for p in ("fp32", "bf16")] == [8, 8]
    assert [global_batch({"fp32": 8, "bf16": 32})(p) for p in ("fp32", "bf16")] == [8, 32]
    with pytest.raises(ValueError, match="no batch for 'bf16'"):
        global_batch({"fp32": 8})("bf16")


def test_unknown_section_id(shipped):
    msg = _error({**shipped, "preset": "smoke", "sections": "A1,C13"})
    assert msg.startswith("config error at sections:") and "'C13'" in msg and "C12" in msg


def test_every_known_size_is_accepted(shipped):
    c = copy.deepcopy(shipped)
    c["presets"]["full"]["A1"]["sizes"] = random.sample(list(MODEL_SIZES), len(MODEL_SIZES))
    validate(c)


def test_unknown_size(shipped):
    c = copy.deepcopy(shipped)
    c["presets"]["full"]["A1"]["sizes"].append("huge")
    i = len(c["presets"]["full"]["A1"]["sizes"]) - 1
    msg = _error(c)
    assert msg.startswith(f"config error at presets.full.A1.sizes.{i}:")
    assert "'huge'" in msg
    for size in MODEL_SIZES:
        assert size in msg


@pytest.mark.parametrize("where", [("smoke", "A1", "warmup"), ("full", "A1", "warmup")])
def test_negative_warmup(shipped, where):
    c = copy.deepcopy(shipped)
    preset, block, key = where
    c["presets"][preset][block][key] = -random.randint(1, 9)
    msg = _error(c)
    assert msg.startswith(f"config error at presets.{preset}.{block}.{key}:")
    assert "minimum of 0" in msg


def test_negative_warmup_in_the_study_list(shipped):
    c = copy.deepcopy(shipped)
    c["presets"]["smoke"]["A1"]["warmup_study"]["warmups"] = [0, -2]
    assert _error(c).startswith("config error at presets.smoke.A1.warmup_study.warmups.1:")


def test_misspelled_key(shipped):
    c = copy.deepcopy(shipped)
    c["presets"]["smoke"]["A1"]["warmpu"] = c["presets"]["smoke"]["A1"].pop("warmup")
    msg = _error(c)
    assert msg.startswith("config error at presets.smoke.A1:")
    assert "'warmpu'" in msg and "allowed:" in msg and "warmup" in msg.split("allowed:")[1]


def test_unknown_top_level_key(shipped):
    msg = _error({**shipped, "presetz": "smoke"})
    assert "(top level)" in msg and "'presetz'" in msg and "preset" in msg.split("allowed:")[1]


def test_wrong_type(shipped):
    c = copy.deepcopy(shipped)
    c["presets"]["full"]["A1"]["batch"] = "4"
    msg = _error(c)
    assert msg.startswith("config error at presets.full.A1.batch:")
    assert "integer" in msg


def test_unknown_preset(shipped):
    msg = _error({**shipped, "preset": "fast"})
    assert msg.startswith("config error at preset:")
    assert "'fast'" in msg and all(p in msg for p in ("auto", "full", "smoke"))


@pytest.mark.parametrize("run", ["a/b", "my run", "../x", "ü"])
def test_bad_run_name(shipped, run):
    msg = _error({**shipped, "preset": "smoke", "run": run})
    assert msg.startswith("config error at run:") and repr(run) in msg


def test_missing_required_block(shipped):
    c = copy.deepcopy(shipped)
    del c["presets"]["smoke"]["A3"]
    msg = _error(c)
    assert msg.startswith("config error at presets.smoke:") and "A3" in msg


@pytest.mark.parametrize("visible,expected", [(False, "smoke"), (True, "full")])
def test_auto_preset_follows_cuda(shipped, monkeypatch, visible, expected):
    monkeypatch.setattr(cfg, "cuda_visible", lambda: visible)
    r = resolve({**shipped, "preset": "auto", "run": ""})
    assert r.preset == expected and r.run == expected
    assert r.why.startswith("auto")
    assert r.grid == shipped["presets"][expected]


def test_run_name_is_kept(shipped):
    name = f"h100-{random.randint(0, 999)}.v2_a"
    r = resolve({**shipped, "preset": "smoke", "run": name})
    assert r.run == name and r.preset == "smoke"


def test_run_defaults_when_absent(shipped):
    c = {k: v for k, v in shipped.items() if k != "run"}
    assert resolve({**c, "preset": "full"}).run == "full"
    assert resolve({**c, "preset": "full", "run": None}).run == "full"


def test_cuda_visible_respects_empty_device_list(monkeypatch):
    for value in ("", "-1"):
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", value)
        assert cfg.cuda_visible() is False


def test_sections_pick_writeup_parts():
    base = yaml.safe_load((Path(__file__).resolve().parents[2] / "config.yaml").read_text())
    assert resolve({**base, "preset": "smoke"}).sections is None
    assert resolve({**base, "preset": "smoke", "sections": "A1,B5"}).sections == ("A1", "B5")
    with pytest.raises(ConfigError, match="config error at sections"):
        resolve({**base, "preset": "smoke", "sections": "A1;B5"})


def test_a_section_part_builds_that_part_alone():
    base = yaml.safe_load((Path(__file__).resolve().parents[2] / "config.yaml").read_text())
    every = resolve({**base, "preset": "smoke"})
    assert every.builds("B2") and every.builds("B2", part="a") and every.writes("C10")
    part = resolve({**base, "preset": "smoke", "sections": "B1,B2a,C10"})
    assert part.builds("B2", part="a") and not part.builds("B2", part="b") and not part.builds("B2")
    assert part.writes("B2") and part.writes("C10") and part.builds("B1")
    assert not part.writes("C1")            # C10 is not a part of C1
    whole = resolve({**base, "preset": "smoke", "sections": "B2"})
    assert whole.builds("B2", part="b") and not whole.builds("B1")
    with pytest.raises(ConfigError, match="config error at sections"):
        resolve({**base, "preset": "smoke", "sections": "B2c"})


def test_device_gate_stops_only_a_local_cuda_run_without_a_gpu():
    from cs336_systems.pipeline.device_gate import refusal

    planned = [("A1_benchmark", 1), ("A1_benchmark", 1), ("C3_variant", 2), ("A1_report", 0), ("writeup", 0)]
    line = refusal("cuda", planned, cuda_visible=False, local=True, preset="full")
    assert line and "\n" not in line and "3 jobs would measure: A1_benchmark x2, C3_variant" in line
    assert "reuse_records=true" in line
    assert refusal("cuda", planned, cuda_visible=True, local=True, preset="full") is None      # a GPU machine
    assert refusal("cuda", planned, cuda_visible=False, local=False, preset="full") is None    # Slurm's nodes
    assert refusal("cpu", planned, cuda_visible=False, local=True, preset="smoke") is None     # the smoke preset
    assert refusal("cuda", [("A1_report", 0), ("writeup", 0)], False, True, "full") is None     # rebuild from records


def test_a_head_dimension_our_kernels_do_not_take_is_refused_in_b5(shipped):
    c = copy.deepcopy(shipped)
    c["presets"]["full"]["B5"]["head_dims"] = [64, 20]
    assert _error(c).startswith("config error at presets.full.B5.head_dims.1:")
