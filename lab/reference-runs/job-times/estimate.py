"""What the full preset's one-GPU measuring jobs would take on one H200 at the current code: an
estimate, from the jobs measured at the current shapes and the committed `h200` run's job times and
step times for the rest. Every input is a file in this repository; the rules are in the docstrings.

    python lab/reference-runs/job-times/estimate.py

Prints one Markdown table: per deliverable, its jobs, the estimate without and with the bytecode the
jobs now keep (cs336_systems.pipeline.bytecode), and where each figure comes from.
"""
from __future__ import annotations

import glob
import json
import os
import re
import statistics
from pathlib import Path

import yaml

from cs336_systems.rounds import SETTLE_TRIAL_ROUNDS, keeps_settling

ROOT = Path(__file__).resolve().parents[3]
HERE = Path(__file__).resolve().parent
H200 = ROOT / "results" / "h200"
# README's snakemake twice at c8c1ec6 on one H200 (lab/paired): A1 small and xl, E1 at the goal point and at
# xl/1024, B2(b) xl train-step, B5's bf16 d = 64 row. Each job is counted at the mean of its two runs (the
# first ran with cold compile caches, the second with warm ones, as the DAG's jobs run after others).
PAIRED_AT = "c8c1ec6"
PAIRED = [ROOT / "lab" / "paired" / "runs" / f"h200-{PAIRED_AT}" / run for run in ("a", "b")]

# The full preset as config.yaml has it now: the jobs' rounds, steps and E1's scope.
FULL = yaml.safe_load((ROOT / "config.yaml").read_text())["presets"]["full"]
A1 = FULL["A1"]
A1_SIZES = A1["sizes"]
A1_WARMUP, A1_ROUNDS, A1_STEPS, A1_SETTLE, A1_MIN_TURN_MS = A1["warmup"], A1["rounds"], A1["steps"], 1, A1["min_turn_ms"]
E1 = FULL["E1"]
# warm-up, then each round the timed steps, and a settling step in the trial rounds or in every round
E1_STEPS_STOPPED = E1["warmup"] + E1["rounds"] * E1["steps"] + SETTLE_TRIAL_ROUNDS
E1_STEPS_SETTLING = E1["warmup"] + E1["rounds"] * (1 + E1["steps"])
E1_GOAL = (E1["goal"]["size"], int(E1["goal"]["context"]))
E1_POINTS = [(size, int(ctx)) for size in E1["sizes"] for ctx in E1["contexts"]]
# `checkpointed` runs only where bf16-weights runs out of memory: counted where the records say it did
E1_LADDER = [n for n in E1["rungs"] if n != "checkpointed"] + E1["anchors"]
E1_ELSEWHERE = [n for n in E1["rungs"] if n in E1["rungs_elsewhere"] and n != "checkpointed"] + E1["anchors"]
E1_PROFILES = len(E1["profiled"])
A6_ROUNDS = FULL["A6"]["rounds"]
B2_ROUNDS = max(3, FULL["B2"]["steps"])


def job_seconds(path: Path) -> float:
    """A Snakemake benchmark file's wall-clock seconds."""
    return float(path.read_text().splitlines()[-1].split("\t")[0])


def paired_job(job: str) -> float:
    """Mean seconds of one job (``<ID>/<name>.tsv``) over the two runs of the check at ``PAIRED_AT``."""
    return statistics.mean(job_seconds(run / "benchmarks" / f"{job}.tsv") for run in PAIRED)


def settles_kept(record: dict) -> bool:
    """Whether the settling rule (``rounds.keeps_settling``) keeps a record's entrant settling."""
    metrics = record.get("metrics") or {}
    return keeps_settling(metrics.get("settle_ms_per_round") or [], metrics.get("rounds") or [])


def settling_saved(pattern: str) -> float:
    """Seconds the settling rule takes off a job measured at ``PAIRED_AT``, whose entrants settled every
    turn: the settling steps after the trial rounds of each record it stops (mean of the two runs).
    ``pattern``: the job's records under a run folder."""
    saved = []
    for run in PAIRED:
        seconds = 0.0
        for path in glob.glob(str(run / pattern)):
            record = json.loads(Path(path).read_text())
            if isinstance(record, dict) and record.get("status") == "ok" and not settles_kept(record):
                seconds += sum(s[0] for s in record["metrics"]["settle_ms_per_round"][SETTLE_TRIAL_ROUNDS:]) / 1000
        saved.append(seconds)
    return statistics.mean(saved)


def old_jobs(section: str, pattern: str = "**/*.tsv") -> list[float]:
    return [job_seconds(Path(p)) for p in glob.glob(str(H200 / "benchmarks" / section / pattern), recursive=True)]


