# A4 mixed precision (toy-model dtypes, layer norm in low precision, fp32 vs bf16 from A1's records)
# and A6 gradient checkpointing (peak memory per checkpoint group size).
#
# The A1 records A4 tabulates come from rule A1_benchmark (a_single_gpu.smk); A6 uses its own
# wildcard {group} because {size}, {context}, {mode} and {precision} are constrained there.

A4 = GRID["A4"]
A6 = GRID["A6"]

A4_TIMING_RECORDS = expand(f"{RESULTS}/A1/records/{{size}}_ctx{{context}}_{{mode}}_{{precision}}.json",
                           size=GRID["A1"]["sizes"], context=A4["contexts"], mode=A4["modes"],
                           precision=["fp32", "bf16"])


rule A4_dtypes:
    """The toy model under fp16 and bf16 autocast on every listed device (an absent device is a
    skipped record), and layer norm's error in low precision: one process, seconds long."""
    input:
        measuring_code("cs336_systems.precision.autocast_dtypes"),
    output:
        f"{RESULTS}/A4/records/dtypes.json",
    log:
        f"{LOGS}/A4/dtypes.log",
    params:
        devices=" ".join(A4["devices"]),
        dtypes=" ".join(A4["autocast_dtypes"]),
    resources:
        gpu=1,
    shell:
        "python -m cs336_systems.pipeline.gpu_lease --gpus {resources.gpu} --"
        " python -m cs336_systems.precision.autocast_dtypes --devices {params.devices} --dtypes {params.dtypes}"
        " --out {output} > {log} 2>&1"


rule A4_report:
    """A4 dtype table, layer-norm errors, fp32-vs-bf16 timing table and speedup plot, summary."""
    input:
        dtypes=rules.A4_dtypes.output,
        timing=A4_TIMING_RECORDS,
        code=code("cs336_systems.report.a4"),
    output:
        csv=f"{RESULTS}/A4/table.csv",
        md=report(f"{RESULTS}/A4/table.md", category="A4 mixed precision", labels={"item": "dtypes"}),
        layernorm=f"{RESULTS}/A4/layernorm.csv",
        timing=report(f"{RESULTS}/A4/timing.md", category="A4 mixed precision", labels={"item": "fp32 vs bf16"}),
        summary=f"{RESULTS}/A4/summary.json",
        plot=report(f"{RESULTS}/A4/speedup.png", category="A4 mixed precision", labels={"item": "bf16 speedup"}),
    log:
        f"{LOGS}/A4/report.log",
    params:
        out_dir=out_dir("csv"),
    shell:
        "python -m cs336_systems.report.a4 --dtypes {input.dtypes} --timing-records {input.timing}"
        " --out-dir {params.out_dir} > {log} 2>&1"


rule A6_checkpoint:
    """One training step (forward+backward) of the A6 model with blocks checkpointed in groups of
    {group} (0 = none): peak memory and step time, a fresh process on its own GPU."""
    input:
        measuring_code("cs336_systems.memory.checkpoint_bench"),
    output:
        f"{RESULTS}/A6/records/group{{group}}.json",
    log:
        f"{LOGS}/A6/group{{group}}.log",
    wildcard_constraints:
        group=r"\d+",
    params:
        size=A6["size"],
        context=A6["context"],
        batch=A6["batch"],
        device=GRID["device"],
    resources:
        gpu=1,
    shell:
        "python -m cs336_systems.pipeline.gpu_lease --gpus {resources.gpu} --"
        " python -m cs336_systems.memory.checkpoint_bench --size {params.size} --context {params.context}"
        " --batch {params.batch} --group {wildcards.group} --mode forward-backward --device {params.device}"
        " --out {output} > {log} 2>&1"


rule A6_report:
    """A6 table of measured vs predicted peaks per group size, the plot, and the summary."""
    input:
        records=expand(f"{RESULTS}/A6/records/group{{group}}.json", group=A6["group_sizes"]),
        code=code("cs336_systems.report.a6"),
    output:
        csv=f"{RESULTS}/A6/table.csv",
        md=report(f"{RESULTS}/A6/table.md", category="A6 checkpointing", labels={"item": "table"}),
        summary=f"{RESULTS}/A6/summary.json",
        plot=report(f"{RESULTS}/A6/peak_vs_group.png", category="A6 checkpointing", labels={"item": "peak vs k"}),
    log:
        f"{LOGS}/A6/report.log",
    params:
        out_dir=out_dir("csv"),
    shell:
        "python -m cs336_systems.report.a6 --records {input.records} --out-dir {params.out_dir} > {log} 2>&1"
