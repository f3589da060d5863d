# D: the writeup. Every deliverable's report rule leaves a summary.json (numbers for the prose)
# next to its tables and figures; this rule renders writeup/templates/ with them.

TEMPLATES = "writeup/templates"

# Each section's report rule (`<ID>_report`, named in cs336_systems.deliverables) and the figures
# it draws: its outputs other than the summary. `sections` in the config picks which are built into
# this run's writeup (the others say "Not built yet"): a committed run that measured only some
# deliverables can then be re-rendered without measuring the rest.
SECTION_OUTPUTS = {
    ident: [outputs.summary, *(path for path in outputs if path.endswith(".png"))]
    for ident, outputs in ((d.id, getattr(rules, d.report_rule).output) for d in deliverables.DELIVERABLES)
}
# A section this machine cannot measure (REBUILD_ONLY) is built only from records the run already
# holds; with none, the writeup says what it needs.
WRITTEN = [ident for ident in deliverables.IDS if CHOSEN.writes(ident) and (
    ident not in REBUILD_ONLY
    or any("/records/" in path for path in getattr(rules, deliverables.get(ident).report_rule).input))]


rule writeup:
    input:
        summaries=[SECTION_OUTPUTS[ident][0] for ident in WRITTEN],
        figures=[figure for ident in WRITTEN for figure in SECTION_OUTPUTS[ident][1:]],
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
        gpus_needed=" ".join(f"{ident}={n}" for ident, n in GPUS_NEEDED.items()),
        templates=lambda wildcards, input: os.path.commonpath(input.templates),
    shell:
        logged("python -m cs336_systems.report.writeup --run {params.run} --preset {params.preset} --templates {params.templates}"
        " --sections {params.sections} --gpus-needed {params.gpus_needed}"
        " --summaries {input.summaries} --md {output.md} --html {output.html} > {log} 2>&1")
