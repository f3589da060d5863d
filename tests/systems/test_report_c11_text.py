"""C11's prose about memory around the optimizer step follows the numbers: equal before and after
is explained, a difference is reported as unexplained, and PyTorch DDP's extra memory is called a
second copy of the gradients only when it is their size."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from cs336_systems.report.ddp import memory_readings
from cs336_systems.report.writeup import Renderer

TEMPLATES = Path(__file__).resolve().parents[2] / "writeup" / "templates"


def _row(variant, before, after, gradients=7.444):
    return {"variant": variant, "after_init_GiB": 7.6, "before_step_GiB": before, "after_step_GiB": after,
            "peak_GiB": before + 20, "parameters_GiB": 7.444, "gradients_GiB": gradients,
            "optimizer_state_GiB": 14.888, "activations_peak_GiB": 20.0, "step_ms": 800.0}


def _render(tmp_path, rows):
    folder = tmp_path / "C11"
    folder.mkdir()
    provenance = {"gpus": ["G"], "hosts": ["h"], "first_utc": "2026-01-01", "last_utc": "2026-01-01",
                  "dates": "2026-01-01", "sittings": [],
                  "commits": ["0" * 10], "dirty": False, "torch": ["x"], "records": 3, "statuses": {"ok": 3}}
    # the readings the report makes of the rows (report.ddp.memory_readings), which the template words
    summary = {"provenance": provenance, "memory": {r["variant"]: r for r in rows}, **memory_readings(rows), "baseline": None,
               "setup": {"size": "xl", "context": 512, "global_batch": 8, "other_batches": {}, "world_size": 2,
                         "backend": "nccl", "warmup": 2, "steps": 5, "rounds": 6, "min_rounds": 5, "judged": True},
               "first_precision": "fp32", "global_batches": {},
               # the sharded step against overlap's as report.ddp_rows.record_difference has it (12.5 ms longer)
               "versus": {"overlap-sharded": {"overlap": {
                   "ms": 12.5, "low_ms": 10.0, "high_ms": 15.0, "verdict": "higher", "sign": 1, "paired": True,
                   "less": {"ms": -12.5, "low_ms": -15.0, "high_ms": -10.0}}}}}
    (folder / "summary.json").write_text(json.dumps(summary))
    (folder / "table.csv").write_text("variant\n" + "\n".join(r["variant"] for r in rows) + "\n")
    return Renderer("md", tmp_path / "w" / "w.md", TEMPLATES).section("C11", folder / "summary.json")


@pytest.mark.parametrize("after, explained", [(30.025, True), (31.0, False)])
def test_equal_memory_around_the_step_is_explained_only_when_equal(tmp_path, after, explained):
    text = _render(tmp_path, [_row("overlap", 30.025, after), _row("overlap-sharded", 22.579, 22.579)])
    assert ("Why before and after the step are equal" in text) is explained
    assert ("differs from before it for overlap" in text) is (not explained)


@pytest.mark.parametrize("torch_before, second_copy", [(37.467, True), (33.0, False)])
def test_torch_ddp_extra_memory_is_named_only_at_the_gradients_size(tmp_path, torch_before, second_copy):
    text = _render(tmp_path, [_row("overlap", 30.025, 30.025), _row("torch-ddp", torch_before, torch_before)])
    assert ("a second copy of them" in text) is second_copy
    assert ("do not say what it is" in text) is (not second_copy)


def test_zero_stage_one_is_said_to_keep_every_gradient_too(tmp_path):
    """ZeRO's stage 1 partitions the optimizer state only: the comparison must not suggest it keeps
    fewer gradients than ours; what differs is what is sent."""
    text = _render(tmp_path, [_row("overlap", 30.025, 30.025), _row("overlap-sharded", 22.579, 22.579)])
    zero = text.split("**Against ZeRO stage 1.**")[1]
    assert "does not\nneed" not in zero and "it does not need" not in zero
    assert "every gradient on every rank" in zero and "stage 1 partitions the optimizer state only" in zero
    assert "3(N − 1)/N·P, 1.5× the data" in zero


def test_the_section_opens_with_what_sharding_saves(tmp_path):
    text = _render(tmp_path, [_row("overlap", 30.025, 30.025), _row("overlap-sharded", 22.579, 22.579)])
    opening = next(p for p in text.split("\n\n") if p.startswith("**Answer.** "))[len("**Answer.** "):]
    assert opening.startswith("Sharding Adam's moments over 2 ranks") and "from 30.02 to 22.58 GiB" in opening
