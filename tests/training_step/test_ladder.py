"""The E1 job on the CPU: every rung of a point in one job, taking turns; the losses it records checked
independently; an OOM that leaves the others going; skips."""
import dataclasses
import json
import math
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

from cs336_systems.models import MODEL_SIZES, build_model, get_size, random_batch
from cs336_systems.records import STATUSES
from cs336_systems.report.e1 import GRAD_RTOL, LOSS_RTOL
from cs336_systems.training_step import ladder, rungs
from cs336_systems.training_step import step as step_module
from cs336_systems.training_step.check import GradientReference, group_of, host_copy

POINT = ["--size", "tiny", "--context", "16", "--batch", "2", "--warmup", "1", "--seed", "3",
         "--backend", "aot_eager", "--device", "cpu"]
JOB = [*POINT, "--rounds", "3", "--steps", "1", "--checkpoint-group", "1"]
ALL = list(rungs.RUNG_NAMES + rungs.ANCHOR_NAMES)


def float64_loss(seed, context, batch) -> float:
    """fp32 eager's first loss, computed apart: the same seeded init and batch, a float64 forward."""
    from cs336_basics.nn_utils import cross_entropy

    torch.manual_seed(seed)
    model = build_model(get_size("tiny"), context)
    inputs, targets = random_batch(batch, context)
    with torch.no_grad():
        return cross_entropy(model.double()(inputs), targets).item()


def read(paths) -> dict:
    records = {}
    for path in paths:
        record = json.loads(path.read_text())
        assert record["id"] == "E1" and record["status"] in STATUSES
        records[record["params"]["rung"]] = record
    return records


def smoke_records(smoke) -> dict:
    """The smoke run's E1 records (its one point, every rung and anchor): the job as its rule runs it,
    in its own process, so the Triton interpreter is chosen before our kernels are first imported."""
    copy, proc, _ = smoke
    assert proc.returncode == 0, proc.stderr[-2000:]
    folder = copy / "results" / "smoke" / "E1" / "records"
    return read([folder / f"tiny_ctx16_{name}.json" for name in ALL])


def test_a_point_s_rungs_and_anchors_take_turns_in_one_job_and_their_first_losses_check_out(smoke):
    records = smoke_records(smoke)
    assert list(records) == ALL
    ran = {n: r for n, r in records.items() if r["status"] == "ok"}
    # our fused modules build on the CUDA graphs: test_our_fused_modules_compute_what... runs them on a CPU
    on_cuda = {"cuda-graphs", "triton-rmsnorm", "triton-swiglu", "triton-rope", "triton-linear-ce", "adamw-in-backward",
               "anchor-sdpa-cudnn", "anchor-liger"}
    assert set(ran) == set(ALL) - on_cuda - {"checkpointed"}, {n: r.get("message") for n, r in records.items()}
    for name in on_cuda:
        assert records[name]["status"] == "skipped" and "CUDA" in records[name]["reason"]
    assert records["checkpointed"]["reason"] == "not needed: the previous rung (bf16-weights) fits"
    # one job: every record names it, its entrants and its rounds
    jobs = {r["metrics"]["turns"]["job"] for r in records.values()}
    assert len(jobs) == 1 and records["fp32"]["metrics"]["turns"]["with"] == ALL
    p = records["fp32"]["params"]
    for name, r in ran.items():
        m = r["metrics"]
        assert len(m["rounds"]) == p["rounds"] and all(len(rd["step"]) == p["steps"] for rd in m["rounds"])
        assert m["step"]["n"] == p["rounds"] * p["steps"]
        assert m["tokens_per_s"] == pytest.approx(p["batch"] * p["context"] / (m["step"]["median"] / 1e3))
        assert set(m) >= {"forward", "backward", "optimizer", "loss", "peak_memory_bytes", "first_step_ms"}
        assert len(m["warmup_step_samples"]) == p["warmup"] - 1          # the steps after the first
        assert (r["params"]["rounds"], r["params"]["steps"]) == (p["rounds"], p["steps"])
    # first losses: fp32 eager against a float64 forward computed apart; every other rung within the
    # report's tolerance; compiled and fused-adamw run the same graph from the same restored weights
    losses = {n: r["metrics"]["loss"] for n, r in ran.items()}
    assert losses["fp32"] == pytest.approx(float64_loss(p["seed"], p["context"], p["batch"]), rel=1e-5)
    assert all(abs(loss / losses["fp32"] - 1) <= LOSS_RTOL for loss in losses.values()), losses
    assert losses["compiled"] == losses["fused-adamw"]
    assert records["fp32"]["params"]["optimizer"].startswith("cs336_basics.optimizer.AdamW")
    p = records["anchor-sdpa-flash"]["params"]
    assert (p["precision"], p["compiled"], p["compile_backend"], p["optimizer"]) == \
        ("bf16", True, "aot_eager", "torch.optim.AdamW(fused=True)")


