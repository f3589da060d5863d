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

ROOT = Path(__file__).resolve().parents[3]
HERE = Path(__file__).resolve().parent
H200 = ROOT / "results" / "h200"
E1_RUNS = ROOT / "lab" / "e1-rungs" / "runs" / "h200-job-times"
# README's snakemake twice at 9cb2819 on one H200 (lab/paired): E1's goal point, B5's bf16 d = 64 row, A1 small
PAIRED = [ROOT / "lab" / "paired" / "runs" / "h200-9cb2819" / run / "benchmarks" for run in ("a", "b")]

# The full preset as config.yaml has it now: the jobs' rounds, steps and E1's scope.
FULL = yaml.safe_load((ROOT / "config.yaml").read_text())["presets"]["full"]
A1 = FULL["A1"]
A1_SIZES = A1["sizes"]
A1_WARMUP, A1_ROUNDS, A1_STEPS, A1_SETTLE, A1_MIN_TURN_MS = A1["warmup"], A1["rounds"], A1["steps"], 1, A1["min_turn_ms"]
E1 = FULL["E1"]
# warm-up, then each round a settling step and the timed ones
E1_STEPS_PER_ENTRANT = E1["warmup"] + E1["rounds"] * (1 + E1["steps"])
E1_GOAL = (E1["goal"]["size"], int(E1["goal"]["context"]))
E1_POINTS = [(size, int(ctx)) for size in E1["sizes"] for ctx in E1["contexts"]]
# `checkpointed` runs only where bf16-weights runs out of memory: counted where the records say it did
E1_LADDER = [n for n in E1["rungs"] if n != "checkpointed"] + E1["anchors"]
E1_ELSEWHERE = [n for n in E1["rungs"] if n in E1["rungs_elsewhere"] and n != "checkpointed"] + E1["anchors"]
E1_PROFILES = len(E1["profiled"])
A6_ROUNDS = FULL["A6"]["rounds"]
B2_ROUNDS = max(3, FULL["B2"]["steps"])
# The jobs these step-time models were measured against (lab/e1-rungs/runs/h200-job-times, at-d4e37fd):
# warm-up 3, then 4 rounds of a settling step and 2 timed; A1 5 rounds of 2.
E1_MEASURED_STEPS_PER_ENTRANT = 3 + 4 * (1 + 2)


