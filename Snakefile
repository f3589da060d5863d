# The lab notebook's DAG: config.yaml -> one process per measurement -> JSON records ->
# tables and figures -> the writeup. `rule all` is the writeup of the chosen run.
#
#   snakemake --cores 1 --resources gpu=2            # everything stale, preset picked automatically
#   snakemake --config preset=full run=my-h100       # a named run of the full grid
#   snakemake results/smoke/A1/table.md              # one part


from snakemake.utils import min_version

min_version("9.0")      # profiles/default's keys and `rule: name:` in loops


# The code that runs is this checkout's own src/ and cs336-basics/, whatever else is installed: the
# rules list those files as inputs (staleness), so they must be what the jobs import. First on the
# Snakefile's own path (the rule files import the package), then on every job's PYTHONPATH.
import os, sys

_CHECKOUT_CODE = [os.path.join(workflow.basedir, "src"), os.path.join(workflow.basedir, "cs336-basics")]
sys.path[:0] = _CHECKOUT_CODE
os.environ.update(PYTHONPATH=os.pathsep.join(
    [*_CHECKOUT_CODE, *(p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p not in _CHECKOUT_CODE)]))
import importlib.util

# Where each package loads from, asked without running it (cs336_basics' __init__ imports torch: ~1.5 s).
for _name, _folder in (("cs336_systems", _CHECKOUT_CODE[0]), ("cs336_basics", _CHECKOUT_CODE[1])):
    _file = getattr(importlib.util.find_spec(_name), "origin", None) or "nowhere"
    if not os.path.realpath(_file).startswith(os.path.realpath(_folder) + os.sep):
        sys.exit(f"cs336-systems: {_name} loads from {os.path.dirname(_file)}, not from "
                 f"this checkout's {_folder}; the jobs would run other code than the rules list. Run snakemake "
                 "in a fresh process (nothing imported the package before the Snakefile), from this checkout")


# Where torch's install keeps no bytecode (the lent GPU machines), the jobs keep theirs in one folder
# instead of compiling every module they import again, a few seconds a job (pipeline/bytecode.py).
from cs336_systems.pipeline import bytecode

bytecode.apply(os.environ, bytecode.job_environment(os.environ, bytecode.CACHE_FOLDER, bytecode.has_bytecode("torch")))


configfile: "config.yaml"
# The image each job runs in under `--software-deployment-method apptainer` (docs/containers.md);
# ignored otherwise. CS336_CONTAINER names another: a .sif file, a registry image.
container: os.environ.get("CS336_CONTAINER", "docker://cs336-systems:latest")


include: "workflow/rules/common.smk"
# One file per part, as cs336_systems.deliverables names the file of each ID's rules (`<ID>_...`), in
# its order: a rule file may use the rules of a file before it. The writeup's comes last: it reads
# every report rule.
from cs336_systems import deliverables

for _rule_file in deliverables.rule_files():
    include: f"workflow/rules/{_rule_file}"
include: "workflow/rules/d_writeup.smk"


rule all:
    default_target: True
    input:
        rules.writeup.output,
