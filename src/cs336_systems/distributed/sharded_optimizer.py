"""C10: optimizer-state sharding. Each rank keeps optimizer state (Adam's moments, say) for only
about 1/world of the parameter elements, steps only those parameters, and then every parameter is
broadcast from the rank that owns it, so all replicas end the step with the same weights.

    optimizer = ShardedOptimizer(model.parameters(), torch.optim.AdamW, lr=1e-3)
    ...                                  # gradients must already agree across ranks (a DDP wrapper)
    optimizer.step()

Ownership is decided in ``add_param_group`` (so groups added later are sharded too): parameters are
taken largest first and each goes to the rank that owns the fewest elements so far (ties to the lower
rank). That depends only on the parameters' sizes and order, so every rank computes the same map
without communicating.
"""
from __future__ import annotations

from typing import Any, Callable

import torch
import torch.distributed as dist


class ShardedOptimizer(torch.optim.Optimizer):
    """Wraps ``optimizer_cls(..., **kwargs)`` over this rank's share of the parameters (``.optimizer``).

    ``param_groups`` lists all parameters (so ``zero_grad`` clears every gradient, and a learning-rate
    schedule that edits ``param_groups`` is honoured: hyperparameters are copied to the wrapped
    optimizer before each step). Optimizer state lives in ``.optimizer.state`` and covers only
    ``owned_parameters()``. ``state_dict()`` is the base class's and therefore holds no state: this
    class does not checkpoint the shards."""

    def __init__(self, params, optimizer_cls: type[torch.optim.Optimizer], **kwargs: Any):
        if not dist.is_initialized():
            raise RuntimeError("ShardedOptimizer needs an initialized default process group")
        self.optimizer: torch.optim.Optimizer | None = None   # built when the first group arrives
        self._optimizer_cls = optimizer_cls
        self._optimizer_kwargs = kwargs
        self._rank = dist.get_rank()
        self._world_size = dist.get_world_size()
        self._owner: dict[torch.Tensor, int] = {}
        self._elements_owned = [0] * self._world_size       # by rank, over all groups so far
        super().__init__(params, defaults=kwargs)            # calls add_param_group for each group

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        super().add_param_group(param_group)                 # validates and fills in the defaults
        group = self.param_groups[-1]
        self._assign_owners(group["params"])
        shard = {key: value for key, value in group.items() if key != "params"}
        # An empty shard is still a group, so group i here is group i of the wrapped optimizer.
        shard["params"] = [p for p in group["params"] if self._owner[p] == self._rank]
        if self.optimizer is None:
            self.optimizer = self._optimizer_cls([shard], **self._optimizer_kwargs)
        else:
            self.optimizer.add_param_group(shard)

    def _assign_owners(self, params: list[torch.Tensor]) -> None:
        # Largest first, each to the least-loaded rank: the classic greedy for balanced partitions.
        # sorted() is stable, so equal sizes keep their order and every rank gets the same answer.
        for p in sorted(params, key=lambda t: t.numel(), reverse=True):
            rank = min(range(self._world_size), key=lambda r: (self._elements_owned[r], r))
            self._owner[p] = rank
            self._elements_owned[rank] += p.numel()

    def owned_parameters(self) -> list[torch.Tensor]:
        """The parameters this rank updates (and keeps optimizer state for), in group order."""
        return [p for group in self.param_groups for p in group["params"] if self._owner[p] == self._rank]

    def step(self, closure: Callable[[], float] | None = None, **kwargs: Any):
        """Step the wrapped optimizer on this rank's shard, then broadcast every parameter from its
        owner. A ``closure`` is evaluated by the wrapped optimizer (once, on every rank)."""
        for ours, theirs in zip(self.param_groups, self.optimizer.param_groups):
            theirs.update({key: value for key, value in ours.items() if key != "params"})
        loss = self.optimizer.step(closure=closure, **kwargs)
        self._broadcast_from_owners()
        return loss

    @torch.no_grad()
    def _broadcast_from_owners(self) -> None:
        # One broadcast per parameter, all in flight together: no flattened copy, so sharding adds no
        # temporary memory the size of a shard.
        works = [dist.broadcast(p.detach(), src=self._owner[p], async_op=True)
                 for group in self.param_groups for p in group["params"]]
        for work in works:
            work.wait()