def _flash_as_sdpa(monkeypatch):
    """Our FlashAttention on the CPU runs in Triton's interpreter, chosen before its first import;
    in this process the tests give its rungs PyTorch's SDPA instead (what the turns do is the subject)."""
    real = step_module.get_attention_backend
    monkeypatch.setattr(step_module, "get_attention_backend", lambda name: real("sdpa" if name == "flash" else name))
    monkeypatch.setenv("TRITON_INTERPRET", "1")


@pytest.mark.parametrize("when", [1, 3])       # its first (warm-up) step, or its turn in round 2
def test_a_rung_that_runs_out_of_memory_is_oom_and_the_others_go_on(tmp_path, monkeypatch, when):
    _flash_as_sdpa(monkeypatch)
    real_step = step_module.SharedPoint.step
    cleared = []

    def step(self, setup, **watching):
        inner = real_step(self, setup, **watching)
        if not (setup.bf16_weights and not setup.checkpointed):
            return inner
        taken = []

        def failing(phase):
            taken.append(1)
            loss = inner(phase)
            if len(taken) == when:
                self.model.lm_head.weight.grad = torch.ones_like(self.model.lm_head.weight)   # a half-done step's
                raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
            return loss
        return failing

    real_clear = step_module.SharedPoint.clear
    monkeypatch.setattr(step_module.SharedPoint, "step", step)
    monkeypatch.setattr(step_module.SharedPoint, "clear", lambda self: (cleared.append(1), real_clear(self)))
    names = ["fp32", "bf16-weights", "checkpointed", "anchor-sdpa-flash"]
    outs = [tmp_path / f"{n}.json" for n in names]
    assert ladder.main([*JOB, "--rungs", *names, "--out", *map(str, outs)]) == 0
    records = read(outs)
    assert records["bf16-weights"]["status"] == "oom" and "out of memory" in records["bf16-weights"]["message"]
    assert cleared          # the half-done step's gradients let go before the next turn
    for name in ("fp32", "anchor-sdpa-flash"):
        assert records[name]["status"] == "ok" and len(records[name]["metrics"]["rounds"]) == 3
    checkpointed = records["checkpointed"]
    if when == 1:       # found out of memory in the warm-up, before the checkpointed rung was built: it runs
        assert checkpointed["status"] == "ok", checkpointed.get("message")
        assert checkpointed["params"]["checkpoint_group"] == 1 and checkpointed["params"]["checkpointed"]
        assert abs(checkpointed["metrics"]["loss"] / records["fp32"]["metrics"]["loss"] - 1) <= LOSS_RTOL
    else:               # it fitted its warm-up, so checkpointing was not needed
        assert checkpointed["status"] == "skipped" and "fits" in checkpointed["reason"]
        assert "step" not in records["bf16-weights"]["metrics"]     # an OOM record holds no time
    assert {r["metrics"]["turns"]["job"] for r in records.values()} == {records["fp32"]["metrics"]["turns"]["job"]}
    assert records["anchor-sdpa-flash"]["metrics"]["loss"] == pytest.approx(records["fp32"]["metrics"]["loss"], rel=LOSS_RTOL)


def test_the_rungs_that_differ_only_in_the_optimizer_share_one_compiled_graph(tmp_path, monkeypatch):
    """compiled, fused-adamw and triton-adamw differ only in the optimizer: only the first compiles."""
    from torch._dynamo.utils import counters

    _flash_as_sdpa(monkeypatch)

    def graphs(names, tag):
        torch._dynamo.reset()
        before = counters["stats"]["unique_graphs"]
        outs = [tmp_path / f"{tag}_{n}.json" for n in names]
        assert ladder.main([*JOB, "--rungs", *names, "--out", *map(str, outs)]) == 0
        assert all(r["status"] == "ok" for r in read(outs).values())
        return counters["stats"]["unique_graphs"] - before

    alone = graphs(["compiled"], "alone")
    assert alone >= 1 and graphs(["compiled", "fused-adamw", "triton-adamw"], "all") == alone


def test_the_checkpointed_rung_runs_only_where_the_rung_before_ran_out_of_memory():
    assert ladder.gated_skip("fused-adamw", None) == "not needed: the previous rung (fused-adamw) fits"
    assert ladder.gated_skip("fused-adamw", ("oom", "CUDA out of memory")) is None
    failed = ladder.gated_skip("fused-adamw", ("error", "head dimension 80"))
    assert "head dimension 80" in failed and "cannot change that" in failed


