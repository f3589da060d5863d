"""The data-parallel training variants, by name: the one list of them.

A variant's name is what the config lists (``DDP.variants``), what its record and trace files are
called, and what ``train_bench --variant`` takes. Each belongs to the deliverable whose results
folder holds its records (``results/<run>/<ID>/records/<name>.json``): naive DDP, PyTorch's DDP
(its anchor) and the no-communication baseline every overhead is measured against to C3; flat to
C4; overlapping to C6; the bucket sizes to C8; optimizer-state sharding to C11; FSDP to C12.

Kept free of torch (the Snakefile and the config check read it); ``build`` names, as a
``module:function`` string, the function that wraps the model, so ``train_bench`` imports only the
variant it runs.
"""
from __future__ import annotations

import importlib
import re
from dataclasses import dataclass
from typing import Callable

FAMILY = "<MB>"     # stands for a number in a family's name: bucketed-<MB> covers bucketed-25


@dataclass(frozen=True)
class Variant:
    name: str               # as in the config and the file names; "bucketed-<MB>" names a family
    deliverable: str        # the ID whose results folder holds its records
    build: str              # "module:function": (model, device, name) -> the wrapped model
    what: str               # one line for help texts and the writeup
    sharded_optimizer: bool = False   # AdamW inside ShardedOptimizer instead of plain AdamW
    gradient_bytes: int = 4           # bytes per gradient element it communicates (fp32; bf16: 2)
    single_rank: bool = False         # runs one rank with one rank's share of the batch

    @property
    def pattern(self) -> str:
        """A regular expression for the names this entry covers."""
        return re.escape(self.name).replace(re.escape(FAMILY), r"[0-9]+(?:\.[0-9]+)?")


_BUILDERS = "cs336_systems.distributed.train_bench"

BASELINE = "no-comm"

VARIANTS: tuple[Variant, ...] = (
    Variant(BASELINE, "C3", f"{_BUILDERS}:wrap_none",
            "the same step on one rank with one rank's share of the batch and no communication: "
            "the baseline every variant's overhead is measured against", single_rank=True),
    Variant("naive", "C3", f"{_BUILDERS}:wrap_naive",
            "one all-reduce per parameter after backward"),
    Variant("torch-ddp", "C3", f"{_BUILDERS}:wrap_torch_ddp",
            "PyTorch's DistributedDataParallel, the anchor"),
    Variant("flat", "C4", f"{_BUILDERS}:wrap_flat",
            "one all-reduce of all gradients flattened together, after backward"),
    Variant("overlap", "C6", f"{_BUILDERS}:wrap_overlap",
            "an asynchronous all-reduce per parameter as soon as its gradient is ready"),
    Variant(f"bucketed-{FAMILY}", "C8", f"{_BUILDERS}:wrap_bucketed",
            "gradients grouped in reverse order into buckets of at most <MB> MB, one all-reduce per bucket"),
    Variant("overlap-sharded", "C11", f"{_BUILDERS}:wrap_overlap",
            "overlap with the optimizer state sharded over the ranks (ShardedOptimizer)",
            sharded_optimizer=True),
    Variant("fsdp", "C12", f"{_BUILDERS}:wrap_fsdp",
            "every Linear and Embedding weight sharded, gathered ahead of use"),
    Variant("fsdp-bf16", "C12", f"{_BUILDERS}:wrap_fsdp",
            "fsdp computing and communicating in bf16 (weights and updates stay fp32)", gradient_bytes=2),
)


def names() -> list[str]:
    return [v.name for v in VARIANTS]


def lookup(name: str) -> Variant:
    """The entry covering ``name``; ValueError naming the known variants otherwise."""
    for variant in VARIANTS:
        if re.fullmatch(variant.pattern, name):
            return variant
    raise ValueError(f"unknown data-parallel variant {name!r}; known: {', '.join(names())}")


def is_name(name: str) -> bool:
    """Whether ``name`` is a variant (a family's names included: bucketed-25)."""
    return re.fullmatch(pattern(), name) is not None


def bucket_size_mb(name: str) -> float | None:
    """The number in a family's name (bucketed-100 -> 100.0), None for a plain name."""
    variant = lookup(name)
    if FAMILY not in variant.name:
        return None
    prefix = variant.name.partition(FAMILY)[0]
    return float(name[len(prefix):])


def of(deliverable: str, chosen: list[str]) -> list[str]:
    """The variants among ``chosen`` whose records live in ``deliverable``'s folder, in order."""
    return [name for name in chosen if lookup(name).deliverable == deliverable]


def deliverables() -> list[str]:
    """The IDs that own variants, in registry order, each once."""
    return list(dict.fromkeys(v.deliverable for v in VARIANTS))


def pattern(deliverable: str | None = None) -> str:
    """A regular expression for the names of ``deliverable``'s variants (every variant: None)."""
    return "|".join(v.pattern for v in VARIANTS if deliverable in (None, v.deliverable))


def builder(name: str) -> Callable:
    module, _, function = lookup(name).build.partition(":")
    return getattr(importlib.import_module(module), function)
