# The lab notebook's DAG: config.yaml -> one process per measurement -> JSON records ->
# tables and figures -> the writeup. `rule all` is the writeup of the chosen run.
#
#   snakemake --cores 1 --resources gpu=2            # everything stale, preset picked automatically
#   snakemake --config preset=full run=my-h100       # a named run of the full grid
#   snakemake results/smoke/A1/table.md              # one part


from snakemake.utils import min_version

min_version("9.0")      # profiles/default's keys and `rule: name:` in loops


configfile: "config.yaml"
# The image each job runs in under `--software-deployment-method apptainer` (README, "Running in
# Docker"); ignored otherwise. CS336_CONTAINER names another: a .sif file, a registry image.
container: os.environ.get("CS336_CONTAINER", "docker://cs336-systems:latest")


include: "workflow/rules/common.smk"
# One file per part; cs336_systems.deliverables names the file of each ID's rules (`<ID>_...`).
include: "workflow/rules/a1_benchmark.smk"
include: "workflow/rules/a2_profile.smk"
include: "workflow/rules/a3_a4_precision.smk"
include: "workflow/rules/a5_a6_memory.smk"
include: "workflow/rules/b_attention.smk"
include: "workflow/rules/c_distributed.smk"
include: "workflow/rules/c9_accounting.smk"
include: "workflow/rules/d_writeup.smk"


rule all:
    default_target: True
    input:
        rules.writeup.output,
