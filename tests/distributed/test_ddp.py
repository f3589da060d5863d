"""DDP wrappers (C2, C4, C5, C7, and C8's bucketed variants past PyTorch's DDP) on 2 Gloo ranks:
training with each wrapper gives the weights of one process training on the concatenation of the
ranks' batches (mean loss), and of PyTorch's DistributedDataParallel in the same ranks; tied, frozen
and unused parameters; bucket grouping, buckets that are the gradients' storage, the first bucket's
size and the order gradients become ready; gradients communicated in bf16 within bf16's rounding.

Each scenario runs once per module (spawning ranks costs seconds); the tests read its results.
"""
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from cs336_systems.distributed.ddp import (DDPBucketed, DDPIndividualParameters, FlatDDP, NaiveDDP,
                                           plan_buckets)
from cs336_systems.distributed.launcher import run_on_ranks

WORLD = 2
TIGHT = dict(rtol=1e-5, atol=1e-6)
# The LM runs several AdamW steps; the ranks sum half-batch gradients in another order (and with
# another thread count) than the one process does, and Adam's division by sqrt(v) magnifies the
# last bits of a gradient whose second moment is tiny. Seen on a 2-core machine: 1 element of 4096
# off by 7e-6 (4e-5 relative). A rank that skipped synchronisation is off by orders more.
LM_CLOSE = dict(rtol=1e-4, atol=1e-5)


# --- the toy model and its data -------------------------------------------------------------------

VOCAB, DIM, SEQ, BATCH = 16, 8, 6, 4          # BATCH sequences per rank
TOY_LR = 1e-2
INIT_SEED = 100                               # rank r builds its replica from INIT_SEED + r
DATA_SEED = 7


