"""The Gluon kernels compile for sm_90 on a CPU machine (Triton's bundled ptxas), and ptxas does
not serialise their wgmma instructions (warnings C7510-C7519, e.g. C7514/C7515: an in-flight
accumulator read or written by other instructions; C7511/C7512: too few registers for the wgmma
pipeline; each costs the whole kernel its MMA overlap). Triton 3.6 only: the GPU machines'
version, whose Gluon API these kernels are written against."""
from __future__ import annotations

import glob
import os
import re
import subprocess
import sys

import flash_gluon as fg
import pytest
import torch
import triton

pytestmark = pytest.mark.skipif(not fg.HAVE_GLUON or not triton.__version__.startswith("3.6"),
                                reason="written against Triton 3.6's Gluon")


def compile_for_sm90(kernel, outputs: list[str], block_q: int, block_k: int, constexprs: dict, num_warps: int,
                     maxnreg: int | None = None):
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
    return triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"num_warps": num_warps, "maxnreg": maxnreg})


def compiled_ptx(which: str, is_causal: bool) -> str:
    """The PTX of one Gluon kernel compiled for sm_90 with the settings this test holds to."""
    if which == "dkdv":
        compiled = compile_for_sm90(fg._dkdv_kernel, ["DK", "DV"], 64, 64,
                                    {"CAUSAL": is_causal, "BLOCK_M": 64, "STAGES": 3}, 4)
    elif which == "dq":
        compiled = compile_for_sm90(fg._dq_kernel, ["DQ"], 128, 64, {"CAUSAL": is_causal, "BLOCK_N": 64, "STAGES": 3}, 8)
    else:   # the warp-specialised dK/dV with one consumer warpgroup, as probe --gluon runs it
        compiled = compile_for_sm90(fg._dkdv_ws_kernel, ["DK", "DV"], 64, 64,
                                    {"CAUSAL": is_causal, "STAGES": 4, "CONSUMERS": 1}, 4, maxnreg=128)
    return compiled.asm["ptx"]


@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("which", ["dkdv", "dq", "dkdv_ws"])
def test_gluon_kernels_compile_without_serialised_wgmma(which, is_causal, tmp_path):
    """In a subprocess without TRITON_INTERPRET: after this suite's interpreter has run a kernel in
    the process, Gluon's code generator fails (seen with Triton 3.6 and an empty kernel cache)."""
    ptxas = glob.glob(os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "ptxas"))
    if not ptxas:
        pytest.skip("this Triton has no bundled ptxas")
    ptx = tmp_path / "kernel.ptx"
    # This folder for the test module, the lab's for flash_gluon (conftest.py puts it there in this process).
    here = os.path.dirname(os.path.abspath(__file__))
    code = ("import sys; sys.path[:0] = sys.argv[1:3]; import test_flash_gluon_compile as t; "
            "open(sys.argv[3], 'w').write(t.compiled_ptx(sys.argv[4], sys.argv[5] == 'True'))")
    env = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"}
    run = subprocess.run([sys.executable, "-c", code, here, os.path.dirname(here), str(ptx), which, str(is_causal)],
                         env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-3000:]
    report = subprocess.run([ptxas[0], "-arch=sm_90a", "-v", str(ptx), "-o", os.devnull], capture_output=True,
                            text=True, check=True).stderr
    assert "wgmma" in ptx.read_text()
    assert not re.search(r"C751[0-9]", report), report     # any reason ptxas gives for serialising wgmma
    assert " 0 bytes spill stores" in report, report