def test_restoring_puts_back_the_seeded_weights_after_another_rung_stepped():
    point = step_module.SharedPoint(get_size("tiny"), context=16, batch=2, device="cpu", seed=3, backend="aot_eager")
    before = [p.detach().clone() for p in point.parameters]
    fp32 = point.step(rungs.get("fp32").setup)
    for _ in range(2):
        fp32()
    assert any(not torch.equal(p, b) for p, b in zip(point.parameters, before))
    point.restore()
    assert all(torch.equal(p, b) for p, b in zip(point.parameters, before))
    # every optimizer updates the same two moments per parameter
    ours, fused = point.optimizer(rungs.get("fp32").setup), point.optimizer(rungs.get("fused-adamw").setup)
    triton = point.optimizer(rungs.get("bf16-weights").setup)
    for p in point.parameters:
        assert ours.state[p]["exp_avg"] is fused.state[p]["exp_avg"] is triton.state[p]["exp_avg"]
        assert ours.state[p]["exp_avg_sq"] is fused.state[p]["exp_avg_sq"] is triton.state[p]["exp_avg_sq"]
    # and both start again as built: zero moments, no step taken
    fused_step = point.step(rungs.get("fused-adamw").setup)
    fp32()
    fused_step()
    assert ours.state[point.parameters[0]]["step"] == 1 and int(fused.state[point.parameters[0]]["step"]) == 1
    point.restore()
    for p in point.parameters:
        assert ours.state[p]["step"] == 0 and int(fused.state[p]["step"]) == 0
        assert not ours.state[p]["exp_avg"].any() and not ours.state[p]["exp_avg_sq"].any()


def _losses_and_gradients_apart(p: dict, steps: int, autocast: bool):
    """A point's first ``steps`` losses and first gradients, computed apart from the job: the same
    seeded model and batch (the record's params ``p``), cs336_basics' AdamW built fresh, the model run
    as it is."""
    from cs336_basics.nn_utils import cross_entropy
    from cs336_basics.optimizer import AdamW

    from cs336_systems.workload import LEARNING_RATE

    torch.manual_seed(p["seed"])
    model = build_model(get_size(p["size"]), p["context"])
    inputs, targets = random_batch(p["batch"], p["context"])
    opt = AdamW(model.parameters(), lr=LEARNING_RATE)
    losses, grads = [], None
    for _ in range(steps):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            loss = cross_entropy(model(inputs), targets)
        loss.backward()
        grads = grads or {n: p.grad.clone() for n, p in model.named_parameters()}
        opt.step()
        model.zero_grad(set_to_none=True)
        losses.append(loss.item())
    return losses, grads


def test_the_job_keeps_each_warm_up_step_s_loss_and_the_first_gradients_error_against_fp32_eager_s(smoke):
    read = smoke_records(smoke)
    records, p = {n: r["metrics"] for n, r in read.items()}, read["fp32"]["params"]
    warmup = p["warmup"]
    assert warmup >= 2                     # the smoke preset's: a loss after an update is among them
    # fp32 eager's losses over the warm-up steps from the seeded state, against a model and optimizer built apart
    fp32_losses, fp32_grads = _losses_and_gradients_apart(p, warmup, autocast=False)
    assert records["fp32"]["losses"] == pytest.approx(fp32_losses, rel=1e-6)
    assert records["fp32"]["loss"] == records["fp32"]["losses"][0]
    assert fp32_losses[-1] < fp32_losses[0]          # the updates moved the loss: the later steps see them
    assert records["fp32"]["gradient_rel_error"] is None        # the reference itself
    # bf16's gradient error per group, against the same quantity computed apart
    bf16_losses, bf16_grads = _losses_and_gradients_apart(p, 1, autocast=True)
    apart: dict[str, list[float]] = {}
    for name, g in bf16_grads.items():
        d, r = apart.setdefault(group_of(name), [0.0, 0.0]), fp32_grads[name]
        d[0] += float((g.double() - r.double()).pow(2).sum())
        d[1] += float(r.double().pow(2).sum())
    errors = records["bf16"]["gradient_rel_error"]
    assert set(errors) == set(apart) and "layers.attn.q_proj.weight" in errors
    assert errors == pytest.approx({k: (d / r) ** 0.5 for k, (d, r) in apart.items()}, rel=1e-3)
    assert records["bf16"]["losses"][0] == pytest.approx(bf16_losses[0], rel=1e-6)
    for name in ("bf16", "flash", "compiled", "fused-adamw", "triton-adamw", "bf16-weights"):
        m = records[name]
        assert len(m["losses"]) == warmup
        assert all(abs(a / b - 1) <= LOSS_RTOL for a, b in zip(m["losses"], records["fp32"]["losses"])), name
        assert 0 < max(m["gradient_rel_error"].values()) <= GRAD_RTOL, name


