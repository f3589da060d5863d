# B: attention. B5 FlashAttention benchmark grid and the leaderboard case.

B5 = GRID["B5"]


rule B5_grid_row:
    """One implementation × dtype × head dimension over every sequence length and pass (a JSON list
    of records): one process, one GPU."""
    input:
        measuring_code("cs336_systems.attention.bench"),
    output:
        f"{RESULTS}/B5/records/{{impl}}_{{dtype}}_d{{d}}.json",
    log:
        f"{LOGS}/B5/{{impl}}_{{dtype}}_d{{d}}.log",
    wildcard_constraints:
        impl="|".join(B5["impls"]),
        dtype="fp32|bf16|fp16",
        d=r"\d+",
    params:
        seqs=" ".join(map(str, B5["seqs"])),
        device=GRID["device"],
    resources:
        gpu=1,
    shell:
        "python -m cs336_systems.pipeline.gpu_lease --gpus {resources.gpu} --"
        " python -m cs336_systems.attention.bench grid --impl {wildcards.impl} --dtype {wildcards.dtype}"
        " --d {wildcards.d} --seqs {params.seqs} --device {params.device} --out {output} > {log} 2>&1"


rule B5_leaderboard:
    """The fixed case, ours (compiled) and both SDPA anchors in one process."""
    input:
        measuring_code("cs336_systems.attention.bench"),
    output:
        f"{RESULTS}/B5/records/leaderboard.json",
    log:
        f"{LOGS}/B5/leaderboard.log",
    params:
        shape=" ".join(map(str, B5["leaderboard"]["shape"])),
        warmup=B5["leaderboard"]["warmup_ms"],
        rep=B5["leaderboard"]["rep_ms"],
        device=GRID["device"],
    resources:
        gpu=1,
    shell:
        "python -m cs336_systems.pipeline.gpu_lease --gpus {resources.gpu} --"
        " python -m cs336_systems.attention.bench leaderboard --shape {params.shape} --warmup-ms {params.warmup}"
        " --rep-ms {params.rep} --device {params.device} --out {output} > {log} 2>&1"


rule B5_report:
    """B5 tables, speed-up maps, TFLOP/s plot and the numbers the writeup quotes."""
    input:
        rows=expand(f"{RESULTS}/B5/records/{{impl}}_{{dtype}}_d{{d}}.json",
                    impl=B5["impls"], dtype=B5["dtypes"], d=B5["head_dims"]),
        leaderboard=rules.B5_leaderboard.output,
        code=code("cs336_systems.report.b5"),
    output:
        csv=f"{RESULTS}/B5/table.csv",
        md=report(f"{RESULTS}/B5/table.md", category="B5 FlashAttention", labels={"item": "table"}),
        leaderboard=f"{RESULTS}/B5/leaderboard.csv",
        summary=f"{RESULTS}/B5/summary.json",
        speedup=report(f"{RESULTS}/B5/speedup.png", category="B5 FlashAttention", labels={"item": "speed-up map"}),
        tflops=report(f"{RESULTS}/B5/tflops.png", category="B5 FlashAttention", labels={"item": "TFLOP/s"}),
    log:
        f"{LOGS}/B5/report.log",
    params:
        out_dir=out_dir("csv"),
    shell:
        "python -m cs336_systems.report.b5 --rows {input.rows} --leaderboard {input.leaderboard}"
        " --out-dir {params.out_dir} > {log} 2>&1"