class ToyLM(nn.Module):
    """A small LM with each thing the wrappers must handle: an embedding tied to the output head, a
    frozen layer, a buffer, a branch used only when asked, and a parameter nothing uses."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        self.frozen = nn.Linear(DIM, DIM)
        self.frozen.requires_grad_(False)
        self.hidden = nn.Linear(DIM, DIM)
        self.branch = nn.Linear(DIM, DIM)
        self.norm = nn.LayerNorm(DIM)
        self.head = nn.Linear(DIM, VOCAB, bias=False)
        self.head.weight = self.embed.weight                 # tied
        self.unused = nn.Parameter(torch.randn(3))
        self.register_buffer("shift", torch.randn(DIM))

    def forward(self, tokens, use_branch=True):
        h = self.embed(tokens) + self.shift
        h = h + torch.tanh(self.frozen(h))
        h = h + torch.tanh(self.hidden(h))
        if use_branch:
            h = h + torch.tanh(self.branch(h))
        return self.head(self.norm(h))


def toy_model(rank: int) -> ToyLM:
    torch.manual_seed(INIT_SEED + rank)
    return ToyLM()


def toy_batch(step: int, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(DATA_SEED * 1000 + step * 10 + rank)
    tokens = torch.randint(0, VOCAB, (BATCH, SEQ + 1), generator=g)
    return tokens[:, :-1], tokens[:, 1:]


def toy_loss(model, x, y, use_branch):
    return F.cross_entropy(model(x, use_branch=use_branch).flatten(0, 1), y.flatten())


# Which rank runs the branch at each step. Step 1 leaves it unused on every rank; step 2 uses it on
# rank 0 only, which DDPIndividualParameters does not support (see ddp.py), so it trains on SAME.
UNUSED_STEP = 1
SAME = ((True, True), (False, False), (True, True), (True, True))
MIXED = ((True, True), (False, False), (True, False), (True, True))
# The first step (the one whose order the ready-order buckets follow) with the branch on rank 0 only:
# rank 1's own order would put the branch last, so the ranks agree only through rank 0's broadcast.
FIRST_MIXED = ((True, False), (False, False), (True, True), (True, True))
BRANCH = ("branch.weight", "branch.bias")

# Trainable parameters in registration order (the root module's own first): unused 12 B,
# embed.weight (= head.weight) 512 B, hidden.weight 256 B, hidden.bias 32 B, branch.weight 256 B,
# branch.bias 32 B, norm.weight 32 B, norm.bias 32 B. Buckets take them in reverse.
TOY_BUCKET_MB = {"one": 1000.0, "several": 300 / 1024**2, "per-param": 1e-9}
TOY_EXPECTED_BUCKETS = {
    "one": [["norm.bias", "norm.weight", "branch.bias", "branch.weight", "hidden.bias", "hidden.weight",
             "embed.weight", "unused"]],
    "several": [["norm.bias", "norm.weight", "branch.bias"], ["branch.weight", "hidden.bias"],
                ["hidden.weight"], ["embed.weight"], ["unused"]],
    "per-param": [["norm.bias"], ["norm.weight"], ["branch.bias"], ["branch.weight"], ["hidden.bias"],
                  ["hidden.weight"], ["embed.weight"], ["unused"]],
}

# The first bucket of the ready-order variant: 40 bytes, room for one 32-byte parameter.
TOY_FIRST_MB = 40 / 1024**2
TOY_READY = dict(first_bucket_mb=TOY_FIRST_MB, ready_order=True)

TOY_VARIANTS = {   # name -> (wrapper factory, branch schedule)
    "naive": (NaiveDDP, MIXED),
    "flat": (FlatDDP, MIXED),
    "individual": (DDPIndividualParameters, SAME),
    **{f"bucketed-{k}": (lambda m, mb=mb: DDPBucketed(m, bucket_size_mb=mb), MIXED)
       for k, mb in TOY_BUCKET_MB.items()},
    # C8's variants past PyTorch's DDP (train_bench.bucketed_options has the same options).
    **{f"bucketed-view-{k}": (lambda m, mb=mb: DDPBucketed(m, bucket_size_mb=mb, gradient_as_bucket_view=True), MIXED)
       for k, mb in TOY_BUCKET_MB.items()},
    "bucketed-ready-several": (lambda m: DDPBucketed(m, bucket_size_mb=TOY_BUCKET_MB["several"],
                                                     gradient_as_bucket_view=True, **TOY_READY), MIXED),
    "bucketed-ready-first-mixed": (lambda m: DDPBucketed(m, bucket_size_mb=TOY_BUCKET_MB["several"],
                                                         gradient_as_bucket_view=True, **TOY_READY), FIRST_MIXED),
    # The mean taken by the all-reduce (ReduceOp.AVG): in the gradients' own buckets, and in
    # buckets the gradients are copied into and out of.
    "bucketed-avg-several": (lambda m: DDPBucketed(m, bucket_size_mb=TOY_BUCKET_MB["several"], gradient_as_bucket_view=True,
                                                   mean_in_all_reduce=True, **TOY_READY), MIXED),
    "bucketed-avg-copied-several": (lambda m: DDPBucketed(m, bucket_size_mb=TOY_BUCKET_MB["several"],
                                                          mean_in_all_reduce=True), MIXED),
}
# Gradients communicated in bf16: the same checks except equality, which holds only to bf16's
# rounding (the gradient test below bounds it).
TOY_BF16 = {
    "bucketed-bf16-several": (lambda m: DDPBucketed(m, bucket_size_mb=TOY_BUCKET_MB["several"],
                                                    communication_dtype=torch.bfloat16, **TOY_READY), MIXED),
    "bucketed-bf16-avg-several": (lambda m: DDPBucketed(m, bucket_size_mb=TOY_BUCKET_MB["several"],
                                                        communication_dtype=torch.bfloat16, mean_in_all_reduce=True,
                                                        **TOY_READY), MIXED),
}
TOY_ALL = TOY_VARIANTS | TOY_BF16
# Whose gradients are views into their buckets: train_bench's order (zero the gradients, then
# on_train_batch_start) keeps the views; the other order (the rest of this file's) makes each
# gradient be copied into its bucket at every step. Half the views train in each order.
ZERO_FIRST = ("bucketed-view-one", "bucketed-view-per-param", "bucketed-ready-several", "bucketed-avg-several")
# And one never calls on_train_batch_start (optional): a bucket may then still hold the last step's
# mean where this rank has no gradient this step, which must count as zero.
NO_START = ("bucketed-view-several",)


class _TorchDDP(DistributedDataParallel):
    """PyTorch's DDP behind our interface (it synchronizes inside backward)."""

    def finish_gradient_synchronization(self):
        pass

    def on_train_batch_start(self):
        pass


