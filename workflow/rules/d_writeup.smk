# D: the writeup. Every deliverable's report rule leaves a summary.json (numbers for the prose)
# next to its tables and figures; this rule renders writeup/templates/ with them.

# Each section's report rule and the figures it embeds. `sections` in the config picks which are
# built into this run's writeup (the others say "Not built yet"): a committed run that measured
# only some deliverables can then be re-rendered without measuring the rest.
SECTION_OUTPUTS = {
    "A1": [rules.A1_report.output.summary, rules.A1_report.output.contexts, rules.A1_report.output.warmup],
    "A2": [rules.A2_report.output.summary, rules.A2_report.output.shares],
    "A3": [rules.A3_report.output.summary, rules.A3_report.output.plot],
    "A4": [rules.A4_report.output.summary, rules.A4_report.output.plot],
    "A5": [rules.A5_report.output.summary, *A5_FIGURES],
    "A6": [rules.A6_report.output.summary, rules.A6_report.output.plot],
    "B1": [rules.B1_report.output.summary, rules.B1_report.output.plot],
    "B2": [rules.B2_report.output.summary, rules.B2_report.output.speedup],
    "B3": [rules.B3_B4_report.output.b3_summary],
    "B4": [rules.B3_B4_report.output.b4_summary],
    "B5": [rules.B5_report.output.summary, rules.B5_report.output.speedup, rules.B5_report.output.tflops],
    "C1": [rules.C1_report.output.summary, rules.C1_report.output.plot],
    "C2": [rules.DDP_report.output.C2_summary],
    "C3": [rules.DDP_report.output.C3_summary, rules.DDP_report.output.phases],
    "C4": [rules.DDP_report.output.C4_summary],
    "C5": [rules.DDP_report.output.C5_summary],
    "C6": [rules.DDP_report.output.C6_summary, rules.DDP_report.output.timeline],
    "C7": [rules.DDP_report.output.C7_summary],
    "C8": [rules.DDP_report.output.C8_summary, rules.DDP_report.output.model],
    "C9": [rules.C9_report.output.summary, rules.C9_report.output.plot],
    "C10": [rules.DDP_report.output.C10_summary],
    "C11": [rules.DDP_report.output.C11_summary],
    "C12": [rules.DDP_report.output.C12_summary, rules.DDP_report.output.fsdp_timeline],
}
WRITTEN = [ident for ident in SECTION_OUTPUTS if CHOSEN.writes(ident)]

# GPUs each section's jobs need in this preset (0 on CPU), so that a missing section can say
# "needs 2 GPUs; this run's jobs had 1". C1 runs its Gloo rows on CPUs; its NCCL rows need GPUs.
DDP_SECTIONS = ("C2", "C3", "C4", "C5", "C6", "C7", "C8", "C10", "C11", "C12")
GPUS_NEEDED = {ident: (1 if ON_GPUS else 0) for ident in SECTION_OUTPUTS if ident != "C9"}
GPUS_NEEDED.update({ident: DDP["world_size"] if DDP_BACKEND == "nccl" else 0 for ident in DDP_SECTIONS})
GPUS_NEEDED["C1"] = min(C1["world_sizes"]) if ON_GPUS and "nccl" in C1["backends"] else 0


rule writeup:
    input:
        summaries=[SECTION_OUTPUTS[ident][0] for ident in WRITTEN],
        figures=[figure for ident in WRITTEN for figure in SECTION_OUTPUTS[ident][1:]],
        templates=sorted(glob.glob("writeup/templates/**/*.j2", recursive=True)),
        code=code("cs336_systems.report.writeup"),
    output:
        md=f"{WRITEUP}/writeup.md",
        html=report(f"{WRITEUP}/writeup.html", category="Writeup"),
    log:
        f"{LOGS}/writeup.log",
    params:
        run=RUN,
        preset=PRESET,
        sections=",".join(CHOSEN.sections) if CHOSEN.sections is not None else "all",
        gpus_needed=" ".join(f"{ident}={n}" for ident, n in GPUS_NEEDED.items()),
    shell:
        "python -m cs336_systems.report.writeup --run {params.run} --preset {params.preset}"
        " --sections {params.sections} --gpus-needed {params.gpus_needed}"
        " --summaries {input.summaries} --md {output.md} --html {output.html} > {log} 2>&1"
