"""Our fused Triton modules of E1's top rungs (RMSNorm, SwiGLU's gate, RoPE, LM head + cross-entropy)
against the model's own functions in float64, forward and backward, on fresh seeded inputs; in Triton's
interpreter on a CPU, compiled on a GPU. Shapes are odd on purpose: rows that do not fill a program,
a feature width that is not a power of two, a head view with the model's strides."""
import copy

import pytest
import torch
from cs336_basics.model import RMSNorm, RotaryPositionalEmbedding, silu
from cs336_basics.nn_utils import cross_entropy

from cs336_systems.training_step import triton_linear_ce, triton_rmsnorm, triton_rope, triton_swiglu


def _device():
    return "cuda" if torch.cuda.is_available() else "cpu"


def _leaf(t: torch.Tensor, dtype=None) -> torch.Tensor:
    return t.to(device=_device(), dtype=dtype or t.dtype).detach().requires_grad_()


def _close(ours: torch.Tensor, reference: torch.Tensor, tol: float) -> None:
    """Within ``tol`` of the reference's largest magnitude, element by element (and not all zero)."""
    reference = reference.detach().double().cpu()
    scale = reference.abs().max().item()
    assert scale > 0
    error = (ours.detach().double().cpu() - reference).abs().max().item()
    assert error <= tol * scale, f"{error:.3g} against {tol} x {scale:.3g}"


def test_rms_norm_forward_and_backward_follow_the_model_s_norm_in_float64():
    g = torch.Generator().manual_seed(3)
    x, w, dy = torch.randn(3, 5, 40, generator=g), 1 + torch.randn(40, generator=g), torch.randn(3, 5, 40, generator=g)
    norm = RMSNorm(40).double()
    with torch.no_grad():
        norm.weight.copy_(w)
    x64 = x.double().requires_grad_()
    (norm(x64) * dy.double()).sum().backward()

    ours_x, ours_w = _leaf(x), _leaf(w)
    y = triton_rmsnorm.rms_norm(ours_x, ours_w, norm.eps)
    assert y.dtype == torch.float32 and y.shape == x.shape
    (y * dy.to(y.device)).sum().backward()
    _close(y, norm(x.double()), 1e-6)
    _close(ours_x.grad, x64.grad, 1e-5)
    _close(ours_w.grad, norm.weight.grad, 1e-5)


def test_rms_norm_writes_the_dtype_autocast_would_feed_the_next_matmul():
    g = torch.Generator().manual_seed(4)
    x = torch.randn(7, 24, generator=g).to(_device())
    module = triton_rmsnorm.TritonRMSNorm(RMSNorm(24).to(_device()))
    assert module(x).dtype == torch.float32
    with torch.autocast(_device(), dtype=torch.bfloat16):
        y = module(x)
    assert y.dtype == torch.bfloat16
    _close(y.float(), RMSNorm(24).double()(x.double().cpu()), 2 ** -7)


@pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-6), (torch.bfloat16, 2 ** -7)])
def test_swiglu_gate_forward_and_backward_follow_silu_times_b_in_float64(dtype, tol):
    g = torch.Generator().manual_seed(5)
    n = triton_swiglu.BLOCK + 37              # one full program and a partial one
    a, b, dh = (3 * torch.randn(n, generator=g) for _ in range(3))
    a, b = a.to(dtype).float(), b.to(dtype).float()     # inputs the dtype can hold exactly
    a64, b64 = a.double().requires_grad_(), b.double().requires_grad_()
    (silu(a64) * b64 * dh.double()).sum().backward()

    ours_a, ours_b = _leaf(a, dtype), _leaf(b, dtype)
    h = triton_swiglu.swiglu_gate(ours_a, ours_b)
    assert h.dtype == dtype
    (h.float() * dh.to(h.device)).sum().backward()
    _close(h, silu(a64) * b64, tol)
    _close(ours_a.grad, a64.grad, 2 * tol)
    _close(ours_b.grad, b64.grad, 2 * tol)


def test_swiglu_gate_refuses_inputs_of_two_shapes():
    with pytest.raises(ValueError, match="the gate's two inputs differ"):
        triton_swiglu.swiglu_gate(torch.ones(4, device=_device()), torch.ones(5, device=_device()))


def test_rope_rotates_the_model_s_head_view_in_place_as_the_model_does_and_back():
    """The (batch, heads, seq, d) view of a projection, as the model makes it, at shuffled positions;
    d / 2 = 5 pairs, not a power of two."""
    g = torch.Generator().manual_seed(6)
    batch, seq, heads, d = 2, 21, 3, 10
    rotary = RotaryPositionalEmbedding(10000.0, d, 64)
    positions = torch.randperm(64, generator=g)[:seq]
    projection, dy = torch.randn(batch, seq, heads * d, generator=g), torch.randn(batch, heads, seq, d, generator=g)
    x64 = projection.double().unflatten(-1, (heads, d)).transpose(1, 2).detach().requires_grad_()
    expected = rotary(x64, positions)
    (expected * dy.double()).sum().backward()

    ours_projection = _leaf(projection)
    view = ours_projection.unflatten(-1, (heads, d)).transpose(1, 2)
    assert not view.is_contiguous()
    module = triton_rope.TritonRoPE(copy.deepcopy(rotary).to(_device()))
    y = module(view, positions.to(_device()).unsqueeze(0))
    assert y.stride() == view.stride()          # the model's layout kept
    (y * dy.to(y.device)).sum().backward()
    _close(y, expected, 1e-6)
    _close(ours_projection.grad.unflatten(-1, (heads, d)).transpose(1, 2), x64.grad, 1e-6)