def _wrap_toy(name, model):
    if name.startswith("torch-ddp"):
        return _TorchDDP(model, find_unused_parameters=True)
    if name == "no-sync":
        return NaiveDDP(model)
    return TOY_ALL[name][0](model)


def _schedule(name):
    if name == "torch-ddp-same":
        return SAME
    if name in ("torch-ddp", "no-sync"):
        return MIXED
    return TOY_ALL[name][1]


def _train_toy_variants(rank, world_size, names):
    """Every variant trains its own replica (initialised differently on each rank) for len(schedule)
    AdamW steps on this rank's batches; "no-sync" skips the gradient synchronization."""
    out = {}
    for name in names:
        model = toy_model(rank)
        arrival = _arrival_order(model)       # registered before the wrapper's hooks: runs first
        wrapped = _wrap_toy(name, model)
        optimizer = torch.optim.AdamW(wrapped.parameters(), lr=TOY_LR)
        record = {"grads_in_buckets": []}
        for step, branch_on in enumerate(_schedule(name)):
            if name in ZERO_FIRST:
                optimizer.zero_grad(set_to_none=True)
                wrapped.on_train_batch_start()
            elif name in NO_START:
                optimizer.zero_grad(set_to_none=True)
            else:
                wrapped.on_train_batch_start()
                optimizer.zero_grad(set_to_none=True)
            x, y = toy_batch(step, rank)
            toy_loss(wrapped, x, y, branch_on[rank]).backward()
            record["grads_in_buckets"].append(_grads_in_buckets(wrapped))
            record["copied_in"] = sum(getattr(b, "copied_in", 0) for b in getattr(wrapped, "_flat", []))
            if step == 0:
                record["first_arrival"] = list(arrival)
            if name != "no-sync":
                wrapped.finish_gradient_synchronization()
            if step == UNUSED_STEP:
                before = {n: p.detach().clone() for n, p in model.named_parameters() if n in BRANCH}
                record["branch_grad_none"] = all(p.grad is None for n, p in model.named_parameters()
                                                 if n in BRANCH)
            optimizer.step()
            if step == UNUSED_STEP:
                record["branch_unchanged"] = all(torch.equal(p, before[n]) for n, p in model.named_parameters()
                                                 if n in BRANCH)
        record["state"] = portable(model.state_dict())
        record["unused_grad_none"] = model.unused.grad is None
        record["tied"] = model.head.weight is model.embed.weight
        record["buckets"] = getattr(wrapped, "buckets", None)
        record["ready_order"] = getattr(wrapped, "ready_order_names", None)
        record["rebuilt"] = getattr(wrapped, "rebuilt", None)
        out[name] = record
    return out


def _arrival_order(model) -> list[str]:
    """The names of the parameters in the order backward completes their gradients, appended to as
    the model trains: an account of the order kept apart from the wrapper's."""
    order, names = [], {p: n for n, p in model.named_parameters()}
    for p in names:
        if p.requires_grad:
            p.register_post_accumulate_grad_hook(lambda p: order.append(names[p]))
    return order


def _grads_in_buckets(wrapped) -> bool | None:
    """After backward: whether every gradient that exists lies inside its bucket's storage (None for
    wrappers without persistent buckets)."""
    buckets = [b for b in getattr(wrapped, "_flat", []) if hasattr(b, "views")]
    if not buckets:
        return None
    return all(p.grad is None or p.grad.data_ptr() == view.data_ptr()
               for b in buckets for p, view in zip(b.params, b.views))


def _train_toy_one_process(schedule):
    """The reference: rank 0's initial weights, every step on all ranks' batches with the mean loss
    (one forward over the concatenation when the ranks agree on the branch)."""
    model = toy_model(0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=TOY_LR)
    for step, branch_on in enumerate(schedule):
        optimizer.zero_grad(set_to_none=True)
        batches = [toy_batch(step, r) for r in range(WORLD)]
        if len(set(branch_on)) == 1:
            x, y = (torch.cat(t) for t in zip(*batches))
            loss = toy_loss(model, x, y, branch_on[0])
        else:
            loss = sum(toy_loss(model, x, y, on) for (x, y), on in zip(batches, branch_on)) / WORLD
        loss.backward()
        optimizer.step()
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


