"""cs336_systems.precision.accumulation against an independent NumPy loop."""

import json
import random

import numpy as np
import pytest
import torch

from cs336_systems.precision import accumulation as acc
from cs336_systems.precision.accumulation import VARIANTS, accumulation_table, running_sums

NUMPY = {torch.float32: np.float32, torch.float16: np.float16}


def numpy_running_sums(acc_dtype, add_dtype, checkpoints):
    total = acc_dtype(0)
    x = add_dtype(0.01)
    out = {}
    for n in range(1, max(checkpoints) + 1):
        total = acc_dtype(total + acc_dtype(x))     # promote the addend, add, round to the accumulator
        if n in checkpoints:
            out[n] = float(total)
    return out


def _checkpoints():
    return sorted({1, 10, 100, 1000, *random.sample(range(2, 3000), 5)})


NUMPY_VARIANTS = [name for name, (a, b, _) in VARIANTS.items() if a in NUMPY and b in NUMPY]


def test_numpy_reference_covers_the_fp32_fp16_variants():
    assert set(NUMPY_VARIANTS) == {"fp32 += fp32", "fp16 += fp16", "fp32 += fp16", "fp32 += fp16.to(fp32)"}


@pytest.mark.parametrize("name", NUMPY_VARIANTS)
def test_running_sums_match_numpy(name):
    accumulator, addend, upcast = VARIANTS[name]
    checkpoints = _checkpoints()
    got = running_sums(accumulator, addend, upcast, checkpoints)
    want = numpy_running_sums(NUMPY[accumulator], NUMPY[addend], set(checkpoints))
    assert got.keys() == set(checkpoints)
    assert got == want        # same IEEE operations, so bit-identical


def test_fp16_accumulator_drifts_and_fp32_does_not():
    fp16 = running_sums(torch.float16, torch.float16, False, [1000])[1000]
    fp32 = running_sums(torch.float32, torch.float32, False, [1000])[1000]
    assert abs(fp32 - 10) < 1e-3
    assert abs(fp16 - 10) > 1e-2


def test_implicit_and_explicit_upcast_agree():
    cps = _checkpoints()
    assert running_sums(torch.float32, torch.float16, False, cps) == running_sums(torch.float32, torch.float16, True, cps)


def test_bf16_accumulator_stalls():
    n = 1000
    cps = list(range(1, n + 1))
    sums = running_sums(torch.bfloat16, torch.bfloat16, False, cps)
    final = sums[n]
    assert final < n / 100 / 2            # far below the exact 10
    first_stalled = next(k for k in cps if sums[k] == final)
    assert first_stalled < n / 2
    assert all(sums[k] == final for k in cps[first_stalled - 1:])     # it stopped changing for good
    # Before the stall it increased monotonically.
    assert all(sums[k] < sums[k + 1] for k in range(1, first_stalled))


def test_fp32_accumulator_of_bf16_addend_is_n_times_the_rounded_addend():
    n = 1000
    x = float(torch.tensor(0.01, dtype=torch.bfloat16))
    assert x != 0.01                          # bf16 rounds 0.01 noticeably
    got = running_sums(torch.float32, torch.bfloat16, False, [n])[n]
    # n fp32 additions, each off by at most half an ulp of the running sum (< 2**-20 near 10).
    assert got == pytest.approx(n * x, abs=n * 2.0 ** -20)
    assert abs(got - n * x) < abs(n * x - n / 100)


def test_accumulation_table_rows_and_errors():
    cps = [1, 10, 100]
    rows = accumulation_table(cps)
    assert len(rows) == len(VARIANTS) * len(cps)
    assert {(r["variant"], r["terms"]) for r in rows} == {(v, n) for v in VARIANTS for n in cps}
    for r in rows:
        assert r["exact"] == pytest.approx(r["terms"] / 100, rel=1e-15)
        assert r["abs_error"] == pytest.approx(abs(r["value"] - r["terms"] / 100), abs=1e-15)
        assert r["rel_error"] == pytest.approx(r["abs_error"] / (r["terms"] / 100), rel=1e-12, abs=1e-15)
        accumulator, addend, _ = VARIANTS[r["variant"]]
        assert r["accumulator"] == str(accumulator).removeprefix("torch.")
        assert r["addend"] == str(addend).removeprefix("torch.")


def test_cli_writes_a_record_with_all_variants_and_terms(tmp_path):
    out = tmp_path / "a3.json"
    terms = [100, 1, 10, 10]                      # unsorted, with a duplicate
    assert acc.main(["--terms", *map(str, terms), "--out", str(out)]) == 0
    r = json.loads(out.read_text())
    assert r["id"] == "A3" and r["status"] == "ok"
    assert r["params"] == {"addend": 0.01, "terms": [1, 10, 100]}
    rows = r["metrics"]["rows"]
    assert len(rows) == len(VARIANTS) * 3
    assert {(x["variant"], x["terms"]) for x in rows} == {(v, n) for v in VARIANTS for n in (1, 10, 100)}
    for x in rows:
        accumulator, addend, upcast = VARIANTS[x["variant"]]
        assert x["value"] == running_sums(accumulator, addend, upcast, [x["terms"]])[x["terms"]]


def test_cli_rejects_nonpositive_terms(tmp_path, capsys):
    with pytest.raises(SystemExit) as info:
        acc.main(["--terms", "10", "0", "--out", str(tmp_path / "r.json")])
    assert info.value.code == 2
    assert "at least 1" in capsys.readouterr().err