def test_rope_leaves_positions_per_batch_entry_to_the_model():
    rotary = RotaryPositionalEmbedding(10000.0, 4, 8).to(_device())
    x = torch.randn(2, 1, 3, 4, device=_device())
    positions = torch.tensor([[0, 1, 2], [3, 4, 5]], device=_device()).unsqueeze(-2)
    assert torch.equal(triton_rope.TritonRoPE(rotary)(x, positions), rotary(x, positions))


@pytest.mark.parametrize("chunk_bytes", [triton_linear_ce.CHUNK_BYTES, 50 * 4 * 8])     # one chunk; five of 8 rows
def test_linear_cross_entropy_gives_the_head_s_and_the_loss_s_values_and_gradients_in_float64(monkeypatch, chunk_bytes):
    monkeypatch.setattr(triton_linear_ce, "CHUNK_BYTES", chunk_bytes)
    g = torch.Generator().manual_seed(7)
    tokens, d, vocab = 37, 24, 50
    hidden, weight = torch.randn(tokens, d, generator=g), torch.randn(vocab, d, generator=g) / 3
    targets = torch.randint(vocab, (tokens,), generator=g)
    h64, w64 = hidden.double().requires_grad_(), weight.double().requires_grad_()
    reference = cross_entropy(h64 @ w64.T, targets)
    (3 * reference).backward()

    ours_h, ours_w = _leaf(hidden), _leaf(weight)
    loss = triton_linear_ce.linear_cross_entropy(ours_h.view(1, tokens, d), ours_w, targets.to(_device()).view(1, tokens))
    (3 * loss).backward()                       # the backward scales the gradients made in the forward
    assert loss.shape == () and abs(loss.item() - reference.item()) <= 1e-5 * reference.item()
    _close(ours_h.grad, h64.grad, 1e-5)
    _close(ours_w.grad, w64.grad, 1e-5)


def test_linear_cross_entropy_refuses_a_head_that_does_not_fit():
    with pytest.raises(ValueError, match="do not fit"):
        triton_linear_ce.linear_cross_entropy(torch.ones(4, 8), torch.ones(10, 6), torch.zeros(4, dtype=torch.long))


@pytest.mark.slow
def test_the_custom_ops_pass_pytorch_s_opcheck():
    """Schema, fake tensors, autograd registration and AOT dispatch, as torch.compile and a CUDA graph
    capture rely on them."""
    g = torch.Generator().manual_seed(8)
    dev = _device()
    x, w = torch.randn(6, 16, generator=g).to(dev), torch.randn(16, generator=g).to(dev)
    torch.library.opcheck(triton_rmsnorm.rms_norm_forward, (x.requires_grad_(), w.requires_grad_(), 1e-5, torch.float32))
    a, b = (torch.randn(6, 16, generator=g).to(dev).requires_grad_() for _ in range(2))
    torch.library.opcheck(triton_swiglu.swiglu_gate_forward, (a, b))
    q = torch.randn(1, 2, 5, 8, generator=g).to(dev).requires_grad_()
    rotary = RotaryPositionalEmbedding(10000.0, 8, 16).to(dev)
    torch.library.opcheck(triton_rope.rope_forward, (q, torch.arange(5, device=dev), rotary.cos, rotary.sin))
    h, head = torch.randn(6, 16, generator=g).to(dev), torch.randn(11, 16, generator=g).to(dev)
    targets = torch.randint(11, (6,), generator=g).to(dev)
    torch.library.opcheck(triton_linear_ce.linear_cross_entropy_with_gradients,
                          (h.requires_grad_(), head.requires_grad_(), targets))


def test_a_compiled_block_with_our_modules_computes_what_it_computes_eager():
    """torch.compile (aot_eager: Dynamo and AOTAutograd, no code generated) traces the custom ops by
    their fakes and autograd registrations, and the norm asks autocast for the matmul's dtype while
    traced: one block's output and input gradient, compiled and not, under bf16 autocast."""
    from cs336_basics.model import TransformerBlock

    g = torch.Generator().manual_seed(9)
    block = TransformerBlock(32, 2, 64, 16, 10000.0).to(_device())
    block.ln1, block.ln2 = triton_rmsnorm.TritonRMSNorm(block.ln1), triton_rmsnorm.TritonRMSNorm(block.ln2)
    block.ffn, block.attn.rope = triton_swiglu.TritonSwiGLU(block.ffn), triton_rope.TritonRoPE(block.attn.rope)
    x, dy = torch.randn(2, 16, 32, generator=g).to(_device()), torch.randn(2, 16, 32, generator=g).to(_device())
    positions = torch.arange(16, device=_device())
    results = []
    for run in (block, torch.compile(block, backend="aot_eager", fullgraph=True)):
        leaf = x.clone().requires_grad_()
        with torch.autocast(_device(), dtype=torch.bfloat16):
            y = run(leaf, positions)
        (y.float() * dy).sum().backward()
        results.append((y.float(), leaf.grad))
    (eager_y, eager_dx), (compiled_y, compiled_dx) = results
    assert torch.equal(compiled_y, eager_y) and torch.equal(compiled_dx, eager_dx)
    assert eager_dx.abs().sum() > 0