ALL_TOY_RUNS = (*TOY_ALL, "torch-ddp", "torch-ddp-same", "no-sync")


@pytest.fixture(scope="module")
def toy_runs():
    return run_on_ranks(_train_toy_variants, WORLD, args=(ALL_TOY_RUNS,))


@pytest.fixture(scope="module")
def toy_reference():
    return {schedule: _train_toy_one_process(schedule) for schedule in (SAME, MIXED, FIRST_MIXED)}


def portable(state: dict) -> dict:
    """A state dict as numpy arrays: tensors sent back through the launcher's queue would travel as
    shared-memory handles that die with the rank's process."""
    return {k: v.detach().cpu().numpy().copy() for k, v in state.items()}


def as_tensors(state: dict) -> dict:
    return {k: torch.as_tensor(v) for k, v in state.items()}


def assert_states_close(actual, expected, **tolerance):
    actual, expected = as_tensors(actual), as_tensors(expected)
    assert actual.keys() == expected.keys()
    for key in expected:
        torch.testing.assert_close(actual[key], expected[key], **(tolerance or TIGHT), msg=lambda m: f"{key}: {m}")


@pytest.mark.parametrize("name", [*TOY_VARIANTS, "torch-ddp", "torch-ddp-same"])
def test_toy_training_matches_one_process_on_the_whole_batch(toy_runs, toy_reference, name):
    for rank in range(WORLD):
        assert_states_close(toy_runs[rank][name]["state"], toy_reference[_schedule(name)])


@pytest.mark.parametrize("name", [n for n in TOY_VARIANTS if _schedule(n) is not FIRST_MIXED])
def test_toy_training_matches_pytorch_ddp_in_the_same_ranks(toy_runs, name):
    anchor = "torch-ddp" if _schedule(name) is MIXED else "torch-ddp-same"
    for rank in range(WORLD):
        assert_states_close(toy_runs[rank][name]["state"], toy_runs[rank][anchor]["state"])


@pytest.mark.parametrize("name", list(TOY_ALL))
def test_replicas_end_identical(toy_runs, name):
    for key, value in as_tensors(toy_runs[0][name]["state"]).items():
        assert torch.equal(value, torch.as_tensor(toy_runs[1][name]["state"][key])), key


@pytest.mark.parametrize("name", list(TOY_ALL))
def test_frozen_parameters_and_buffers_are_rank_zeros_and_never_change(toy_runs, name):
    initial = toy_model(0).state_dict()
    assert not torch.equal(initial["frozen.weight"], toy_model(1).state_dict()["frozen.weight"])  # needs the broadcast
    for rank in range(WORLD):
        state = as_tensors(toy_runs[rank][name]["state"])
        for key in ("frozen.weight", "frozen.bias", "shift"):
            assert torch.equal(state[key], initial[key]), (rank, key)


@pytest.mark.parametrize("name", list(TOY_ALL))
def test_parameters_without_gradient_keep_none_and_stay_bit_identical(toy_runs, toy_reference, name):
    reference = toy_reference[_schedule(name)]
    for rank in range(WORLD):
        run = toy_runs[rank][name]
        assert run["unused_grad_none"] and torch.equal(torch.as_tensor(run["state"]["unused"]), reference["unused"])
        assert run["branch_grad_none"], "a branch no rank used must keep grad None"
        assert run["branch_unchanged"], "AdamW must skip the unused branch at that step"


@pytest.mark.parametrize("name", list(TOY_ALL))
def test_tied_weights_stay_tied(toy_runs, name):
    for rank in range(WORLD):
        run = toy_runs[rank][name]
        state = as_tensors(run["state"])
        assert run["tied"] and torch.equal(state["head.weight"], state["embed.weight"])


def test_without_synchronization_the_replicas_drift(toy_runs, toy_reference):
    """The equality tests have teeth: skip the all-reduce and the weights are wrong."""
    reference = toy_reference[MIXED]
    for rank in range(WORLD):
        with pytest.raises(AssertionError):
            assert_states_close(toy_runs[rank]["no-sync"]["state"], reference)
    with pytest.raises(AssertionError):
        assert_states_close(toy_runs[0]["no-sync"]["state"], toy_runs[1]["no-sync"]["state"])


