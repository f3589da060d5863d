# The lab notebook's DAG: config.yaml -> one process per measurement -> JSON records ->
# tables and figures -> the writeup. `rule all` is the writeup of the chosen run.
#
#   snakemake --cores 1 --resources gpu=2            # everything stale, preset picked automatically
#   snakemake --config preset=full run=my-h100       # a named run of the full grid
#   snakemake results/smoke/A1/table.md              # one part
import glob
import re
import sys

from cs336_systems.pipeline.config import ConfigError, resolve
from cs336_systems.pipeline.sources import module_sources


configfile: "config.yaml"


try:
    CHOSEN = resolve(config)
except ConfigError as error:
    sys.exit(f"cs336-systems: {error}")

PRESET, RUN, GRID = CHOSEN.preset, CHOSEN.run, CHOSEN.grid
RESULTS = f"results/{RUN}"
LOGS = f"{RESULTS}/logs"
WRITEUP = f"writeup/{RUN}"
PY = sys.executable
# Wraps every GPU job: picks exactly `gpu` free devices and sets CUDA_VISIBLE_DEVICES.
LEASE = f"{PY} -m cs336_systems.pipeline.gpu_lease --gpus"

print(f"cs336-systems: preset {PRESET} ({CHOSEN.why}); results in {RESULTS}/, writeup in {WRITEUP}/",
      file=sys.stderr)


def code(*modules):
    """The source files a rule's command runs: inputs, so editing them makes the rule stale."""
    return list(module_sources(*modules))


include: "workflow/rules/a_single_gpu.smk"
include: "workflow/rules/d_writeup.smk"


rule all:
    default_target: True
    input:
        rules.writeup.output,
