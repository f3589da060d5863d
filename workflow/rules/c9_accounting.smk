# C9: 4D-parallelism accounting. Closed forms only, no GPU: C9_accounting computes every number into
# the record (a CPU job, like any measuring step), the report formats it.


rule C9_accounting:
    """C9 (a)–(d) for the XXL model and the H100 scaling study, from the closed forms: one record."""
    input:
        measuring_code("cs336_systems.accounting.study", deliverable="C9"),
    output:
        f"{RESULTS}/C9/records/accounting.json",
    log:
        f"{LOGS}/C9/accounting.log",
    benchmark:
        f"{BENCHMARKS}/C9/accounting.tsv",
    shell:
        logged("python -m cs336_systems.accounting.study --out {output} > {log} 2>&1")


rule C9_report:
    """C9 table, scaling table and plot, and the numbers the writeup quotes."""
    input:
        record=rules.C9_accounting.output,
        code=code("cs336_systems.report.c9"),
    output:
        **report_outputs("C9"),
    log:
        f"{LOGS}/C9/report.log",
    params:
        out_dir=out_dir("summary"),
    shell:
        logged("python -m cs336_systems.report.c9 --record {input.record} --out-dir {params.out_dir} > {log} 2>&1")
