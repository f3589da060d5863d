"""A2(a)–(c)'s prose checks on synthetic forward profiles with known answers: host-bound points,
a shorter context slower than a longer one (host or GPU), A1's independent timing, and the
top-kernel and non-matmul summaries."""
from __future__ import annotations

import random

import pytest

from cs336_systems.report import a2


def _a2(size, context, range_ms, kernels):
    """An A2 record whose forward mode ran ``kernels`` = [(name, category, ms, calls)]."""
    table = [{"name": n, "category": c, "total_ns": ms * 1e6, "instances": k} for n, c, ms, k in kernels]
    forward = {"status": "ok", "python_ms": {"forward": {"mean": range_ms * 0.999}},
               "ranges": [{"range": "forward", "instances": 2, "avg_ns": range_ms * 1e6}],
               "tables": {"forward": table}}
    return {"id": "A2", "status": "ok", "params": {"size": size, "context": context, "batch": 4},
            "metrics": {"modes": {"forward": forward}}}


def _a1(size, context, mean, std):
    return {"id": "A1", "status": "ok", "params": {"size": size, "context": context, "batch": 4, "mode": "forward",
                                                   "precision": "fp32", "compile": False, "attention": "naive"},
            "metrics": {"forward": {"mean": mean, "std": std}}}


GEMM = "sm90_xmma_gemm_f32f32_tn_n_kernel"


def test_a_host_bound_shorter_context_is_explained_by_the_host_only_when_its_kernels_are_fewer(seed):
    rng = random.Random(seed)
    busy_ms = rng.uniform(20, 30)
    records = [_a2("medium", 128, 75.0, [(GEMM, "GEMM", 10.0, 48), ("mul", "elementwise", 4.0, 100)]),
               _a2("medium", 256, 41.0, [(GEMM, "GEMM", busy_ms, 48), ("mul", "elementwise", 5.0, 100)])]
    found = a2.a_findings(a2.table_a(records))
    assert [h["point"] for h in found["host_bound"]] == ["medium ctx 128"]
    (slower,) = found["slower_shorter"]
    assert (slower["short"], slower["long"], slower["kernels_grow"]) == (128, 256, True)
    # the GPU's own work shrinking with context as well: not the host's doing
    records[0] = _a2("medium", 128, 75.0, [(GEMM, "GEMM", 70.0, 48)])
    (slower,) = a2.a_findings(a2.table_a(records))["slower_shorter"]
    assert slower["kernels_grow"] is False


@pytest.mark.parametrize("a1_mean, outside", [(40.5, []), (30.0, ["medium ctx 256"])])
def test_the_nvtx_forward_is_compared_with_a1_within_its_spread(a1_mean, outside):
    records = [_a2("medium", 256, 41.0, [(GEMM, "GEMM", 38.0, 48)])]
    a1 = [_a1("medium", 256, a1_mean, 0.5), _a1("large", 256, 10.0, 0.1)]
    table = a2.table_a(records, a1)
    assert table.loc[0, "a1_forward_ms"] == a1_mean
    found = a2.a_findings(table)
    assert found["a1_compared"] == 1 and found["a1_outside_spread"] == outside


def test_top_kernel_and_non_matmul_summaries():
    mul4 = "void at::native::elementwise_kernel<128, 4, at::native::MulFunctor<float>>(int, T1)"
    mul2 = "void at::native::elementwise_kernel<128, 2, at::native::MulFunctor<float>>(int, T1)"
    # each Mul variant is 0.7 % of the forward, below the 1 % threshold; together they are above it
    records = [_a2("small", c, 20.0, [(GEMM, "GEMM", 10.0, 73), (mul4, "elementwise", 0.075, 50),
                                      (mul2, "elementwise", 0.075, 5),
                                      ("gather", "other", 0.5 if c == 128 else 0.01, 48)])
               for c in (128, 256)]
    table_b = a2.table_b(records)
    b = a2.b_findings(table_b)
    assert b["categories"] == ["GEMM"] and b["calls"] == [73, 73] and b["compared"] == 0
    c = a2.c_findings(records)
    assert c["points"] == 2
    shares = {k["kernel"]: (k["points"], k["median_share"]) for k in c["kernels"]}
    assert shares["at::native::elementwise_kernel[MulFunctor]"][0] == 2   # the variants together, once per point
    assert shares[a2.short_name("gather")][0] == 1
