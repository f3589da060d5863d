# D: the writeup. Every deliverable's report rule leaves a summary.json (numbers for the prose)
# next to its tables and figures; this rule renders writeup/templates/ with them.

TEMPLATES = "writeup/templates"

# Each section's report rule (`<ID>_report`, named in cs336_systems.deliverables) and the figures
# it draws: its outputs other than the summary. `sections` in the config picks which are built into
# this run's writeup (the others say "Not built yet"): a committed run that measured only some
# deliverables can then be re-rendered without measuring the rest.
def section_outputs(ident):
    outputs = getattr(rules, deliverables.get(ident).report_rule).output
    return [outputs.summary, *(path for path in outputs if path.endswith(".png"))]


WRITTEN = [ident for ident in deliverables.IDS if CHOSEN.writes(ident)]


def gpus_needed(ident):
    """GPUs a section's jobs need in this preset (0 on CPUs), so that a missing section can say
    "needs 2 GPUs; this run's jobs had 1". C1 runs its Gloo rows on CPUs, its NCCL rows on GPUs."""
    needs = deliverables.get(ident).needs
    if needs == deliverables.CPU or not ON_GPUS:
        return 0
    if needs == deliverables.ONE_GPU:
        return 1
    if ident == "C1":
        return min(C1["world_sizes"]) if "nccl" in C1["backends"] else 0
    return DDP["world_size"]


rule writeup:
    input:
        summaries=[section_outputs(ident)[0] for ident in WRITTEN],
        figures=[figure for ident in WRITTEN for figure in section_outputs(ident)[1:]],
        templates=sorted(glob.glob(f"{TEMPLATES}/**/*.j2", recursive=True)),
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
        gpus_needed=" ".join(f"{ident}={gpus_needed(ident)}" for ident in deliverables.IDS),
        templates=TEMPLATES,
    shell:
        "python -m cs336_systems.report.writeup --run {params.run} --preset {params.preset} --templates {params.templates}"
        " --sections {params.sections} --gpus-needed {params.gpus_needed}"
        " --summaries {input.summaries} --md {output.md} --html {output.html} > {log} 2>&1"