def bytecode_savings() -> tuple[float, float]:
    """Seconds a process saves when its imports' bytecode is kept, from bytecode_probe.txt: the median
    of `plain` less the median of `writable-prefix` after its first (which writes the bytecode); the
    same with Liger-Kernel imported."""
    text = (HERE / "at-d4e37fd" / "bytecode_probe.txt").read_text()
    times = {}
    for label, seconds in re.findall(r"^([a-z+-]+) ([\d.]+) s$", text, re.M):
        times.setdefault(label, []).append(float(seconds))
    plain = statistics.median(times["plain"]) - statistics.median(times["writable-prefix"][1:])
    liger = statistics.median(times["plain+liger"]) - statistics.median(times["writable-prefix+liger"][1:])
    return plain, liger


def provenance_seconds_per_record() -> float:
    """A record's nvidia-smi call before a process asked once, from the B5 row's cProfile."""
    text = (HERE / "at-d4e37fd" / "b5_bf16_d64_cprofile.txt").read_text()
    calls, cumulative = re.search(r"^\s*(\d+)\s+[\d.]+\s+[\d.]+\s+([\d.]+)\s+[\d.]+\s+\S*records\.py:\d+\(provenance\)",
                                  text, re.M).groups()
    return float(cumulative) / int(calls)


def a1_model(rounds: int = A1_ROUNDS, steps: int = A1_STEPS, min_turn_ms: float = A1_MIN_TURN_MS) -> dict[str, float]:
    """Per size, the seconds of its points' steps: a point whose timed steps fill a turn of
    `min_turn_ms` takes (warm-up + rounds x steps + trial rounds x settle) steps; a cheaper one takes
    turns of `min_turn_ms` (its warm-up too) and a settling step in each trial round. Each point stops
    settling after the trial rounds, as 22 of xl's 24 did at ``PAIRED_AT``. Step times: the committed
    h200 records' medians."""
    seconds = dict.fromkeys(A1_SIZES, 0.0)
    for path in glob.glob(str(H200 / "A1" / "records" / "*.json")):
        record = json.loads(Path(path).read_text())
        if record["status"] != "ok":
            continue
        step = record["metrics"]["step"]["median"]
        if step * steps >= min_turn_ms:
            ms = (A1_WARMUP + rounds * steps + SETTLE_TRIAL_ROUNDS * A1_SETTLE) * step
        else:
            ms = min_turn_ms * (1 + rounds) + SETTLE_TRIAL_ROUNDS * A1_SETTLE * step
        seconds[record["params"]["size"]] += ms / 1000
    return seconds


def b2_more_rounds() -> float:
    """Seconds B2(b)'s configured rounds (one a timed step: the rule's max(3, steps)) add to the jobs
    measured at 5: a settling and a timed step of each variant a round, at the committed h200 records'
    step medians."""
    medians = 0.0
    for path in glob.glob(str(H200 / "B2" / "whole_model" / "*.json")):
        for variant in json.loads(Path(path).read_text())["metrics"]["variants"].values():
            medians += (variant.get("step") or {}).get("median") or 0.0
    return 2 * (B2_ROUNDS - 5) * medians / 1000


def a6_model() -> tuple[float, str]:
    """The measured A6 job (1 warm-up step, 3 rounds of a settling and a timed step a group size) less
    its steps, plus the configured rounds' steps at the steps the job's log gives each group size:
    a timed step a round, and a settling step in the trial rounds only (A6's entrants are eager models
    like A1's, whose settling the rule stops; not yet measured for A6 itself)."""
    log = (HERE / "at-d4e37fd" / "A6_groups.log").read_text()
    steps = sum(float(ms) for ms in re.findall(r"A6 group \d+ ok: step median ([\d.]+) ms", log)) / 1000
    measured = job_seconds(HERE / "at-d4e37fd" / "A6_groups.tsv")
    fixed = measured - (1 + 3 * 2) * steps
    return fixed + (1 + A6_ROUNDS + SETTLE_TRIAL_ROUNDS) * steps, (
        f"the measured job ({measured:.0f} s at 3 rounds) less its steps, + {A6_ROUNDS} rounds of a timed step of "
        f"each group size and {SETTLE_TRIAL_ROUNDS} settling ones ({steps:.0f} s a step of each)")


