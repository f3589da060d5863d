# What every rule file shares (the resolved config, the run folder, the machine, code dependencies)
import glob
import os
import re
import sys

from cs336_systems import deliverables
from cs336_systems.attention.backends import BENCH_IMPLS, module_of as attention_module
from cs336_systems.models import MODES
from cs336_systems.pipeline import machine, run_folder
from cs336_systems.pipeline.config import ConfigError, resolve
from cs336_systems.pipeline.rule_helpers import code, out_dir, records_present, report_outputs as registry_outputs

# Where C's ranks run (the Slurm profile's `launch` block: profiles/slurm/launch.yaml) is a setting
# of the launch, not of the grid: distributed.placement reads and checks it (c_distributed.smk).
LAUNCH_BLOCK = config.pop("launch", None)

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

print(f"cs336-systems: preset {PRESET} ({CHOSEN.why}); results in {RESULTS}/, writeup in {WRITEUP}/",
      file=sys.stderr)

# The run folder belongs to the preset and kind of device that first measured into it
# (pipeline.run_folder): another may rebuild its tables from its records, never measure into it.
# Damaged records are set aside here, before Snakemake decides what is stale, so they are measured
# again and every report reads the new one. Jobs re-read this file under some executors: only the
# process that plans does either.
HERE = run_folder.Identity(PRESET, machine.device_kind(GRID["device"]) or "")
if workflow.is_main_process:
    _found = run_folder.scan(RESULTS)
    for _line in run_folder.set_aside_damaged(RESULTS, _found, deliverables.readers(),
                                              [f"{WRITEUP}/writeup.md", f"{WRITEUP}/writeup.html"]):
        print(_line, file=sys.stderr)
    _held = run_folder.identity(RESULTS, _found)
    _archived = run_folder.archived(RESULTS, _held)
    if _archived:
        sys.exit(f"cs336-systems: {_archived}")
    RUN_CONFLICT = run_folder.conflict(RESULTS, _held, PRESET, HERE.device or None)
    if RUN_CONFLICT and not CHOSEN.reuse_records:
        sys.exit(f"cs336-systems: {RUN_CONFLICT}")
else:
    RUN_CONFLICT = None

# GPUs: the most one job gets here (machine.gpus_for_jobs: visible GPUs, capped by --resources gpu=N;
# None on a cluster, inside a cluster job, or where no GPU shows), and what each deliverable's jobs
# need in this preset (0 on CPUs): C1's NCCL rows one GPU per rank, the data-parallel variants `world_size`.
_resources_gpu = workflow.global_resources.get("gpu")
GPUS_HERE = machine.gpus_for_jobs(workflow.local_exec and workflow.is_main_process,
                                  getattr(_resources_gpu, "value", _resources_gpu))
ON_GPUS = GRID["device"].startswith("cuda")
GPUS_NEEDED = {
    d.id: 0 if d.needs == deliverables.CPU or not ON_GPUS
    else 1 if d.needs == deliverables.ONE_GPU
    else (min(GRID["C1"]["world_sizes"]) if "nccl" in GRID["C1"]["backends"] else 0) if d.id == "C1"
    else GRID["DDP"]["world_size"]
    for d in deliverables.DELIVERABLES
}
# A deliverable that needs more GPUs than a job gets here is not measured: its section is rendered
# from the records the run folder already holds (a bigger machine of the same kind measured them),
# kept whatever the code's age, or says what it needs.
REBUILD_ONLY = {ident for ident, need in GPUS_NEEDED.items() if GPUS_HERE is not None and need > GPUS_HERE}
# Rebuilding a committed run's sections from its records (reuse_records with sections): reports whose
# grid grew after the run read the records it has (rule_helpers.records_on_disk).
REBUILDING = CHOSEN.reuse_records and CHOSEN.sections is not None


# The record lists another deliverable's report reads too (the registry's `reads`: A1 reads A2's
# profiles, A2 A1's fp32 forward points), defined once here so no rule file reads another's globals.
A1_RECORDS = expand(f"{RESULTS}/A1/records/{{size}}_ctx{{context}}_{{mode}}_{{precision}}.json",
                    size=GRID["A1"]["sizes"], context=GRID["A1"]["contexts"], mode=GRID["A1"]["modes"],
                    precision=GRID["A1"]["precisions"])
A2_RECORDS = expand(f"{RESULTS}/A2/records/{{size}}_ctx{{context}}.json", size=GRID["A2"]["sizes"],
                    context=GRID["A2"]["contexts"])

# Every command sends its output to its log (`logged`); where it fails, one line on the console says why (the
# exception, or a full disk that left the log empty: pipeline.job_failed), and the job still fails.
logged = lambda command: f"{command} || python -m cs336_systems.pipeline.job_failed {{log}} $?"

# The code inputs of a measuring step of `deliverable`. With reuse_records, or for a deliverable
# this machine cannot measure, records already on disk count as fresh whatever the code's age, so
# tables and the writeup can be rebuilt from committed records anywhere; only missing ones are measured.
measuring_code = lambda *modules, deliverable=None: code(
    *modules, kept=CHOSEN.reuse_records or deliverable in REBUILD_ONLY)


# A report rule's outputs, as the registry declares them (rule_helpers.report_outputs); tables'
# Markdown and figures also go into Snakemake's own HTML report (`snakemake --report`).
report_outputs = lambda ident, points=(): registry_outputs(RESULTS, ident, points, shown=report)


onstart:
    # After Snakemake has decided what is stale, before the first job: a run that would measure on
    # GPUs this machine lacks stops here with one line (pipeline.device_gate says why).
    from cs336_systems.pipeline.config import cuda_visible
    from cs336_systems.pipeline.device_gate import refusal

    jobs = list(workflow.dag.needrun_jobs())
    planned = [(job.rule.name, job.resources.get("gpu", 0)) for job in jobs]
    stop = refusal(GRID["device"], planned, cuda_visible(), workflow.local_exec, PRESET)
    if stop:
        sys.exit(stop)
    # Measuring jobs (those Snakemake times with `benchmark:`) write records: only into a run folder
    # of this preset and device, which the first of them claims.
    measuring = sorted({job.rule.name for job in jobs if job.rule.benchmark})
    if measuring and RUN_CONFLICT:
        sys.exit(f"cs336-systems: {RUN_CONFLICT} (it would measure: {', '.join(measuring)})")
    if measuring and HERE.device:
        run_folder.claim(RESULTS, HERE)
    # The writeup is about to be rewritten: take the old one away now. Snakemake remakes a missing
    # file (a record set aside, the outputs of a job that failed or was cut off) only when something
    # that needs it is out of date, so if this run stops early, the missing writeup is what makes the
    # next run remake everything missing beneath it, instead of saying "Nothing to be done" beside
    # an old writeup that quotes files no longer there.
    if "writeup" in {rule for rule, _ in planned}:
        for path in rules.writeup.output:
            if os.path.exists(path):
                os.remove(path)
