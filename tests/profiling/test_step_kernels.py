"""step_kernels: what a step launches, by kind; the busy time is the union of kernel intervals."""
import json

import pytest

from cs336_systems.profiling import step_kernels
from cs336_systems.profiling.step_kernels import Work, busy_us, kind, per_step_tables


def test_busy_time_counts_overlapping_kernels_once():
    works = [Work("a", 0, 10, 10, ()), Work("b", 5, 12, 7, ()), Work("c", 20, 25, 5, ()), Work("d", 21, 22, 1, ())]
    assert busy_us(works) == 17            # [0, 12] and [20, 25]
    assert busy_us([]) == 0


def test_a_kernel_is_a_cast_by_the_op_that_launched_it():
    copy = "void at::native::vectorized_elementwise_kernel<4, direct_copy_kernel_cuda>"
    assert kind(Work(copy, 0, 1, 1, ("aten::copy_", "aten::_to_copy", "aten::to"))) == "cast"
    assert kind(Work(copy, 0, 1, 1, ("aten::copy_", "aten::clone", "aten::contiguous"))) == "elementwise"
    assert kind(Work("sm90_xmma_gemm_bf16bf16_bf16f32", 0, 1, 1, ("aten::mm",))) == "GEMM"
    assert kind(Work("aten::_to_copy", 0, 1, 1, ("aten::to",))) == "cast"           # the CPU operator itself


def test_per_step_tables_average_over_the_step_windows():
    works = [Work("gemm", s + 1, s + 4, 3, ("aten::mm",)) for s in (0, 100)]
    works += [Work("copy", s + 5, s + 6, 1, ("aten::copy_", "aten::_to_copy")) for s in (0, 100, 100)]
    works += [Work("outside", 50, 60, 10, ())]
    t = per_step_tables(works, [(0, 10), (100, 110)], on_gpu=True)
    assert t["count_per_step"] == [2, 3]
    assert t["kinds"]["cast"] == {"count": 1.5, "ms": 1.5e-3} and t["kinds"]["GEMM"]["count"] == 1.0
    assert t["busy_ms_per_step"] == [4e-3, 4e-3]          # the two copies at 105 overlap
    assert t["unattributed_per_step"] == 0.0
    with pytest.raises(RuntimeError, match="no 'profiled step' range"):
        per_step_tables(works, [], on_gpu=True)


@pytest.fixture(scope="module")
def cpu_records(tmp_path_factory):
    folder = tmp_path_factory.mktemp("k")          # one job: both precisions in turns, one record each
    assert step_kernels.main(["--size", "tiny", "--context", "8", "--batch", "2", "--warmup", "1", "--rounds", "3",
                              "--steps", "1", "--device", "cpu", "--out-dir", str(folder)]) == 0
    return {p: json.loads((folder / f"kernels_tiny_ctx8_forward-backward_{p}.json").read_text()) for p in ("fp32", "bf16")}


def test_cpu_run_counts_autocast_casts(cpu_records):
    fp32, bf16 = (cpu_records[p]["metrics"] for p in ("fp32", "bf16"))
    assert cpu_records["bf16"]["status"] == "ok" and fp32["unit"] == "CPU operators (self time)"
    for m in (fp32, bf16):
        assert len(set(m["count_per_step"])) == 1          # the same step every time
        assert m["steps"] == 3 and m["busy_share"] is None and m["step"]["n"] == 3     # rounds x steps
        assert len(m["rounds"]) == 3 and m["turns"]["with"] == ["fp32", "bf16"]
        assert sum(k["count"] for k in m["kinds"].values()) == pytest.approx(m["count_per_step"][0])
    # autocast casts every weight a matmul uses, and backward casts the gradients back
    assert bf16["kinds"]["cast"]["count"] > fp32["kinds"]["cast"]["count"] + 20
    assert cpu_records["bf16"]["params"]["precision"] == "bf16"
    from cs336_systems.report.spread import judge
    paired = judge(cpu_records["bf16"], cpu_records["fp32"])
    assert paired.paired and paired.rounds == 3
    from cs336_systems.report import a4
    assert a4.kernel_summary(list(cpu_records.values()))["compare"]["step_judged"] == "paired"


def test_bad_input_is_one_line(capsys, tmp_path):
    with pytest.raises(SystemExit):
        step_kernels.main(["--size", "tiny", "--context", "0", "--out", str(tmp_path / "x.json")])
    err = capsys.readouterr().err
    assert "--context" in err and "Traceback" not in err


def test_the_launch_links_come_from_kineto_where_the_events_lack_them(seed):
    """torch 2.11 (the GPU machines') FunctionEvents have no ``linked_correlation_id``; the link is
    then read from Kineto's own events and must agree with what newer torch puts on the event."""
    import torch

    from cs336_systems.profiling.step_kernels import linked_ids

    torch.manual_seed(seed)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        (torch.randn(32, 32) @ torch.randn(32, 32)).to(torch.bfloat16).sum()
    linked = linked_ids(prof)

    class Old:      # the same event as torch 2.11 builds it
        def __init__(self, e):
            self.id, self.name, self.device_type = e.id, e.name, e.device_type

    events = list(prof.events())
    assert events and all(linked(Old(e)) == e.linked_correlation_id for e in events)


def test_a_range_is_not_work(seed):
    """The optimizer's own range (``Optimizer.step#AdamW.step``, a user annotation that on the GPU
    spans its kernels) is not counted as work beside the operators inside it."""
    import torch

    torch.manual_seed(seed)
    model = torch.nn.Linear(16, 16)
    optimizer = torch.optim.AdamW(model.parameters())

    def step():
        model(torch.randn(4, 16)).square().sum().backward()
        optimizer.step()

    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profiler:
        with torch.profiler.record_function(step_kernels.STEP_RANGE):
            step()
    annotated = [e.name for e in profiler.events() if e.is_user_annotation]
    assert any(name.startswith("Optimizer.step#") for name in annotated), annotated
    works, windows = step_kernels.profiler_works(profiler, on_gpu=False)
    assert len(windows) == 1 and works
    assert not {w.name for w in works} & set(annotated)
    assert any(w.name.startswith("aten::") and kind(w) != "other" for w in works)
