"""The Gluon kernels compile for sm_90 on a CPU machine (Triton's bundled ptxas), and ptxas does
not serialise their wgmma instructions (warnings C7514/C7515: an in-flight accumulator read or
written by other instructions, which cost the whole kernel its MMA overlap). Triton 3.6 only: the
GPU machines' version, whose Gluon API these kernels are written against."""
from __future__ import annotations

import glob
import os
import subprocess

import pytest
import torch
import triton

from cs336_systems.attention import flash_gluon as fg

pytestmark = pytest.mark.skipif(not fg.HAVE_GLUON or not triton.__version__.startswith("3.6"),
                                reason="written against Triton 3.6's Gluon")



def compile_for_sm90(kernel, outputs: list[str], block_q: int, block_k: int, constexprs: dict, num_warps: int):
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource
    from triton.runtime.jit import mangle_type

    flat = torch.empty(1, 1024, 64, dtype=torch.bfloat16)
    signature = {name: mangle_type(fg._descriptor(flat, rows))
                 for name, rows in (("q_desc", block_q), ("do_desc", block_q), ("k_desc", block_k), ("v_desc", block_k))}
    signature.update({"L": "*fp32", "DELTA": "*fp32", **{name: "*bf16" for name in outputs}, "stride_lb": "i32",
                      "n_batch": "i32", "n_queries": "i32", "n_keys": "i32", "scale": "fp32", "qk_scale": "fp32"})
    signature.update({name: "constexpr" for name in (*constexprs, "num_warps")})
    source = GluonASTSource(kernel, signature, constexprs={**constexprs, "num_warps": num_warps})
    return triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"num_warps": num_warps})


@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("which", ["dkdv", "dq"])
def test_gluon_kernels_compile_without_serialised_wgmma(which, is_causal, tmp_path):
    if which == "dkdv":
        compiled = compile_for_sm90(fg._dkdv_kernel, ["DK", "DV"], 64, 64,
                                    {"CAUSAL": is_causal, "BLOCK_M": 64, "STAGES": 3}, 4)
    else:
        compiled = compile_for_sm90(fg._dq_kernel, ["DQ"], 128, 64, {"CAUSAL": is_causal, "BLOCK_N": 64, "STAGES": 3}, 8)
    ptxas = glob.glob(os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "ptxas"))
    if not ptxas:
        pytest.skip("this Triton has no bundled ptxas")
    ptx = tmp_path / "kernel.ptx"
    ptx.write_text(compiled.asm["ptx"])
    report = subprocess.run([ptxas[0], "-arch=sm_90a", "-v", str(ptx), "-o", os.devnull], capture_output=True,
                            text=True, check=True).stderr
    assert "wgmma" in compiled.asm["ptx"]
    assert "C7514" not in report and "C7515" not in report, report
    assert " 0 bytes spill stores" in report, report
