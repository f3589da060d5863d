"""A6: checkpointing changes memory, never the gradients; the closed forms match what autograd saves."""
import math
import random

import pytest
import torch

from cs336_basics.nn_utils import cross_entropy
from cs336_systems.memory import activation_model as am
from cs336_systems.memory.checkpointing import CheckpointedGroup, checkpoint_blocks
from cs336_systems.models import ModelSize, build_model, get_size, random_batch

VOCAB = 97


def _grads(group: int, seed: int, size: ModelSize, context: int, batch: int):
    torch.manual_seed(seed)
    model = build_model(size, context, vocab_size=VOCAB, dtype=torch.float64)
    checkpoint_blocks(model, group)
    torch.manual_seed(seed + 1)
    inputs, targets = random_batch(batch, context, vocab_size=VOCAB)
    loss = cross_entropy(model(inputs), targets)
    loss.backward()
    # Parameter names change when blocks are regrouped; their order does not.
    return loss.detach(), [p.grad for p in model.parameters()], model


THREE_BLOCKS = ModelSize(d_model=32, d_ff=64, num_layers=3, num_heads=4)   # 3 blocks: an uneven last group


@pytest.mark.parametrize("size, group", [(get_size("tiny"), 1), (get_size("tiny"), 2), (THREE_BLOCKS, 2),
                                         (THREE_BLOCKS, 3)])
def test_checkpointed_gradients_equal_plain_ones(size, group):
    seed = random.randrange(10**6)
    loss0, grads0, _ = _grads(0, seed, size, context=12, batch=2)
    loss, grads, model = _grads(group, seed, size, context=12, batch=2)
    assert len(model.layers) == math.ceil(size.num_layers / group)
    assert all(isinstance(layer, CheckpointedGroup) for layer in model.layers)
    torch.testing.assert_close(loss, loss0, rtol=1e-12, atol=1e-12)
    assert len(grads) == len(grads0)
    for g, g0 in zip(grads, grads0):
        torch.testing.assert_close(g, g0, rtol=1e-10, atol=1e-12)


def test_group_zero_leaves_the_model_and_negative_is_refused():
    model = build_model(get_size("tiny"), 8, vocab_size=VOCAB)
    layers = model.layers
    assert checkpoint_blocks(model, 0).layers is layers
    with pytest.raises(ValueError, match="group_size"):
        checkpoint_blocks(model, -1)


class _SavedBytes:
    """Bytes autograd saves for backward, one count per storage, parameters left out."""

    def __init__(self, model):
        self.params = {p.untyped_storage().data_ptr() for p in model.parameters()}
        self.seen: dict[int, int] = {}

    def pack(self, t):
        storage = t.untyped_storage()
        if storage.data_ptr() not in self.params:
            self.seen[storage.data_ptr()] = storage.nbytes()
        return t

    @property
    def total(self):
        return sum(self.seen.values())


def _random_size():
    heads = random.choice([2, 4])
    return ModelSize(d_model=heads * random.choice([8, 16]), d_ff=random.choice([48, 64, 96]),
                     num_layers=random.choice([1, 2, 3]), num_heads=heads)


def test_block_saved_bytes_match_autograd():
    size, batch, context = _random_size(), random.randint(1, 3), random.randint(5, 40)
    model = build_model(size, context, vocab_size=VOCAB)
    counter = _SavedBytes(model)
    x = torch.randn(batch, context, size.d_model, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(counter.pack, lambda t: t):
        model.layers[0](x, torch.arange(context))
    assert counter.total == am.block_saved_bytes(size, context, batch)


def test_whole_model_saved_bytes_match_autograd():
    size, batch, context = _random_size(), random.randint(1, 3), random.randint(5, 40)
    model = build_model(size, context, vocab_size=VOCAB)
    counter = _SavedBytes(model)
    inputs, targets = random_batch(batch, context, vocab_size=VOCAB)
    with torch.autograd.graph.saved_tensors_hooks(counter.pack, lambda t: t):
        cross_entropy(model(inputs), targets)
    expected = size.num_layers * am.block_saved_bytes(size, context, batch) + am.head_saved_bytes(
        size, context, batch, vocab_size=VOCAB)
    assert counter.total == expected


def test_checkpointed_forward_keeps_only_group_inputs():
    size = ModelSize(d_model=16, d_ff=32, num_layers=4, num_heads=2)
    context, batch = random.randint(5, 20), 2
    model = checkpoint_blocks(build_model(size, context, vocab_size=VOCAB), 2)
    counter = _SavedBytes(model)
    inputs, targets = random_batch(batch, context, vocab_size=VOCAB)
    with torch.autograd.graph.saved_tensors_hooks(counter.pack, lambda t: t):
        cross_entropy(model(inputs), targets)
    # Two group inputs (a each) plus the head; the positions (int64) are the one extra input.
    expected = 2 * am.block_input_bytes(size, context, batch) + am.head_saved_bytes(size, context, batch, VOCAB)
    assert expected <= counter.total <= expected + context * 8


def test_closed_form_optimum_is_the_brute_force_minimum():
    for _ in range(200):
        n = random.randint(1, 200)
        a = random.uniform(1, 100)
        A = a * 10 ** random.uniform(-1, 3)
        brute = min(range(1, n + 1), key=lambda k: (n * a / k + k * A, k))
        best = am.optimal_group_size(n, a, A)
        assert math.isclose(n * a / best + best * A, n * a / brute + brute * A, rel_tol=1e-12)
        k_star = am.continuous_optimum(n, a, A)
        assert math.isclose(n * a / k_star, k_star * A, rel_tol=1e-9)   # the two terms balance at k*


def test_checkpoint_memory_model():
    assert am.checkpoint_memory(48, 2.0, 10.0, 0) == 480.0
    assert am.checkpoint_memory(48, 2.0, 10.0, 5) == math.ceil(48 / 5) * 2.0 + 50.0


def test_predicted_peak_orders_group_sizes_as_the_model_does():
    size = get_size("xl")
    peaks = [am.predicted_peak(size, 2048, 4, k, baseline=0)["peak"] for k in (0, 1, 2, 4, 8)]
    assert peaks[0] > max(peaks[1:])           # no checkpointing stores everything
    assert peaks[1:] == sorted(peaks[1:])      # at xl / 2048 the optimum is k = 1 and peaks grow with k
    a, A = am.block_input_bytes(size, 2048, 4), am.block_saved_bytes(size, 2048, 4)
    assert am.optimal_group_size(48, a, A) == 1
