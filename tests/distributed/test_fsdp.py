"""FSDP (C12) on 2 Gloo ranks: training the tiny Transformer LM with FSDP gives the weights of one
process training the unsharded model on the concatenation of the ranks' batches (mean loss), in fp32
and with fp16 / bf16 compute; each rank holds one slice of every Linear and Embedding weight; the
gather trace obeys the one-layer prefetch rule and frees every full weight after use.

All scenarios train in one pair of ranks, once per module (spawning ranks costs seconds); the tests
read the results.
"""
import contextlib
from dataclasses import dataclass
from unittest import mock

import pytest
import torch
from torch import nn
from torch.nn.utils import parametrize

from cs336_basics.model import Embedding, Linear, RMSNorm
from cs336_basics.nn_utils import cross_entropy
from cs336_basics.optimizer import AdamW
from cs336_systems.distributed import fsdp as fsdp_module
from cs336_systems.distributed.fsdp import FSDP, GatherEvent
from cs336_systems.distributed.launcher import device_for, run_on_ranks
from cs336_systems.models import MODEL_SIZES, build_model

WORLD = 2
VOCAB, CONTEXT, BATCH, STEPS = 512, 16, 4, 3      # BATCH sequences per rank
INIT_SEED = 100                                   # rank r builds from INIT_SEED + r; FSDP takes rank 0's
DATA_SEED = 7
TIGHT = dict(rtol=1e-5, atol=1e-6)
# AdamW divides each gradient element by its own running magnitude (plus eps), so an element whose
# gradient is near zero (a sum that cancels) turns the 1e-7 relative rounding differences between one
# process and two ranks into weight differences of up to LR * (rounding) / EPS. With LR=1e-2 and the
# default eps=1e-8 one element in 10^5 drifts past TIGHT; LR=1e-3 and EPS=1e-5 bound it near TIGHT's
# atol (measured: 1.2e-7) and still let the optimizer take Adam-sized steps.
LR, EPS = 1e-3, 1e-5


# --- models, data, training -------------------------------------------------------------------------

class OddLM(nn.Module):
    """Weights whose element counts (7 * 5 and 5 * 7) do not divide by the world size: padded shards."""

    def __init__(self):
        super().__init__()
        self.embed = Embedding(7, 5)
        self.norm = RMSNorm(5)
        self.head = Linear(5, 7)

    def forward(self, tokens):
        return self.head(self.norm(self.embed(tokens)))


@dataclass(frozen=True)
class Scenario:
    model: str = "tiny"                        # "tiny" Transformer LM or OddLM
    compute_dtype: torch.dtype | None = None
    optimizer: str = "ours"                    # cs336_basics AdamW or torch.optim.AdamW
    skip_reduction: bool = False               # a broken variant: no gradient reduce-scatter
    keep_saved_weights: bool = False           # a broken variant: autograd keeps the full weights
    steps: int = STEPS
    lr: float = LR
    eps: float = EPS


SCENARIOS = {
    "fp32": Scenario(),
    "fp16": Scenario(compute_dtype=torch.float16),
    "bf16": Scenario(compute_dtype=torch.bfloat16, optimizer="torch"),
    "odd": Scenario(model="odd"),
    "no-reduction": Scenario(skip_reduction=True),
    "keeps-weights": Scenario(keep_saved_weights=True, steps=1),
}
OPTIMIZERS = {"ours": AdamW, "torch": torch.optim.AdamW}


def vocab_of(scenario: Scenario) -> int:
    return VOCAB if scenario.model == "tiny" else 7


def make_model(scenario: Scenario, seed: int) -> nn.Module:
    torch.manual_seed(seed)
    if scenario.model == "odd":
        return OddLM()
    return build_model(MODEL_SIZES["tiny"], CONTEXT, vocab_size=VOCAB)


def make_batch(scenario: Scenario, step: int, rank: int, device="cpu") -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(DATA_SEED * 1000 + step * 10 + rank)
    tokens = torch.randint(0, vocab_of(scenario), (BATCH, CONTEXT + 1), generator=g).to(device)
    return tokens[:, :-1], tokens[:, 1:]


def numpy_state(state: dict) -> dict:
    """Tensors sent back through the launcher's queue would travel as shared-memory handles that die
    with the rank's process, so results travel as numpy arrays."""
    return {k: v.detach().float().cpu().numpy().copy() for k, v in state.items()}


def _reduce_nothing(flat, world_size):
    """Stands in for fsdp.reduce_scatter_sum: keeps this rank's own slice of its own gradient."""
    shard = flat.numel() // world_size
    rank = torch.distributed.get_rank()

    class Done:
        def wait(self):
            pass
    return flat[rank * shard:(rank + 1) * shard].clone(), Done()