def job_seconds(path: Path) -> float:
    """A Snakemake benchmark file's wall-clock seconds."""
    return float(path.read_text().splitlines()[-1].split("\t")[0])


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
    `min_turn_ms` takes (warm-up + rounds x (settle + steps)) steps; a cheaper one takes turns of
    `min_turn_ms` (its warm-up too) and a settling step each round. Step times: the committed h200
    records' medians."""
    seconds = dict.fromkeys(A1_SIZES, 0.0)
    for path in glob.glob(str(H200 / "A1" / "records" / "*.json")):
        record = json.loads(Path(path).read_text())
        if record["status"] != "ok":
            continue
        step = record["metrics"]["step"]["median"]
        if step * steps >= min_turn_ms:
            ms = (A1_WARMUP + rounds * (A1_SETTLE + steps)) * step
        else:
            ms = min_turn_ms * (1 + rounds) + rounds * A1_SETTLE * step
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
    its steps, plus the configured rounds' steps at the steps the job's log gives each group size."""
    log = (HERE / "at-d4e37fd" / "A6_groups.log").read_text()
    steps = sum(float(ms) for ms in re.findall(r"A6 group \d+ ok: step median ([\d.]+) ms", log)) / 1000
    measured = job_seconds(HERE / "at-d4e37fd" / "A6_groups.tsv")
    fixed = measured - (1 + 3 * 2) * steps
    return fixed + (1 + A6_ROUNDS * 2) * steps, (f"the measured job ({measured:.0f} s at 3 rounds) less its steps, "
                                                f"+ {A6_ROUNDS} rounds of a settling and a timed step of each group size "
                                                f"({steps:.0f} s a step of each)")


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


def e1_model() -> tuple[float, str]:
    """Each point's job: a fixed part per size (building, copying, compiling; from the measured job
    of that size, less its entrants' steps) plus the configured steps of every entrant it measures
    (the whole ladder at the goal point, ``rungs_elsewhere`` and the anchors at the others) at the
    h200 records' step medians; an entrant with no record at a point (a rung added since, or an OOM
    where the next rung fits) counted at the fastest median that point has, an entrant that ran out
    of memory there (fp32 and bf16 at 2048) at none. The fixed part is the whole ladder's at every
    point: a job of five entrants compiles fewer graphs, by how much is not measured."""
    medians, oom = e1_records()
    measured_27 = job_seconds(E1_RUNS / "after" / "E1_2.7B_ctx1024.tsv")
    records_27 = [json.loads(Path(p).read_text())
                  for p in glob.glob(str(E1_RUNS / "after" / "E1_records_2.7B_ctx1024" / "*.json"))]
    steps_27 = sum(r["metrics"]["step"]["median"] for r in records_27 if r["status"] == "ok")
    log = (E1_RUNS / "after" / "E1_xl_ctx512_timestamped.log").read_text()
    measured_xl = float(log.strip().splitlines()[-1].split()[0])
    steps_xl = sum(float(ms) for ms in re.findall(r"E1 \S+ ok: step median ([\d.]+) ms", log))
    fixed = {"2.7B": measured_27 - E1_MEASURED_STEPS_PER_ENTRANT * steps_27 / 1000,
             "xl": measured_xl - E1_MEASURED_STEPS_PER_ENTRANT * steps_xl / 1000}
    total = 0.0
    for point in E1_POINTS:
        known = medians[point]
        floor = min(known.values())
        entrants = E1_LADDER if point == E1_GOAL else E1_ELSEWHERE
        ms = sum(known.get(e, floor) for e in entrants if e not in oom[point])
        total += fixed[point[0]] + E1_STEPS_PER_ENTRANT * ms / 1000
    # the goal point's job as measured at these shapes, in place of its model
    goal_measured = statistics.mean(job_seconds(b / "E1" / "2.7B_ctx1024.tsv") for b in PAIRED)
    known = medians[E1_GOAL]
    total += goal_measured - (fixed[E1_GOAL[0]] + E1_STEPS_PER_ENTRANT * sum(
        known.get(e, min(known.values())) for e in E1_LADDER if e not in oom[E1_GOAL]) / 1000)
    why = (f"the goal point's whole ladder measured ({goal_measured:.0f} s, 9cb2819); the other points modelled: "
           f"fixed part {fixed['xl']:.0f} s (xl) and {fixed['2.7B']:.0f} s (2.7B) from two measured jobs, "
           f"+ {E1_STEPS_PER_ENTRANT} steps of each of {len(E1_ELSEWHERE)} entrants")
    return total, why


def main() -> None:
    plain_saving, liger_saving = bytecode_savings()
    per_record = provenance_seconds_per_record()
    model = a1_model()
    a1_measured = job_seconds(HERE / "at-d4e37fd" / "A1_2.7B.tsv")
    a1_fixed = a1_measured - a1_model(rounds=5, steps=2, min_turn_ms=250)["2.7B"]      # the measured job's turns
    b1_old = old_jobs("B1")
    b1_scale = job_seconds(HERE / "at-4314ad5" / "B1_row_d64.tsv") / sum(old_jobs("B1", "*_d64.tsv"))
    b2_scale = (sum(job_seconds(HERE / "at-4314ad5" / f"B2_2.7B_{m}.tsv") for m in ("forward", "train-step"))
                / sum(old_jobs("B2", "whole_model/2.7B_*.tsv")))
    # B5's rows: the bf16 d = 64 row as measured at 8 rounds, each other row scaled by what the
    # committed h200 run's jobs of that row took against its bf16 d = 64 jobs
    b5_d64 = statistics.mean(job_seconds(b / "B5" / "row_bf16_d64.tsv") for b in PAIRED)
    b5_rows = [f"{dtype}_d{d}" for dtype in FULL["B5"]["dtypes"] for d in FULL["B5"]["head_dims"]]
    b5_grid = sum(b5_d64 * sum(old_jobs("B5", f"*_{row}.tsv")) / sum(old_jobs("B5", "*_bf16_d64.tsv")) for row in b5_rows)
    b2_more = b2_more_rounds()
    e1_seconds, e1_why = e1_model()
    a6_seconds, a6_why = a6_model()
    profile_old = old_jobs("E1", "profile_*.tsv")

    # deliverable: (jobs, processes that import torch, of them with Liger, seconds, records per job beyond one, basis)
    rows = {
        "A1": (5, 5, 0, sum(model.values()) + 5 * a1_fixed, 23 * 5,
               f"model: committed step times, {A1_ROUNDS} rounds x {A1_STEPS} steps, turns of {A1_MIN_TURN_MS:g} ms; "
               f"+ {a1_fixed:.0f} s a job (2.7B's job measured at 5 x 2, 250 ms: {a1_measured:.0f} s)"),
        "A1 warm-up study": (12, 12, 0, sum(old_jobs("A1", "warmup/*.tsv")), 0, "h200's jobs (shape unchanged)"),
        "A2": (20, 40, 0, sum(old_jobs("A2")), 0, "h200's jobs (shape unchanged; two processes a job)"),
        "A3, C9": (2, 2, 0, sum(old_jobs("A3")) + sum(old_jobs("C9")), 0, "h200's jobs"),
        "A4": (2, 2, 0, sum(old_jobs("A4")), 0, "h200's three jobs (the pair is one job now)"),
        "A5": (12, 12, 0, sum(old_jobs("A5")), 0, "h200's jobs (shape unchanged)"),
        "A6": (1, 1, 0, a6_seconds, 0, a6_why),
        "B1": (4, 4, 0, sum(b1_old) * b1_scale, 0, f"h200's jobs x {b1_scale:.2f} (the d = 64 row measured against its two old jobs)"),
        "B2": (10, 10, 0, sum(old_jobs("B2")) * b2_scale + b2_more, 0,
               f"h200's jobs x {b2_scale:.2f} (2.7B's two jobs measured against their old ones, 5 rounds) "
               f"+ {b2_more:.0f} s for {B2_ROUNDS - 5} more rounds of a settling and a timed step a variant"),
        "B3": (1, 1, 0, sum(old_jobs("B3")), 0, "h200's job"),
        "B5": (len(b5_rows) + 1, len(b5_rows) + 1, 0, b5_grid + job_seconds(HERE / "at-d4e37fd" / "B5_leaderboard.tsv"), 0,
               f"the bf16 d = 64 row measured at {FULL['B5']['rounds']} rounds ({b5_d64:.0f} s, 9cb2819), the other rows "
               "scaled by h200's old jobs; + the leaderboard measured"),
        "E1": (len(E1_POINTS), len(E1_POINTS), len(E1_POINTS), e1_seconds,
               len(E1_LADDER) + (len(E1_POINTS) - 1) * len(E1_ELSEWHERE), e1_why),
        "E1 profiles": (E1_PROFILES, E1_PROFILES, 1, E1_PROFILES * statistics.mean(profile_old), 0, "4 x the mean of h200's two profile jobs"),
    }
    print("| deliverable | jobs | min | min, bytecode kept | from |")
    print("|:--|--:|--:|--:|:--|")
    before = after = 0.0
    for name, (jobs, processes, liger, seconds, extra_records, basis) in rows.items():
        saved = (processes - liger) * plain_saving + liger * liger_saving + extra_records * per_record
        before, after = before + seconds, after + seconds - saved
        print(f"| {name} | {jobs} | {seconds / 60:.1f} | {(seconds - saved) / 60:.1f} | {basis} |")
    print(f"| **all** | {sum(r[0] for r in rows.values())} | **{before / 60:.1f}** | **{after / 60:.1f}** | |")
    print(f"\nbytecode kept: {plain_saving:.1f} s a process, {liger_saving:.1f} s one that imports Liger-Kernel; "
          f"a record's nvidia-smi: {per_record * 1000:.0f} ms (B5: {119 * 8} records beyond one a job, E1: one an entrant)")


if __name__ == "__main__":
    main()
