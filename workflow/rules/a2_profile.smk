# A2: Nsight Systems profiles. One GPU job per size x context runs the three modes in one process
# (under `nsys profile` when the config's `nsys` program is found on a CUDA machine, otherwise with
# torch.profiler) and leaves one record; the .nsys-rep beside it is not an output: the report and
# the writeup rebuild from the committed JSON alone.

A2 = GRID["A2"]

# (a) compares the NVTX forward with A1's own timing of the same point, when this run builds A1:
# its fp32 forward records (an A2-only run does not wait for the A1 grid).
A2_A1_FORWARD = [r for r in A1_RECORDS if r.endswith("_forward_fp32.json")] if CHOSEN.builds("A1") else []


rule A2_profile:
    """One size x context: forward, forward+backward and train step, each after its own warm-up."""
    input:
        measuring_code("cs336_systems.profiling.profile"),
    output:
        f"{RESULTS}/A2/records/{{size}}_ctx{{context}}.json",
    log:
        f"{LOGS}/A2/{{size}}_ctx{{context}}.log",
    benchmark:
        f"{BENCHMARKS}/A2/{{size}}_ctx{{context}}.tsv",
    wildcard_constraints:
        size="|".join(map(re.escape, A2["sizes"])),
        context=r"\d+",
    params:
        modes=" ".join(A2["modes"]),
        batch=A2["batch"],
        warmup=A2["warmup"],
        steps=A2["steps"],
        nsys=lambda wildcards: repr(A2["nsys"]),
        device=GRID["device"],
    resources:
        gpu=1,
    shell:
        logged("python -m cs336_systems.pipeline.gpu_lease --gpus {resources.gpu} --"
        " python -m cs336_systems.profiling.profile --size {wildcards.size} --context {wildcards.context}"
        " --modes {params.modes} --batch {params.batch} --warmup {params.warmup} --steps {params.steps}"
        " --device {params.device} --nsys {params.nsys} --out {output} > {log} 2>&1")


rule A2_report:
    """A2 tables (a)-(e), the category-share figure and the numbers the writeup quotes."""
    input:
        records=A2_RECORDS,
        a1=A2_A1_FORWARD,
        code=code("cs336_systems.report.a2"),
    output:
        **report_outputs("A2"),
    log:
        f"{LOGS}/A2/report.log",
    params:
        out_dir=out_dir("summary"),
    shell:
        logged("python -m cs336_systems.report.a2 --records {input.records} --a1-records {input.a1}"
        " --out-dir {params.out_dir} > {log} 2>&1")