def _logging_dtype(collective, log: list):
    """Wraps fsdp's all_gather_flat / reduce_scatter_sum to note the dtype each one communicates."""
    def logged(tensor, world_size):
        log.append(str(tensor.dtype))
        return collective(tensor, world_size)
    return logged


def _train_scenarios(rank, world_size, names, backend="gloo"):
    device = device_for(rank, backend)
    out = {}
    for name in names:
        scenario = SCENARIOS[name]
        model = FSDP(make_model(scenario, INIT_SEED + rank).to(device), compute_dtype=scenario.compute_dtype,
                     record_events=backend == "gloo")
        optimizer = OPTIMIZERS[scenario.optimizer](model.parameters(), lr=scenario.lr, eps=scenario.eps)
        events, communicated = [], {"all_gather": [], "reduce_scatter": []}
        reduce = _reduce_nothing if scenario.skip_reduction else fsdp_module.reduce_scatter_sum
        with contextlib.ExitStack() as patches:
            patches.enter_context(mock.patch.object(fsdp_module, "reduce_scatter_sum",
                                                    _logging_dtype(reduce, communicated["reduce_scatter"])))
            patches.enter_context(mock.patch.object(fsdp_module, "all_gather_flat", _logging_dtype(
                fsdp_module.all_gather_flat, communicated["all_gather"])))
            if scenario.keep_saved_weights:     # no placeholders: the graph holds every full weight
                patches.enter_context(mock.patch.object(FSDP, "_pack", lambda self, tensor: tensor))
                patches.enter_context(mock.patch.object(fsdp_module._BufferTracker, "GRACE_S", 0.01))
            for step in range(scenario.steps):
                optimizer.zero_grad(set_to_none=True)
                x, y = make_batch(scenario, step, rank, device)
                cross_entropy(model(x), y).backward()
                model.finish_gradient_synchronization()
                optimizer.step()
                events.append(list(model.events))
        out[name] = {
            "full": numpy_state(model.gather_full_params()),
            "own": numpy_state(dict(model.named_parameters())),
            "events": events,
            "sharded_names": [layer.name for layer in model.sharded],
            "dtypes": {n: (str(p.dtype), str(p.grad.dtype)) for n, p in model.named_parameters()},
            "communicated": communicated,       # during training, not gather_full_params
        }
    return out


def _train_one_process(scenario: Scenario, device="cpu") -> dict:
    """The reference: rank 0's initial weights, each step on both ranks' batches with the mean loss,
    in one process and without sharding.

    In fp32 it runs one forward and backward on the concatenation of the ranks' batches (equal sizes,
    so its mean loss is the mean of the ranks' mean losses).

    With a compute dtype it casts the way FSDP is specified to: the Linear/Embedding weights stay fp32
    master weights and a parametrization casts each to the compute dtype whenever the layer runs, so
    forward and backward run in that dtype (norms stay fp32, as in FSDP); the cast's backward hands the
    compute-dtype gradient to the fp32 master. It runs the ranks' batches one after the other (gradient
    accumulation: the same sum), because a half batch in fp16 rounds differently from a whole one, and
    then rounds each summed weight gradient to the compute dtype once, as FSDP's compute-dtype
    reduce-scatter does, before dividing by the world size in fp32. Emulated that closely, FSDP's
    result is expected to agree to within a rounding of the compute dtype (on our CPU: exactly)."""
    model = make_model(scenario, INIT_SEED).to(device)
    if scenario.compute_dtype is not None:
        for module in model.modules():
            if isinstance(module, (Linear, Embedding)):
                parametrize.register_parametrization(module, "weight", _CastTo(scenario.compute_dtype),
                                                 unsafe=True)   # the cast is the point
    optimizer = OPTIMIZERS[scenario.optimizer](model.parameters(), lr=scenario.lr, eps=scenario.eps)
    for step in range(STEPS):
        optimizer.zero_grad(set_to_none=True)
        batches = [make_batch(scenario, step, r, device) for r in range(WORLD)]
        if scenario.compute_dtype is None:
            x, y = (torch.cat(t) for t in zip(*batches))
            cross_entropy(model(x), y).backward()
        else:
            for x, y in batches:
                cross_entropy(model(x), y).backward()
            for module in model.modules():
                if parametrize.is_parametrized(module):
                    master = module.parametrizations.weight.original
                    master.grad = master.grad.to(scenario.compute_dtype).float() / WORLD
                elif isinstance(module, RMSNorm):
                    module.weight.grad /= WORLD
        optimizer.step()
    for module in model.modules():
        if parametrize.is_parametrized(module):
            parametrize.remove_parametrizations(module, "weight", leave_parametrized=False)
    return {k: v.detach().clone() for k, v in model.named_parameters()}


class _CastTo(nn.Module):
    def __init__(self, dtype):
        super().__init__()
        self.dtype = dtype

    def forward(self, weight):
        return weight.to(self.dtype)