@pytest.mark.parametrize("size", list(TOY_BUCKET_MB))
def test_bucketed_wrapper_groups_parameters_in_reverse_order(toy_runs, size):
    for rank in range(WORLD):
        assert toy_runs[rank][f"bucketed-{size}"]["buckets"] == TOY_EXPECTED_BUCKETS[size]


@pytest.mark.parametrize("name", [n for n in TOY_VARIANTS if "view" in n or "ready" in n or n == "bucketed-avg-several"])
def test_view_buckets_hold_the_gradients_and_copy_only_when_the_gradients_were_dropped(toy_runs, name):
    """After every backward each gradient is a view into its bucket. Zeroed before
    on_train_batch_start (train_bench's order), backward accumulated straight into the buckets: no
    gradient was copied in. Set to None after it, every step copies them in once."""
    for rank in range(WORLD):
        run = toy_runs[rank][name]
        assert run["grads_in_buckets"] == [True] * len(_schedule(name))
        if name in ZERO_FIRST:
            assert run["copied_in"] == 0
        else:
            assert run["copied_in"] > 0


def test_ready_order_buckets_follow_rank_zeros_first_step_with_a_small_first_bucket(toy_runs):
    """The order comes from the first step's gradients on rank 0 (recorded here by hooks of our own),
    the parameter that produced none last; it differs from reverse registration (norm.weight is ready
    before norm.bias), so the buckets were rebuilt in it, every rank the same; the first bucket holds
    at most 40 bytes."""
    names = [n for n, p in toy_model(0).named_parameters() if p.requires_grad]
    expected = toy_runs[0]["bucketed-ready-several"]["first_arrival"] + ["unused"]
    assert expected != names[::-1]
    sizes = dict((n, p.numel() * 4) for n, p in toy_model(0).named_parameters())
    for rank in range(WORLD):
        run = toy_runs[rank]["bucketed-ready-several"]
        assert run["rebuilt"] and run["ready_order"] == expected
        assert [n for bucket in run["buckets"] for n in bucket] == expected
        first = run["buckets"][0]
        assert len(first) == 1 or sum(sizes[n] for n in first) <= 40
        assert all(sum(sizes[n] for n in b) <= 300 or len(b) == 1 for b in run["buckets"][1:])


def test_ready_order_is_rank_zeros_where_the_ranks_saw_different_orders(toy_runs):
    """The first step used the branch on rank 0 only: rank 1's own arrival order lacks it, yet both
    ranks build rank 0's buckets (a rank planning from its own order would send other buckets)."""
    own = [toy_runs[r]["bucketed-ready-first-mixed"]["first_arrival"] for r in range(WORLD)]
    assert "branch.weight" in own[0] and "branch.weight" not in own[1]
    expected = own[0] + ["unused"]
    for rank in range(WORLD):
        run = toy_runs[rank]["bucketed-ready-first-mixed"]
        assert run["ready_order"] == expected
        assert [n for bucket in run["buckets"] for n in bucket] == expected


# bf16 communication: how far the synchronized gradient may be from the exact mean of the ranks'
# fp32 gradients g_0, g_1, element by element. bf16 keeps 8 significant bits (7 stored), so rounding
# to nearest has unit roundoff u = 2^-8: each rank's cast gives g_r(1 + d_r), |d_r| <= u. The sum of
# the two bf16 values is rounded once to bf16, (1 + d_s), |d_s| <= u, or, where Gloo adds in fp32
# first, twice: u + 2^-24 at most. Casting the sum back to fp32 and halving it is exact (and so is
# halving in bf16, where the all-reduce takes the mean itself: a power of two). So
#   |m - (g_0 + g_1)/2| <= (u·(|g_0| + |g_1|) + (u + 2^-24)(1 + u)(|g_0| + |g_1|)) / 2
#                       <= (2u + u^2 + 2^-23) · (|g_0| + |g_1|) / 2,
# relative to |g_0| + |g_1|, not to |g_0 + g_1|: where the ranks' gradients cancel, the rounding of
# each survives. PyTorch's DDP sums in fp32 (one more 2^-24 rounding), inside the 2^-23 already there.
BF16_U = 2.0**-8
BF16_BOUND = 2 * BF16_U + BF16_U**2 + 2.0**-23
BF16_STEPS = MIXED