def test_bad_options_stop_in_one_line(capsys):
    with pytest.raises(SystemExit):
        ladder.main([*JOB, "--rungs", "fp32", "--warmup", "0", "--out", "x.json"])
    assert "--warmup must be at least 1 (the first warm-up step gives the loss)" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        ladder.main([*JOB, "--rungs", "fp32", "bf16", "--out", "x.json"])
    assert "--out needs one path per rung: 2 rungs, 1 paths" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        ladder.main([*JOB, "--rungs", "checkpointed", "bf16-weights", "--out", "x.json", "y.json"])
    assert "bf16-weights must come before it" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        ladder.main([*POINT, "--rounds", "2", "--rungs", "fp32", "--out", "x.json"])
    assert "--rounds must be at least 3" in capsys.readouterr().err


def test_the_loss_tolerance_tells_bf16_rounding_from_a_wrong_attention():
    """The report's tolerance (report.e1's doc says why) on the tiny model: bf16 autocast inside it,
    attention that ignores the causal mask outside it."""
    from cs336_basics.model import set_attention
    from cs336_basics.nn_utils import cross_entropy

    torch.manual_seed(0)
    model = build_model(get_size("tiny"), 16)
    inputs, targets = random_batch(2, 16)
    with torch.no_grad():
        fp32 = cross_entropy(model(inputs), targets).item()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            bf16 = cross_entropy(model(inputs), targets).item()
        set_attention(model, lambda q, k, v, is_causal: F.scaled_dot_product_attention(q, k, v, is_causal=False))
        unmasked = cross_entropy(model(inputs), targets).item()
    assert abs(bf16 / fp32 - 1) < LOSS_RTOL < abs(unmasked / fp32 - 1)
    assert not math.isclose(unmasked, fp32, rel_tol=LOSS_RTOL)


def test_the_gradient_tolerance_tells_bf16_rounding_from_a_wrong_attention():
    """The report's gradient tolerance (report.e1's doc says why) on the tiny model, through the
    job's own comparison: bf16 autocast's first gradients inside it in every group, attention that
    ignores the causal mask outside it in every group."""
    from cs336_basics.model import set_attention
    from cs336_basics.nn_utils import cross_entropy

    torch.manual_seed(0)
    model = build_model(get_size("tiny"), 16)
    inputs, targets = random_batch(2, 16)
    names, parameters = zip(*model.named_parameters())

    def first_gradients(autocast=False):
        model.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            cross_entropy(model(inputs), targets).backward()

    first_gradients()
    reference = GradientReference(names, parameters)
    assert max(reference.relative_errors(parameters).values()) == 0
    first_gradients(autocast=True)
    bf16 = reference.relative_errors(parameters)
    set_attention(model, lambda q, k, v, is_causal: F.scaled_dot_product_attention(q, k, v, is_causal=False))
    first_gradients()
    unmasked = reference.relative_errors(parameters)
    assert max(bf16.values()) < GRAD_RTOL < min(unmasked.values())


def test_the_reference_keeps_its_own_copy_of_the_gradients_it_took():
    """The reference's gradients are copies: the next rung's backward, writing the same .grad
    tensors, does not move them."""
    weight = torch.nn.Parameter(torch.randn(4, 3))
    weight.grad = torch.randn(4, 3)
    reference = GradientReference(["layers.0.w"], [weight])
    taken = weight.grad.clone()
    weight.grad.mul_(2)                         # another rung's gradients in the same tensor
    assert reference.relative_errors([weight]) == {"layers.w": pytest.approx(1.0)}
    assert torch.equal(reference.gradients[0], taken)


@pytest.mark.gpu
def test_on_a_gpu_host_copies_are_page_locked_and_come_back_as_they_went():
    on_device = torch.randn(1000, 33, device="cuda")
    kept = host_copy(on_device)
    assert kept.device.type == "cpu" and kept.is_pinned() and torch.equal(kept.cuda(), on_device)
    on_device.add_(1)                           # a copy, not a view
    assert not torch.equal(kept.cuda(), on_device)


