"""Fully sharded data parallelism (C12): each rank keeps 1/world of every Linear and Embedding weight
and gathers a layer's full weight only around the moments it is needed.

    model = FSDP(build_model(size, context), compute_dtype=torch.bfloat16)
    optimizer = AdamW(model.parameters(), lr=1e-3)     # sees the fp32 shards and the replicated norms
    for x, y in batches:
        optimizer.zero_grad()
        cross_entropy(model(x), y).backward()
        model.finish_gradient_synchronization()         # every .grad is now the mean over ranks
        optimizer.step()
    weights = model.gather_full_params()                # {original name: full fp32 tensor}, all ranks

What is sharded. Every trainable ``weight`` of a ``cs336_basics`` ``Linear`` or ``Embedding`` is
flattened, zero-padded to a multiple of the world size, and replaced by ``weight_shard``: this rank's
contiguous 1/world slice, an ``nn.Parameter`` in the weight's own dtype (fp32 for our models: the
master weights). Everything else (RMSNorm weights, frozen weights) stays replicated; the gradients of
the trainable ones are all-reduced and averaged. At construction every rank takes rank 0's values, so
the ranks start identical however each built its module.

Mechanism, per layer (a sharded module):

- forward: a forward pre-hook casts the shard to ``compute_dtype`` (before communicating, so the
  all-gather moves compute-dtype bytes), waits for the layer's all-gather (issuing it if no prefetch
  did) and sets ``module.weight`` to ``_GatheredWeight.apply(shard)``: the full weight, tied into the
  autograd graph as a function of the shard. The forward hook drops it, so the layer's own forward
  is the only time it is materialised.
- prefetch: the pre-hook of the layer at position i of the execution order also issues the
  asynchronous all-gather of the layer at position i + 1. So a gather starts no earlier than when the
  layer two before it finished (it starts when the one before it starts), and at most two full
  weights exist at once. The order is the one recorded in the previous forward (layers are not called
  in registration order: SwiGLU runs w1, w3, w2), so the first forward gathers on demand only.
- saved tensors: ``forward`` runs the module under ``torch.autograd.graph.saved_tensors_hooks``. When
  autograd saves the full weight (or a view of it, as matmul saves ``weight.T``) the pack hook keeps a
  placeholder instead, so the graph holds no full weight between forward and backward.
- backward: the first unpack of a layer's placeholder gathers the weight again (again prefetching
  the next layer in the backward order: the forward order reversed, keeping only layers whose weight
  was saved; an Embedding's backward needs only its indices) and rebuilds the saved view.
  ``_GatheredWeight.backward`` receives the full weight's gradient, frees the gathered weight, and
  launches an asynchronous reduce-scatter (sum, in compute dtype) of the gradient into a shard-sized
  buffer; it returns no gradient to autograd.
- ``finish_gradient_synchronization()`` waits for those reduce-scatters and adds each result, cast
  to the shard's dtype and divided by the world size (the mean), to ``weight_shard.grad`` (fp32
  accumulation), and waits for the replicated parameters' all-reduces, launched by
  post-accumulate-grad hooks, and divides them by the world size.

Mixed precision (``compute_dtype``): only the gathered Linear/Embedding weights are cast, so
activations follow them into the compute dtype; replicated parameters stay in their own dtype (our
RMSNorm computes in fp32 and casts its output back), and so do their gradients. The optimizer sees
only the fp32 master shards and the replicated parameters; no compute-dtype copy is a Parameter.

Collectives: ``all_gather_into_tensor`` and ``reduce_scatter_tensor`` (under their newer names
``all_gather_single`` and ``reduce_scatter_single`` where torch has them). Gloo on the CPU supports both
in the torch versions this was tested with (2.13 on the CPU, checked in fp32, fp16 and bf16; 2.11 on
the GPU machines), so NCCL and Gloo take the same path and no all-reduce fallback is needed. The mean is a SUM collective followed by a division
in the master dtype (Gloo has no ``ReduceOp.AVG``, and dividing fp16 gradients before summing loses
the small ones to underflow); an fp16 sum overflows only where the mean gradient exceeds 65504 / world.

Debugging: ``FSDP(..., record_events=True)`` appends a ``GatherEvent`` to ``events`` for each gather
issued, layer start (``use``), layer end (``done``) and free, in both phases, with the number of
gathered full weights still alive in memory at that moment (tracked by weak references to their
storages); ``events`` restarts at every forward. Limits: one backward between
``finish_gradient_synchronization`` calls (a second would all-reduce the replicated parameters'
accumulated gradients again); weights shared by two modules (tied) are refused; the model must be
called through the wrapper (the hooks need its state).
"""
from __future__ import annotations

import time
import weakref
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from cs336_basics.model import Embedding, Linear
from cs336_systems.distributed.ddp import broadcast_from_rank_zero, weakly_bound

