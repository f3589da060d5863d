# B: attention. B1 / B2(a) plain attention sweep (eager and compiled), B2(b) the whole model eager
# and compiled, B3 / B4 checks of our FlashAttention Functions, B5 FlashAttention benchmark grid and
# the leaderboard case.

B1 = GRID["B1"]
B2 = GRID["B2"]
B3 = GRID["B3"]
B5 = GRID["B5"]
# torch.compile back end of B1's compiled rows and B2(b): inductor, or aot_eager in the smoke preset.
COMPILE_BACKEND = GRID.get("compile_backend", "inductor")


rule B1_row:
    """Plain attention at one head dimension over the sequence lengths (and on until out of memory),
    eager and compiled taking turns in rounds at each length in one process on one GPU (B2(a)'s
    comparison is paired per round); one JSON list of records per variant."""
    input:
        measuring_code("cs336_systems.attention.sweep"),
    output:
        expand(f"{RESULTS}/B1/records/{{variant}}_d{{{{d}}}}.json", variant=B1["variants"]),
    log:
        f"{LOGS}/B1/row_d{{d}}.log",
    benchmark:
        f"{BENCHMARKS}/B1/row_d{{d}}.tsv",
    wildcard_constraints:
        d=r"\d+",
    params:
        seqs=" ".join(map(str, B1["seqs"])),
        extend_to=f"--extend-to {B1['extend_to']}" if B1["extend_to"] else "",
        variants=" ".join(B1["variants"]),
        backend=COMPILE_BACKEND,
        batch=B1["batch"],
        iters=B1["iters"],
        rounds=B1["rounds"],
        out_dir=out_dir(0),
        device=GRID["device"],
    resources:
        gpu=1,
    shell:
        logged("python -m cs336_systems.pipeline.gpu_lease --gpus {resources.gpu} --"
        " python -m cs336_systems.attention.sweep --d {wildcards.d} --seqs {params.seqs} {params.extend_to}"
        " --variants {params.variants} --backend {params.backend} --batch {params.batch} --iters {params.iters}"
        " --rounds {params.rounds} --device {params.device} --out-dir {params.out_dir} > {log} 2>&1")


rule B1_report:
    """B1 table, time and memory plot, the accounting of the smallest out-of-memory case."""
    input:
        rows=expand(f"{RESULTS}/B1/records/{{variant}}_d{{d}}.json", variant=B1["variants"], d=B1["head_dims"]),
        code=code("cs336_systems.report.b1"),
    output:
        **report_outputs("B1"),
    log:
        f"{LOGS}/B1/report.log",
    params:
        out_dir=out_dir("summary"),
    shell:
        logged("python -m cs336_systems.report.b1 --rows {input.rows} --out-dir {params.out_dir} > {log} 2>&1")


# B2(b) compiles each Transformer block in place ("blocks", regional compilation) rather than the
# whole model: whole-model compile of xl took minutes for its first forward+backward on an H100 (a
# probe), times every grid point; the blocks share one compiled graph and compile in seconds. The embedding, final
# norm, LM head and loss stay eager. `python -m cs336_systems.compile_bench --compile model` does
# the whole model for whoever has the time.
B2_COMPILE = "blocks"
# A run that measured only part of B2 reports that part alone: part (a) reads B1's rows, so it is
# built when the run builds B1 (or names "B2a"); part (b) when the run builds B2 (or names "B2b").
B2_WHOLE_MODEL = (expand(f"{RESULTS}/B2/whole_model/{{size}}_{{mode}}.json", size=B2["sizes"], mode=B2["modes"])
                  if CHOSEN.builds("B2", part="b") else [])
B2_B1_ROWS = rules.B1_report.input.rows if CHOSEN.builds("B1") or CHOSEN.builds("B2", part="a") else []


rule B2_whole_model:
    """B2(b): one size × mode, eager and compiled taking turns in rounds in one process on one GPU
    (one set of weights), with the loss of both checked against each other. `steps` timed steps per
    variant, one per round, in at least three rounds."""
    input:
        measuring_code("cs336_systems.compile_bench", attention_module("naive")),
    output:
        f"{RESULTS}/B2/whole_model/{{size}}_{{mode}}.json",
    log:
        f"{LOGS}/B2/whole_model/{{size}}_{{mode}}.log",
    benchmark:
        f"{BENCHMARKS}/B2/whole_model/{{size}}_{{mode}}.tsv",
    wildcard_constraints:
        size="|".join(map(re.escape, B2["sizes"])),
        mode="|".join(MODES),
    params:
        context=B2["context"],
        batch=B2["batch"],
        warmup=B2["warmup"],
        rounds=max(3, B2["steps"]),
        compile=B2_COMPILE,
        backend=COMPILE_BACKEND,
        device=GRID["device"],
    resources:
        gpu=1,
    shell:
        logged("python -m cs336_systems.pipeline.gpu_lease --gpus {resources.gpu} --"
        " python -m cs336_systems.compile_bench --size {wildcards.size} --mode {wildcards.mode}"
        " --context {params.context} --batch {params.batch} --warmup {params.warmup} --rounds {params.rounds}"
        " --compile {params.compile} --backend {params.backend} --device {params.device} --out {output} > {log} 2>&1")


