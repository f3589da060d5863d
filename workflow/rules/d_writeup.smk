# D: the writeup. Every deliverable's report rule leaves a summary.json (numbers for the prose)
# next to its tables and figures; this rule renders writeup/templates/ with them.

TEMPLATES = "writeup/templates"

# The writeup reads, of each section it builds (`sections` in the config; the others say "Not built
# yet", so a committed run that measured only some deliverables can be re-rendered without measuring
# the rest), the summary and every other file its report rule declares (tables and figures).
# A section this machine cannot measure (REBUILD_ONLY) is built only from records the run already
# holds; with none, the writeup says what it needs.
report_files = lambda ident: getattr(rules, deliverables.get(ident).report_rule).output
WRITTEN = [ident for ident in deliverables.IDS if CHOSEN.writes(ident) and (
    ident not in REBUILD_ONLY
    or any("/records/" in path for path in getattr(rules, deliverables.get(ident).report_rule).input))]


rule writeup:
    input:
        summaries=[report_files(ident).summary for ident in WRITTEN],
        tables_and_figures=[path for ident in WRITTEN for path in report_files(ident) if path != report_files(ident).summary],
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
        gpus_here=f"--gpus-here {GPUS_HERE}" if GPUS_HERE is not None else "",
        templates=lambda wildcards, input: os.path.commonpath(input.templates),
    shell:
        logged("python -m cs336_systems.report.writeup --run {params.run} --preset {params.preset} --templates {params.templates}"
        " --sections {params.sections} --gpus-needed {params.gpus_needed} {params.gpus_here}"
        " --summaries {input.summaries} --md {output.md} --html {output.html} > {log} 2>&1")
