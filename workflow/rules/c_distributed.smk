# C: several processes. C1 all-reduce rows (one process group per backend × world size); the
# data-parallel training variants (C3–C8, C11, C12), one process group each on `world_size` GPUs
# under NCCL, or CPU ranks under Gloo in the smoke preset.

C1 = GRID["C1"]
DDP = GRID["DDP"]
ON_GPUS = GRID["device"].startswith("cuda")
DDP_BACKEND = "nccl" if ON_GPUS else "gloo"
TRACED = DDP["traced"]
if set(TRACED) - set(DDP["variants"]):
    sys.exit(f"cs336-systems: DDP.traced names variants that DDP.variants does not run: "
             f"{', '.join(sorted(set(TRACED) - set(DDP['variants'])))}")


rule C1_row:
    """All-reduce of each tensor size on `world` ranks; a JSON list of records (skipped where the
    machine has too few GPUs or cores). NCCL rows lease up to `world` GPUs; Gloo rows use none."""
    input:
        measuring_code("cs336_systems.distributed.allreduce_bench"),
    output:
        f"{RESULTS}/C1/records/{{backend}}_x{{world}}.json",
    log:
        f"{LOGS}/C1/{{backend}}_x{{world}}.log",
    wildcard_constraints:
        backend="gloo|nccl",
        world=r"\d+",
    params:
        sizes=" ".join(map(str, C1["sizes_mb"])),
        warmup=C1["warmup"],
        iters=C1["iters"],
        lease=lambda wildcards: (f"python -m cs336_systems.pipeline.gpu_lease --gpus {wildcards.world} --up-to --"
                                 if wildcards.backend == "nccl" and ON_GPUS else ""),
    resources:
        # A preset without GPUs still runs its NCCL rows, which record that they were skipped.
        gpu=lambda wildcards: int(wildcards.world) if wildcards.backend == "nccl" and ON_GPUS else 0,
    shell:
        "{params.lease} python -m cs336_systems.distributed.allreduce_bench --backend {wildcards.backend}"
        " --world-size {wildcards.world} --sizes-mb {params.sizes} --warmup {params.warmup} --iters {params.iters}"
        " --out {output} > {log} 2>&1"


rule C1_report:
    """C1 table, time and bandwidth plots, and the per-call overhead and bandwidth fitted for C8."""
    input:
        rows=expand(f"{RESULTS}/C1/records/{{backend}}_x{{world}}.json", backend=C1["backends"],
                    world=C1["world_sizes"]),
        code=code("cs336_systems.report.c1"),
    output:
        csv=f"{RESULTS}/C1/table.csv",
        md=report(f"{RESULTS}/C1/table.md", category="C1 all-reduce", labels={"item": "table"}),
        summary=f"{RESULTS}/C1/summary.json",
        plot=report(f"{RESULTS}/C1/allreduce.png", category="C1 all-reduce", labels={"item": "time and bandwidth"}),
    log:
        f"{LOGS}/C1/report.log",
    params:
        out_dir=out_dir("csv"),
    shell:
        "python -m cs336_systems.report.c1 --rows {input.rows} --out-dir {params.out_dir} > {log} 2>&1"


rule DDP_variant:
    """One data-parallel training variant on `world_size` ranks: per-phase step times, memory, and
    the compute / communication intervals of one step (the report draws the `traced` ones)."""
    input:
        measuring_code("cs336_systems.distributed.train_bench"),
    output:
        record=f"{RESULTS}/C3/records/{{variant}}.json",
        trace=f"{RESULTS}/C3/traces/{{variant}}.json",
    log:
        f"{LOGS}/C3/{{variant}}.log",
    wildcard_constraints:
        variant="|".join(map(re.escape, DDP["variants"])),
    params:
        lease=(f"python -m cs336_systems.pipeline.gpu_lease --gpus {DDP['world_size']} --"
               if DDP_BACKEND == "nccl" else ""),
        backend=DDP_BACKEND,
    resources:
        gpu=DDP["world_size"] if DDP_BACKEND == "nccl" else 0,
    shell:
        "{params.lease} python -m cs336_systems.distributed.train_bench --variant {wildcards.variant}"
        f" --size {DDP['size']} --context {DDP['context']} --global-batch {DDP['global_batch']}"
        f" --world-size {DDP['world_size']} --warmup {DDP['warmup']} --steps {DDP['steps']}"
        " --backend {params.backend} --trace {output.trace} --out {output.record} > {log} 2>&1"


rule DDP_report:
    """Tables, the overhead model fitted from C1, trace timelines and memory breakdowns, one folder
    (and summary) per writeup section C2–C8, C10–C12."""
    input:
        records=expand(f"{RESULTS}/C3/records/{{variant}}.json", variant=DDP["variants"]),
        traces=expand(f"{RESULTS}/C3/traces/{{variant}}.json", variant=DDP["variants"]),
        c1=rules.C1_report.output.summary,
        code=code("cs336_systems.report.ddp"),
    output:
        **{f"{ident}_summary": f"{RESULTS}/{ident}/summary.json"
           for ident in ("C2", "C3", "C4", "C5", "C6", "C7", "C8", "C10", "C11", "C12")},
        phases=report(f"{RESULTS}/C3/phases.png", category="C DDP", labels={"item": "time per step"}),
        timeline=report(f"{RESULTS}/C6/timeline.png", category="C DDP", labels={"item": "trace"}),
        model=report(f"{RESULTS}/C8/overhead_model.png", category="C DDP", labels={"item": "overhead model"}),
        fsdp_timeline=report(f"{RESULTS}/C12/timeline.png", category="C DDP", labels={"item": "FSDP trace"}),
    log:
        f"{LOGS}/C3/report.log",
    params:
        # The run's results folder: two levels above C2/summary.json.
        results=lambda wildcards, output: os.path.dirname(os.path.dirname(output.C2_summary)),
        traced=" ".join(TRACED),
    shell:
        "python -m cs336_systems.report.ddp --records {input.records} --traces {input.traces} --traced {params.traced}"
        " --c1-summary {input.c1} --results {params.results} > {log} 2>&1"
