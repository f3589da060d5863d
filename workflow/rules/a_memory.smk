# A5: memory snapshots. One process per context x mode x precision records one step (CUDA memory
# history on a GPU, torch.profiler's memory events on the CPU), analyses it and draws its timeline.
#
# The CUDA snapshot pickle (memory_viz's format) is written beside the record but declared nowhere:
# it is too large for git, and a declared file that a fresh checkout lacks would make Snakemake
# re-measure. Everything downstream reads the committed record and PNG only.
#
# {context}, {mode} and {precision} reuse the global constraints of a_single_gpu.smk; the size is
# not a wildcard (GRID["A5"]["size"]).

A5 = GRID["A5"]
A5_POINT = "ctx{context}_{mode}_{precision}"
A5_RECORDS = expand(f"{RESULTS}/A5/records/{A5_POINT}.json",
                    context=A5["contexts"], mode=A5["modes"], precision=A5["precisions"])
A5_TIMELINES = expand(f"{RESULTS}/A5/timelines/{A5_POINT}.png",
                      context=A5["contexts"], mode=A5["modes"], precision=A5["precisions"])
# The timelines the section embeds: fp32 (bf16's are drawn too, and listed in the summary).
A5_FIGURES = expand(f"{RESULTS}/A5/timelines/{A5_POINT}.png",
                    context=A5["contexts"], mode=A5["modes"], precision=["fp32"])


rule A5_snapshot:
    """One recorded step: the record (peaks, phases, largest allocations) and its timeline PNG."""
    input:
        measuring_code("cs336_systems.memory.snapshot"),
    output:
        record=f"{RESULTS}/A5/records/{A5_POINT}.json",
        timeline=f"{RESULTS}/A5/timelines/{A5_POINT}.png",
    log:
        f"{LOGS}/A5/{A5_POINT}.log",
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
        "python -m cs336_systems.pipeline.gpu_lease --gpus {resources.gpu} --"
        " python -m cs336_systems.memory.snapshot --size {params.size} --context {wildcards.context}"
        " --mode {wildcards.mode} --precision {wildcards.precision} --batch {params.batch}"
        " --warmup {params.warmup} --max-entries {params.max_entries} --device {params.device}"
        " --out {output.record} --timeline {output.timeline} --pickle {params.pickle} > {log} 2>&1"


rule A5_report:
    """A5 peak tables (fp32, bf16), largest forward allocations, and the numbers the writeup quotes."""
    input:
        records=A5_RECORDS,
        timelines=A5_TIMELINES,
        code=code("cs336_systems.report.a5"),
    output:
        fp32_csv=f"{RESULTS}/A5/peak_fp32.csv",
        fp32_md=report(f"{RESULTS}/A5/peak_fp32.md", category="A5 memory", labels={"item": "peak fp32"}),
        bf16_csv=f"{RESULTS}/A5/peak_bf16.csv",
        bf16_md=report(f"{RESULTS}/A5/peak_bf16.md", category="A5 memory", labels={"item": "peak bf16"}),
        top_csv=f"{RESULTS}/A5/top_allocations.csv",
        top_md=f"{RESULTS}/A5/top_allocations.md",
        summary=f"{RESULTS}/A5/summary.json",
    log:
        f"{LOGS}/A5/report.log",
    params:
        out_dir=out_dir("summary"),
    shell:
        "python -m cs336_systems.report.a5 --records {input.records} --timelines {input.timelines}"
        " --out-dir {params.out_dir} > {log} 2>&1"
