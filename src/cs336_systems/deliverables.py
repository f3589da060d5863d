"""The one registry of deliverables: ID -> title, rules, module, report, results folder, config, section.

Every deliverable is one hop from its ID:

    ID  ->  rules ``measures`` and ``<ID>_report`` in ``workflow/rules/<rules>``
        ->  ``python -m <runs>`` (what its measuring rules run; ``about``: the code the
            deliverable is about, where that is not the same module)
        ->  ``python -m <report> ...`` writes ``results/<run>/<ID>/`` (table, figures, summary.json,
            and ``records/`` where it measures; ``reads``: the other deliverables whose records it reads)
        ->  ``writeup/templates/sections/<ID>.md.j2``

``python -m cs336_systems.deliverables`` prints that map. The Snakefile reads this table for the
rule files it includes, the writeup's inputs and the GPUs each section needs; the config check for
the blocks every preset holds; the run folder for where records live; the writeup for its titles
and order; the data-parallel report for which sections it writes and which variants each reads.
Adding a deliverable is an entry here, its rule file, its code, its section template, its block in
config.yaml and its row in README's map (tests/workflow/test_new_deliverable.py adds one).

Kept free of torch: the Snakefile imports it while parsing.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass

# What a deliverable's measuring jobs need: nothing but CPUs, one GPU of the preset's device, or
# one GPU per rank (the C1 NCCL rows and the data-parallel variants; Gloo ranks on CPUs in smoke).
CPU, ONE_GPU, RANKS = "cpu", "one GPU", "ranks"
BUCKET_SIZES = "bucketed-<MB>"     # every bucket size of the data-parallel variants (distributed.variants)
SUMMARY = "summary.json"           # the numbers the writeup's section quotes; every report writes one


def tables(*stems: str) -> tuple[str, ...]:
    """A report's tables: each written twice (report.common.write_table), as CSV and as Markdown."""
    return tuple(f"{stem}.{ext}" for stem in stems for ext in ("csv", "md"))


def output_name(file: str) -> str:
    """The name of ``file`` among its report rule's outputs: ``table.csv`` -> ``table_csv``,
    ``timelines/{point}.png`` -> ``timelines``, the summary -> ``summary``."""
    if file == SUMMARY:
        return "summary"
    if "{" in file:
        return file.split("/")[0]
    return file.replace(".", "_")


@dataclass(frozen=True)
class Deliverable:
    id: str
    title: str
    rules: str                    # the rule file under workflow/rules/ holding its rules
    runs: str                     # the module its measuring rules run with `python -m`
    report: str                   # the report module that writes its results folder
    needs: str                    # CPU, ONE_GPU or RANKS
    measures: tuple[str, ...] = ()   # its measuring rules (its report rule is `<ID>_report`)
    reads: tuple[str, ...] = ()   # other deliverables whose records (or summary) its report reads
    about: str = ""               # the code it is about, where not `runs` (DDPBucketed for C7)
    # Data-parallel deliverables: the variants (distributed.variants names) whose records its report
    # reads, None for every variant of the run; whether it reads their traces.
    variants: tuple[str, ...] | None = ()
    traces: bool = False
    # What its report writes in its results folder besides summary.json: the rule declares exactly
    # these and the writeup takes them as inputs. ``{point}`` stands for each measured point.
    outputs: tuple[str, ...] = ()
    # Its block under each preset of config.yaml: "" its ID's, None none (closed forms). Every
    # preset must hold each deliverable's block (pipeline.config); the schema checks those it defines.
    config: str | None = ""
    # The folders under its results folder that measuring jobs write records into (pipeline.run_folder
    # reads records in these, wherever the records of a deliverable live).
    record_folders: tuple[str, ...] = ("records",)

    def folder(self, run: str) -> str:
        return f"results/{run}/{self.id}"

    @property
    def section(self) -> str:
        return f"sections/{self.id}.md.j2"

    @property
    def report_rule(self) -> str:
        """The rule whose outputs (``summary`` and its figures) the writeup renders."""
        return f"{self.id}_report"

    @property
    def files(self) -> tuple[str, ...]:
        """Every file its report writes under its results folder, the summary first."""
        return (SUMMARY, *self.outputs)

    @property
    def module(self) -> str:
        """The code the deliverable is about."""
        return self.about or self.runs

    @property
    def problem(self) -> str:
        """The assignment's problem it answers (``PROBLEMS``), "" where it goes beyond the assignment."""
        return PROBLEMS.get(self.id, "")

    @property
    def config_block(self) -> str | None:
        """The name of its block under each preset of config.yaml, or None."""
        return self.id if self.config == "" else self.config


