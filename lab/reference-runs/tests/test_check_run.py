"""check_run.py, the guard refrun.sh runs before a machine's first job: a run folder passes only
where every measured record names the pin; records from other commits pass only under --kept."""
import json
import random
import secrets
import subprocess
import sys
from pathlib import Path

from cs336_systems.records import make_record, write_json_atomic

SCRIPT = Path(__file__).resolve().parents[1] / "check_run.py"
PIN = "59b45a2a8ea5b5abb23e0acf51d4cee06b7eda07"


def _record(path: Path, commit: str, status: str = "ok") -> None:
    record = make_record(path.parts[-3], {}, status)
    record["provenance"]["commit"] = commit
    write_json_atomic(path, record)


def _check(run: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), str(run), "--pin", PIN[:7], *extra],
                          capture_output=True, text=True, timeout=60)


def test_the_pin_passes_and_anything_else_measured_fails(tmp_path):
    seed = secrets.randbits(32)          # the house's seed fixture lives under tests/; this one is printed on failure
    print("seed", seed)
    rng = random.Random(seed)
    run = tmp_path / "h200"
    other = "".join(rng.choice("0123456789abcdef") for _ in range(40))
    for k in range(rng.randint(1, 5)):
        _record(run / "A1" / "records" / f"p{k}.json", PIN)
    _record(run / "B2" / "whole_model" / "small.json", PIN, "oom")
    _record(run / "C3" / "records" / "naive_fp32.json", other)
    plain = _check(run)
    assert plain.returncode == 1 and f"commit {other[:7]}, not the pin: C3/records/naive_fp32.json" in plain.stdout
    kept = _check(run, "--kept", "C3")
    assert kept.returncode == 0, kept.stdout
    assert "oom   B2/whole_model/small.json" in kept.stdout
    _record(run / "E1" / "records" / "x.json", other)           # a measured record from main's old notebook
    assert _check(run, "--kept", "C3").returncode == 1
    (run / "E1" / "records" / "x.json").write_text(json.dumps({"id": "E1"})[:5])      # cut short
    cut = _check(run, "--kept", "C3")
    assert cut.returncode == 1 and "does not parse: E1/records/x.json" in cut.stdout


def test_an_empty_folder_passes(tmp_path):
    assert _check(tmp_path / "absent").returncode == 0
