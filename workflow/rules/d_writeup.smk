# D: the writeup. Every deliverable's report rule leaves a summary.json (numbers for the prose)
# next to its tables and figures; this rule renders writeup/templates/ with them.

WRITEUP_SUMMARIES = [
    rules.A1_report.output.summary,
    rules.A3_report.output.summary,
    rules.B1_report.output.summary,
    rules.B5_report.output.summary,
]


rule writeup:
    input:
        summaries=WRITEUP_SUMMARIES,
        figures=[rules.A1_report.output.contexts, rules.A1_report.output.warmup, rules.A3_report.output.plot,
                 rules.B1_report.output.plot, rules.B5_report.output.speedup, rules.B5_report.output.tflops],
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
    shell:
        "python -m cs336_systems.report.writeup --run {params.run} --preset {params.preset}"
        " --summaries {input.summaries} --md {output.md} --html {output.html} > {log} 2>&1"