_S = "cs336_systems"
_DDP = "c_distributed.smk"
_TRAIN = f"{_S}.distributed.train_bench"
_DDP_REPORT = f"{_S}.report.ddp"
_MEMORY_VARIANTS = ("no-comm", "overlap", "overlap-sharded", "torch-ddp", "fsdp", "fsdp-bf16")


def _ddp(ident: str, title: str, variants: tuple[str, ...] | None, about: str = "", measures: bool = False,
         traces: bool = False, reads: tuple[str, ...] = (), outputs: tuple[str, ...] = tables("table")) -> Deliverable:
    """A data-parallel deliverable: its report reads the records of ``variants`` wherever they live. One
    job per precision measures every variant (``C3_variants``, C3's: ``measures``), whatever folder
    its records go to."""
    return Deliverable(ident, title, _DDP, _TRAIN, _DDP_REPORT, RANKS, (f"{ident}_variants",) if measures else (),
                       reads, about, variants, traces, outputs, config="DDP")


# The assignment's name for the problem each deliverable answers, as its handout writes it; the
# deliverables left out go beyond the assignment (DELIVERABLES.md marks them so). A section opens with it.
PROBLEMS: dict[str, str] = {
    "A1": "benchmarking_script", "A2": "nsys_profile", "A3": "mixed_precision_accumulation",
    "A4": "benchmarking_mixed_precision", "A5": "memory_profiling", "B1": "pytorch_attention",
    "B2": "torch_compile", "B3": "flash_forward", "B4": "flash_backward", "B5": "flash_benchmarking",
    "C1": "distributed_communication_single_node", "C2": "naive_ddp", "C3": "naive_ddp_benchmarking",
    "C4": "minimal_ddp_flat_benchmarking", "C5": "ddp_overlap_individual_parameters",
    "C6": "ddp_overlap_individual_parameters_benchmarking", "C7": "ddp_overlap_bucketed",
    "C8": "ddp_bucketed_benchmarking", "C9": "communication_accounting", "C10": "optimizer_state_sharding",
    "C11": "optimizer_state_sharding_accounting"}