SHARDED_TYPES = (Linear, Embedding)

# Newer torch (2.13 here) names the single-tensor collectives all_gather_single / reduce_scatter_single
# and deprecates the old names; same operations. Older torch has only the old names.
_all_gather_into_tensor = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_reduce_scatter_tensor = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


# --- collectives on flat tensors ------------------------------------------------------------------

def all_gather_flat(shard: torch.Tensor, world_size: int):
    """Start gathering every rank's equal-sized flat ``shard`` into one flat tensor, rank order.
    Returns (output, work); read the output only after ``work.wait()``."""
    output = shard.new_empty(shard.numel() * world_size)
    return output, _all_gather_into_tensor(output, shard, async_op=True)


def reduce_scatter_sum(flat: torch.Tensor, world_size: int):
    """Start summing ``flat`` (padded to a multiple of the world size) over ranks, this rank
    receiving its 1/world slice of the sum, in ``flat``'s dtype. Returns (output, work); keep
    ``flat`` alive until the work is done."""
    output = flat.new_empty(flat.numel() // world_size)
    return output, _reduce_scatter_tensor(output, flat, op=dist.ReduceOp.SUM, async_op=True)


# --- per-layer state ------------------------------------------------------------------------------

@dataclass
class _InFlight:
    """An asynchronous collective: its output, its work handle, and its input, which must stay alive
    until the collective is done (the cast shard of an all-gather, the padded gradient of a
    reduce-scatter)."""
    output: torch.Tensor
    work: Any
    source: torch.Tensor


@dataclass(eq=False)
class ShardedWeight:
    """One sharded weight: where it lives, its full shape, this rank's shard and its gather state."""
    name: str                       # the original parameter name, e.g. "layers.0.attn.q_proj.weight"
    module: nn.Module
    shape: torch.Size
    shard: nn.Parameter             # flat, (padded numel) / world elements
    pending: _InFlight | None = None        # an all-gather issued and not yet waited for
    full: torch.Tensor | None = None        # the gathered weight while it is in use

    @property
    def numel(self) -> int:
        return self.shape.numel()


@dataclass(frozen=True)
class GatherEvent:
    phase: str      # "forward" or "backward"
    kind: str       # "gather" (all-gather issued), "use" (layer starts), "done" (layer ends), "free"
    layer: str      # original parameter name of the weight
    live: int       # gathered full weights alive in memory just after the event


@dataclass(frozen=True)
class _SavedWeightView:
    """What autograd keeps instead of a saved full weight: how to rebuild the view from a re-gather."""
    layer: ShardedWeight
    size: torch.Size
    stride: tuple[int, ...]
    offset: int


@dataclass
class _Cursor:
    """Walks a planned layer order, so a layer's position tells which layer to prefetch next."""
    plan: list[ShardedWeight] = field(default_factory=list)
    position: int = 0

    def next_after(self, layer: ShardedWeight) -> ShardedWeight | None:
        for i in range(self.position, len(self.plan)):
            if self.plan[i] is layer:
                self.position = i + 1
                return self.plan[i + 1] if i + 1 < len(self.plan) else None
        return None         # off plan (the order changed): no prefetch


class _GatheredWeight(torch.autograd.Function):
    """Identity-like link from a shard to its gathered full weight: forward hands out the weight the
    pre-hook gathered, backward gives the full gradient to the FSDP wrapper to reduce-scatter."""

    @staticmethod
    def forward(ctx, shard, layer, owner):
        ctx.layer, ctx.owner = layer, owner
        return layer.full

    @staticmethod
    def backward(ctx, grad_full):
        ctx.owner._layer_backward_done(ctx.layer, grad_full)
        return None, None, None


class _BufferTracker:
    """Debug only: how many gathered buffers are still alive in memory, by weak references to their
    storages, so a reference kept by mistake (autograd saving a full weight, say) shows up.

    A collective's worker thread may drop its reference to the output a few milliseconds after
    ``wait()`` returns (Gloo does, about one time in five), so a buffer FSDP has let go of gets a
    grace period to disappear before it counts as alive; one still alive after that is a leak and is
    counted from then on without waiting again."""

    GRACE_S = 0.2

    def __init__(self):
        self._held: dict[int, weakref.ref] = {}       # id(layer) -> the buffer FSDP still uses
        self._released: list[weakref.ref] = []        # buffers FSDP let go of, not yet seen to die
        self._leaked: list[weakref.ref] = []

    def track(self, layer, buffer: torch.Tensor) -> None:
        self._held[id(layer)] = weakref.ref(buffer.untyped_storage())

    def release(self, layer) -> None:
        ref = self._held.pop(id(layer), None)
        if ref is not None:
            self._released.append(ref)

    def live(self) -> int:
        deadline = time.monotonic() + self.GRACE_S
        while any(ref() is not None for ref in self._released) and time.monotonic() < deadline:
            time.sleep(0.0005)
        self._leaked += [ref for ref in self._released if ref() is not None]
        self._released = []
        self._leaked = [ref for ref in self._leaked if ref() is not None]
        return sum(ref() is not None for ref in self._held.values()) + len(self._leaked)


def _same_storage(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.device == b.device and a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


# --- the wrapper ----------------------------------------------------------------------------------

class FSDP(nn.Module):
    """Shard ``module``'s Linear/Embedding weights over the default process group (see module doc)."""

    def __init__(self, module: nn.Module, compute_dtype: torch.dtype | None = None, *,
                 record_events: bool = False):
        super().__init__()
        self.module = module
        self.compute_dtype = compute_dtype
        self.world_size, self.rank = dist.get_world_size(), dist.get_rank()
        self.record_events = record_events
        self.events: list[GatherEvent] = []
        self._original_names = [name for name, _ in module.named_parameters()]
        broadcast_from_rank_zero(module)
        self.sharded = self._shard_weights(module)
        shards = {id(layer.shard) for layer in self.sharded}
        self.replicated = [p for p in module.parameters() if p.requires_grad and id(p) not in shards]
        # Runtime state of the current step.
        self._forward_order: list[ShardedWeight] = []     # as recorded in the previous forward
        self._forward_cursor = _Cursor()
        self._backward_cursor = _Cursor()
        self._calls: list[ShardedWeight] = []            # this forward's layer calls, in order
        self._saved_by_call: list[bool] = []             # whether autograd saved that call's weight
        self._in_forward: ShardedWeight | None = None
        self._running = False
        self._pending_reduce_scatters: list[tuple[ShardedWeight, _InFlight]] = []
        self._pending_all_reduces: list[tuple[nn.Parameter, Any]] = []
        self._gathered_buffers = _BufferTracker()
        for layer in self.sharded:
            layer.module.register_forward_pre_hook(partial(self._before_layer_forward, layer))
            layer.module.register_forward_hook(partial(self._after_layer_forward, layer))
        hook = weakly_bound(self._all_reduce_replicated)      # not keeping a dropped wrapper alive
        for p in self.replicated:
            p.register_post_accumulate_grad_hook(hook)

    def _shard_weights(self, module: nn.Module) -> list[ShardedWeight]:
        owners: dict[int, str] = {}
        layers = []
        for module_name, sub in module.named_modules():
            if not isinstance(sub, SHARDED_TYPES) or not sub.weight.requires_grad:
                continue
            name = f"{module_name}.weight" if module_name else "weight"
            weight = sub.weight
            if id(weight) in owners:
                raise ValueError(f"FSDP does not shard tied weights: {name} is {owners[id(weight)]}")
            owners[id(weight)] = name
            shard_numel = -(-weight.numel() // self.world_size)
            flat = torch.zeros(shard_numel * self.world_size, dtype=weight.dtype, device=weight.device)
            flat[:weight.numel()] = weight.detach().reshape(-1)
            shard = nn.Parameter(flat[self.rank * shard_numel:(self.rank + 1) * shard_numel].clone())
            del sub._parameters["weight"]       # the full weight is freed here
            sub.weight = None                   # set only while the layer runs
            sub.register_parameter("weight_shard", shard)
            layers.append(ShardedWeight(name, sub, weight.shape, shard))
        return layers

    # --- forward ---

    def forward(self, *args, **kwargs):
        self._finish_leftover_gathers()
        self.events.clear()
        self._forward_cursor = _Cursor(self._forward_order)
        self._calls, self._saved_by_call = [], []
        self._running = True
        try:
            with torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack):
                output = self.module(*args, **kwargs)
        finally:
            self._running = False
            self._in_forward = None
        self._finish_leftover_gathers()         # prefetched for a layer that was not called
        self._forward_order = list(self._calls)
        self._backward_cursor = _Cursor([layer for layer, saved in zip(reversed(self._calls),
                                                                        reversed(self._saved_by_call))
                                         if saved])
        return output

    def _before_layer_forward(self, layer: ShardedWeight, module, args):
        if not self._running:
            raise RuntimeError(f"{layer.name}: call the FSDP wrapper, not the module inside it")
        self._calls.append(layer)
        self._saved_by_call.append(False)
        upcoming = self._forward_cursor.next_after(layer)
        self._start_gather(layer, "forward")
        if upcoming is not None:
            self._start_gather(upcoming, "forward")     # the one-layer look-ahead
        self._wait_gather(layer, "forward")
        self._in_forward = layer
        module.weight = _GatheredWeight.apply(layer.shard, layer, self)

    def _after_layer_forward(self, layer: ShardedWeight, module, args, output):
        self._in_forward = None
        module.weight = None
        self._record("forward", "done", layer)
        self._free(layer, "forward")

    def _pack(self, tensor: torch.Tensor):
        layer = self._in_forward
        if layer is not None and layer.full is not None and _same_storage(tensor, layer.full):
            self._saved_by_call[-1] = True
            return _SavedWeightView(layer, tensor.size(), tensor.stride(), tensor.storage_offset())
        return tensor

    # --- backward ---

    def _unpack(self, saved):
        if not isinstance(saved, _SavedWeightView):
            return saved
        layer = saved.layer
        if layer.full is None:                  # the layer's backward starts
            upcoming = self._backward_cursor.next_after(layer)
            self._start_gather(layer, "backward")
            if upcoming is not None:
                self._start_gather(upcoming, "backward")
            self._wait_gather(layer, "backward")
        return layer.full.as_strided(saved.size, saved.stride, saved.offset)

    def _layer_backward_done(self, layer: ShardedWeight, grad_full: torch.Tensor) -> None:
        self._record("backward", "done", layer)
        self._free(layer, "backward")
        with torch.no_grad():
            padded = grad_full.new_zeros(layer.shard.numel() * self.world_size)
            padded[:layer.numel] = grad_full.reshape(-1)
            output, work = reduce_scatter_sum(padded, self.world_size)
        self._pending_reduce_scatters.append((layer, _InFlight(output, work, padded)))

    def _all_reduce_replicated(self, param: nn.Parameter) -> None:
        self._pending_all_reduces.append((param, dist.all_reduce(param.grad, async_op=True)))

    def finish_gradient_synchronization(self) -> None:
        """Wait for every outstanding reduce-scatter and all-reduce of this backward; afterwards each
        ``weight_shard.grad`` holds (adds) this rank's slice of the mean gradient in the master dtype
        and each replicated parameter's ``.grad`` the mean over ranks."""
        for layer, reduction in self._pending_reduce_scatters:
            reduction.work.wait()
            # Mean = sum / world, divided in the master dtype: dividing fp16 gradients before the sum
            # would push small ones into fp16's subnormal range and lose their low bits.
            grad = reduction.output.to(layer.shard.dtype).div_(self.world_size)
            if layer.shard.grad is None:
                layer.shard.grad = grad
            else:
                layer.shard.grad.add_(grad)
        for param, work in self._pending_all_reduces:
            work.wait()
            param.grad.div_(self.world_size)
        self._pending_reduce_scatters, self._pending_all_reduces = [], []
        self._finish_leftover_gathers()

    # --- gathering and freeing ---

    def _start_gather(self, layer: ShardedWeight, phase: str) -> None:
        if layer.pending is not None or layer.full is not None:
            return
        with torch.no_grad():
            send = layer.shard.detach()
            if self.compute_dtype is not None:
                send = send.to(self.compute_dtype)      # cast before communicating
            flat, work = all_gather_flat(send, self.world_size)
        layer.pending = _InFlight(flat, work, send)
        if self.record_events:
            self._gathered_buffers.track(layer, flat)
        self._record(phase, "gather", layer)

    def _wait_gather(self, layer: ShardedWeight, phase: str) -> None:
        gather, layer.pending = layer.pending, None
        gather.work.wait()
        layer.full = gather.output[:layer.numel].view(layer.shape)
        self._record(phase, "use", layer)

    def _free(self, layer: ShardedWeight, phase: str) -> None:
        if layer.full is not None:
            layer.full = None
            self._gathered_buffers.release(layer)
            self._record(phase, "free", layer)

    def _finish_leftover_gathers(self) -> None:
        """Wait for and drop gathers nobody used (a prefetch off the actual order, an interrupted
        pass), so no buffer outlives its step or is freed under a running collective."""
        for layer in self.sharded:
            if layer.pending is not None:
                layer.pending.work.wait()
                layer.pending = None
            layer.full = None
            layer.module.weight = None
            self._gathered_buffers.release(layer)

    def _record(self, phase: str, kind: str, layer: ShardedWeight) -> None:
        if not self.record_events:
            return
        self.events.append(GatherEvent(phase, kind, layer.name, self._gathered_buffers.live()))

    # --- whole weights ---

    @torch.no_grad()
    def gather_full_params(self) -> dict[str, torch.Tensor]:
        """Every parameter of the wrapped module as a full tensor in its master dtype, keyed by its
        original name (as ``module.named_parameters()`` listed it before sharding); the same on
        every rank. A collective: call it on all ranks."""
        shards = {id(layer.shard) for layer in self.sharded}
        full = {name: p.detach().clone() for name, p in self.module.named_parameters()
                if id(p) not in shards}
        for layer in self.sharded:
            flat, work = all_gather_flat(layer.shard.detach(), self.world_size)
            work.wait()
            full[layer.name] = flat[:layer.numel].view(layer.shape).clone()
        return {name: full[name] for name in self._original_names}