def _bf16_gradients(rank, world_size, name, device="cpu"):
    """Per step of MIXED: this rank's own fp32 gradients (a plain copy of the weights, this rank's
    batch), PyTorch DDP's synchronized ones (another copy), and the bf16-communicating wrapper's."""
    import copy

    device = torch.device("cpu" if device == "cpu" else f"cuda:{rank}")
    model = toy_model(rank).to(device)
    wrapped = TOY_BF16[name][0](model)
    plain, anchor = copy.deepcopy(model), copy.deepcopy(model)
    anchor_ddp = _TorchDDP(anchor, find_unused_parameters=True)
    optimizer = torch.optim.AdamW(wrapped.parameters(), lr=TOY_LR)
    steps = []
    for step, branch_on in enumerate(BF16_STEPS):
        x, y = (t.to(device) for t in toy_batch(step, rank))
        grads = {}
        for label, net, runner in (("own", plain, plain), ("torch-ddp", anchor, anchor_ddp)):
            net.load_state_dict(model.state_dict())
            net.zero_grad(set_to_none=True)
            toy_loss(runner, x, y, branch_on[rank]).backward()
            grads[label] = {n: p.grad.cpu().numpy().copy() for n, p in net.named_parameters() if p.grad is not None}
        optimizer.zero_grad(set_to_none=True)
        wrapped.on_train_batch_start()
        toy_loss(wrapped, x, y, branch_on[rank]).backward()
        wrapped.finish_gradient_synchronization()
        grads["bf16"] = {n: p.grad.cpu().numpy().copy() for n, p in model.named_parameters() if p.grad is not None}
        grads["side_stream"] = wrapped.casts_on_side_stream
        optimizer.step()
        steps.append(grads)
    return steps


@pytest.fixture(scope="module", params=list(TOY_BF16))
def bf16_runs(request):
    return run_on_ranks(_bf16_gradients, WORLD, args=(request.param,))


def test_bf16_communication_is_within_bf16_rounding_of_one_process_and_pytorch_ddp(bf16_runs):
    """Against the exact mean of the ranks' fp32 gradients (what one process on the whole batch
    computes, up to fp32 rounding) and PyTorch DDP's: within BF16_BOUND, at every step, parameters
    used on one rank only included; no rank has a gradient where none had one."""
    _check_bf16_runs(bf16_runs)
    assert not any(step["side_stream"] for steps in bf16_runs for step in steps)    # a CPU has no streams


@pytest.mark.gpu(WORLD)
@pytest.mark.parametrize("name", list(TOY_BF16))
def test_bf16_communication_on_gpus_under_nccl(name):
    """The same checks on two GPUs, where a bucket whose gradients all arrived casts, all-reduces and
    casts back on a side stream (the steps where every rank uses the branch), and one that lacks some
    takes the path the CPU test checks (the steps where a rank leaves it unused)."""
    runs = run_on_ranks(_bf16_gradients, WORLD, args=(name, "cuda"), backend="nccl")
    _check_bf16_runs(runs)
    assert all(steps[-1]["side_stream"] for steps in runs)        # the records say so (C8's description)
    for step, _ in enumerate(BF16_STEPS):
        for param, value in runs[0][step]["bf16"].items():
            assert torch.equal(torch.as_tensor(value), torch.as_tensor(runs[1][step]["bf16"][param])), (step, param)


def _check_bf16_runs(bf16_runs):
    worst = 0.0
    for step, _ in enumerate(BF16_STEPS):
        own = [bf16_runs[r][step]["own"] for r in range(WORLD)]
        for rank in range(WORLD):
            synced = bf16_runs[rank][step]["bf16"]
            assert synced.keys() == set(own[0]) | set(own[1]), step
            for name, value in synced.items():
                g = [torch.as_tensor(o.get(name, 0 * value)).double() for o in own]
                scale = (g[0].abs() + g[1].abs()) / 2
                got = torch.as_tensor(value).double()
                for reference in ((g[0] + g[1]) / 2, torch.as_tensor(bf16_runs[rank][step]["torch-ddp"][name]).double()):
                    excess = (got - reference).abs() - BF16_BOUND * scale
                    assert excess.max() <= 0, (step, rank, name, float(excess.max()))
                ratio = ((got - (g[0] + g[1]) / 2).abs() / scale.clamp_min(1e-30)).max()
                worst = max(worst, float(ratio))
    # The gradients did travel in bf16: fp32 communication would leave errors near 2^-24.
    assert 2.0**-12 < worst <= BF16_BOUND