@pytest.mark.gpu
def test_on_a_gpu_a_rung_s_peak_in_the_shared_job_is_the_one_it_has_alone_and_losses_agree(tmp_path):
    """Every rung of a small point in one job on a GPU (Inductor): each rung's timed peak equals the
    peak it has in a job of its own (nothing of another rung outlives its turn), compiled and
    fused-adamw compute the same first loss, and every loss is within the report's tolerance."""
    point = ["--size", "small", "--context", "256", "--batch", "2", "--warmup", "2", "--rounds", "3", "--steps", "2",
             "--compile-mode", "blocks", "--device", "cuda"]

    def job(names, tag):
        outs = [tmp_path / f"{tag}_{n}.json" for n in names]
        proc = subprocess.run([sys.executable, "-m", "cs336_systems.training_step.ladder", *point, "--rungs", *names,
                               "--out", *map(str, outs)], capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, proc.stderr[-2000:]
        return read(outs)

    shared = job(ALL, "shared")
    assert {n for n, r in shared.items() if r["status"] == "ok"} >= set(ALL) - {"checkpointed", "anchor-liger"}
    for name in ("fp32", "bf16", "fused-adamw", "bf16-weights", "cuda-graphs", "anchor-sdpa-cudnn"):
        alone = job([name], name)[name]
        assert shared[name]["metrics"]["peak_memory_bytes"] == pytest.approx(alone["metrics"]["peak_memory_bytes"],
                                                                          rel=0.01), name
    losses = {n: r["metrics"]["loss"] for n, r in shared.items() if r["status"] == "ok"}
    assert losses["compiled"] == pytest.approx(losses["fused-adamw"], rel=1e-6)
    # bf16 copies hold the bits autocast casts to, and our AdamW moves both alike
    assert shared["bf16-weights"]["metrics"]["losses"] == pytest.approx(shared["triton-adamw"]["metrics"]["losses"],
                                                                        rel=1e-5)
    # the graphs replay the step bf16-weights takes (its second loss comes from a replay), and hold
    # what it holds: the capture's peak, not the replays' (which allocate nothing)
    assert shared["cuda-graphs"]["metrics"]["losses"] == pytest.approx(shared["bf16-weights"]["metrics"]["losses"],
                                                                       rel=1e-6)
    assert shared["cuda-graphs"]["metrics"]["peak_memory_bytes"] == pytest.approx(
        shared["bf16-weights"]["metrics"]["peak_memory_bytes"], rel=0.05)
    assert all(abs(loss / losses["fp32"] - 1) <= LOSS_RTOL for loss in losses.values()), losses
    # and after updates, and the first gradients, group by group: every rung that ran, the anchors too
    later = {n: r["metrics"]["losses"] for n, r in shared.items() if r["status"] == "ok"}
    assert all(abs(a / b - 1) <= LOSS_RTOL for n in later for a, b in zip(later[n], later["fp32"])), later
    worst = {n: max(r["metrics"]["gradient_rel_error"].values()) for n, r in shared.items()
             if r["status"] == "ok" and n != "fp32"}
    assert all(w <= GRAD_RTOL for w in worst.values()), worst
    # Liger is an optional extra: where it is installed (the GPU machines carry it), its anchor runs
    from cs336_systems.training_step.liger import missing
    assert (shared["anchor-liger"]["status"] == "ok") == (missing() is None), shared["anchor-liger"].get("reason")


def test_bf16_weights_compute_what_fp32_weights_under_autocast_compute_and_go_with_the_rung_s_turn():
    """The bf16-weights rung holds bf16 copies of the matrices, which autocast would otherwise cast the
    fp32 weights to each forward: from the same seeded state its losses over three updates and its
    first gradients equal triton-adamw's (the same AdamW, fp32 weights), and switching to another
    rung puts the fp32 weights back and drops the copies."""
    from cs336_basics.model import Linear

    point = step_module.SharedPoint(get_size("tiny"), context=16, batch=2, device="cpu", seed=5, backend="aot_eager")
    fp32_weights = {id(m): m.weight for m in point.model.modules() if isinstance(m, Linear)}
    eager = {name: dataclasses.replace(rungs.get(name).setup, compiled=False, attention="sdpa")
             for name in ("triton-adamw", "bf16-weights")}

    def run(name):
        point.restore()
        losses, grads = [], {}

        def keep():
            grads.update({n: h.grad.float().clone() for n, h in zip(point.names, point.gradient_holders())})
        step = point.step(eager[name], watched=3, on_loss=losses.append, on_gradients=keep)
        for _ in range(3):
            step()
        return losses, grads

    fp32_losses, fp32_grads = run("triton-adamw")
    assert all(isinstance(m.weight, torch.nn.Parameter) and m.weight.dtype == torch.float32
               for m in point.model.modules() if isinstance(m, Linear))
    bf16_losses, bf16_grads = run("bf16-weights")
    matrices = [m for m in point.model.modules() if isinstance(m, Linear)]
    assert matrices and all(m.weight.dtype == torch.bfloat16 for m in matrices)
    assert fp32_losses[2] < fp32_losses[0]
    assert bf16_losses == pytest.approx(fp32_losses, rel=1e-6)
    assert bf16_grads.keys() == fp32_grads.keys()
    for name in fp32_grads:
        assert torch.allclose(bf16_grads[name], fp32_grads[name], rtol=1e-5, atol=1e-7), name
    # the fp32 masters moved with the copies: each copy is its master rounded to bf16
    for m in matrices:
        assert torch.equal(m.weight.detach(), fp32_weights[id(m)].detach().to(torch.bfloat16))
    point.configure(eager["triton-adamw"])
    assert all(m.weight is fp32_weights[id(m)] for m in matrices)
    assert all(h is p for h, p in zip(point.gradient_holders(), point.parameters))


def test_the_liger_anchor_is_skipped_with_how_to_install_where_liger_is_missing(monkeypatch):
    from cs336_systems.training_step import liger

    monkeypatch.setattr(liger.importlib.util, "find_spec", lambda name: None)
    assert ladder.unavailable("anchor-liger", "cuda") == "Liger-Kernel is not installed (pip install -e '.[liger]')"
    assert "CUDA GPU" in ladder.unavailable("anchor-liger", "cpu")
    assert ladder.unavailable("anchor-sdpa-cudnn", "cuda") is None


def test_liger_s_modules_take_the_model_s_places_over_its_own_parameters_and_give_them_back():
    from cs336_systems.training_step.liger import KIT, LigerRMSNorm, LigerSwiGLU
    from cs336_systems.training_step.swap import HiddenStates, Swap

    point = step_module.SharedPoint(get_size("tiny"), context=16, batch=2, device="cpu", seed=5, backend="aot_eager")
    model = point.model
    own = {name: module for name, module in model.named_modules()}
    before = [id(p) for p in model.parameters()]
    swap = Swap(model, point.blocks)
    swap.hold({kind: KIT for kind in KIT})
    assert all(isinstance(b.ln1, LigerRMSNorm) and isinstance(b.ln2, LigerRMSNorm) and isinstance(b.ffn, LigerSwiGLU)
               for b in point.blocks)
    assert all(b.attn.rope is own["layers.0.attn.rope"] or b.attn.rope is own[f"layers.{i}.attn.rope"]
               for i, b in enumerate(point.blocks))             # Liger's RoPE is another function: not swapped
    assert isinstance(model.ln_final, LigerRMSNorm) and isinstance(model.lm_head, HiddenStates)
    assert sorted(id(p) for p in model.parameters()) == sorted(before)      # the same tensors, none added
    assert point.blocks[0].ffn.w1 is own["layers.0.ffn"].w1 and point.blocks[0].ln1.weight is own["layers.0.ln1"].weight
    hidden = torch.randn(2, 3, model.lm_head.head.weight.shape[1])
    assert model.lm_head(hidden) is hidden          # the head is fused into the loss instead
    swap.hold({})
    assert dict(model.named_modules()).keys() == own.keys()
    assert all(module is own[name] for name, module in model.named_modules())


def test_swapping_the_same_kits_in_twice_changes_nothing_the_second_time(monkeypatch):
    """configure() runs before every step: a swap already made must not set ~100 attributes again."""
    from cs336_systems.training_step.liger import KIT
    from cs336_systems.training_step.swap import Swap

    point = step_module.SharedPoint(get_size("tiny"), context=16, batch=2, device="cpu", seed=5, backend="aot_eager")
    swap = Swap(point.model, point.blocks)
    swap.hold({kind: KIT for kind in KIT})
    calls = []
    real = torch.nn.Module.__setattr__
    monkeypatch.setattr(torch.nn.Module, "__setattr__", lambda self, k, v: (calls.append(k), real(self, k, v))[1])
    swap.hold({kind: KIT for kind in KIT})
    assert calls == []
    swap.hold({})
    assert len(calls) == len(swap.places)
    with pytest.raises(ValueError, match="no such kind of place: bias"):
        swap.hold({"bias": KIT})


def _eager_sdpa(name: str) -> rungs.Setup:
    """Rung ``name``'s setup without CUDA graphs or compiling, attention by SDPA: what a CPU runs of it."""
    return dataclasses.replace(rungs.get(name).setup, cuda_graphs=False, compiled=False, attention="sdpa")


def _two_steps(point, setup) -> tuple[list[float], dict, list[torch.Tensor]]:
    """From the point's restored seeded state, two steps of ``setup``: their losses, the first step's
    gradients (float64, by parameter name) and the weights after them."""
    point.restore()
    losses, grads = [], {}

    def keep():
        grads.update({n: h.grad.double().clone() for n, h in zip(point.names, point.gradient_holders())})
    step = point.step(setup, watched=2, on_loss=losses.append, on_gradients=keep)
    for _ in range(2):
        step()
    return losses, grads, [p.detach().clone() for p in point.parameters]


def test_our_fused_modules_compute_what_the_model_s_own_compute_step_after_step():
    """The triton-* rungs' setups without CUDA graphs or compiling (a CPU runs Triton's interpreter;
    test_fused_ops compiles the modules), on the GPU where there is one: from one seeded state, two
    steps' losses and the first step's gradients against fp32 eager's, within the report's tolerances
    and no farther than the same bf16 step with the model's own norms, gate, RoPE and loss lands; then
    the model's modules are back in their places."""
    from cs336_systems.report.e1 import GRAD_RTOL, LOSS_RTOL

    device = "cuda" if torch.cuda.is_available() else "cpu"     # our kernels compiled, or in the interpreter
    point = step_module.SharedPoint(get_size("tiny"), context=16, batch=2, device=device, seed=5, backend="aot_eager")
    own = dict(point.model.named_modules())

    def errors(grads):
        return {n: float((grads[n] - fp32_grads[n]).norm() / fp32_grads[n].norm()) for n in fp32_grads}

    fp32_losses, fp32_grads, _ = _two_steps(point, dataclasses.replace(rungs.get("fp32").setup, attention="sdpa"))
    base_losses, base_grads, _ = _two_steps(point, _eager_sdpa("cuda-graphs"))
    base = errors(base_grads)
    for name in ("triton-rmsnorm", "triton-swiglu", "triton-rope", "triton-linear-ce"):
        losses, grads, _ = _two_steps(point, _eager_sdpa(name))
        assert losses == pytest.approx(fp32_losses, rel=LOSS_RTOL), name
        assert losses != base_losses or name == "triton-rmsnorm", name        # another computation ran
        ours = errors(grads)
        assert all(ours[n] <= min(GRAD_RTOL, 1.5 * base[n] + 1e-3) for n in ours), (name, ours, base)
    assert type(point.model.lm_head).__name__ == "HiddenStates"
    point.configure(_eager_sdpa("cuda-graphs"))
    assert all(module is own[name] for name, module in point.model.named_modules())


@pytest.mark.gpu
def test_on_a_gpu_replayed_graphs_take_the_steps_the_eager_rung_takes_and_go_with_the_turn():
    """From the same restored state, cuda-graphs' steps (the first eager, then captured and replayed)
    give bf16-weights' losses and weights; another rung's turn lets the graphs and their gradients go,
    and the next turn captures them anew."""
    point = step_module.SharedPoint(get_size("tiny"), context=64, batch=2, device="cuda", seed=7)

    def run(name, steps=4):
        point.restore()
        losses = []
        step = point.step(rungs.get(name).setup, watched=steps, on_loss=losses.append)
        for _ in range(steps):
            step()
        return losses, [p.detach().clone() for p in point.parameters]

    eager_losses, eager_weights = run("bf16-weights")
    point.configure(rungs.get("triton-adamw").setup)
    held = torch.cuda.memory_allocated()
    graph_losses, graph_weights = run("cuda-graphs")
    assert graph_losses == pytest.approx(eager_losses, rel=1e-6) and graph_losses[-1] < graph_losses[0]
    assert all(torch.allclose(g, e, rtol=1e-6, atol=1e-7) for g, e in zip(graph_weights, eager_weights))
    assert point._graphed is not None and point.capture_peaks
    point.configure(rungs.get("triton-adamw").setup)
    assert point._graphed is None and all(p.grad is None for p in point.model.parameters())
    # nothing of the graphs outlives them (cuBLAS's workspace for the capture's stream included)
    assert torch.cuda.memory_allocated() <= held


def test_a_replayed_rung_s_peak_is_its_capture_s_where_that_is_larger():
    """A replay allocates nothing, so the allocator's peak over replayed steps misses the activations
    the graphs' pool holds: the record takes the capture's peak where larger (and either where only
    one is known: the CPU has neither)."""
    assert ladder.timed_peak(100, 250) == 250
    assert ladder.timed_peak(300, 250) == 300
    assert ladder.timed_peak(100, None) == 100
    assert ladder.timed_peak(None, 250) == 250
    assert ladder.timed_peak(None, None) is None


def test_the_update_in_backward_computes_what_the_update_after_it_computes_and_leaves_other_rungs_alone():
    """adamw-in-backward's setup without CUDA graphs (on a CPU each update runs in its hook): from one
    seeded state, two steps' losses, the first gradients and the weights after them equal the same
    step with the update after backward; then another rung's steps fire no update from backward."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    point = step_module.SharedPoint(get_size("tiny"), context=16, batch=2, device=device, seed=5, backend="aot_eager")
    after = _two_steps(point, _eager_sdpa("triton-linear-ce"))
    inside = _two_steps(point, _eager_sdpa("adamw-in-backward"))
    assert point._in_backward is not None and len(point._in_backward.handles) == len(point.parameters)
    assert inside[0] == after[0] and after[0][1] < after[0][0]
    assert all(torch.equal(inside[1][n], after[1][n]) for n in after[1])
    assert all(torch.equal(a, b) for a, b in zip(inside[2], after[2]))
    # the hooks go with the rung's turn: another rung's backward leaves the weights alone
    point.configure(_eager_sdpa("triton-linear-ce"))
    assert point._in_backward is None
    before = [p.detach().clone() for p in point.parameters]
    point.workload(_eager_sdpa("triton-linear-ce")).forward().backward()
    assert all(torch.equal(a, b) for a, b in zip(before, point.parameters))


@pytest.mark.gpu
def test_on_a_gpu_the_graphed_update_in_backward_takes_the_steps_the_update_after_it_takes():
    """Captured, the hooks' updates on the side stream become branches of the backward graph: from
    one restored state, three steps (the first eager, then captured and replayed) give the same
    losses and weights as the graphed step that updates after backward."""
    point = step_module.SharedPoint(get_size("tiny"), context=64, batch=2, device="cuda", seed=7)
    results = {}
    for name in ("triton-linear-ce", "adamw-in-backward"):
        setup = dataclasses.replace(rungs.get(name).setup, compiled=False)
        point.restore()
        losses = []
        step = point.step(setup, watched=3, on_loss=losses.append)
        for _ in range(3):
            step()
        results[name] = losses, [p.detach().clone() for p in point.parameters]
    (after, after_weights), (inside, inside_weights) = results["triton-linear-ce"], results["adamw-in-backward"]
    assert inside == after and after[2] < after[0]
    assert all(torch.equal(a, b) for a, b in zip(inside_weights, after_weights))


def test_a_point_may_compile_a_graph_for_every_compiled_rung_and_anchor_and_no_silent_fallback():
    """Dynamo's default keeps 8 graphs of a code object and past that runs it eagerly with only a
    warning: a point's compiled rungs and anchors (one graph of the blocks' code each, at most) must
    fit under the limit the point sets, and reaching it must fail the job instead."""
    step_module.SharedPoint(get_size("tiny"), context=16, batch=2, device="cpu", seed=5, backend="aot_eager")
    compiled = [r.name for r in rungs.BY_NAME.values() if r.setup.compiled]
    assert len(compiled) > 8                        # what the default would not hold
    assert torch._dynamo.config.recompile_limit >= step_module.RECOMPILE_LIMIT >= len(compiled)
    # every block compiled apart (compile mode "blocks"), even if each kept graphs of its own
    assert torch._dynamo.config.accumulated_recompile_limit >= len(compiled) * max(s.num_layers for s in MODEL_SIZES.values())
    assert torch._dynamo.config.fail_on_recompile_limit_hit


def test_a_rung_named_twice_is_an_a_a_pair_of_one_job(tmp_path):
    """The second entry is an entrant of its own (``<rung>#2``) that computes what the first computes;
    its record says ``again``, so a report or the A/A check tells the two apart."""
    names = ["fp32", "bf16", "fp32"]
    outs = [tmp_path / f"{i}.json" for i in range(3)]
    assert ladder.main([*JOB, "--rungs", *names, "--out", *map(str, outs)]) == 0
    first, _, again = (json.loads(p.read_text()) for p in outs)
    assert first["status"] == again["status"] == "ok"
    assert again["params"]["again"] is True and "again" not in first["params"]
    assert {k: v for k, v in again["params"].items() if k != "again"} == first["params"]
    assert again["metrics"]["turns"]["with"] == ["fp32", "bf16", "fp32#2"]
    assert again["metrics"]["turns"]["job"] == first["metrics"]["turns"]["job"]
    assert again["metrics"]["loss"] == pytest.approx(first["metrics"]["loss"], rel=1e-6)    # the same seeded start
    assert max(again["metrics"]["gradient_rel_error"].values()) < 1e-6
    with pytest.raises(SystemExit):
        ladder.main([*JOB, "--rungs", "fp32", "fp32", "fp32", "--out", "a", "b", "c"])
