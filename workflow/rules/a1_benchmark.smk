# A1: the end-to-end benchmark, its grid (one job per size: every context, mode and precision of it
# taking turns in one process, so bf16 against fp32 is paired per round) and the warm-up study (one
# process per point: it studies a fresh process's first steps).
#
# GPU jobs declare `resources: gpu=k` and run under `gpu_lease`, which hands the command exactly
# k free devices (CUDA_VISIBLE_DEVICES), so timing jobs never share a GPU.

A1 = GRID["A1"]
A1_STUDY = A1["warmup_study"]

# Each rule constrains its own wildcards (none are file-global), so other rule files name theirs freely.
A1_POINT = dict(size="|".join(map(re.escape, A1["sizes"] + A1_STUDY["sizes"])), context=r"\d+",
                mode="|".join(MODES), precision="fp32|bf16")

A1_WARMUP_RECORDS = expand(f"{RESULTS}/A1/warmup/{{size}}_ctx{A1_STUDY['context']}_w{{warmup}}.json",
                           size=A1_STUDY["sizes"], warmup=A1_STUDY["warmups"])


# One benchmark process on its own GPU, timing one point: the warm-up study's.
BENCHMARK = (
    logged("python -m cs336_systems.pipeline.gpu_lease --gpus {resources.gpu} --"
    " python -m cs336_systems.benchmark --size {wildcards.size} --context {wildcards.context}"
    " --mode {params.mode} --precision {params.precision} --batch {params.batch}"
    " --warmup {params.warmup} --steps {params.steps} --attention {params.attention}"
    " --device {params.device} --out {output} > {log} 2>&1")
)


rule A1_benchmark:
    """One size of the A1 grid: one process on its own GPU, one model, its points taking turns in
    rounds (`benchmark --out-dir`), one record per point."""
    input:
        measuring_code("cs336_systems.benchmark", attention_module(A1["attention"])),
    output:
        [f"{RESULTS}/A1/records/{{size}}_ctx{c}_{m}_{p}.json"
         for c in A1["contexts"] for m in A1["modes"] for p in A1["precisions"]],
    log:
        f"{LOGS}/A1/{{size}}.log",
    benchmark:
        f"{BENCHMARKS}/A1/{{size}}.tsv",
    wildcard_constraints:
        size=A1_POINT["size"],
    params:
        contexts=" ".join(map(str, A1["contexts"])),
        modes=" ".join(A1["modes"]),
        precisions=" ".join(A1["precisions"]),
        out_dir=out_dir(0),         # the records folder, from the outputs (snakemake --lint)
        warmup=A1["warmup"],
        rounds=A1["rounds"],
        min_turn_ms=A1["min_turn_ms"],
        batch=A1["batch"],
        steps=A1["steps"],
        attention=A1["attention"],
        device=GRID["device"],
    resources:
        gpu=1,
    shell:
        logged("python -m cs336_systems.pipeline.gpu_lease --gpus {resources.gpu} --"
        " python -m cs336_systems.benchmark --size {wildcards.size} --contexts {params.contexts}"
        " --modes {params.modes} --precisions {params.precisions} --batch {params.batch}"
        " --warmup {params.warmup} --rounds {params.rounds} --min-turn-ms {params.min_turn_ms} --steps {params.steps}"
        " --attention {params.attention}"
        " --device {params.device} --out-dir {params.out_dir} > {log} 2>&1")


rule A1_warmup_study:
    """The same benchmark after 0, 1, 2, ... warm-up steps."""
    input:
        measuring_code("cs336_systems.benchmark", attention_module(A1["attention"])),
    output:
        f"{RESULTS}/A1/warmup/{{size}}_ctx{{context}}_w{{warmup}}.json",
    log:
        f"{LOGS}/A1/warmup/{{size}}_ctx{{context}}_w{{warmup}}.log",
    benchmark:
        f"{BENCHMARKS}/A1/warmup/{{size}}_ctx{{context}}_w{{warmup}}.tsv",
    wildcard_constraints:
        size=A1_POINT["size"],
        context=r"\d+",
        warmup=r"\d+",
    params:
        mode=A1_STUDY["mode"],
        precision=A1_STUDY["precision"],
        warmup=lambda wildcards: wildcards.warmup,
        batch=A1["batch"],
        steps=A1_STUDY["steps"],
        attention=A1["attention"],
        device=GRID["device"],
    resources:
        gpu=1,
    shell:
        BENCHMARK


rule A1_report:
    """A1 table (mean ± std per phase, TFLOP/s, MFU, what bounds each step), figures and the numbers
    the writeup quotes. Where the run builds A2 too, its profiles give the fp32 steps' GPU busy share."""
    input:
        records=A1_RECORDS,
        warmup=A1_WARMUP_RECORDS,
        profiles=A2_RECORDS if CHOSEN.builds("A2") else [],
        code=code("cs336_systems.report.a1"),
    output:
        **report_outputs("A1"),
    log:
        f"{LOGS}/A1/report.log",
    params:
        out_dir=out_dir("summary"),
    shell:
        logged("python -m cs336_systems.report.a1 --records {input.records} --warmup-records {input.warmup}"
        " --profiles {input.profiles} --out-dir {params.out_dir} > {log} 2>&1")