DELIVERABLES: tuple[Deliverable, ...] = (
    Deliverable("A1", "End-to-end benchmark", "a1_benchmark.smk", f"{_S}.benchmark", f"{_S}.report.a1", ONE_GPU,
                ("A1_benchmark", "A1_warmup_study"), reads=("A2",),
                outputs=tables("table") + ("time_vs_context.png", "warmup.png"),
                record_folders=("records", "warmup")),
    Deliverable("A2", "Nsight Systems profile", "a2_profile.smk", f"{_S}.profiling.profile", f"{_S}.report.a2",
                ONE_GPU, ("A2_profile",), reads=("A1",),
                outputs=tables("table_a", "table_b", "table_c", "table_d", "table_e", "failed") + ("category_shares.png",)),
    Deliverable("A3", "Accumulation in low precision", "a3_a4_precision.smk", f"{_S}.precision.accumulation",
                f"{_S}.report.a3", CPU, ("A3_accumulation",), outputs=tables("table") + ("error_vs_terms.png",)),
    Deliverable("A4", "Mixed precision", "a3_a4_precision.smk", f"{_S}.precision.autocast_dtypes",
                f"{_S}.report.a4", ONE_GPU, ("A4_dtypes", "A4_kernels"), reads=("A1",),
                outputs=tables("table", "layernorm", "timing", "kernels") + ("speedup.png",)),
    Deliverable("A5", "Memory", "a5_a6_memory.smk", f"{_S}.memory.snapshot", f"{_S}.report.a5", ONE_GPU,
                ("A5_snapshot",), outputs=tables("peak_fp32", "peak_bf16", "top_allocations") + ("timelines/{point}.png",)),
    Deliverable("A6", "Gradient checkpointing", "a5_a6_memory.smk", f"{_S}.memory.checkpoint_bench",
                f"{_S}.report.a6", ONE_GPU, ("A6_checkpoint",), about=f"{_S}.memory.checkpointing",
                outputs=tables("table") + ("peak_vs_group.png",)),
    Deliverable("B1", "PyTorch attention sweep", "b_attention.smk", f"{_S}.attention.sweep", f"{_S}.report.b1",
                ONE_GPU, ("B1_row",), outputs=tables("table") + ("time_and_memory.png",)),
    Deliverable("B2", "torch.compile", "b_attention.smk", f"{_S}.compile_bench", f"{_S}.report.b2", ONE_GPU,
                ("B2_whole_model",), reads=("B1",), outputs=tables("table", "whole_model") + ("attention.png", "whole_model_speedup.png"),
                record_folders=("whole_model",)),
    Deliverable("B3", "FlashAttention-2 forward", "b_attention.smk", f"{_S}.attention.check",
                f"{_S}.report.flash_checks", ONE_GPU, ("B3_checks",), about=f"{_S}.attention.flash_triton",
                outputs=tables("table")),
    Deliverable("B4", "FlashAttention-2 backward", "b_attention.smk", f"{_S}.attention.check",
                f"{_S}.report.flash_checks", ONE_GPU, reads=("B3",), about=f"{_S}.attention.flash_triton",
                outputs=tables("table"), config="B3", record_folders=()),
    Deliverable("B5", "FlashAttention benchmark", "b_attention.smk", f"{_S}.attention.bench", f"{_S}.report.b5",
                ONE_GPU, ("B5_grid_row", "B5_leaderboard"),
                outputs=tables("table") + ("leaderboard.csv", "speedup.png", "tflops.png")),
    Deliverable("C1", "All-reduce benchmark", _DDP, f"{_S}.distributed.allreduce_bench", f"{_S}.report.c1", RANKS,
                ("C1_row",), outputs=tables("table") + ("allreduce.png",)),
    _ddp("C2", "Naive DDP", ("naive",), about=f"{_S}.distributed.ddp", reads=("C3",)),
    _ddp("C3", "Naive DDP benchmark", ("naive", "torch-ddp"), measures=True),
    _ddp("C4", "Flat DDP", ("naive", "flat"), about=f"{_S}.distributed.ddp", reads=("C3",)),
    _ddp("C5", "Overlapping DDP", ("overlap",), about=f"{_S}.distributed.ddp", reads=("C3", "C6")),
    _ddp("C6", "Overlapping DDP benchmark", ("naive", "flat", "overlap", "torch-ddp"), traces=True,
         reads=("C3", "C4"), outputs=tables("table") + ("timeline.png",)),
    _ddp("C7", "Bucketed DDP", (BUCKET_SIZES,), about=f"{_S}.distributed.ddp", reads=("C3", "C8")),
    _ddp("C8", "Bucket sizes and the overhead model", None, traces=True,
         reads=("C1", "C3", "C4", "C6", "C11", "C12"),
         outputs=tables("table", "variants", "overhead", "accuracy") + ("phases.png", "overhead.png", "overhead_model.png")),
    Deliverable("C9", "4D-parallelism accounting", "c9_accounting.smk", f"{_S}.accounting.study", f"{_S}.report.c9",
                CPU, ("C9_accounting",), about=f"{_S}.accounting",
                outputs=tables("table", "scaling") + ("scaling_grid.csv", "scaling.png"), config=None),
    _ddp("C10", "Optimizer state sharding", ("overlap", "overlap-sharded"), about=f"{_S}.distributed.sharded_optimizer",
         reads=("C3", "C6", "C11")),
    _ddp("C11", "Optimizer state sharding: memory and time", _MEMORY_VARIANTS,
         reads=("C3", "C6", "C12")),
    _ddp("C12", "FSDP", ("fsdp", "fsdp-bf16", "overlap", "torch-ddp"), about=f"{_S}.distributed.fsdp",
         traces=True, reads=("C1", "C3", "C6"), outputs=tables("table") + ("timeline.png",)),
    Deliverable("E1", "The training step, every technique together", "e1_training_step.smk",
                f"{_S}.training_step.ladder", f"{_S}.report.e1", ONE_GPU, ("E1_ladder", "E1_step", "E1_profile"),
                outputs=tables("table", "kernels") + ("ladder.png",), record_folders=("records", "profiles")),
)

