# C9: 4D-parallelism accounting. Closed forms only: no GPU, no records to measure; the report step
# computes the numbers and writes the record itself, so editing the accounting code reruns it.


rule C9_report:
    """C9 (a)–(d) for the XXL model and the H100 scaling study: table, scaling table and plot, summary."""
    input:
        code=code("cs336_systems.report.c9", "cs336_systems.accounting"),
    output:
        csv=f"{RESULTS}/C9/table.csv",
        md=report(f"{RESULTS}/C9/table.md", category="C9 accounting", labels={"item": "table"}),
        scaling_csv=f"{RESULTS}/C9/scaling.csv",
        scaling_md=report(f"{RESULTS}/C9/scaling.md", category="C9 accounting", labels={"item": "scaling table"}),
        grid=f"{RESULTS}/C9/scaling_grid.csv",
        record=f"{RESULTS}/C9/records/accounting.json",
        summary=f"{RESULTS}/C9/summary.json",
        plot=report(f"{RESULTS}/C9/scaling.png", category="C9 accounting", labels={"item": "scaling"}),
    log:
        f"{LOGS}/C9/report.log",
    params:
        out_dir=out_dir("csv"),
    shell:
        logged("python -m cs336_systems.report.c9 --out-dir {params.out_dir} > {log} 2>&1")
