# A3 accumulation in low precision; A4 mixed precision (toy-model dtypes, layer norm in low
# precision, fp32 vs bf16 from A1's records, which rule A1_benchmark in a1_benchmark.smk makes, and
# one A1 point's kernels per step in both precisions, timed in turns in one job).

A4 = GRID["A4"]

A4_TIMING_RECORDS = expand(f"{RESULTS}/A1/records/{{size}}_ctx{{context}}_{{mode}}_{{precision}}.json",
                           size=GRID["A1"]["sizes"], context=A4["contexts"], mode=A4["modes"],
                           precision=["fp32", "bf16"])

# One A1 point's fp32 and bf16 steps, kernel by kernel (where bf16 loses time). This measurement is
# newer than the committed runs: rebuilding a run whose A4 was measured (its dtypes record exists)
# from its records (`reuse_records` with `sections`, as the DDP variants do) reads the kernel records
# it has and measures none on the spot; the section then says "not measured in this run".
A4_KERNELS = A4["kernels"]
A4_KERNEL_PATHS = expand(f"{RESULTS}/A4/records/kernels_{{size}}_ctx{{context}}_{{mode}}_{{precision}}.json",
                         **{k: A4_KERNELS[k] for k in ("size", "context", "mode")}, precision=["fp32", "bf16"])
A4_KERNEL_RECORDS = (
    [p for p in A4_KERNEL_PATHS if os.path.exists(p)]
    if REBUILDING and os.path.exists(f"{RESULTS}/A4/records/dtypes.json")
    else A4_KERNEL_PATHS
)


rule A3_accumulation:
    """Summing 0.01 in fp32 / fp16 / bf16 accumulators (on the CPU: the arithmetic is the same)."""
    input:
        measuring_code("cs336_systems.precision.accumulation"),
    output:
        f"{RESULTS}/A3/records/accumulation.json",
    log:
        f"{LOGS}/A3/accumulation.log",
    benchmark:
        f"{BENCHMARKS}/A3/accumulation.tsv",
    params:
        terms=" ".join(map(str, GRID["A3"]["terms"])),
    shell:
        logged("python -m cs336_systems.precision.accumulation --terms {params.terms} --out {output} > {log} 2>&1")


rule A3_report:
    """A3 table, error against number of terms, and the numbers the writeup quotes."""
    input:
        record=rules.A3_accumulation.output,
        code=code("cs336_systems.report.a3"),
    output:
        **report_outputs("A3"),
    log:
        f"{LOGS}/A3/report.log",
    params:
        out_dir=out_dir("summary"),
    shell:
        logged("python -m cs336_systems.report.a3 --record {input.record} --out-dir {params.out_dir} > {log} 2>&1")


rule A4_dtypes:
    """The toy model under fp16 and bf16 autocast on every listed device (an absent device is a
    skipped record), and layer norm's error in low precision: one process, seconds long."""
    input:
        measuring_code("cs336_systems.precision.autocast_dtypes"),
    output:
        f"{RESULTS}/A4/records/dtypes.json",
    log:
        f"{LOGS}/A4/dtypes.log",
    benchmark:
        f"{BENCHMARKS}/A4/dtypes.tsv",
    params:
        devices=" ".join(A4["devices"]),
        dtypes=" ".join(A4["autocast_dtypes"]),
    resources:
        gpu=1,
    shell:
        logged("python -m cs336_systems.pipeline.gpu_lease --gpus {resources.gpu} --"
        " python -m cs336_systems.precision.autocast_dtypes --devices {params.devices} --dtypes {params.dtypes}"
        " --out {output} > {log} 2>&1")


rule A4_kernels:
    """One A1 point in fp32 and bf16, one process and one model: timed as A1 times it (the two
    precisions taking turns in rounds), then each profiled step by step (torch.profiler)."""
    input:
        measuring_code("cs336_systems.profiling.step_kernels"),
    output:
        [f"{RESULTS}/A4/records/kernels_{{size}}_ctx{{context}}_{{mode}}_{p}.json" for p in ("fp32", "bf16")],
    log:
        f"{LOGS}/A4/kernels_{{size}}_ctx{{context}}_{{mode}}.log",
    benchmark:
        f"{BENCHMARKS}/A4/kernels_{{size}}_ctx{{context}}_{{mode}}.tsv",
    wildcard_constraints:
        size=re.escape(A4_KERNELS["size"]),
        context=r"\d+",
        mode="|".join(MODES),
    params:
        batch=GRID["A1"]["batch"],
        warmup=GRID["A1"]["warmup"],
        rounds=GRID["A1"]["rounds"],
        steps=GRID["A1"]["steps"],
        device=GRID["device"],
        out_dir=out_dir(0),
    resources:
        gpu=1,
    shell:
        logged("python -m cs336_systems.pipeline.gpu_lease --gpus {resources.gpu} --"
        " python -m cs336_systems.profiling.step_kernels --size {wildcards.size} --context {wildcards.context}"
        " --mode {wildcards.mode} --precisions fp32 bf16 --batch {params.batch} --warmup {params.warmup}"
        " --rounds {params.rounds} --steps {params.steps} --device {params.device} --out-dir {params.out_dir}"
        " > {log} 2>&1")


rule A4_report:
    """A4 dtype table, layer-norm errors, fp32-vs-bf16 timing table and speedup plot, summary."""
    input:
        dtypes=rules.A4_dtypes.output,
        timing=A4_TIMING_RECORDS,
        kernels=A4_KERNEL_RECORDS,
        code=code("cs336_systems.report.a4"),
    output:
        **report_outputs("A4"),
    log:
        f"{LOGS}/A4/report.log",
    params:
        out_dir=out_dir("summary"),
    shell:
        logged("python -m cs336_systems.report.a4 --dtypes {input.dtypes} --timing-records {input.timing}"
        " --kernel-records {input.kernels} --out-dir {params.out_dir} > {log} 2>&1")