@pytest.fixture(scope="module")
def runs():
    return run_on_ranks(_train_scenarios, WORLD, args=(tuple(SCENARIOS),))


@pytest.fixture(scope="module")
def reference():
    return {name: _train_one_process(SCENARIOS[name]) for name in ("fp32", "fp16", "bf16", "odd")}


def as_tensors(state: dict) -> dict:
    return {k: torch.as_tensor(v) for k, v in state.items()}


def max_difference(actual: dict, expected: dict) -> float:
    return max((torch.as_tensor(actual[k]) - expected[k]).abs().max().item() for k in expected)


# --- the trace rules (pure functions on GatherEvent lists) -------------------------------------------

def _phase(events, phase):
    return [e for e in events if e.phase == phase]


def _first_index(events, kind, layer):
    return next(i for i, e in enumerate(events) if e.kind == kind and e.layer == layer)


def gathered_too_early(events, phase) -> list[str]:
    """Gathers that started before the layer two uses before theirs had finished."""
    evs = _phase(events, phase)
    uses = [e.layer for e in evs if e.kind == "use"]
    return [f"{layer} gathered before {uses[k - 2]} finished" for k, layer in enumerate(uses)
            if k >= 2 and _first_index(evs, "gather", layer) < _first_index(evs, "done", uses[k - 2])]


def not_prefetched(events, phase) -> list[str]:
    """Layers (after the first) whose gather did not start while the layer before them was running."""
    evs = _phase(events, phase)
    uses = [e.layer for e in evs if e.kind == "use"]
    return [f"{layer} gathered only after {uses[k - 1]} finished" for k, layer in enumerate(uses)
            if k >= 1 and _first_index(evs, "gather", layer) > _first_index(evs, "done", uses[k - 1])]


def not_freed_after_use(events, phase) -> list[str]:
    """Layers used in the phase with no free after their end."""
    evs = _phase(events, phase)
    return [e.layer for e in evs if e.kind == "use"
            and not any(f.kind == "free" and f.layer == e.layer for f in evs[_first_index(evs, "done", e.layer):])]


# --- tests ------------------------------------------------------------------------------------------

def test_fp32_training_matches_one_process_on_the_concatenated_batches(runs, reference):
    for rank in range(WORLD):
        torch.testing.assert_close(as_tensors(runs[rank]["fp32"]["full"]), reference["fp32"], **TIGHT)


def test_uneven_weights_are_padded_and_still_match(runs, reference):
    torch.testing.assert_close(as_tensors(runs[0]["odd"]["full"]), reference["odd"], **TIGHT)
    own = runs[0]["odd"]["own"]
    assert own["module.head.weight_shard"].size == 18 and own["module.embed.weight_shard"].size == 18


# Tolerance from the dtype: a gradient that differs by one rounding of the compute dtype (relative
# finfo.eps: 1e-3 in fp16, 8e-3 in bf16) changes an AdamW step of size ~LR by about LR * finfo.eps.
MIXED_TOLERANCE = {name: dict(rtol=1e-5, atol=LR * torch.finfo(SCENARIOS[name].compute_dtype).eps)
                   for name in ("fp16", "bf16")}


@pytest.mark.parametrize("name", ["fp16", "bf16"])
def test_mixed_precision_matches_a_reference_that_casts_the_same_way(runs, reference, name):
    for rank in range(WORLD):
        torch.testing.assert_close(as_tensors(runs[rank][name]["full"]), reference[name],
                                   **MIXED_TOLERANCE[name])
    # The tolerance has teeth: computing in fp32 instead lands outside it.
    with pytest.raises(AssertionError):
        torch.testing.assert_close(as_tensors(runs[0]["fp32"]["full"]), reference[name], **MIXED_TOLERANCE[name])


@pytest.mark.parametrize("name", ["fp16", "bf16"])
def test_master_weights_and_their_gradients_stay_fp32(runs, name):
    dtypes = runs[0][name]["dtypes"]
    assert dtypes and set(dtypes.values()) == {("torch.float32", "torch.float32")}


@pytest.mark.parametrize("name", ["fp32", "fp16", "bf16"])
def test_weights_and_gradients_travel_in_the_compute_dtype(runs, name):
    expected = str(SCENARIOS[name].compute_dtype or torch.float32)
    communicated = runs[0][name]["communicated"]
    assert communicated["all_gather"] and set(communicated["all_gather"]) == {expected}
    assert communicated["reduce_scatter"] and set(communicated["reduce_scatter"]) == {expected}