def e1_records() -> tuple[dict[tuple[str, int], dict[str, float]], dict[tuple[str, int], set[str]]]:
    """Per point, in the committed h200 records: each entrant's step median (ms) where it ran, and
    the entrants that ran out of memory."""
    medians: dict[tuple[str, int], dict[str, float]] = {point: {} for point in E1_POINTS}
    oom: dict[tuple[str, int], set[str]] = {point: set() for point in E1_POINTS}
    for path in glob.glob(str(H200 / "E1" / "records" / "*.json")):
        record = json.loads(Path(path).read_text())
        size, ctx, rung = re.fullmatch(r"(.+)_ctx(\d+)_(.+)\.json", os.path.basename(path)).groups()
        if record["status"] == "ok":
            medians[(size, int(ctx))][rung] = record["metrics"]["step"]["median"]
        elif record["status"] == "oom":
            oom[(size, int(ctx))].add(rung)
    return medians, oom


def e1_model() -> tuple[float, float, str]:
    """E1's jobs: the goal point's (the whole ladder) and xl/1024's (``rungs_elsewhere`` and the
    anchors) as measured at ``PAIRED_AT``, less the settling the rule stops (``settling_saved``); each
    other point's a fixed part (building, copying, compiling: xl/1024's job less its entrants' steps
    at its own records' medians) plus its entrants' steps at the committed h200 records' step medians,
    each entrant settling as it did at xl/1024 (every turn, or the trial rounds only). An entrant
    with no record at a point (a rung added since, or an OOM where the next rung fits) is counted at
    the fastest median that point has, one that ran out of memory there at none. 2.7B's points take
    xl's fixed part: its model is larger to build and copy, by how much is not measured. Returns the
    seconds measured, the seconds modelled and the basis."""
    medians, oom = e1_records()
    measured_point = ("xl", 1024)
    jobs = {point: f"E1/{point[0]}_ctx{point[1]}" for point in (E1_GOAL, measured_point)}
    measured = {point: paired_job(job) - settling_saved(f"{job}_*.json".replace("E1/", "E1/records/"))
                for point, job in jobs.items()}
    own = {}                       # entrant -> (its step median, the steps the rule gives it), run a's records
    for path in glob.glob(str(PAIRED[0] / "E1" / "records" / f"{measured_point[0]}_ctx{measured_point[1]}_*.json")):
        record = json.loads(Path(path).read_text())
        if record["status"] == "ok":
            steps = E1_STEPS_SETTLING if settles_kept(record) else E1_STEPS_STOPPED
            own[record["params"]["rung"]] = (record["metrics"]["step"]["median"], steps)
    fixed = measured[measured_point] - sum(ms * steps for ms, steps in own.values()) / 1000
    modelled = 0.0
    for point in E1_POINTS:
        if point in measured:
            continue
        known = medians[point]
        floor = min(known.values())
        entrants = E1_LADDER if point == E1_GOAL else E1_ELSEWHERE
        modelled += fixed + sum(known.get(e, floor) * own.get(e, (0, E1_STEPS_SETTLING))[1]
                                for e in entrants if e not in oom[point]) / 1000
    settling = sorted(rung for rung, (_, steps) in own.items() if steps == E1_STEPS_SETTLING)
    why = (f"the goal point's whole ladder ({measured[E1_GOAL]:.0f} s) and xl/1024's {len(E1_ELSEWHERE)} entrants "
           f"({measured[measured_point]:.0f} s) measured at {PAIRED_AT}, less the settling the rule stops; the other "
           f"{len(E1_POINTS) - 2} points a fixed {fixed:.0f} s (xl/1024's) + {E1_STEPS_SETTLING} steps of each of "
           f"{', '.join(settling)} and {E1_STEPS_STOPPED} of the others")
    return sum(measured.values()), modelled, why


