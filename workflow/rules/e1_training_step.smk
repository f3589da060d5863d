# E1: one AdamW training step per size x context x rung, the notebook's techniques added one at a
# time (cs336_systems.training_step.rungs), the plain-PyTorch anchors beside. One job per size x
# context: its rungs and anchors share one model and take turns in rounds, so every verdict (a rung
# against the rung before, ours against an anchor) is a paired difference inside one process; the
# job still writes one record per rung. The goal point's job measures the whole ladder (E1_ladder);
# the grid's other points measure `rungs_elsewhere` beside every anchor (E1_step): the top rung
# against the rung below it and the anchors, without the ladder's other rungs at every point.
#
# The job depends on the ladder's code and every rung's attention back end, our Triton AdamW and A6's checkpointing:
# a point's rungs are compared with each other, so editing our FlashAttention re-measures the points
# whole (the anchors beside the flash rungs). The checkpointed rung runs only where the rung before it ran
# out of memory in the same job's warm-up, so only a job that also measures that rung holds it.
#
# Inductor's caches (its FX graphs, Triton kernels, autotuning) live under the run folder, shared by
# the run's jobs and kept across re-runs (git ignores results/*/cache/).

from cs336_systems.pipeline.rule_helpers import records_in, records_on_disk
from cs336_systems.training_step import rungs as e1_rungs

E1 = GRID["E1"]
E1_NAMES = E1["rungs"] + E1["anchors"]
# Away from the goal point: the rungs named for there, in the ladder's order, and every anchor.
E1_ELSEWHERE = [name for name in E1["rungs"] if name in E1["rungs_elsewhere"]] + E1["anchors"]
# (pipeline.config checks that these name rungs of E1.rungs, the gated one only with the rung it needs)
E1_GOAL = (E1["goal"]["size"], int(E1["goal"]["context"]))
# The grid's points, and the goal point wherever it lies: the goal is judged there.
E1_POINTS = list(dict.fromkeys([(size, int(context)) for size in E1["sizes"] for context in E1["contexts"]]
                               + [E1_GOAL]))
E1_RECORD = f"{RESULTS}/E1/records/{{size}}_ctx{{context}}_{{rung}}.json"
E1_RECORDS = [path for size, context in E1_POINTS
              for path in expand(E1_RECORD, size=size, context=context,
                                 rung=E1_NAMES if (size, context) == E1_GOAL else E1_ELSEWHERE)]
# The profiles: the configured rungs at the goal point, each its own process after the ladder's.
E1_PROFILE = f"{RESULTS}/E1/profiles/{{size}}_ctx{{context}}_{{rung}}.json"
E1_PROFILES = expand(E1_PROFILE, size=E1["goal"]["size"], context=E1["goal"]["context"], rung=E1["profiled"])
# How every E1 point is built: the same for the ladder's jobs and the profiles.
E1_BUILD = (f"--batch {E1['batch']} --warmup {E1['warmup']} --seed {E1['seed']}"
            f" --compile-mode {E1['compile']} --backend {GRID.get('compile_backend', 'inductor')}"
            f" --checkpoint-group {E1['checkpoint_group']} --device {GRID['device']}")
# The ladder's jobs: rounds of `steps` a turn; a profile times as many steps as one rung's rounds hold.
E1_TURNS = f"--rounds {E1['rounds']} --steps {E1['steps']}"
E1_PROFILE_STEPS = f"--steps {E1['rounds'] * E1['steps']}"
E1_CODE = sorted({m for name in E1_NAMES for m in e1_rungs.code_of(name)})
INDUCTOR_CACHE = f"{RESULTS}/cache/inductor"
E1_JOB = ("TORCHINDUCTOR_CACHE_DIR=\"$PWD/{params.cache}\" python -m cs336_systems.pipeline.gpu_lease --gpus {resources.gpu} --"
          " python -m cs336_systems.training_step.ladder --size {wildcards.size} --context {wildcards.context}"
          " --rungs {params.rungs} {params.how} --out {output} > {log} 2>&1")

