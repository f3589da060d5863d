"""Data-parallel wrappers (C2, C4, C5, C7): four ways to keep N replicas of a model in step.

All four share one interface, so the benchmark and the tests can swap them::

    model = Wrapper(model)                  # broadcasts rank 0's parameters and buffers
    for batch in batches:
        model.on_train_batch_start()        # needed by DDPBucketed only; a no-op elsewhere
        optimizer.zero_grad()
        loss_fn(model(batch)).backward()    # forward(*args, **kwargs) passes through to .module
        model.finish_gradient_synchronization()   # every .grad is now the mean over ranks
        optimizer.step()

- ``NaiveDDP``: after backward, one blocking all-reduce per parameter.
- ``FlatDDP``: after backward, one all-reduce of all gradients flattened into one buffer.
- ``DDPIndividualParameters``: an asynchronous all-reduce per parameter, launched by a hook the
  moment that parameter's gradient is accumulated, so communication overlaps the rest of backward.
- ``DDPBucketed``: parameters grouped (in reverse registration order, roughly the order backward
  produces their gradients) into buckets of at most ``bucket_size_mb``; a bucket is flattened and
  all-reduced asynchronously once all its gradients are ready.

Rules common to all four:

- Only parameters with ``requires_grad`` are communicated (frozen ones are broadcast once and left
  alone). A parameter shared by two modules (tied weights) is one Parameter, so it is synchronized once.
- Averaging divides the summed gradient by the world size in place, in the gradient's own dtype.
- A parameter whose gradient is ``None`` on every rank keeps ``grad = None`` (so the optimizer skips it,
  as in one-process training). Where some ranks have a gradient and others do not, the missing ones
  count as zeros. ``NaiveDDP`` learns which parameters had gradients anywhere from one small extra
  all-reduce; the flattening variants carry one presence flag per parameter at the end of each flat
  buffer, so this costs them no extra collective.
- ``DDPBucketed`` launches buckets strictly in bucket order (a ready bucket waits for the buckets before
  it), so every rank issues the same collectives in the same order even when ranks used different
  parameters; ``finish_gradient_synchronization`` launches whatever backward left unready.
  ``DDPIndividualParameters`` launches in the order gradients appear, which is the same on every rank
  only when every rank's backward produced gradients for the same parameters: it supports parameters
  unused on *all* ranks, not parameters used on some ranks only.
- Buffers are broadcast once, at construction (they are not re-synchronized every forward).
"""
from __future__ import annotations

import itertools
import weakref
from collections.abc import Iterable

import torch
import torch.distributed as dist
from torch import nn
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

BYTES_PER_MB = 1024**2


def broadcast_from_rank_zero(module: nn.Module) -> None:
    """Overwrite every parameter and buffer of ``module`` with rank 0's values, in place."""
    with torch.no_grad():
        for tensor in itertools.chain(module.parameters(), module.buffers()):
            dist.broadcast(tensor.detach(), src=0)


def trainable_named_parameters(module: nn.Module) -> list[tuple[str, nn.Parameter]]:
    """The parameters that take part in gradient synchronization, each once (tied weights are one
    Parameter and ``named_parameters`` already lists it once), in registration order."""
    return [(name, p) for name, p in module.named_parameters() if p.requires_grad]


def plan_buckets(named_parameters: Iterable[tuple[str, nn.Parameter]],
                 bucket_size_mb: float) -> list[list[tuple[str, nn.Parameter]]]:
    """Group parameters in REVERSE of the given order into buckets of at most ``bucket_size_mb``
    (MB = 1024² bytes). A parameter larger than the limit gets a bucket of its own; a change of dtype
    or device also starts a new bucket, because a bucket is flattened into one tensor."""
    if not bucket_size_mb > 0:
        raise ValueError(f"bucket_size_mb must be positive, got {bucket_size_mb}")
    limit = bucket_size_mb * BYTES_PER_MB
    buckets: list[list[tuple[str, nn.Parameter]]] = []
    current: list[tuple[str, nn.Parameter]] = []
    current_bytes = 0
    for name, p in reversed(list(named_parameters)):
        size = p.numel() * p.element_size()
        fits = current_bytes + size <= limit
        same_kind = not current or (current[0][1].dtype, current[0][1].device) == (p.dtype, p.device)
        if current and not (fits and same_kind):
            buckets.append(current)
            current, current_bytes = [], 0
        current.append((name, p))
        current_bytes += size
    if current:
        buckets.append(current)
    return buckets


