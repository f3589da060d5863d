# E1: one AdamW training step per size x context x rung, the notebook's techniques added one at a
# time (cs336_systems.training_step.rungs), the plain-PyTorch anchors beside; one process per point.
#
# A rung's rule depends on the ladder's code, its own attention back end and, for the checkpointed
# rung, A6's checkpointing: editing our FlashAttention reruns the flash rungs, not fp32 eager or the
# anchors. The checkpointed rung reads the record of the rung before it: it measures only where that
# one ran out of memory.

from cs336_systems.pipeline.rule_helpers import kept_inputs, records_on_disk
from cs336_systems.training_step import rungs as e1_rungs

E1 = GRID["E1"]
E1_NAMES = E1["rungs"] + E1["anchors"]
E1_RECORD = f"{RESULTS}/E1/records/{{size}}_ctx{{context}}_{{rung}}.json"
E1_RECORDS = expand(E1_RECORD, size=E1["sizes"], context=E1["contexts"], rung=E1_NAMES)
# The profiles: the configured rungs at the goal point, each its own process after the ladder's.
E1_PROFILE = f"{RESULTS}/E1/profiles/{{size}}_ctx{{context}}_{{rung}}.json"
E1_PROFILES = expand(E1_PROFILE, size=E1["goal"]["size"], context=E1["goal"]["context"], rung=E1["profiled"])
# How every E1 point is built and timed: the same for the ladder's records and the profiles.
E1_HOW = (f"--batch {E1['batch']} --warmup {E1['warmup']} --steps {E1['steps']} --seed {E1['seed']}"
          f" --compile-mode {E1['compile']} --backend {GRID.get('compile_backend', 'inductor')}"
          f" --checkpoint-group {E1['checkpoint_group']} --device {GRID['device']}")


rule E1_step:
    """One rung of the E1 ladder (or an anchor) at one size and context: a fresh process, its own GPU, one record."""
    input:
        code=lambda wildcards: measuring_code("cs336_systems.training_step.ladder",
                                              *e1_rungs.code_of(wildcards.rung), deliverable="E1"),
        # the checkpointed rung reads the record of the rung before it at the same point; rebuilding
        # from records (reuse_records), a re-measured rung before it does not make it measure again
        previous=lambda wildcards: kept_inputs([E1_RECORD.format(size=wildcards.size, context=wildcards.context,
                                                                 rung=e1_rungs.previous(wildcards.rung))],
                                               CHOSEN.reuse_records or "E1" in REBUILD_ONLY)
        if wildcards.rung == e1_rungs.ONLY_WHEN_PREVIOUS_OOMS else [],
    output:
        E1_RECORD,
    log:
        f"{LOGS}/E1/{{size}}_ctx{{context}}_{{rung}}.log",
    benchmark:
        f"{BENCHMARKS}/E1/{{size}}_ctx{{context}}_{{rung}}.tsv",
    wildcard_constraints:
        size="|".join(map(re.escape, E1["sizes"])),
        context=r"\d+",
        rung="|".join(map(re.escape, E1_NAMES)),
    params:
        previous=lambda wildcards, input: f"--previous {input.previous}" if input.previous else "",
        how=E1_HOW,
    resources:
        gpu=1,
    shell:
        logged("python -m cs336_systems.pipeline.gpu_lease --gpus {resources.gpu} --"
        " python -m cs336_systems.training_step.ladder --size {wildcards.size} --context {wildcards.context}"
        " --rung {wildcards.rung} {params.how} {params.previous} --out {output} > {log} 2>&1")


rule E1_profile:
    """One rung at the goal point, timed as E1_step times it, then its steps profiled by kernel kind."""
    input:
        code=lambda wildcards: measuring_code("cs336_systems.training_step.profile",
                                              *e1_rungs.code_of(wildcards.rung), deliverable="E1"),
    output:
        E1_PROFILE,
    log:
        f"{LOGS}/E1/profile_{{size}}_ctx{{context}}_{{rung}}.log",
    benchmark:
        f"{BENCHMARKS}/E1/profile_{{size}}_ctx{{context}}_{{rung}}.tsv",
    wildcard_constraints:
        size="|".join(map(re.escape, E1["sizes"] + [E1["goal"]["size"]])),
        context=r"\d+",
        rung="|".join(map(re.escape, E1_NAMES)),
    params:
        how=E1_HOW,
    resources:
        gpu=1,
    shell:
        logged("python -m cs336_systems.pipeline.gpu_lease --gpus {resources.gpu} --"
        " python -m cs336_systems.training_step.profile --size {wildcards.size} --context {wildcards.context}"
        " --rung {wildcards.rung} {params.how} --out {output} > {log} 2>&1")


rule E1_report:
    """E1 ladder table (Δ per rung, MFU, loss against fp32 eager), the figure, and the goal's verdict."""
    input:
        # Rebuilding a committed run (reuse_records with sections): the records it has; the rows
        # it lacks are "not measured in this run" (rule_helpers.records_on_disk).
        records=records_on_disk(E1_RECORDS, REBUILDING),
        # The profiles a rebuild has, none measured on the spot (a run made before E1 profiled has none).
        profiles=(records_present if REBUILDING else list)(E1_PROFILES),
        code=code("cs336_systems.report.e1"),
    output:
        **report_outputs("E1"),
    log:
        f"{LOGS}/E1/report.log",
    params:
        out_dir=out_dir("summary"),
        goal=E1["goal"],
        planned=E1_RECORDS,
    shell:
        logged("python -m cs336_systems.report.e1 --records {input.records} --goal-size {params.goal[size]}"
        " --goal-context {params.goal[context]} --goal-mfu {params.goal[mfu]} --planned {params.planned}"
        " --profiles {input.profiles}"
        " --out-dir {params.out_dir} > {log} 2>&1")