def test_bf16_communication_synchronizes_the_replicas_exactly(bf16_runs):
    for step, _ in enumerate(BF16_STEPS):
        for name, value in bf16_runs[0][step]["bf16"].items():
            assert torch.equal(torch.as_tensor(value), torch.as_tensor(bf16_runs[1][step]["bf16"][name])), (step, name)


# --- bucket planning (no processes needed) ------------------------------------------------------

def _named(*specs):
    return [(name, nn.Parameter(torch.zeros(numel, dtype=dtype))) for name, numel, dtype in specs]


def test_plan_buckets_respects_the_limit_and_gives_a_large_parameter_its_own_bucket():
    f32 = torch.float32
    params = _named(("a", 100, f32), ("b", 1000, f32), ("c", 200, f32), ("d", 50, f32), ("e", 10, f32))
    limit_mb = 1200 / 1024**2                     # 1200 bytes = 300 floats
    plan = [[n for n, _ in bucket] for bucket in plan_buckets(params, limit_mb)]
    assert plan == [["e", "d", "c"], ["b"], ["a"]]
    for bucket in plan_buckets(params, limit_mb):
        assert len(bucket) == 1 or sum(p.numel() * 4 for _, p in bucket) <= 1200


def test_plan_buckets_splits_at_a_change_of_dtype():
    params = _named(("a", 4, torch.float32), ("b", 4, torch.bfloat16), ("c", 4, torch.bfloat16))
    assert [[n for n, _ in b] for b in plan_buckets(params, 1.0)] == [["c", "b"], ["a"]]


def test_plan_buckets_refuses_a_size_that_is_not_positive():
    with pytest.raises(ValueError, match="positive"):
        plan_buckets(_named(("a", 4, torch.float32)), 0)


# --- the tiny Transformer LM ----------------------------------------------------------------------

LM_CONTEXT, LM_BATCH, LM_STEPS, LM_LR = 16, 2, 3, 1e-3
LM_BUCKET_MB = 0.05
LM_FIRST_MB = 0.01
LM_VARIANTS = ("naive", "flat", "individual", "bucketed", "bucketed-view", "bucketed-ready", "bucketed-avg", "torch-ddp")


def lm_model(rank):
    from cs336_systems.models import build_model, get_size

    torch.manual_seed(INIT_SEED + rank)
    return build_model(get_size("tiny"), LM_CONTEXT)


def lm_batch(step, rank):
    from cs336_systems.models import VOCAB_SIZE

    g = torch.Generator().manual_seed(DATA_SEED * 1000 + step * 10 + rank)
    tokens = torch.randint(0, VOCAB_SIZE, (LM_BATCH, LM_CONTEXT + 1), generator=g)
    return tokens[:, :-1], tokens[:, 1:]


def _wrap_lm(name, model):
    return {"naive": NaiveDDP, "flat": FlatDDP, "individual": DDPIndividualParameters,
            "bucketed": lambda m: DDPBucketed(m, bucket_size_mb=LM_BUCKET_MB),
            "bucketed-view": lambda m: DDPBucketed(m, bucket_size_mb=LM_BUCKET_MB, gradient_as_bucket_view=True),
            "bucketed-ready": lambda m: DDPBucketed(m, bucket_size_mb=LM_BUCKET_MB, gradient_as_bucket_view=True,
                                                    first_bucket_mb=LM_FIRST_MB, ready_order=True),
            "bucketed-avg": lambda m: DDPBucketed(m, bucket_size_mb=LM_BUCKET_MB, gradient_as_bucket_view=True,
                                                  first_bucket_mb=LM_FIRST_MB, ready_order=True, mean_in_all_reduce=True),
            "torch-ddp": _TorchDDP}[name](model)


