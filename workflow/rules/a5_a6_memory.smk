# A5: memory snapshots. One process per context x mode x precision records one step (CUDA memory
# history on a GPU, torch.profiler's memory events on the CPU) and analyses it into its record,
# which keeps the timeline's bands too. The report draws the timelines (one PNG per point), so
# rebuilding from committed records redraws them and an edit to the drawing measures nothing.
#
# The CUDA snapshot pickle (memory_viz's format) is written beside the record but declared nowhere:
# it is too large for git, and a declared file that a fresh checkout lacks would make Snakemake
# re-measure. Everything downstream reads the committed record only.
#
# The size is not a wildcard (GRID["A5"]["size"]). A6: gradient checkpointing, peak memory per
# checkpoint group size, every group size in one job (they take turns on one model).

A5 = GRID["A5"]
A6 = GRID["A6"]
A5_POINT = "ctx{context}_{mode}_{precision}"
A5_POINTS = expand(A5_POINT, context=A5["contexts"], mode=A5["modes"], precision=A5["precisions"])
A5_RECORDS = [f"{RESULTS}/A5/records/{point}.json" for point in A5_POINTS]
A6_RECORDS = expand(f"{RESULTS}/A6/records/group{{group}}.json", group=A6["group_sizes"])


rule A5_snapshot:
    """One recorded step: the record (peaks, phases, largest allocations, the timeline's bands)."""
    input:
        measuring_code("cs336_systems.memory.snapshot"),
    output:
        record=f"{RESULTS}/A5/records/{A5_POINT}.json",
    log:
        f"{LOGS}/A5/{A5_POINT}.log",
    benchmark:
        f"{BENCHMARKS}/A5/{A5_POINT}.tsv",
    wildcard_constraints:
        context=r"\d+",
        mode="|".join(MODES),
        precision="fp32|bf16",
    params:
        size=A5["size"],
        batch=A5["batch"],
        warmup=A5["warmup"],
        max_entries=A5["max_entries"],
        device=GRID["device"],
        pickle=f"{RESULTS}/A5/snapshots/{A5_POINT}.pickle",
    resources:
        gpu=1,
    shell:
        logged("python -m cs336_systems.pipeline.gpu_lease --gpus {resources.gpu} --"
        " python -m cs336_systems.memory.snapshot --size {params.size} --context {wildcards.context}"
        " --mode {wildcards.mode} --precision {wildcards.precision} --batch {params.batch}"
        " --warmup {params.warmup} --max-entries {params.max_entries} --device {params.device}"
        " --out {output.record} --pickle {params.pickle} > {log} 2>&1")


rule A5_report:
    """A5 peak tables (fp32, bf16), largest forward allocations, a timeline per point, and the numbers
    the writeup quotes."""
    input:
        records=A5_RECORDS,
        code=code("cs336_systems.report.a5"),
    output:
        **report_outputs("A5", points=A5_POINTS),
    log:
        f"{LOGS}/A5/report.log",
    params:
        out_dir=out_dir("summary"),
    shell:
        logged("python -m cs336_systems.report.a5 --records {input.records} --out-dir {params.out_dir} > {log} 2>&1")


rule A6_checkpoint:
    """One training step (forward+backward) of the A6 model with blocks checkpointed in groups of each
    configured size (0 = none), the group sizes taking turns on one model in one process on its own
    GPU: peak memory and step time, one record per group size."""
    input:
        measuring_code("cs336_systems.memory.checkpoint_bench"),
    output:
        A6_RECORDS,
    log:
        f"{LOGS}/A6/groups.log",
    benchmark:
        f"{BENCHMARKS}/A6/groups.tsv",
    params:
        size=A6["size"],
        context=A6["context"],
        batch=A6["batch"],
        groups=" ".join(map(str, A6["group_sizes"])),
        rounds=A6["rounds"],
        device=GRID["device"],
    resources:
        gpu=1,
    shell:
        logged("python -m cs336_systems.pipeline.gpu_lease --gpus {resources.gpu} --"
        " python -m cs336_systems.memory.checkpoint_bench --size {params.size} --context {params.context}"
        " --batch {params.batch} --groups {params.groups} --rounds {params.rounds} --mode forward-backward"
        " --device {params.device}"
        " --out {output} > {log} 2>&1")


rule A6_report:
    """A6 table of measured vs predicted peaks per group size, the plot, and the summary."""
    input:
        records=A6_RECORDS,
        code=code("cs336_systems.report.a6"),
    output:
        **report_outputs("A6"),
    log:
        f"{LOGS}/A6/report.log",
    params:
        out_dir=out_dir("summary"),
    shell:
        logged("python -m cs336_systems.report.a6 --records {input.records} --out-dir {params.out_dir} > {log} 2>&1")
