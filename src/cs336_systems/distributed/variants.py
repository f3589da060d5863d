"""The data-parallel training variants, by name: the one list of them.

A variant's name is what the config lists (``DDP.variants``), what its record and trace files are
called, and what ``train_bench --variants`` takes. Each belongs to the deliverable whose results
folder holds its records (``results/<run>/<ID>/records/<name>_<precision>.json``, see ``stem``):
naive DDP, PyTorch's DDP (its anchor) and the no-communication baseline every overhead is measured
against to C3; flat to C4; overlapping to C6; the bucket sizes and the bucketed variants that go past
PyTorch's DDP to C8; optimizer-state sharding to C11; FSDP to C12.

Every variant trains in either precision of ``PRECISIONS``: fp32, or bf16 autocast (weights,
gradients and optimizer state stay fp32; forward and backward run under autocast). A record without
a ``precision`` param is fp32: the records made before bf16 training existed.

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
    # The variant that is this one with gradients communicated in fp32 (same buckets, same order):
    # the reference of the accuracy measurement of a variant that communicates in bf16.
    fp32_twin: str | None = None

    @property
    def pattern(self) -> str:
        """A regular expression for the names this entry covers."""
        return re.escape(self.name).replace(re.escape(FAMILY), r"[0-9]+(?:\.[0-9]+)?")


_BUILDERS = "cs336_systems.distributed.train_bench"

PRECISIONS = ("fp32", "bf16")
DEFAULT_PRECISION = "fp32"      # what a record without a precision param was measured in

BASELINE = "no-comm"

VARIANTS: tuple[Variant, ...] = (
    Variant(BASELINE, "C3", f"{_BUILDERS}:wrap_none",
            "the same ranks, each with the same per-rank batch, and no gradient communication: "
            "the baseline every variant's overhead is measured against, in the same job"),
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
    # Past PyTorch's DDP: bucketed variants, so C8's (bucketed DDP against the others, and what bucket
    # sizes cost) is the question they answer, and their records sit beside the bucket sizes there.
    # A ladder, each rung adding one thing: views, then the first bucket and the order, then the mean
    # taken inside the all-reduce, then bf16.
    Variant(f"bucketed-view-{FAMILY}", "C8", f"{_BUILDERS}:wrap_bucketed",
            "bucketed-<MB> whose buckets are the gradients' own storage (each .grad a view into its "
            "bucket, as PyTorch's gradient_as_bucket_view): no copy into or out of the buckets"),
    Variant(f"bucketed-ready-{FAMILY}", "C8", f"{_BUILDERS}:wrap_bucketed",
            "bucketed-view-<MB> with a 1 MB first bucket, so communication starts with the first "
            "gradients, and buckets rebuilt after the first step in the order gradients became ready"),
    Variant(f"bucketed-avg-{FAMILY}", "C8", f"{_BUILDERS}:wrap_bucketed",
            "bucketed-ready-<MB> whose all-reduce averages (ReduceOp.AVG, scaled as it reduces) instead "
            "of summing: no division pass over every gradient after it"),
    Variant(f"bucketed-bf16-{FAMILY}", "C8", f"{_BUILDERS}:wrap_bucketed",
            "bucketed-avg-<MB> communicating in bf16: gradients cast into bf16 buckets, averaged in the "
            "all-reduce, the mean cast back into the fp32 gradients (half the bytes; costs accuracy, measured)",
            gradient_bytes=2, fp32_twin=f"bucketed-avg-{FAMILY}"),
    Variant("overlap-sharded", "C11", f"{_BUILDERS}:wrap_overlap",
            "overlap with the optimizer state sharded over the ranks (ShardedOptimizer)",
            sharded_optimizer=True),
    Variant("fsdp", "C12", f"{_BUILDERS}:wrap_fsdp",
            "every Linear and Embedding weight sharded, gathered ahead of use"),
    Variant("fsdp-bf16", "C12", f"{_BUILDERS}:wrap_fsdp",
            "fsdp computing and communicating in bf16 (weights and updates stay fp32)", gradient_bytes=2),
)


def stem(name: str, precision: str) -> str:
    """The file name (without suffix) of a variant's record and trace in one precision."""
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}; known: {', '.join(PRECISIONS)}")
    lookup(name)
    return f"{name}_{precision}"


def global_batch(setting: int | dict) -> Callable[[str], int]:
    """The config's ``DDP.global_batch`` (one number, or one per precision) as precision -> sequences.
    Why per precision: the eager bf16 step is host-bound at fp32's batch, and its rounds scatter."""
    def batch(precision: str) -> int:
        if isinstance(setting, int):
            return setting
        if precision not in setting:
            raise ValueError(f"DDP.global_batch names no batch for {precision!r} (it names {', '.join(setting)})")
        return setting[precision]
    return batch


def precision_of(record: dict) -> str:
    """The precision a record was measured in (fp32 where the record predates the param)."""
    return record["params"].get("precision", DEFAULT_PRECISION)


def fp32_twin(name: str) -> str | None:
    """The fp32-communicating counterpart of ``name`` (bucketed-bf16-25 -> bucketed-avg-25)."""
    variant = lookup(name)
    if variant.fp32_twin is None:
        return None
    if FAMILY not in variant.name:
        return variant.fp32_twin
    prefix = variant.name.partition(FAMILY)[0]
    return variant.fp32_twin.replace(FAMILY, name[len(prefix):])


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