# The goal point's files are E1_ladder's, though E1_step's pattern names some of them too.
ruleorder: E1_ladder > E1_step


rule E1_ladder:
    """Every rung and anchor of the E1 ladder at the goal point, taking turns in one process on its
    own GPU; one record per rung."""
    input:
        code=measuring_code("cs336_systems.training_step.ladder", *E1_CODE, deliverable="E1"),
    output:
        [E1_RECORD.replace("{rung}", name) for name in E1_NAMES],
    log:
        f"{LOGS}/E1/{{size}}_ctx{{context}}.log",
    benchmark:
        f"{BENCHMARKS}/E1/{{size}}_ctx{{context}}.tsv",
    wildcard_constraints:
        size=re.escape(E1_GOAL[0]),
        context=str(E1_GOAL[1]),
    params:
        rungs=" ".join(E1_NAMES),
        how=f"{E1_BUILD} {E1_TURNS}",
        cache=INDUCTOR_CACHE,
    resources:
        gpu=1,
    shell:
        logged(E1_JOB)


rule E1_step:
    """The rungs E1 measures away from the goal point and every anchor, at one size and context,
    taking turns in one process on its own GPU; one record each."""
    input:
        code=measuring_code("cs336_systems.training_step.ladder",
                            *sorted({m for name in E1_ELSEWHERE for m in e1_rungs.code_of(name)}), deliverable="E1"),
    output:
        [E1_RECORD.replace("{rung}", name) for name in E1_ELSEWHERE],
    log:
        f"{LOGS}/E1/{{size}}_ctx{{context}}.log",
    benchmark:
        f"{BENCHMARKS}/E1/{{size}}_ctx{{context}}.tsv",
    wildcard_constraints:
        size="|".join(map(re.escape, E1["sizes"])),
        context=r"\d+",
    params:
        rungs=" ".join(E1_ELSEWHERE),
        how=f"{E1_BUILD} {E1_TURNS}",
        cache=INDUCTOR_CACHE,
    resources:
        gpu=1,
    shell:
        logged(E1_JOB)


rule E1_profile:
    """One rung at the goal point on a model of its own, built as E1_ladder builds it, its steps timed,
    then profiled by kernel kind."""
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
        how=f"{E1_BUILD} {E1_PROFILE_STEPS}",
        cache=INDUCTOR_CACHE,
    resources:
        gpu=1,
    shell:
        logged("TORCHINDUCTOR_CACHE_DIR=\"$PWD/{params.cache}\" python -m cs336_systems.pipeline.gpu_lease --gpus {resources.gpu} --"
        " python -m cs336_systems.training_step.profile --size {wildcards.size} --context {wildcards.context}"
        " --rung {wildcards.rung} {params.how} --out {output} > {log} 2>&1")


rule E1_report:
    """E1 ladder table (Δ per rung, MFU, loss against fp32 eager), the figure, and the goal's verdict."""
    input:
        # Rebuilding a committed run (reuse_records with sections): the records it has; the rows
        # it lacks are "not measured in this run" (rule_helpers.records_on_disk).
        records=records_on_disk(E1_RECORDS, REBUILDING),
        # A rebuild reads every profile the run has, none measured on the spot: the rungs its config
        # profiled then (a run made before E1 profiled has none).
        profiles=records_in(f"{RESULTS}/E1/profiles") if REBUILDING else E1_PROFILES,
        code=code("cs336_systems.report.e1"),
    output:
        **report_outputs("E1"),
    log:
        f"{LOGS}/E1/report.log",
    params:
        out_dir=out_dir("summary"),
        goal=E1["goal"],
        elsewhere=" ".join(E1["rungs_elsewhere"]),
        planned=E1_RECORDS,
    shell:
        logged("python -m cs336_systems.report.e1 --records {input.records} --goal-size {params.goal[size]}"
        " --goal-context {params.goal[context]} --goal-ratio {params.goal[ratio]} --goal-mfu {params.goal[mfu]}"
        " --elsewhere {params.elsewhere} --planned {params.planned}"
        " --profiles {input.profiles}"
        " --out-dir {params.out_dir} > {log} 2>&1")
