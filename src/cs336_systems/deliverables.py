"""The one registry of deliverables: ID -> title, rule file, module, report, results folder, section.

Every deliverable is one hop from its ID:

    ID  ->  rules named ``<ID>_...`` in ``workflow/rules/<rules>``
        ->  ``python -m <module>`` (what it measures or implements)
        ->  ``python -m <report> ...`` writes ``results/<run>/<ID>/`` (table, figures, summary.json,
            and ``records/`` where it measures)
        ->  ``writeup/templates/sections/<ID>.md.j2``

The Snakefile reads this table for the writeup's inputs and the GPUs each section needs, the
writeup for its titles and order, the data-parallel report for which sections it writes. The
data-parallel variants each deliverable measures are in ``distributed.variants``.

Kept free of torch: the Snakefile imports it while parsing.
"""
from __future__ import annotations

from dataclasses import dataclass

# What a deliverable's measuring jobs need: nothing but CPUs, one GPU of the preset's device, or
# one GPU per rank (the C1 NCCL rows and the data-parallel variants; Gloo ranks on CPUs in smoke).
CPU, ONE_GPU, RANKS = "cpu", "one GPU", "ranks"


@dataclass(frozen=True)
class Deliverable:
    id: str
    title: str
    rules: str          # the rule file under workflow/rules/ holding its rules
    module: str         # the code it measures or implements
    report: str         # the report module that writes its results folder
    needs: str          # CPU, ONE_GPU or RANKS

    def folder(self, run: str) -> str:
        return f"results/{run}/{self.id}"

    @property
    def section(self) -> str:
        return f"sections/{self.id}.md.j2"

    @property
    def report_rule(self) -> str:
        """The rule whose outputs (``summary`` and its figures) the writeup renders."""
        return f"{self.id}_report"


_S = "cs336_systems"
_DDP = "c_distributed.smk"

DELIVERABLES: tuple[Deliverable, ...] = (
    Deliverable("A1", "End-to-end benchmark", "a1_benchmark.smk", f"{_S}.benchmark", f"{_S}.report.a1", ONE_GPU),
    Deliverable("A2", "Nsight Systems profile", "a2_profile.smk", f"{_S}.profiling.profile", f"{_S}.report.a2", ONE_GPU),
    Deliverable("A3", "Accumulation in low precision", "a3_a4_precision.smk", f"{_S}.precision.accumulation",
                f"{_S}.report.a3", CPU),
    Deliverable("A4", "Mixed precision", "a3_a4_precision.smk", f"{_S}.precision.autocast_dtypes",
                f"{_S}.report.a4", ONE_GPU),
    Deliverable("A5", "Memory", "a5_a6_memory.smk", f"{_S}.memory.snapshot", f"{_S}.report.a5", ONE_GPU),
    Deliverable("A6", "Gradient checkpointing", "a5_a6_memory.smk", f"{_S}.memory.checkpoint_bench",
                f"{_S}.report.a6", ONE_GPU),
    Deliverable("B1", "PyTorch attention sweep", "b_attention.smk", f"{_S}.attention.sweep", f"{_S}.report.b1", ONE_GPU),
    Deliverable("B2", "torch.compile", "b_attention.smk", f"{_S}.compile_bench", f"{_S}.report.b2", ONE_GPU),
    Deliverable("B3", "FlashAttention-2 forward", "b_attention.smk", f"{_S}.attention.check",
                f"{_S}.report.flash_checks", ONE_GPU),
    Deliverable("B4", "FlashAttention-2 backward", "b_attention.smk", f"{_S}.attention.check",
                f"{_S}.report.flash_checks", ONE_GPU),
    Deliverable("B5", "FlashAttention benchmark", "b_attention.smk", f"{_S}.attention.bench", f"{_S}.report.b5", ONE_GPU),
    Deliverable("C1", "All-reduce benchmark", _DDP, f"{_S}.distributed.allreduce_bench", f"{_S}.report.c1", RANKS),
    Deliverable("C2", "Naive DDP", _DDP, f"{_S}.distributed.ddp", f"{_S}.report.ddp", RANKS),
    Deliverable("C3", "Naive DDP benchmark", _DDP, f"{_S}.distributed.train_bench", f"{_S}.report.ddp", RANKS),
    Deliverable("C4", "Flat DDP", _DDP, f"{_S}.distributed.ddp", f"{_S}.report.ddp", RANKS),
    Deliverable("C5", "Overlapping DDP", _DDP, f"{_S}.distributed.ddp", f"{_S}.report.ddp", RANKS),
    Deliverable("C6", "Overlapping DDP benchmark", _DDP, f"{_S}.distributed.train_bench", f"{_S}.report.ddp", RANKS),
    Deliverable("C7", "Bucketed DDP", _DDP, f"{_S}.distributed.ddp", f"{_S}.report.ddp", RANKS),
    Deliverable("C8", "Bucket sizes and the overhead model", _DDP, f"{_S}.distributed.train_bench",
                f"{_S}.report.ddp", RANKS),
    Deliverable("C9", "4D-parallelism accounting", "c9_accounting.smk", f"{_S}.accounting.c9", f"{_S}.report.c9", CPU),
    Deliverable("C10", "Optimizer state sharding", _DDP, f"{_S}.distributed.sharded_optimizer", f"{_S}.report.ddp",
                RANKS),
    Deliverable("C11", "Optimizer state sharding: memory and time", _DDP, f"{_S}.distributed.train_bench",
                f"{_S}.report.ddp", RANKS),
    Deliverable("C12", "FSDP", _DDP, f"{_S}.distributed.fsdp", f"{_S}.report.ddp", RANKS),
)

BY_ID: dict[str, Deliverable] = {d.id: d for d in DELIVERABLES}
IDS: tuple[str, ...] = tuple(BY_ID)


def get(ident: str) -> Deliverable:
    try:
        return BY_ID[ident]
    except KeyError:
        raise ValueError(f"unknown deliverable {ident!r}; known: {', '.join(IDS)}") from None


def reported_by(report: str) -> list[str]:
    """The IDs whose folder the report module ``report`` writes, in registry order."""
    return [d.id for d in DELIVERABLES if d.report == report]