class _FlatGradients:
    """The gradients of a few parameters (one dtype, one device) all-reduced as one flat tensor.

    The flat tensor is ``[grad_0, grad_1, ..., presence_0, presence_1, ...]``: after the sum, a presence
    count of 0 says no rank had that gradient, so it stays ``None``. The flags ride in the same
    all-reduce, so agreeing on which parameters had gradients costs no extra collective."""

    def __init__(self, params: list[nn.Parameter]):
        self.params = params
        self._flat: torch.Tensor | None = None
        self._work = None
        self._all_present_here = True

    @property
    def in_flight(self) -> bool:
        return self._flat is not None

    def launch(self) -> None:
        """Start the asynchronous sum of the gradients over ranks (missing ones count as zeros)."""
        present = [p.grad is not None for p in self.params]
        self._all_present_here = all(present)
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in self.params]
        reference = self.params[0]
        if self._all_present_here:   # the usual case: no host-to-device copy for the flags
            flags = torch.ones(len(self.params), dtype=reference.dtype, device=reference.device)
        else:
            flags = torch.tensor(present, dtype=reference.dtype, device=reference.device)
        self._flat = _flatten_dense_tensors(grads + [flags])
        self._work = dist.all_reduce(self._flat, async_op=True)

    def finish(self, world_size: int) -> None:
        """Wait for the sum, then write the mean back into each gradient (in place where it exists)."""
        self._work.wait()
        flat = self._flat.div_(world_size)
        self._flat, self._work = None, None
        n = len(self.params)
        means = _unflatten_dense_tensors(flat[:-n], self.params)
        # Only a rank that lacked a gradient must read the flags (a device-to-host sync); where this
        # rank had all of them, every count is at least its own 1.
        seen_anywhere = [True] * n if self._all_present_here else (flat[-n:] > 0).tolist()
        for p, mean, seen in zip(self.params, means, seen_anywhere):
            if not seen:
                continue
            if p.grad is None:
                p.grad = mean.clone()
            else:
                p.grad.copy_(mean)


class _DataParallel(nn.Module):
    """Construction (broadcast from rank 0), forward pass-through and the common interface."""

    def __init__(self, module: nn.Module):
        super().__init__()
        if not dist.is_initialized():
            raise RuntimeError(f"{type(self).__name__} needs an initialized default process group")
        self.module = module
        self.world_size = dist.get_world_size()
        broadcast_from_rank_zero(module)
        self._named_trainable = trainable_named_parameters(module)

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    def on_train_batch_start(self) -> None:
        """Called before each step's forward; only the bucketed wrapper keeps per-step state."""

    def finish_gradient_synchronization(self) -> None:
        raise NotImplementedError

    def _register_grad_ready_hooks(self, params: Iterable[nn.Parameter]) -> None:
        # The hook holds the wrapper weakly: a dropped wrapper must neither stay alive through its
        # model's parameters nor keep communicating for them.
        wrapper = weakref.ref(self)

        def on_grad_accumulated(param: nn.Parameter) -> None:
            live = wrapper()
            if live is not None:
                live._on_grad_ready(param)

        self._hook_handles = [p.register_post_accumulate_grad_hook(on_grad_accumulated) for p in params]

    def _on_grad_ready(self, param: nn.Parameter) -> None:
        raise NotImplementedError


class NaiveDDP(_DataParallel):
    """C2: after backward, all-reduce each parameter's gradient on its own, blocking, then average."""

    def finish_gradient_synchronization(self) -> None:
        params = [p for _, p in self._named_trainable]
        if not params:
            return
        present = [p.grad is not None for p in params]
        device = params[0].device
        # The agreement on which parameters have a gradient anywhere: one small all-reduce of counts.
        counts = torch.ones(len(params), dtype=torch.int32, device=device) if all(present) else \
            torch.tensor(present, dtype=torch.int32, device=device)
        dist.all_reduce(counts)
        seen_anywhere = [True] * len(params) if all(present) else (counts > 0).tolist()
        for p, seen in zip(params, seen_anywhere):
            if not seen:
                continue
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            dist.all_reduce(p.grad)
            p.grad.div_(self.world_size)