rule B2_report:
    """B2(a): the B1 grid compiled against eager, side by side; B2(b): the whole model, per size and
    mode, with the speed-up figure."""
    input:
        rows=B2_B1_ROWS,
        whole_model=B2_WHOLE_MODEL,
        code=code("cs336_systems.report.b2"),
    output:
        **report_outputs("B2"),
    log:
        f"{LOGS}/B2/report.log",
    params:
        out_dir=out_dir("summary"),
    shell:
        logged("python -m cs336_systems.report.b2 --rows {input.rows} --whole-model {input.whole_model}"
        " --out-dir {params.out_dir} > {log} 2>&1")


rule B3_checks:
    """Our three FlashAttention Functions against float64 attention, and the two backward paths timed."""
    input:
        measuring_code("cs336_systems.attention.check"),
    output:
        f"{RESULTS}/B3/records/checks.json",
    log:
        f"{LOGS}/B3/checks.log",
    benchmark:
        f"{BENCHMARKS}/B3/checks.tsv",
    params:
        shape=" ".join(map(str, B3["shape"])),
        bench_shape=" ".join(map(str, B3["bench_shape"])),
        dtypes=" ".join(B3["dtypes"]),
        device=GRID["device"],
        backend=GRID["compile_backend"],
    resources:
        gpu=1,
    shell:
        logged("python -m cs336_systems.pipeline.gpu_lease --gpus {resources.gpu} --"
        " python -m cs336_systems.attention.check --shape {params.shape} --bench-shape {params.bench_shape}"
        " --dtypes {params.dtypes} --device {params.device} --backend {params.backend} --out {output} > {log} 2>&1")


# B3 and B4 both read the one checks record: the errors are B3's table, the backward timings B4's.
for ident in deliverables.reported_by("cs336_systems.report.flash_checks"):

    rule:
        """B3: the error tables against float64; B4: the backward paths timed; each its summary."""
        name:
            f"{ident}_report"
        input:
            records=rules.B3_checks.output,
            code=code("cs336_systems.report.flash_checks"),
        output:
            **report_outputs(ident),
        log:
            f"{LOGS}/{ident}/report.log",
        params:
            ident=ident,
            out_dir=out_dir("summary"),
        shell:
            logged("python -m cs336_systems.report.flash_checks {params.ident} --records {input.records}"
            " --out-dir {params.out_dir} > {log} 2>&1")


rule B5_grid_row:
    """One dtype × head dimension row: every implementation takes turns at each sequence length and
    pass, in rounds, in one process on one GPU (a job is a comparison: ours against plain attention
    and SDPA is paired per round). It writes one JSON list of records per implementation. Editing
    our kernels reruns every row, since each row measures ours beside the others."""
    input:
        measuring_code("cs336_systems.attention.bench", *(attention_module(impl, BENCH_IMPLS) for impl in B5["impls"])),
    output:
        expand(f"{RESULTS}/B5/records/{{impl}}_{{{{dtype}}}}_d{{{{d}}}}.json", impl=B5["impls"]),
    log:
        f"{LOGS}/B5/row_{{dtype}}_d{{d}}.log",
    benchmark:
        f"{BENCHMARKS}/B5/row_{{dtype}}_d{{d}}.tsv",
    wildcard_constraints:
        dtype="fp32|bf16|fp16",
        d=r"\d+",
    params:
        impls=" ".join(B5["impls"]),
        seqs=" ".join(map(str, B5["seqs"])),
        rounds=B5["rounds"],
        out_dir=out_dir(0),
        device=GRID["device"],
    resources:
        gpu=1,
    shell:
        logged("python -m cs336_systems.pipeline.gpu_lease --gpus {resources.gpu} --"
        " python -m cs336_systems.attention.bench grid --impls {params.impls} --dtype {wildcards.dtype}"
        " --d {wildcards.d} --seqs {params.seqs} --rounds {params.rounds} --device {params.device}"
        " --out-dir {params.out_dir} > {log} 2>&1")


rule B5_leaderboard:
    """The fixed case, ours (compiled) and both SDPA anchors in one process."""
    input:
        measuring_code("cs336_systems.attention.bench", *(attention_module(impl, BENCH_IMPLS)
                                                          for impl in ("ours", "sdpa-cudnn"))),
    output:
        f"{RESULTS}/B5/records/leaderboard.json",
    log:
        f"{LOGS}/B5/leaderboard.log",
    benchmark:
        f"{BENCHMARKS}/B5/leaderboard.tsv",
    params:
        shape=" ".join(map(str, B5["leaderboard"]["shape"])),
        warmup=B5["leaderboard"]["warmup_ms"],
        rep=B5["leaderboard"]["rep_ms"],
        device=GRID["device"],
    resources:
        gpu=1,
    shell:
        logged("python -m cs336_systems.pipeline.gpu_lease --gpus {resources.gpu} --"
        " python -m cs336_systems.attention.bench leaderboard --shape {params.shape} --warmup-ms {params.warmup}"
        " --rep-ms {params.rep} --device {params.device} --out {output} > {log} 2>&1")


rule B5_report:
    """B5 tables, speed-up maps, TFLOP/s plot and the numbers the writeup quotes."""
    input:
        rows=expand(f"{RESULTS}/B5/records/{{impl}}_{{dtype}}_d{{d}}.json",
                    impl=B5["impls"], dtype=B5["dtypes"], d=B5["head_dims"]),
        leaderboard=rules.B5_leaderboard.output,
        code=code("cs336_systems.report.b5"),
    output:
        **report_outputs("B5"),
    log:
        f"{LOGS}/B5/report.log",
    params:
        out_dir=out_dir("summary"),
    shell:
        logged("python -m cs336_systems.report.b5 --rows {input.rows} --leaderboard {input.leaderboard}"
        " --out-dir {params.out_dir} > {log} 2>&1")
