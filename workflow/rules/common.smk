# Shared by every rule file: the resolved config, the run's folders, and code dependencies.
import glob
import os
import re
import sys

from cs336_systems import deliverables
from cs336_systems.attention.backends import BENCH_IMPLS, module_of as attention_module
from cs336_systems.models import MODES
from cs336_systems.pipeline.config import ConfigError, resolve
from cs336_systems.pipeline.rule_helpers import code, out_dir

# Snakemake's `validate` with the schema (defaults filled in), then the names our tables define;
# a mistake stops here with one line naming the key.
try:
    CHOSEN = resolve(config, schema=os.path.join(workflow.basedir, "workflow/schemas/config.schema.yaml"))
except ConfigError as error:
    sys.exit(f"cs336-systems: {error}")

PRESET, RUN, GRID = CHOSEN.preset, CHOSEN.run, CHOSEN.grid
RESULTS = f"results/{RUN}"
LOGS = f"{RESULTS}/logs"
# Every job also leaves Snakemake's own measurement of itself (wall time, memory, CPU time) beside
# its log: `python -m cs336_systems.pipeline.job_times results/<run>` sums them by deliverable.
BENCHMARKS = f"{RESULTS}/benchmarks"
WRITEUP = f"writeup/{RUN}"

# Code inputs of the rules that measure. With `reuse_records: true`, records already on disk count
# as fresh whatever the code's age (`ancient`), so tables and the writeup can be rebuilt from
# committed GPU records on any machine; only missing records are measured.
measuring_code = (lambda *modules: [ancient(f) for f in code(*modules)]) if CHOSEN.reuse_records else code

print(f"cs336-systems: preset {PRESET} ({CHOSEN.why}); results in {RESULTS}/, writeup in {WRITEUP}/",
      file=sys.stderr)



onstart:
    # After Snakemake has decided what is stale, before the first job: a run that would measure on
    # GPUs this machine lacks stops here with one line (pipeline.device_gate says why).
    from cs336_systems.pipeline.config import cuda_visible
    from cs336_systems.pipeline.device_gate import refusal

    planned = [(job.rule.name, job.resources.get("gpu", 0)) for job in workflow.dag.needrun_jobs()]
    stop = refusal(GRID["device"], planned, cuda_visible(), workflow.local_exec, PRESET)
    if stop:
        sys.exit(stop)
    # The writeup is about to be rewritten: take the old one away now. Snakemake remakes a missing
    # file (a record set aside, the outputs of a job that failed or was cut off) only when something
    # that needs it is out of date, so if this run stops early, the missing writeup is what makes the
    # next run remake everything missing beneath it, instead of saying "Nothing to be done" beside
    # an old writeup that quotes files no longer there.
    if "writeup" in {rule for rule, _ in planned}:
        for path in rules.writeup.output:
            if os.path.exists(path):
                os.remove(path)
