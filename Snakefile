# The lab notebook's DAG: config.yaml -> one process per measurement -> JSON records ->
# tables and figures -> the writeup. `rule all` is the writeup of the chosen run.
#
#   snakemake --cores 1 --resources gpu=2            # everything stale, preset picked automatically
#   snakemake --config preset=full run=my-h100       # a named run of the full grid
#   snakemake results/smoke/A1/table.md              # one part


configfile: "config.yaml"
# The image each job runs in under `--software-deployment-method apptainer` (README, "Running in
# Docker"); ignored otherwise. CS336_CONTAINER names another: a .sif file, a registry image.
container: os.environ.get("CS336_CONTAINER", "docker://cs336-systems:latest")


include: "workflow/rules/common.smk"
include: "workflow/rules/a_single_gpu.smk"
include: "workflow/rules/a_profile.smk"
include: "workflow/rules/a_precision_memory.smk"
include: "workflow/rules/a_memory.smk"
include: "workflow/rules/b_attention.smk"
include: "workflow/rules/c_distributed.smk"
include: "workflow/rules/c_accounting.smk"
include: "workflow/rules/d_writeup.smk"


rule all:
    default_target: True
    input:
        rules.writeup.output,