def main() -> None:
    plain_saving, liger_saving = bytecode_savings()
    per_record = provenance_seconds_per_record()
    model = a1_model()
    a1_measured = {size: paired_job(f"A1/{size}") - settling_saved(f"A1/records/{size}_*.json")
                   for size in ("small", "xl")}
    a1_fixed = a1_measured["xl"] - model["xl"]           # what the model leaves out of a job
    a1_modelled = [size for size in A1_SIZES if size not in a1_measured]
    b1_old = old_jobs("B1")
    b1_scale = job_seconds(HERE / "at-4314ad5" / "B1_row_d64.tsv") / sum(old_jobs("B1", "*_d64.tsv"))
    b2_scale = (sum(job_seconds(HERE / "at-4314ad5" / f"B2_2.7B_{m}.tsv") for m in ("forward", "train-step"))
                / sum(old_jobs("B2", "whole_model/2.7B_*.tsv")))
    # B5's rows: the bf16 d = 64 row as measured, each other row scaled by what the committed h200
    # run's jobs of that row took against its bf16 d = 64 jobs
    b5_d64 = paired_job("B5/row_bf16_d64")
    b5_rows = [f"{dtype}_d{d}" for dtype in FULL["B5"]["dtypes"] for d in FULL["B5"]["head_dims"]]
    b5_scaled = sum(b5_d64 * sum(old_jobs("B5", f"*_{row}.tsv")) / sum(old_jobs("B5", "*_bf16_d64.tsv"))
                    for row in b5_rows if row != "bf16_d64")
    b2_more = b2_more_rounds()
    e1_measured, e1_modelled, e1_why = e1_model()
    a6_seconds, a6_why = a6_model()
    profile_old = old_jobs("E1", "profile_*.tsv")

    # deliverable: (jobs, seconds measured at PAIRED_AT, seconds otherwise; of the latter: processes that
    # import torch, of them with Liger, records per job beyond one; basis). The bytecode and nvidia-smi
    # savings apply only to what is scaled from older jobs: the jobs measured at PAIRED_AT, and the
    # rows modelled from them (A1's fixed part, B5's rows, E1's fixed part), had both already.
    rows = {
        "A1": (5, sum(a1_measured.values()), sum(model[s] for s in a1_modelled) + len(a1_modelled) * a1_fixed, 0, 0, 0,
               f"small and xl measured ({a1_measured['small']:.0f} and {a1_measured['xl']:.0f} s, {PAIRED_AT}, less "
               "the settling the rule stops); "
               f"{', '.join(a1_modelled)} modelled: committed step times, {A1_ROUNDS} rounds x {A1_STEPS} steps, "
               f"turns of {A1_MIN_TURN_MS:g} ms, + {a1_fixed:.0f} s a job (xl's job against its model)"),
        "A1 warm-up study": (12, 0, sum(old_jobs("A1", "warmup/*.tsv")), 12, 0, 0, "h200's jobs (shape unchanged)"),
        "A2": (20, 0, sum(old_jobs("A2")), 40, 0, 0, "h200's jobs (shape unchanged; two processes a job)"),
        "A3, C9": (2, 0, sum(old_jobs("A3")) + sum(old_jobs("C9")), 2, 0, 0, "h200's jobs"),
        "A4": (2, 0, sum(old_jobs("A4")), 2, 0, 0, "h200's three jobs (the pair is one job now)"),
        "A5": (12, 0, sum(old_jobs("A5")), 12, 0, 0, "h200's jobs (shape unchanged)"),
        "A6": (1, 0, a6_seconds, 1, 0, 0, a6_why),
        "B1": (4, 0, sum(b1_old) * b1_scale, 4, 0, 0,
               f"h200's jobs x {b1_scale:.2f} (the d = 64 row measured against its two old jobs)"),
        "B2": (10, 0, sum(old_jobs("B2")) * b2_scale + b2_more, 10, 0, 0,
               f"h200's jobs x {b2_scale:.2f} (2.7B's two jobs measured against their old ones, 5 rounds) "
               f"+ {b2_more:.0f} s for {B2_ROUNDS - 5} more rounds of a settling and a timed step a variant"),
        "B3": (1, 0, sum(old_jobs("B3")), 1, 0, 0, "h200's job"),
        "B5": (len(b5_rows) + 1, b5_d64, b5_scaled + job_seconds(HERE / "at-d4e37fd" / "B5_leaderboard.tsv"),
               1, 0, 0,
               f"the bf16 d = 64 row measured at {FULL['B5']['rounds']} rounds ({b5_d64:.0f} s, {PAIRED_AT}), the other "
               "rows scaled by h200's old jobs; + the leaderboard measured"),
        "E1": (len(E1_POINTS), e1_measured, e1_modelled, 0, 0, 0, e1_why),
        "E1 profiles": (E1_PROFILES, 0, E1_PROFILES * statistics.mean(profile_old), E1_PROFILES, 1, 0,
                        "4 x the mean of h200's two profile jobs"),
    }
    print("| deliverable | jobs | min | min, bytecode kept | from |")
    print("|:--|--:|--:|--:|:--|")
    before = after = 0.0
    for name, (jobs, measured, seconds, processes, liger, extra_records, basis) in rows.items():
        saved = (processes - liger) * plain_saving + liger * liger_saving + extra_records * per_record
        before, after = before + measured + seconds, after + measured + seconds - saved
        print(f"| {name} | {jobs} | {(measured + seconds) / 60:.1f} | {(measured + seconds - saved) / 60:.1f} | {basis} |")
    print(f"| **all** | {sum(r[0] for r in rows.values())} | **{before / 60:.1f}** | **{after / 60:.1f}** | |")
    print(f"\nbytecode kept: {plain_saving:.1f} s a process, {liger_saving:.1f} s one that imports Liger-Kernel; "
          f"a record's nvidia-smi: {per_record * 1000:.0f} ms; neither is taken off the jobs measured at {PAIRED_AT} "
          "or the rows modelled from them, which had both")


if __name__ == "__main__":
    main()
