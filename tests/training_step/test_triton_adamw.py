"""Our Triton AdamW (E1's triton-adamw and bf16-weights rungs) against PyTorch's AdamW in float64,
on fresh seeded weights and gradients, in Triton's interpreter on the CPU (compiled on a GPU)."""
import pytest
import torch

from cs336_systems.training_step.triton_adamw import BLOCK, TritonAdamW

HYPER = dict(lr=3e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
SHAPES = [(37, 53), (BLOCK + 3,), (5,)]         # a tensor of one partial block, one past a block, a tiny one


def _device():
    return "cuda" if torch.cuda.is_available() else "cpu"


def _beside_pytorch_s(seed: int):
    """Fresh seeded weights for ours (fp32, on the test's device) and for PyTorch's AdamW in float64."""
    g = torch.Generator().manual_seed(seed)
    start = [torch.randn(s, generator=g) for s in SHAPES]
    ours = [torch.nn.Parameter(w.to(_device(), copy=True)) for w in start]
    reference = [torch.nn.Parameter(w.double()) for w in start]
    return g, start, ours, reference, TritonAdamW(ours, **HYPER), torch.optim.AdamW(reference, **HYPER, foreach=False)


def test_its_updates_follow_pytorch_s_adamw_in_float64_over_several_steps():
    g, start, ours, reference, opt, ref = _beside_pytorch_s(11)
    for _ in range(4):
        grads = [torch.randn(s, generator=g) for s in SHAPES]
        for p, q, grad in zip(ours, reference, grads):
            p.grad, q.grad = grad.to(_device()), grad.double()
        opt.step()
        ref.step()
    for p, q in zip(ours, reference):
        assert opt.state[p]["step"].item() == 4
        assert torch.allclose(p.detach().cpu().double(), q.detach(), rtol=1e-5, atol=1e-6)
        for moment in ("exp_avg", "exp_avg_sq"):
            assert torch.allclose(opt.state[p][moment].cpu().double(), ref.state[q][moment], rtol=1e-5, atol=1e-7)
    # it moved the weights well past what the tolerance allows
    assert all((p.detach().cpu() - w).abs().max() > 1e-3 for p, w in zip(ours, start))


def test_a_bf16_copy_gets_its_gradient_read_and_the_update_rounded_to_nearest_even():
    g = torch.Generator().manual_seed(12)
    weights = [torch.randn(s, generator=g) * 4 for s in SHAPES]
    grads = [torch.randn(s, generator=g).to(torch.bfloat16) for s in SHAPES]
    with_copies = [torch.nn.Parameter(w.to(_device(), copy=True)) for w in weights]
    plain = [torch.nn.Parameter(w.to(_device(), copy=True)) for w in weights]
    copies = [torch.nn.Parameter(w.detach().to(torch.bfloat16)) for w in with_copies]
    opt, same = TritonAdamW(with_copies, **HYPER), TritonAdamW(plain, **HYPER)
    opt.copies = {id(p): c for p, c in zip(with_copies, copies)}
    for p, c, q, grad in zip(with_copies, copies, plain, grads):
        c.grad = grad.to(_device())
        q.grad = grad.float().to(_device())        # the bf16 gradient's values, as autocast casts them up
        assert p.grad is None
    opt.step()
    same.step()
    for p, c, q in zip(with_copies, copies, plain):
        assert torch.equal(p.detach(), q.detach())                       # the master moved as without a copy
        assert torch.equal(c.detach(), p.detach().to(torch.bfloat16))    # PyTorch's rounding, bit for bit
        assert not torch.equal(c.detach().float(), p.detach())           # and it was rounded


def test_weights_it_cannot_update_are_refused_in_one_line():
    p = torch.nn.Parameter(torch.randn(4, 6).t())     # not contiguous
    p.grad = torch.randn(6, 4)
    with pytest.raises(ValueError, match="contiguous fp32 weights"):
        TritonAdamW([p]).step()
    q = torch.nn.Parameter(torch.randn(8, dtype=torch.float64))
    q.grad = torch.randn(8, dtype=torch.float64)
    with pytest.raises(ValueError, match="got a torch.float64 weight"):
        TritonAdamW([q]).step()
    with pytest.raises(ValueError, match="invalid hyperparameters"):
        TritonAdamW([q], betas=(0.9, 1.0))


def test_weights_whose_step_counts_differ_are_each_updated_with_their_own():
    """A weight that joined later (its first step while the others take their third) gets its own
    bias corrections, as PyTorch's AdamW gives it."""
    g, _, ours, reference, opt, ref = _beside_pytorch_s(13)
    for step in range(3):
        grads = [torch.randn(s, generator=g) for s in SHAPES]
        for i, (p, q, grad) in enumerate(zip(ours, reference, grads)):
            late = i == 1 and step < 2           # the second weight has no gradient in the first two steps
            p.grad, q.grad = (None, None) if late else (grad.to(_device()), grad.double())
        opt.step()
        ref.step()
    assert [opt.state[p]["step"].item() for p in ours] == [3, 1, 3]
    for p, q in zip(ours, reference):
        assert torch.allclose(p.detach().cpu().double(), q.detach(), rtol=1e-5, atol=1e-6)
