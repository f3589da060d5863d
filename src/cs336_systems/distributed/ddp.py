"""Data-parallel wrappers (C2, C4, C5, C7, and C8's variants past PyTorch's DDP): four ways to keep
N replicas of a model in step.

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
  all-reduced asynchronously once all its gradients are ready. Its options (C8's variants past
  PyTorch's DDP) make the buckets the gradients' own storage, communicate in bf16, shrink the first
  bucket, and rebuild the buckets in the order gradients became ready in the first step.

Rules common to all four:

- Only parameters with ``requires_grad`` are communicated (frozen ones are broadcast once and left
  alone). A parameter shared by two modules (tied weights) is one Parameter, so it is synchronized once.
- Averaging divides the summed gradient by the world size in place, in the gradient's own dtype
  (``DDPBucketed`` communicating in bf16: the bf16 sum is cast up into the gradient, then divided),
  or, with ``DDPBucketed(mean_in_all_reduce=True)``, inside the all-reduce itself (``ReduceOp.AVG``:
  NCCL scales as it reduces, so no pass over the gradients is left to divide them).
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
from collections.abc import Callable, Iterable

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


def weakly_bound(method: Callable[..., None]) -> Callable[..., None]:
    """``method`` (a bound method) as a function that holds its object weakly and does nothing once
    the object is gone. For a parameter's gradient hook: held from C++, where the garbage collector
    cannot see it, a hook holding its wrapper keeps a dropped wrapper, its model and their memory
    alive (and communicating) for as long as the parameters live."""
    ref = weakref.WeakMethod(method)

    def call(*args) -> None:
        live = ref()
        if live is not None:
            live(*args)
    return call


def trainable_named_parameters(module: nn.Module) -> list[tuple[str, nn.Parameter]]:
    """The parameters that take part in gradient synchronization, each once (tied weights are one
    Parameter and ``named_parameters`` already lists it once), in registration order."""
    return [(name, p) for name, p in module.named_parameters() if p.requires_grad]


def plan_buckets(named_parameters: Iterable[tuple[str, nn.Parameter]], bucket_size_mb: float,
                 first_bucket_mb: float | None = None,
                 reverse: bool = True) -> list[list[tuple[str, nn.Parameter]]]:
    """Group parameters in REVERSE of the given order (``reverse=False``: in the given order) into
    buckets of at most ``bucket_size_mb`` (MB = 1024² bytes of the parameters), the first bucket at
    most ``first_bucket_mb`` where given. A parameter larger than the limit gets a bucket of its own;
    a change of dtype or device also starts a new bucket, because a bucket is flattened into one tensor."""
    for what, value in (("bucket_size_mb", bucket_size_mb), ("first_bucket_mb", first_bucket_mb)):
        if value is not None and not value > 0:
            raise ValueError(f"{what} must be positive, got {value}")
    limit = bucket_size_mb * BYTES_PER_MB
    first_limit = limit if first_bucket_mb is None else first_bucket_mb * BYTES_PER_MB
    buckets: list[list[tuple[str, nn.Parameter]]] = []
    current: list[tuple[str, nn.Parameter]] = []
    current_bytes = 0
    ordered = list(named_parameters)
    for name, p in (reversed(ordered) if reverse else ordered):
        size = p.numel() * p.element_size()
        fits = current_bytes + size <= (limit if buckets else first_limit)
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
        hook = weakly_bound(self._on_grad_ready)
        self._hook_handles = [p.register_post_accumulate_grad_hook(hook) for p in params]

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


class _BucketBuffer:
    """A bucket that keeps one flat buffer for its whole life, ``[grad_0, grad_1, ..., presence flags]``
    (the flags as in ``_FlatGradients``), in one of two ways:

    - ``as_view``: each parameter's ``.grad`` *is* its slice of the buffer, so backward accumulates
      straight into the bucket and nothing is copied in or out (PyTorch's ``gradient_as_bucket_view``);
      the mean is computed in place. A ``.grad`` that is not the view (the optimizer set it to None
      and autograd made a new one) is copied in once and replaced by the view.
    - ``dtype`` other than the gradients' (bf16): gradients are cast into the buffer at launch, the
      sum runs in that dtype, and the mean is written back into the fp32 gradients (cast up, then
      divided in fp32, so the division adds no rounding of its own).

    ``average``: the all-reduce computes the mean itself (``ReduceOp.AVG``), so no division pass
    follows it. NCCL scales each rank's share by 1/world as it reduces: exact for a power-of-two
    world, one more rounding otherwise. The presence flags then arrive as count/world, still > 0
    wherever some rank had the gradient.

    A parameter that no rank had a gradient for ends the step with ``grad = None``, as in one process."""

    def __init__(self, params: list[nn.Parameter], dtype: torch.dtype | None = None, as_view: bool = False,
                 average: bool = False):
        reference = params[0]
        self.params, self.as_view, self.average = params, as_view, average
        self.dtype = dtype or reference.dtype
        if as_view and self.dtype != reference.dtype:
            raise ValueError("a bucket that is the gradients' storage communicates in their own dtype")
        total = sum(p.numel() for p in params)
        self.buffer = torch.zeros(total + len(params), dtype=self.dtype, device=reference.device)
        self.views, offset = [], 0
        for p in params:
            self.views.append(self.buffer[offset:offset + p.numel()].view_as(p))
            offset += p.numel()
        self._flags = self.buffer[total:]
        self._work = None
        self._all_present_here = True
        self._side: torch.cuda.Stream | None = None     # where the mean went back already (``launch``)
        self.copied_in = 0          # gradients that were not views and had to be copied in (as_view)

    def attach(self, keep: bool = False) -> None:
        """Make every ``.grad`` its view (``as_view`` only): zeroed for a new step's backward to
        accumulate into, or (``keep``) holding the values the gradients have now."""
        if not keep:
            self.buffer.zero_()
        for p, view in zip(self.params, self.views):
            if keep and p.grad is not None:
                view.copy_(p.grad)
            p.grad = view if (p.grad is not None or not keep) else None

    def adopt(self, index: int) -> None:
        """Backward has produced parameter ``index``'s gradient: make sure it lives in the bucket."""
        p, view = self.params[index], self.views[index]
        if self.as_view and p.grad.data_ptr() != view.data_ptr():
            view.copy_(p.grad)
            p.grad = view
            self.copied_in += 1

    def launch(self, arrived: list[bool], side: torch.cuda.Stream | None = None) -> None:
        """Start the asynchronous sum; ``arrived`` says which gradients this rank produced this step
        (the others count as zeros: a view may still hold the last step's mean).

        ``side`` (a CUDA stream; buckets of another dtype whose gradients all arrived here): the cast
        in, the all-reduce and the cast back of the mean all go on that stream, issued now, so the
        compute stream runs none of them and ``finish`` only makes it wait. In a GPU-bound backward
        the two memory-bound casts (the fp32 gradients read, the bf16 bucket written, and back) then
        run beside backward's kernels instead of between them and after the last one."""
        if side is not None and not self.as_view and all(arrived):
            side.wait_stream(torch.cuda.current_stream(self.buffer.device))     # the gradients are ready
            with torch.cuda.stream(side):
                grads = [p.grad for p in self.params]
                torch._foreach_copy_(self.views, grads)
                self._flags.fill_(1)
                op = dist.ReduceOp.AVG if self.average else dist.ReduceOp.SUM
                dist.all_reduce(self.buffer, op=op, async_op=True).wait()     # the side stream waits for it
                torch._foreach_copy_(grads, self.views)
                if not self.average:
                    torch._foreach_div_(grads, dist.get_world_size())
            self._side, self._all_present_here = side, True
            return
        # One multi-tensor kernel each (per-parameter copies would be hundreds of launches).
        missing = [view for view, here in zip(self.views, arrived) if not here]
        if missing:
            torch._foreach_zero_(missing)
        if not self.as_view:                    # the cast into the communication dtype
            present = [(view, p.grad) for p, view, here in zip(self.params, self.views, arrived) if here]
            if present:
                torch._foreach_copy_([v for v, _ in present], [g for _, g in present])
        self._all_present_here = all(arrived)
        if self._all_present_here:
            self._flags.fill_(1)
        else:
            self._flags.copy_(torch.tensor(arrived, dtype=self.dtype))
        op = dist.ReduceOp.AVG if self.average else dist.ReduceOp.SUM
        self._work = dist.all_reduce(self.buffer, op=op, async_op=True)

    @property
    def in_flight(self) -> bool:
        return self._work is not None or self._side is not None

    @property
    def on_side_stream(self) -> bool:
        """Launched, and its work issued on the side stream (the mean comes back there)."""
        return self._side is not None

    def finish(self, world_size: int) -> None:
        if self._side is not None:              # launched on the side stream, the mean already back
            torch.cuda.current_stream(self.buffer.device).wait_stream(self._side)
            self._side = None
            return
        self._work.wait()
        self._work = None
        n = len(self.params)
        seen_anywhere = [True] * n if self._all_present_here else (self._flags > 0).tolist()
        if self.as_view and not self.average:
            self.buffer.div_(world_size)
        back = []                               # (fp32 gradient, its bf16 mean) to write back
        for p, view, seen in zip(self.params, self.views, seen_anywhere):
            if not seen:
                p.grad = None
            elif self.as_view:
                p.grad = view
            else:
                if p.grad is None:
                    p.grad = torch.empty_like(p)
                back.append((p.grad, view))
        if back:                                # cast up, then divide in fp32: no rounding of its own
            grads = [g for g, _ in back]
            torch._foreach_copy_(grads, [v for _, v in back])
            if not self.average:
                torch._foreach_div_(grads, world_size)


class DDPBucketed(_DataParallel):
    """C7: gradients all-reduced in buckets of at most ``bucket_size_mb`` (see ``plan_buckets``), each
    launched asynchronously from a hook once all its gradients are ready and every earlier bucket has
    been launched. ``buckets`` lists the parameter names of each bucket, in bucket order. One backward
    per step, as for ``DDPIndividualParameters``.

    Options past that (C8's variants that go beyond PyTorch's DDP; all off by default):

    - ``gradient_as_bucket_view``: each ``.grad`` is a view into its bucket (see ``_BucketBuffer``),
      so nothing is copied into or out of the buckets. Then ``on_train_batch_start`` zeroes the
      buckets and points the gradients at them; zero the gradients *before* calling it (a
      ``zero_grad(set_to_none=True)`` after it undoes the views, and each gradient is copied in once).
    - ``communication_dtype`` (torch.bfloat16): buckets of that dtype; the mean goes back into the
      fp32 gradients. Not with views.
    - ``mean_in_all_reduce``: the all-reduce averages (``ReduceOp.AVG``) instead of summing, so no
      division pass over every gradient follows it (see ``_BucketBuffer``).
    - ``first_bucket_mb``: a smaller first bucket, so the first all-reduce starts with the first
      gradients instead of waiting for a whole ``bucket_size_mb`` of them.
    - ``ready_order``: after the first step, the buckets are rebuilt in the order in which that step's
      gradients became ready (rank 0's order, broadcast, so every rank builds the same buckets),
      where it differs from reverse registration order. ``ready_order_names`` is that order and
      ``rebuilt`` whether the buckets changed.
    """

    def __init__(self, module: nn.Module, bucket_size_mb: float, *, gradient_as_bucket_view: bool = False,
                 communication_dtype: torch.dtype | None = None, first_bucket_mb: float | None = None,
                 ready_order: bool = False, mean_in_all_reduce: bool = False):
        super().__init__(module)
        if gradient_as_bucket_view and communication_dtype is not None:
            raise ValueError("gradient_as_bucket_view and communication_dtype exclude each other: a bf16 "
                             "bucket cannot be the storage of fp32 gradients")
        self.bucket_size_mb, self.first_bucket_mb = bucket_size_mb, first_bucket_mb
        self._as_view, self._dtype, self._average = gradient_as_bucket_view, communication_dtype, mean_in_all_reduce
        self._learn_order = ready_order
        self._side: torch.cuda.Stream | None = None
        self._cast_aside = False
        self._arrival: list[nn.Parameter] = []
        self.ready_order_names: list[str] | None = None
        self.rebuilt = False
        self._flat = []
        self._build(plan_buckets(self._named_trainable, bucket_size_mb, first_bucket_mb))
        self._register_grad_ready_hooks(p for _, p in self._named_trainable)
        self.on_train_batch_start()

    def _build(self, plan: list[list[tuple[str, nn.Parameter]]]) -> None:
        self.buckets: list[list[str]] = [[name for name, _ in bucket] for bucket in plan]
        if self._as_view or self._dtype is not None or self._average:
            self._flat = [_BucketBuffer([p for _, p in bucket], self._dtype, self._as_view, self._average)
                          for bucket in plan]
        else:
            self._flat = [_FlatGradients([p for _, p in bucket]) for bucket in plan]
        self._bucket_of = {p: (i, j) for i, bucket in enumerate(plan) for j, (_, p) in enumerate(bucket)}
        self._reset_step()

    @property
    def casts_on_side_stream(self) -> bool:
        """Whether a bucket of this wrapper has cast, all-reduced and cast back on the side stream
        (``_BucketBuffer.launch``): bf16 buckets on a GPU whose gradients all arrived."""
        return self._cast_aside

    @property
    def communications_in_flight(self) -> int:
        """Buckets launched and not yet waited for."""
        return sum(bucket.in_flight for bucket in self._flat)

    def on_train_batch_start(self) -> None:
        """Forget which gradients arrived in the last step (``finish_gradient_synchronization`` does the
        same, so calling this is optional) and, with views, zero the buckets and point every gradient
        at its view."""
        if any(bucket.in_flight for bucket in self._flat):
            raise RuntimeError("buckets are still in flight: call finish_gradient_synchronization() first")
        self._reset_step()
        if self._as_view:
            for bucket in self._flat:
                bucket.attach()

    def _reset_step(self) -> None:
        self._waiting_for = [len(bucket.params) for bucket in self._flat]   # gradients still to come
        self._arrived: set[nn.Parameter] = set()
        self._next_to_launch = 0

    def _on_grad_ready(self, param: nn.Parameter) -> None:
        if param in self._arrived:
            raise RuntimeError("a gradient was accumulated twice in one step: call "
                               "finish_gradient_synchronization() after each backward")
        self._arrived.add(param)
        if self._learn_order and self.ready_order_names is None:
            self._arrival.append(param)
        index, position = self._bucket_of[param]
        if self._as_view:
            self._flat[index].adopt(position)
        self._waiting_for[index] -= 1
        # In bucket order only: ranks then agree on the sequence of collectives whatever the order in
        # which their gradients arrived (PyTorch's DDP reducer keeps the same rule).
        while self._next_to_launch < len(self._flat) and self._waiting_for[self._next_to_launch] == 0:
            self._launch(self._next_to_launch)
            self._next_to_launch += 1

    def _launch(self, index: int) -> None:
        bucket = self._flat[index]
        if isinstance(bucket, _BucketBuffer):
            bucket.launch([p in self._arrived for p in bucket.params], self._side_stream(bucket))
            self._cast_aside |= bucket.on_side_stream
        else:
            bucket.launch()

    def _side_stream(self, bucket: "_BucketBuffer") -> torch.cuda.Stream | None:
        """One CUDA stream for the buckets that cast (``communication_dtype``), made on first use."""
        if self._dtype is None or not bucket.buffer.is_cuda:
            return None
        if self._side is None:
            self._side = torch.cuda.Stream(bucket.buffer.device)
        return self._side

    def finish_gradient_synchronization(self) -> None:
        # Buckets whose gradients did not all arrive (parameters unused this step) go now.
        for index in range(self._next_to_launch, len(self._flat)):
            self._launch(index)
        self._next_to_launch = len(self._flat)
        for bucket in self._flat:
            bucket.finish(self.world_size)
        if self._learn_order and self.ready_order_names is None:
            self._rebuild_in_ready_order()
        self._reset_step()

    def _rebuild_in_ready_order(self) -> None:
        """Rank 0's order of this step's gradients (parameters that produced none follow, in reverse
        registration order), broadcast; the buckets are planned again in it if it is not the order
        they have. The gradients just synchronized keep their values (copied into new views)."""
        trainable = [p for _, p in self._named_trainable]
        if not trainable:
            self.ready_order_names = []
            return
        index = {p: i for i, p in enumerate(trainable)}
        arrived = [index[p] for p in self._arrival]
        rest = [i for i in reversed(range(len(trainable))) if i not in set(arrived)]
        order = torch.tensor(arrived + rest, dtype=torch.int64, device=trainable[0].device)
        dist.broadcast(order, src=0)
        ready = [self._named_trainable[i] for i in order.tolist()]
        self.ready_order_names = [name for name, _ in ready]
        self._arrival = []
        if self.ready_order_names == [name for name, _ in reversed(self._named_trainable)]:
            return
        self._build(plan_buckets(ready, self.bucket_size_mb, self.first_bucket_mb, reverse=False))
        self.rebuilt = True
        if self._as_view:
            for bucket in self._flat:
                bucket.attach(keep=True)
