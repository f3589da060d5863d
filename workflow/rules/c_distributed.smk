# C: several processes. C1 all-reduce rows (one process group per backend × world size); the
# data-parallel training variants (records in C3, C4, C6, C8, C11, C12), one process group per
# precision of DDP.precisions on `world_size` GPUs under NCCL, or CPU ranks under Gloo in the smoke
# preset, every variant and the baseline in turns; the reports C2–C8, C10–C12.

from functools import partial

from cs336_systems import deliverables
from cs336_systems.distributed import placement, variants as ddp_variants
from cs336_systems.pipeline.rule_helpers import records_on_disk

C1 = GRID["C1"]
DDP = GRID["DDP"]
DDP_BACKEND = "nccl" if ON_GPUS else "gloo"
TRACED = DDP["traced"]      # a subset of DDP.variants: the config check makes sure
DDP_PRECISIONS = DDP["precisions"]
DDP_BATCH = ddp_variants.global_batch(DDP["global_batch"])     # precision -> sequences per step

# What starts a job's ranks: torch's launcher on the job's host, or under the Slurm profile srun
# across nodes, each job asking Slurm for its nodes and tasks (distributed.placement).
try:
    LAUNCH = placement.settings(LAUNCH_BLOCK)
except placement.PlacementError as error:
    sys.exit(f"cs336-systems: {error}")
BY_SRUN = LAUNCH.launcher == "srun"
# The command's launcher, its job's shape and cores from the job's own resources (the profile's cpus_per_task).
launcher = lambda world: lambda wildcards, resources: placement.command(
    int(world(wildcards)), LAUNCH, resources.get("cpus_per_task"))
# A job's Slurm resources under srun: its nodes, tasks, and under NCCL its GPUs a node (none else).
slurm_resources = lambda world, gpus: placement.rule_resources(world, gpus, LAUNCH)


rule C1_row:
    """All-reduce of each tensor size on `world` ranks, which torch's launcher starts on one host, or
    srun across nodes under the Slurm profile (rank 0 writes); a JSON list of records (skipped where
    the machine has too few GPUs or cores, or the profile's nodes cannot hold the row). NCCL rows lease
    up to `world` GPUs; Gloo rows use none."""
    input:
        measuring_code("cs336_systems.distributed.allreduce_bench", deliverable="C1"),
    output:
        f"{RESULTS}/C1/records/{{backend}}_x{{world}}.json",
    log:
        f"{LOGS}/C1/{{backend}}_x{{world}}.log",
    benchmark:
        f"{BENCHMARKS}/C1/{{backend}}_x{{world}}.tsv",
    wildcard_constraints:
        backend="gloo|nccl",
        world=r"\d+",
    params:
        sizes=" ".join(map(str, C1["sizes_mb"])),
        warmup=C1["warmup"],
        iters=C1["iters"],
        lease=lambda wildcards: (f"python -m cs336_systems.pipeline.gpu_lease --gpus {wildcards.world} --up-to --"
                                 if wildcards.backend == "nccl" and ON_GPUS else ""),
        launch=launcher(lambda wildcards: wildcards.world),
        # a row the Slurm profile's nodes cannot hold is recorded as skipped, with why
        skip=lambda wildcards: placement.skip_option(int(wildcards.world), LAUNCH),
    resources:
        # A preset without GPUs still runs its NCCL rows, which record that they were skipped. Under
        # srun the GPUs are asked a node (slurm_resources' gres).
        gpu=lambda wildcards: int(wildcards.world) if wildcards.backend == "nccl" and ON_GPUS and not BY_SRUN else 0,
        **slurm_resources(lambda wildcards: wildcards.world, lambda wildcards: wildcards.backend == "nccl" and ON_GPUS),
    shell:
        logged("{params.lease} {params.launch}"
        " -m cs336_systems.distributed.allreduce_bench --backend {wildcards.backend}"
        " --world-size {wildcards.world} --sizes-mb {params.sizes} --warmup {params.warmup} --iters {params.iters}"
        " {params.skip} --out {output} > {log} 2>&1")


rule C1_report:
    """C1 table, time and bandwidth plots, and the per-call overhead and bandwidth fitted for C8."""
    input:
        rows=(records_present if "C1" in REBUILD_ONLY else list)(
            expand(f"{RESULTS}/C1/records/{{backend}}_x{{world}}.json", backend=C1["backends"], world=C1["world_sizes"])),
        code=code("cs336_systems.report.c1"),
    output:
        **report_outputs("C1"),
    log:
        f"{LOGS}/C1/report.log",
    params:
        out_dir=out_dir("summary"),
    shell:
        logged("python -m cs336_systems.report.c1 --rows {input.rows} --out-dir {params.out_dir} > {log} 2>&1")


