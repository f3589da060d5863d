"""flash_plan.direct_launcher: a plan's launch reads the current stream of the kernel's device on
every call and hands Triton's launcher what Triton's own launch hands it; with a launch hook set it
is Triton's own launch. On a GPU: launches bound in eager calls run inside a CUDA graph capture
(which forbids launching on any stream but the capturing one) and replay to eager's results."""
from __future__ import annotations

import pytest
import torch

from cs336_systems.attention import flash_plan as fp

from .test_flash import random_qkv


class FakeCompiled:
    function, packed_metadata = object(), object()

    def __init__(self):
        self.calls, self.own = [], []

    def run(self, *args):
        self.calls.append(args)

    def __getitem__(self, grid):
        return lambda *args: self.own.append((grid, args))


@pytest.fixture
def fake_cuda(monkeypatch):
    streams = iter(range(111, 10**6, 111))
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 3)
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda device: (device, next(streams)), raising=False)


def test_each_launch_reads_the_current_stream(fake_cuda):
    compiled = FakeCompiled()
    launch = fp.direct_launcher(compiled, (4, 2, 1))
    launch("q", "k", 7)
    launch("q2", "k2", 7)
    expected = lambda stream: (4, 2, 1, stream, compiled.function, compiled.packed_metadata, None, None, None)
    assert compiled.calls == [(*expected((3, 111)), "q", "k", 7), (*expected((3, 222)), "q2", "k2", 7)]
    assert compiled.own == []


def test_while_a_hook_is_registered_triton_launches(fake_cuda):
    from triton import knobs

    compiled = FakeCompiled()
    launch = fp.direct_launcher(compiled, (1, 1, 1))
    seen = []
    knobs.runtime.launch_enter_hook.add(seen.append)
    try:
        launch("q")
    finally:
        knobs.runtime.launch_enter_hook.remove(seen.append)
    launch("q")
    assert compiled.own == [((1, 1, 1), ("q",))] and len(compiled.calls) == 1


@pytest.mark.gpu
@pytest.mark.parametrize("batch,n", [(1, 1024), (2, 300)])       # (1, 1024) takes the split backward
def test_launches_bound_in_eager_run_in_a_graph(batch, n, seed):
    from cs336_systems.attention.flash_triton import FlashAttentionTriton

    torch.manual_seed(seed)
    q, k, v = (t.requires_grad_() for t in random_qkv(batch, n, n, 64, torch.bfloat16, "cuda"))
    grad = torch.randn_like(q)

    def step():
        q.grad = k.grad = v.grad = None
        out = FlashAttentionTriton.apply(q, k, v, True)
        out.backward(grad)
        return out

    eager = step().detach().clone(), q.grad.clone(), k.grad.clone(), v.grad.clone()   # binds the launches
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()                                     # a warm-up on the capture's side stream, as torch asks
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    q.grad = k.grad = v.grad = None
    with torch.cuda.graph(graph):
        captured = step()
    graph.replay()
    torch.cuda.synchronize()
    for got, want in zip((captured, q.grad, k.grad, v.grad), eager):
        torch.testing.assert_close(got, want, rtol=0, atol=0)
