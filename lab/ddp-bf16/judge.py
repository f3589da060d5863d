"""Judge lab/ddp-bf16/batch.sh's records: per global batch, the baseline's rounds, each variant's
overhead paired per round against it (report.spread.judge, the reports' own judge), and our
variants' overhead against half of PyTorch DDP's (issue goal), paired per round (judge_rounds).

    python lab/ddp-bf16/judge.py lab/ddp-bf16/runs/h200x2-batch
"""
import glob
import json
import statistics as st
import sys
from pathlib import Path

from cs336_systems.report.spread import judge, judge_rounds, round_samples

OURS = ("bucketed-100", "bucketed-1000", "bucketed-ready-100", "bucketed-ready-1000", "bucketed-avg-1000",
        "bucketed-bf16-100", "bucketed-bf16-1000", "overlap")


def round_medians(record, phase="step"):
    return [st.median(samples) for samples in round_samples(record, phase)]


def main(folder: Path) -> None:
    for batch_dir in sorted((p for p in folder.glob("gb*") if p.is_dir()), key=lambda p: int(p.name[2:])):
        recs = {}
        for f in glob.glob(str(batch_dir / "*/records/*.json")):
            r = json.load(open(f))
            recs[r["params"]["variant"]] = r
        base = recs["no-comm"]
        steps = round_medians(base)
        print(f"global batch {batch_dir.name[2:]}: baseline step {base['metrics']['step_ms']:.1f} ms, rounds "
              f"{min(steps):.1f}-{max(steps):.1f}; forward per round {[round(x, 1) for x in round_medians(base, 'forward')]}")
        for name, rec in sorted(recs.items()):
            if name == "no-comm":
                continue
            v = judge(rec, base)
            print(f"  {name:20s} overhead {v.difference:7.1f} ms in [{v.low:.1f}, {v.high:.1f}]  {v.verdict}")
        torch_ddp = round_medians(recs["torch-ddp"])
        for name in (n for n in OURS if n in recs):
            ours = round_medians(recs[name])
            d = [(o - b) - 0.5 * (t - b) for o, b, t in zip(ours, steps, torch_ddp)]
            v = judge_rounds([[x] for x in d], [[0.0]] * len(d))
            verdict = {"lower": "meets the goal", "higher": "misses it"}.get(v.verdict, v.verdict)
            print(f"  {name}: overhead - 0.5 x PyTorch's = {v.difference:.1f} ms in [{v.low:.1f}, {v.high:.1f}] "
                  f"({verdict}); per round {[round(x, 1) for x in d]}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
