"""cs336_systems.timing: the OOM test, failures as results, summaries and the timers."""

import random
import statistics
import time

import pytest
import torch

from cs336_systems.timing import (PhaseTimer, attempt, exception_line, failure_status, is_out_of_memory,
                                  loop_ms, median_ms, summarize)


@pytest.mark.parametrize("exc", [
    torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"),
    MemoryError(),
    RuntimeError("CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 79.1 GiB total capacity)"),
    RuntimeError("[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory: "
                 "you tried to allocate 9437184 bytes. Error code 12 (Cannot allocate memory)"),
    RuntimeError("Cannot allocate memory"),
])
def test_is_out_of_memory_true(exc):
    assert is_out_of_memory(exc)


@pytest.mark.parametrize("exc", [
    ValueError("out of memory"),          # right words, wrong type
    RuntimeError("mat1 and mat2 shapes cannot be multiplied (2x3 and 4x5)"),
    RuntimeError("CUDA error: device-side assert triggered"),
    KeyError("memory"),
    TypeError("x"),
])
def test_is_out_of_memory_false(exc):
    assert not is_out_of_memory(exc)


def test_attempt_passes_metrics_through():
    metrics = {"x": random.random()}
    assert attempt(lambda: metrics) == ("ok", metrics, None)


def test_attempt_turns_oom_into_a_result():
    detail = f"Tried to allocate {random.randint(1, 99)} GiB"

    def fn():
        raise torch.OutOfMemoryError(f"CUDA out of memory. {detail}\nsecond line of the message")

    status, metrics, msg = attempt(fn)
    assert (status, metrics) == ("oom", {})
    assert msg.startswith("OutOfMemoryError: ") and detail in msg
    assert "\n" not in msg and "second line" not in msg


def test_attempt_catches_memory_error():
    def fn():
        raise MemoryError("host")
    assert attempt(fn)[0] == "oom"


@pytest.mark.parametrize("exc", [ValueError("bad"), RuntimeError("shape mismatch"), ZeroDivisionError()])
def test_attempt_records_other_errors(exc, capsys):
    def fn():
        raise exc
    assert attempt(fn) == ("error", {}, exception_line(exc))
    assert "Traceback" in capsys.readouterr().err          # the log keeps what the record does not


def test_failure_status_oom_against_error(capsys):
    oom = torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
                                 "79.10 GiB of which 1.00 GiB is free.\nsecond line")
    assert failure_status(oom) == ("oom", "OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 "
                                          "has a total capacity of 79.10 GiB of which 1.00 GiB is free.")
    assert capsys.readouterr().err == ""                    # an OOM is a result, not a bug: no traceback
    try:
        raise ValueError("the kernel is wrong\nat tile 3")
    except ValueError as exc:
        error = exc
    assert failure_status(error) == ("error", "ValueError: the kernel is wrong")
    err = capsys.readouterr().err
    assert "Traceback" in err and "at tile 3" in err


def test_loop_ms_is_the_mean_per_call():
    calls = []
    ms = loop_ms(lambda: (calls.append(1), time.sleep(0.01)), 5, "cpu")
    assert len(calls) == 5 and 10 * 0.95 <= ms <= 10 + 50


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU path; on CUDA it is do_bench")
def test_median_ms_on_the_cpu_calls_once_untimed_then_at_most_20_times():
    calls = []
    ms = median_ms(lambda: calls.append(1), rep_ms=1e4)
    assert len(calls) == 21 and 0 <= ms < 50


@pytest.mark.parametrize("n", [1, 2, 7, 50])
def test_summarize_matches_statistics(n):
    samples = [random.uniform(0.1, 100.0) for _ in range(n)]
    s = summarize(samples)
    assert s["n"] == n
    assert s["mean"] == pytest.approx(statistics.mean(samples), rel=1e-12)
    assert s["median"] == pytest.approx(statistics.median(samples), rel=1e-12)
    assert s["std"] == pytest.approx(statistics.stdev(samples) if n > 1 else 0.0, rel=1e-12, abs=1e-15)
    assert s["min"] == min(samples) and s["max"] == max(samples)


def test_summarize_closed_form():
    s = summarize([1.0, 2.0, 3.0, 4.0])
    assert s["mean"] == 2.5 and s["median"] == 2.5
    assert s["std"] == pytest.approx((5 / 3) ** 0.5)


def test_summarize_rejects_empty():
    with pytest.raises(ValueError):
        summarize([])


def test_phase_timer_one_sample_per_entry():
    timer = PhaseTimer("cpu")
    counts = {"forward": random.randint(1, 5), "backward": random.randint(1, 5), "optimizer": random.randint(0, 3)}
    for name, k in counts.items():
        for _ in range(k):
            with timer.phase(name):
                pass
    assert {k: len(v) for k, v in timer.samples.items()} == {k: v for k, v in counts.items() if v}
    assert all(x >= 0 for v in timer.samples.values() for x in v)


def test_phase_timer_keeps_working_after_an_exception_in_a_phase():
    timer = PhaseTimer("cpu")
    with pytest.raises(ZeroDivisionError):
        with timer.phase("bad"):
            1 / 0
    with timer.phase("good"):
        pass
    assert len(timer.samples["good"]) == 1


def test_phase_timer_measures_milliseconds():
    timer = PhaseTimer("cpu")
    durations = [0.0, 0.05, 0.2]
    for d in durations:
        with timer.phase(f"sleep{d}"):
            time.sleep(d)
    got = [timer.samples[f"sleep{d}"][0] for d in durations]
    # Sleeping d seconds takes at least d*1000 ms; allow generous slack on a busy machine.
    for d, ms in zip(durations, got):
        assert d * 1e3 * 0.95 <= ms <= d * 1e3 + 250
    assert got[0] < got[1] < got[2]


def test_oom_during_returns_the_failure_line_and_lets_other_errors_through():
    from cs336_systems.timing import exception_line, oom_during

    assert oom_during(lambda: None) is None
    message = oom_during(lambda: (_ for _ in ()).throw(MemoryError("no room\nsecond line")))
    assert message == "MemoryError: no room"
    with pytest.raises(ValueError):
        oom_during(lambda: int("not a number"))
    assert exception_line(RuntimeError("x" * 500)) == "RuntimeError: " + "x" * 300
    assert exception_line(KeyError()) == "KeyError: "