class FlatDDP(_DataParallel):
    """C4: after backward, one all-reduce of every gradient flattened into one buffer (one per dtype
    and device, should a model mix them), copied back and averaged."""

    def __init__(self, module: nn.Module):
        super().__init__(module)
        groups: dict[tuple, list[nn.Parameter]] = {}
        for _, p in self._named_trainable:
            groups.setdefault((p.dtype, p.device), []).append(p)
        self._flat_groups = [_FlatGradients(ps) for ps in groups.values()]

    def finish_gradient_synchronization(self) -> None:
        for group in self._flat_groups:
            group.launch()
        for group in self._flat_groups:
            group.finish(self.world_size)


class DDPIndividualParameters(_DataParallel):
    """C5: an asynchronous all-reduce of each parameter's gradient, launched from a
    post-accumulate-grad hook as soon as backward has accumulated it; ``finish_gradient_synchronization``
    waits for them all and averages. One backward per step (a second accumulation of a gradient whose
    all-reduce is in flight is refused)."""

    def __init__(self, module: nn.Module):
        super().__init__(module)
        self._in_flight: dict[nn.Parameter, object] = {}   # param -> its all-reduce's Work
        self._register_grad_ready_hooks(p for _, p in self._named_trainable)

    @property
    def communications_in_flight(self) -> int:
        """All-reduces launched during backward and not yet waited for."""
        return len(self._in_flight)

    def _on_grad_ready(self, param: nn.Parameter) -> None:
        if param in self._in_flight:
            raise RuntimeError("a gradient was accumulated again while its all-reduce was in flight: call "
                               "finish_gradient_synchronization() after each backward")
        self._in_flight[param] = dist.all_reduce(param.grad, async_op=True)

    def finish_gradient_synchronization(self) -> None:
        for param, work in self._in_flight.items():
            work.wait()
            param.grad.div_(self.world_size)
        self._in_flight.clear()


class DDPBucketed(_DataParallel):
    """C7: gradients all-reduced in buckets of at most ``bucket_size_mb`` (see ``plan_buckets``), each
    launched asynchronously from a hook once all its gradients are ready and every earlier bucket has
    been launched. ``buckets`` lists the parameter names of each bucket, in bucket order. One backward
    per step, as for ``DDPIndividualParameters``."""

    def __init__(self, module: nn.Module, bucket_size_mb: float):
        super().__init__(module)
        self.bucket_size_mb = bucket_size_mb
        plan = plan_buckets(self._named_trainable, bucket_size_mb)
        self.buckets: list[list[str]] = [[name for name, _ in bucket] for bucket in plan]
        self._flat = [_FlatGradients([p for _, p in bucket]) for bucket in plan]
        self._bucket_of = {p: i for i, bucket in enumerate(plan) for _, p in bucket}
        self._register_grad_ready_hooks(self._bucket_of)
        self.on_train_batch_start()

    @property
    def communications_in_flight(self) -> int:
        """Buckets launched and not yet waited for."""
        return sum(bucket.in_flight for bucket in self._flat)

    def on_train_batch_start(self) -> None:
        """Forget which gradients arrived in the last step (``finish_gradient_synchronization`` does the
        same, so calling this is optional)."""
        if any(bucket.in_flight for bucket in getattr(self, "_flat", [])):
            raise RuntimeError("buckets are still in flight: call finish_gradient_synchronization() first")
        self._waiting_for = [len(bucket.params) for bucket in self._flat]   # gradients still to come
        self._arrived: set[nn.Parameter] = set()
        self._next_to_launch = 0

    def _on_grad_ready(self, param: nn.Parameter) -> None:
        if param in self._arrived:
            raise RuntimeError("a gradient was accumulated twice in one step: call "
                               "finish_gradient_synchronization() after each backward")
        self._arrived.add(param)
        self._waiting_for[self._bucket_of[param]] -= 1
        # In bucket order only: ranks then agree on the sequence of collectives whatever the order in
        # which their gradients arrived (PyTorch's DDP reducer keeps the same rule).
        while self._next_to_launch < len(self._flat) and self._waiting_for[self._next_to_launch] == 0:
            self._flat[self._next_to_launch].launch()
            self._next_to_launch += 1

    def finish_gradient_synchronization(self) -> None:
        # Buckets whose gradients did not all arrive (parameters unused this step) go now.
        for bucket in self._flat[self._next_to_launch:]:
            bucket.launch()
        self._next_to_launch = len(self._flat)
        for bucket in self._flat:
            bucket.finish(self.world_size)
        self.on_train_batch_start()