BY_ID: dict[str, Deliverable] = {d.id: d for d in DELIVERABLES}
IDS: tuple[str, ...] = tuple(BY_ID)


def get(ident: str) -> Deliverable:
    try:
        return BY_ID[ident]
    except KeyError:
        raise ValueError(f"unknown deliverable {ident!r}; known: {', '.join(IDS)}") from None


def config_blocks() -> list[str]:
    """The blocks every preset of config.yaml holds, one per deliverable that has settings, in registry order."""
    return list(dict.fromkeys(d.config_block for d in DELIVERABLES if d.config_block is not None))


def record_folders() -> list[str]:
    """The names of the folders that hold records, under any deliverable's results folder."""
    return list(dict.fromkeys(name for d in DELIVERABLES for name in d.record_folders))


def rule_files() -> list[str]:
    """The rule files under workflow/rules/ that hold the deliverables' rules, in registry order."""
    return list(dict.fromkeys(d.rules for d in DELIVERABLES))


def reported_by(report: str) -> list[str]:
    """The IDs whose folder the report module ``report`` writes, in registry order."""
    return [d.id for d in DELIVERABLES if d.report == report]


def variants_read(ident: str, chosen: list[str]) -> list[str]:
    """The data-parallel variants among ``chosen`` (a run's, in config order) whose records ``ident``'s
    report reads (its ``variants``; None: all of them), and the no-communication baseline wherever the
    run has it: every overhead is measured against it."""
    from cs336_systems.distributed import variants      # torch-free, like this module

    wanted = get(ident).variants
    return [v for v in chosen if wanted is None or variants.lookup(v).name in wanted or v == variants.BASELINE]


def readers() -> dict[str, list[str]]:
    """ID -> the deliverables whose reports read its records: itself and those that name it in ``reads``."""
    return {d.id: [d.id, *(r.id for r in DELIVERABLES if d.id in r.reads)] for d in DELIVERABLES}


def rules_of(d: Deliverable) -> tuple[str, ...]:
    """Every rule of ``d``: its measuring rules and its report rule."""
    return (*d.measures, d.report_rule)


def map_lines() -> list[str]:
    """The map, one line per deliverable: ID, title, rules, what runs, results folder, section."""
    lines = []
    for d in DELIVERABLES:
        runs = f"python -m {d.runs}" + (f" (about {d.about})" if d.about else "")
        reads = f"; reads {', '.join(d.reads)}" if d.reads else ""
        lines.append(f"{d.id:<4} {d.title}\n"
                     f"     rules    {', '.join(rules_of(d))} (workflow/rules/{d.rules})\n"
                     f"     runs     {runs}\n"
                     f"     report   python -m {d.report} -> results/<run>/{d.id}/{reads}\n"
                     f"     section  writeup/templates/{d.section}")
    return lines


if __name__ == "__main__":
    print("\n".join(map_lines()))
    sys.exit(0)