# The data-parallel variants of one precision, the no-communication baseline among them: one job, one
# process group of `world_size` ranks (NCCL on one GPU each, or Gloo ranks on CPUs), every variant
# taking its turns in `rounds` interleaved rounds (train_bench's docstring says why and how), one record
# per variant in its own deliverable's folder (distributed.variants says which), a one-step trace of
# each `traced` one. The rule is C3's, whose baseline and anchor every other variant is set against.
DDP_FOLDER = {v: f"{RESULTS}/{ddp_variants.lookup(v).deliverable}" for v in DDP["variants"]}
DDP_GPUS = DDP["world_size"] if DDP_BACKEND == "nccl" else 0
_unplaced = placement.unplaced_reason(DDP["world_size"], LAUNCH)
if _unplaced:
    sys.exit(f"cs336-systems: the data-parallel job (DDP.world_size {DDP['world_size']}): {_unplaced}")


rule C3_variants:
    """Every data-parallel variant and the baseline in one precision, in turns in one process group
    (its ranks started by torch's launcher, or srun across nodes under the Slurm profile; rank 0 writes):
    per-phase step times of every round, memory, one traced step of the `traced` ones (the C6 and
    C12 timelines draw them), and for a variant that communicates in bf16 its weights against fp32
    communication."""
    input:
        measuring_code("cs336_systems.distributed.train_bench", deliverable="C3"),
    output:
        records=[f"{DDP_FOLDER[v]}/records/{v}_{{precision}}.json" for v in DDP["variants"]],
        traces=[f"{DDP_FOLDER[v]}/traces/{v}_{{precision}}.json.gz" for v in TRACED],
    log:
        f"{LOGS}/C3/variants_{{precision}}.log",
    benchmark:
        f"{BENCHMARKS}/C3/variants_{{precision}}.tsv",
    wildcard_constraints:
        precision="|".join(ddp_variants.PRECISIONS),
    params:
        lease=f"python -m cs336_systems.pipeline.gpu_lease --gpus {DDP_GPUS} --" if DDP_BACKEND == "nccl" else "",
        backend=DDP_BACKEND,
        variants=" ".join(DDP["variants"]),
        traced=" ".join(TRACED),
        global_batch=lambda wildcards: DDP_BATCH(wildcards.precision),
        launch=launcher(lambda wildcards: DDP["world_size"]),
    resources:
        gpu=0 if BY_SRUN else DDP_GPUS,
        **slurm_resources(lambda wildcards: DDP["world_size"], lambda wildcards: DDP_BACKEND == "nccl"),
    shell:
        logged("{params.lease} {params.launch}"
        " -m cs336_systems.distributed.train_bench --variants {params.variants}"
        " --precision {wildcards.precision}"
        f" --size {DDP['size']} --context {DDP['context']} --global-batch {{params.global_batch}}"
        f" --world-size {DDP['world_size']} --warmup {DDP['warmup']} --rounds {DDP['rounds']} --steps {DDP['steps']}"
        f" --accuracy-steps {DDP['accuracy_steps']} --traced {{params.traced}}"
        f" --backend {{params.backend}} --out-dir {RESULTS} > {{log}} 2>&1")


# The records (or traces) of some variants in every precision, fp32's first, for deliverable `ident`'s
# report; in a rebuild from records (reuse_records with sections) only those the run has
# (rule_helpers.records_on_disk), and only those for a deliverable this machine cannot measure.
ddp_files = lambda ident, kind, chosen, suffix: (records_present if ident in REBUILD_ONLY else partial(
    records_on_disk, rebuilding=REBUILDING))(
    [f"{DDP_FOLDER[v]}/{kind}/{ddp_variants.stem(v, p)}{suffix}" for p in DDP_PRECISIONS for v in chosen])


# One report per deliverable C2–C8, C10–C12 (the registry says which variants each reads, and
# whether their traces and C1's fit): its table, figures and summary in results/<run>/<ID>/.
for ident in deliverables.reported_by("cs336_systems.report.ddp"):
    about = deliverables.get(ident)
    chosen = deliverables.variants_read(ident, DDP["variants"])

    rule:
        """The deliverable's table of the variants it discusses, its figures and summary."""
        name:
            f"{ident}_report"
        input:
            records=ddp_files(ident, "records", chosen, ".json"),
            traces=ddp_files(ident, "traces", TRACED, ".json.gz") if about.traces else [],
            c1=rules.C1_report.output.summary if "C1" in about.reads else [],
            code=code("cs336_systems.report.ddp"),
        output:
            **report_outputs(ident),
        log:
            f"{LOGS}/{ident}/report.log",
        params:
            ident=ident,
            traced=" ".join(TRACED),
            c1=lambda wildcards, input: f"--c1-summary {input.c1}" if input.c1 else "",
            out_dir=out_dir("summary"),
        shell:
            logged("python -m cs336_systems.report.ddp {params.ident} --records {input.records} --traces {input.traces}"
            " --traced {params.traced} {params.c1} --out-dir {params.out_dir} > {log} 2>&1")
