"""A1 grid records shaped as ``benchmark.run_group`` writes them, for the report's tests.

One heat is one context and mode of a size, its precisions taking turns in rounds in one job
(``rounds.take_turns``): every record holds its per-phase summaries and samples, ``step`` (the
phases' sum, step by step), ``rounds`` (each round's samples) and ``turns`` (the job). A point that
failed in its turns is an ``oom`` record that still names the job.
"""
from __future__ import annotations

import statistics
import uuid
from dataclasses import asdict

from cs336_systems.models import VOCAB_SIZE, get_size
from cs336_systems.records import make_record

PHASES = {"forward": ["forward"], "forward-backward": ["forward", "backward"],
          "train-step": ["forward", "backward", "optimizer"]}


def timed(samples: list[float]) -> dict:
    """``timing.summarize`` of ``samples``, with the samples (a record's phase)."""
    return {"mean": statistics.fmean(samples), "std": statistics.stdev(samples) if len(samples) > 1 else 0.0,
            "median": statistics.median(samples), "min": min(samples), "max": max(samples), "n": len(samples),
            "samples": samples}


def params(size: str, context: int, mode: str, precision: str, *, batch: int, warmup: int, steps: int, rounds: int,
           min_turn_ms: float = 0.0, device: str = "cuda") -> dict:
    """A grid record's params: the group's base and the point's own."""
    return {"size": size, **asdict(get_size(size)), "vocab_size": VOCAB_SIZE, "batch": batch, "warmup": warmup,
            "steps": steps, "compile": False, "attention": "naive", "device": device, "memory_limit_gb": None,
            "float32_matmul_precision": "highest", "context": context, "mode": mode, "precision": precision,
            "rounds": rounds, "min_turn_ms": min_turn_ms}


def heat(size: str, context: int, mode: str, per_round: dict[str, list[dict[str, list[float]]]], *, batch: int,
         warmup: int = 1, steps: int | None = None, oom: tuple[str, ...] = (), job: str | None = None,
         gpu: str | None = None) -> list[dict]:
    """The records of one heat, in ``per_round``'s order: ``per_round[precision][i][phase]`` is that
    precision's timed samples of ``phase`` in round ``i`` (the mode's phases, one list each, of equal
    length: the turn's steps); ``oom``: precisions that ran out of memory in their turns."""
    job = job or uuid.uuid4().hex[:12]
    rounds = len(next(iter(per_round.values())))
    turn = len(next(iter(next(iter(per_round.values()))[0].values())))
    turns = {"job": job, "with": [f"ctx{context}_{mode}_{p}" for p in per_round], "rounds": rounds,
             "steps": steps or turn, "warmup": warmup, "min_turn_ms": 0.0, "settle": 1}
    out = []
    for precision, rounds_of in per_round.items():
        point = params(size, context, mode, precision, batch=batch, warmup=warmup, steps=steps or turn, rounds=rounds)
        if precision in oom:
            out.append(make_record("A1", point, "oom", {"turns": turns},
                                   reason="OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB"))
            continue
        kept = [{**r, "step": [sum(r[ph][i] for ph in PHASES[mode]) for i in range(turn)]} for r in rounds_of]
        metrics = {ph: timed([t for r in kept for t in r[ph]]) for ph in [*PHASES[mode], "step"]}
        metrics |= {"rounds": kept, "warmup_step_samples": [3 * kept[0]["step"][0]] * warmup,
                    "peak_memory_bytes": 2**30, "turns": turns | {"steps_per_turn": turn, "interleaved": False},
                    "parameters": get_size(size).parameter_count()}
        record = make_record("A1", point, "ok", metrics)
        record["provenance"]["gpu"] = gpu
        out.append(record)
    return out