def _train_lm_variants(rank, world_size, names, device="cpu"):
    from cs336_basics.nn_utils import cross_entropy
    from cs336_basics.optimizer import AdamW

    device = torch.device("cpu" if device == "cpu" else f"cuda:{rank}")
    out = {}
    for name in names:
        model = lm_model(rank).to(device)
        wrapped = _wrap_lm(name, model)
        optimizer = AdamW(wrapped.parameters(), lr=LM_LR)
        in_flight_after_backward = []
        for step in range(LM_STEPS):
            wrapped.on_train_batch_start()
            optimizer.zero_grad(set_to_none=True)
            x, y = (t.to(device) for t in lm_batch(step, rank))
            cross_entropy(wrapped(x), y).backward()
            in_flight_after_backward.append(getattr(wrapped, "communications_in_flight", None))
            wrapped.finish_gradient_synchronization()
            optimizer.step()
        out[name] = {"state": portable(model.state_dict()),
                     "in_flight_after_backward": in_flight_after_backward,
                     "buckets": getattr(wrapped, "buckets", None), "rebuilt": getattr(wrapped, "rebuilt", None)}
    return out


def _train_lm_one_process():
    from cs336_basics.nn_utils import cross_entropy
    from cs336_basics.optimizer import AdamW

    model = lm_model(0)
    optimizer = AdamW(model.parameters(), lr=LM_LR)
    for step in range(LM_STEPS):
        optimizer.zero_grad(set_to_none=True)
        x, y = (torch.cat(t) for t in zip(*(lm_batch(step, r) for r in range(WORLD))))
        cross_entropy(model(x), y).backward()
        optimizer.step()
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


@pytest.fixture(scope="module")
def lm_runs():
    return run_on_ranks(_train_lm_variants, WORLD, args=(LM_VARIANTS,))


@pytest.fixture(scope="module")
def lm_reference():
    return _train_lm_one_process()


@pytest.mark.parametrize("name", LM_VARIANTS)
def test_tiny_lm_training_matches_one_process_and_pytorch_ddp(lm_runs, lm_reference, name):
    reference = lm_reference
    for rank in range(WORLD):
        assert_states_close(lm_runs[rank][name]["state"], reference, **LM_CLOSE)
        assert_states_close(lm_runs[rank][name]["state"], lm_runs[rank]["torch-ddp"]["state"], **LM_CLOSE)


@pytest.mark.gpu(WORLD)
def test_on_gpus_under_nccl_every_wrapper_matches_pytorch_ddp():
    """The same tiny-LM training on two GPUs: NCCL's own reductions (ReduceOp.AVG scales as it
    reduces), collectives on NCCL's streams, backward on autograd's device thread."""
    runs = run_on_ranks(_train_lm_variants, WORLD, args=(LM_VARIANTS, "cuda"), backend="nccl")
    for rank in range(WORLD):
        for name in LM_VARIANTS:
            assert_states_close(runs[rank][name]["state"], runs[rank]["torch-ddp"]["state"], **LM_CLOSE)
        assert runs[rank]["bucketed-avg"]["rebuilt"]


def test_tiny_lm_communication_overlaps_backward(lm_runs):
    """When backward returns, the overlapping wrappers have already launched every all-reduce."""
    n_params = len(list(lm_model(0).parameters()))
    for rank in range(WORLD):
        assert lm_runs[rank]["individual"]["in_flight_after_backward"] == [n_params] * LM_STEPS
        buckets = lm_runs[rank]["bucketed"]["buckets"]
        assert 2 < len(buckets) < n_params
        assert lm_runs[rank]["bucketed"]["in_flight_after_backward"] == [len(buckets)] * LM_STEPS
        names = [n for n, _ in lm_model(0).named_parameters()]
        assert [n for bucket in buckets for n in bucket] == names[::-1]
        # Rebuilt after the first step (a block's ln2 is ready after its feed-forward weights, not
        # before), and still launched from backward: every bucket in flight when it returns.
        ready = lm_runs[rank]["bucketed-ready"]
        assert ready["rebuilt"] and [n for b in ready["buckets"] for n in b] != names[::-1]
        assert ready["in_flight_after_backward"] == [len(ready["buckets"])] * LM_STEPS


def test_public_names_are_these_classes():
    import cs336_systems
    from cs336_systems.distributed.sharded_optimizer import ShardedOptimizer

    assert cs336_systems.DDPIndividualParameters is DDPIndividualParameters
    assert cs336_systems.DDPBucketed is DDPBucketed
    assert cs336_systems.ShardedOptimizer is ShardedOptimizer