def test_each_rank_holds_one_slice_of_every_linear_and_embedding_weight(runs):
    full = runs[0]["fp32"]["full"]
    sharded = runs[0]["fp32"]["sharded_names"]
    expected_sharded = [n for n in full if n.endswith("weight") and "ln" not in n]
    assert sorted(sharded) == sorted(expected_sharded) and len(sharded) == 2 + 7 * MODEL_SIZES["tiny"].num_layers
    for rank in range(WORLD):
        own = runs[rank]["fp32"]["own"]
        for name in sharded:
            shard = torch.as_tensor(own[f"module.{name}_shard"])
            flat = torch.as_tensor(full[name]).reshape(-1)
            assert shard.numel() == -(-flat.numel() // WORLD)
            torch.testing.assert_close(shard, flat[rank * shard.numel():(rank + 1) * shard.numel()],
                                       rtol=0, atol=0)
        replicated = {n for n in own if not n.endswith("weight_shard")}
        assert replicated == {f"module.{n}" for n in full if n not in sharded}
        assert all("ln" in n for n in replicated)
    for name in runs[0]["fp32"]["own"]:
        if not name.endswith("weight_shard"):         # norms: replicated and equal after training
            torch.testing.assert_close(torch.as_tensor(runs[0]["fp32"]["own"][name]),
                                       torch.as_tensor(runs[1]["fp32"]["own"][name]), rtol=0, atol=0)
    torch.testing.assert_close(as_tensors(runs[0]["fp32"]["full"]), as_tensors(runs[1]["fp32"]["full"]),
                               rtol=0, atol=0)


@pytest.mark.parametrize("phase", ["forward", "backward"])
def test_prefetch_gathers_one_layer_ahead_and_no_earlier(runs, phase):
    for step, events in enumerate(runs[0]["fp32"]["events"]):
        assert gathered_too_early(events, phase) == []
        if step > 0 or phase == "backward":   # the first forward records the order prefetch follows
            assert not_prefetched(events, phase) == []
    # The check can fail: the first forward gathers each layer on demand.
    assert not_prefetched(runs[0]["fp32"]["events"][0], "forward") != []


def test_backward_regathers_the_weights_it_needs(runs):
    events = runs[0]["fp32"]["events"][-1]
    forward_uses = [e.layer for e in _phase(events, "forward") if e.kind == "use"]
    backward_uses = [e.layer for e in _phase(events, "backward") if e.kind == "use"]
    # Reverse order; the embedding's backward needs only the token ids, so it is not gathered again.
    assert backward_uses == [n for n in reversed(forward_uses) if n != "token_embeddings.weight"]


def test_full_weights_are_freed_after_each_use(runs):
    for events in runs[0]["fp32"]["events"]:
        for phase in ("forward", "backward"):
            assert not_freed_after_use(events, phase) == []
        assert max(e.live for e in events) <= 2        # the layer running and the one prefetched
        assert events[-1].live == 0 and _phase(events, "forward")[-1].live == 0


def test_the_liveness_count_sees_weights_that_autograd_keeps(runs):
    events = runs[0]["keeps-weights"]["events"][0]
    linear_layers = 7 * MODEL_SIZES["tiny"].num_layers + 1
    assert max(e.live for e in _phase(events, "forward")) == linear_layers  # all kept until backward


def test_the_trace_checks_catch_a_gather_two_layers_ahead():
    ok = [GatherEvent("forward", kind, layer, 0) for layer in "abc" for kind in ("gather", "use", "done")]
    early = [GatherEvent("forward", "gather", "c", 0), *ok]
    assert gathered_too_early(ok, "forward") == [] and not_freed_after_use(ok, "forward") == ["a", "b", "c"]
    assert gathered_too_early(early, "forward") == ["c gathered before a finished"]


def test_without_gradient_reduction_the_weights_differ(runs, reference):
    broken = as_tensors(runs[0]["no-reduction"]["full"])
    assert max_difference(broken, reference["fp32"]) > 100 * TIGHT["atol"]
    with pytest.raises(AssertionError):
        torch.testing.assert_close(broken, reference["fp32"], **TIGHT)


@pytest.mark.gpu(WORLD)
def test_nccl_training_matches_a_one_gpu_reference():
    """The same training with NCCL on GPUs (backward runs on autograd's device thread, collectives on
    NCCL's streams) against the reference on one GPU."""
    names = ("fp32", "bf16", "odd")
    gpu_runs = run_on_ranks(_train_scenarios, WORLD, args=(names, "nccl"), backend="nccl")
    tolerance = {"fp32": TIGHT, "odd": TIGHT, "bf16": MIXED_TOLERANCE["bf16"]}
    for name in names:
        expected = {k: v.cpu() for k, v in _train_one_process(SCENARIOS[name], "cuda").items()}
        for rank in range(WORLD):
            torch.testing.assert_close(as_tensors(gpu_runs[rank][name]["full"]), expected, **tolerance[name])
        assert set(gpu_runs[0][name]["communicated"]["all_gather"]) == {str(SCENARIOS[name].compute_dtype
                                                                            or torch.float32)}
