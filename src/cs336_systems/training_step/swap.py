"""Fused modules in the places of the model's norms, SwiGLU gates, rotary embeddings and LM head.

E1's steps that fuse parts of the model (Liger-Kernel's anchor, our Triton rungs) call other
functions over the model's own parameters. They share one model (``step.SharedPoint``), so before
each step the swap sets which module each place holds, by attribute: the blocks (compiled or not)
stay the same objects, only what they call changes.

A kit maps a kind of place to what makes its module from the model's (``KINDS``):

    norm   every RMSNorm: each block's ln1 and ln2, and ln_final
    gate   every SwiGLU feed-forward
    rope   every attention's rotary embedding
    loss   the LM head and the loss: the head's place holds ``HiddenStates`` and the step's loss is
           ``kit["loss"](head)``, a function of the hidden states and the targets
"""
from __future__ import annotations

from typing import Callable, Mapping

from torch import nn

KINDS = ("norm", "gate", "rope", "loss")
Kit = Mapping[str, Callable]


class HiddenStates(nn.Module):
    """In the LM head's place: hands the final norm's output through, so the loss can fuse the head.
    Holds the head, so its weight stays among the model's parameters (cleared with them)."""

    def __init__(self, head: nn.Module):
        super().__init__()
        self.head = head

    def forward(self, x):
        return x


class Swap:
    """The model's modules and the kits' in their places (module doc)."""

    def __init__(self, model: nn.Module, blocks: nn.ModuleList):
        self.places: list[tuple[str, nn.Module, str, nn.Module]] = []    # (kind, owner, attribute, model's)
        for block in blocks:
            self.places += [("norm", block, "ln1", block.ln1), ("norm", block, "ln2", block.ln2),
                            ("gate", block, "ffn", block.ffn)]
            if block.attn.rope is not None:
                self.places.append(("rope", block.attn, "rope", block.attn.rope))
        self.places += [("norm", model, "ln_final", model.ln_final), ("loss", model, "lm_head", model.lm_head)]
        self.head = model.lm_head
        self._made: dict[tuple[int, int], nn.Module] = {}       # (id(kit), place) -> the kit's module there
        self._losses: dict[int, Callable] = {}                   # id(kit) -> its loss over the head
        self.held: dict[str, int | None] = {kind: None for kind in KINDS}    # kind -> id of the kit in place

    def hold(self, kits: Mapping[str, Kit]) -> None:
        """For each kind ``kits`` names, that kit's modules in its places; the model's everywhere else.
        A no-op where the same kits already hold them, so configuring every step costs nothing."""
        unknown = set(kits) - set(KINDS)
        if unknown:
            raise ValueError(f"no such kind of place: {', '.join(sorted(unknown))}; known: {', '.join(KINDS)}")
        wanted = {kind: id(kits[kind]) if kind in kits else None for kind in KINDS}
        if wanted == self.held:
            return
        for place, (kind, owner, name, own) in enumerate(self.places):
            kit = kits.get(kind)
            setattr(owner, name, own if kit is None else self._module(kit, kind, place, own))
        self.held = wanted

    def _module(self, kit: Kit, kind: str, place: int, own: nn.Module) -> nn.Module:
        key = (id(kit), place)
        if key not in self._made:
            self._made[key] = HiddenStates(own) if kind == "loss" else kit[kind](own)
        return self._made[key]

    def loss(self, kit: Kit) -> Callable:
        """``kit``'s loss of the hidden states and targets, over the model's head."""
        if id(kit) not in self._losses:
            self._losses[id(kit)] = kit["loss"](self.head)
        return self._losses[id(kit)]
