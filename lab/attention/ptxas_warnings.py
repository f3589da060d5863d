"""Compile each Gluon backward kernel of ``flash_gluon.py`` for sm_90 on this machine (no GPU
needed: Triton 3.6 and its bundled ptxas) and print, per kernel and causal flag, the ptxas
warnings that serialise wgmma (C7510-C7519) with the register and spill counts.

    python lab/attention/ptxas_warnings.py                 # every kernel, causal and not
    python lab/attention/ptxas_warnings.py dq_ws dkdv_ws2  # some of them
    python lab/attention/ptxas_warnings.py --json          # one JSON object instead of text
    python lab/attention/ptxas_warnings.py --keep DIR      # also keep each kernel's .ptx in DIR

Each compile runs in its own subprocess: in a process where the Triton interpreter has run,
Gluon's code generator fails (seen with Triton 3.6). The settings (``KERNELS``) are the ones
``probe.py --gluon`` and the GPU tests launch. Why a warning matters: one C751x makes ptxas
insert a wait after every wgmma of the whole kernel, so none overlaps anything.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))

# name: (kernel attribute, output pointers, rows of the Q/dO block, rows of the K/V block,
#        constexprs other than CAUSAL, num_warps, maxnreg)
KERNELS = {
    "dkdv": ("_dkdv_kernel", ["DK", "DV"], 64, 64, {"BLOCK_M": 64, "STAGES": 3}, 4, None),
    "dq": ("_dq_kernel", ["DQ"], 128, 64, {"BLOCK_N": 64, "STAGES": 3}, 8, None),
    "dkdv_ws": ("_dkdv_ws_kernel", ["DK", "DV"], 64, 64, {"STAGES": 4, "CONSUMERS": 1}, 4, 128),
    "dkdv_ws2": ("_dkdv_ws_kernel", ["DK", "DV"], 64, 128, {"STAGES": 3, "CONSUMERS": 2}, 8, 160),
    "dq_ws": ("_dq_ws_kernel", ["DQ"], 64, 64, {"STAGES": 4}, 4, 128),
}


def compile_for_sm90(kernel, outputs: list[str], block_q: int, block_k: int, constexprs: dict, num_warps: int,
                     maxnreg: int | None = None):
    """Triton's compiled kernel of one Gluon kernel for sm_90, built without a GPU."""
    import torch
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource
    from triton.runtime.jit import mangle_type

    import flash_gluon as fg

    flat = torch.empty(1, 1024, 64, dtype=torch.bfloat16)
    signature = {name: mangle_type(fg._descriptor(flat, rows))
                 for name, rows in (("q_desc", block_q), ("do_desc", block_q), ("k_desc", block_k), ("v_desc", block_k))}
    signature.update({"L": "*fp32", "DELTA": "*fp32", **{name: "*bf16" for name in outputs}, "stride_lb": "i32",
                      "n_batch": "i32", "n_queries": "i32", "n_keys": "i32", "scale": "fp32", "qk_scale": "fp32"})
    signature.update({name: "constexpr" for name in (*constexprs, "num_warps")})
    source = GluonASTSource(kernel, signature, constexprs={**constexprs, "num_warps": num_warps})
    return triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"num_warps": num_warps, "maxnreg": maxnreg})


def compiled_ptx(name: str, is_causal: bool) -> str:
    """The PTX of kernel ``name`` (a key of KERNELS) for sm_90."""
    import flash_gluon as fg

    attr, outputs, block_q, block_k, constexprs, num_warps, maxnreg = KERNELS[name]
    compiled = compile_for_sm90(getattr(fg, attr), outputs, block_q, block_k, {"CAUSAL": is_causal, **constexprs},
                                num_warps, maxnreg)
    return compiled.asm["ptx"]


def ptxas_path() -> str | None:
    import triton
    found = glob.glob(os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "ptxas"))
    return found[0] if found else None


def write_ptx(name: str, is_causal: bool, path: str) -> None:
    """Compile in a fresh interpreter (see the module docstring) and write the PTX to ``path``."""
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import ptxas_warnings as w; "
            "open(sys.argv[2], 'w').write(w.compiled_ptx(sys.argv[3], sys.argv[4] == 'True'))")
    env = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"}
    run = subprocess.run([sys.executable, "-c", code, HERE, path, name, str(is_causal)], env=env,
                         capture_output=True, text=True)
    if run.returncode != 0:
        raise RuntimeError(f"{name} (causal={is_causal}) did not compile:\n{run.stderr[-3000:]}")


def ptxas_report(ptx_path: str) -> str:
    """ptxas -v's output (warnings and resource usage) for the PTX file."""
    return subprocess.run([ptxas_path(), "-arch=sm_90a", "-v", ptx_path, "-o", os.devnull], capture_output=True,
                          text=True, check=True).stderr


def summarise(report: str) -> dict:
    """The serialising warnings (code and text, deduplicated), registers and spills per function."""
    warnings = sorted({m.group(0).strip() for m in re.finditer(r"ptxas \w+ *: \(C751[0-9]\).*", report)})
    codes = sorted({m.group(0) for m in re.finditer(r"C751[0-9]", report)})
    registers = [int(r) for r in re.findall(r"Used (\d+) registers", report)]
    spills = [int(s) for s in re.findall(r"(\d+) bytes spill stores", report)]
    return {"codes": codes, "warnings": warnings, "registers": registers, "spill_stores": spills}


def check(name: str, is_causal: bool, keep: str | None = None) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(keep or tmp, f"{name}_{'causal' if is_causal else 'full'}.ptx")
        write_ptx(name, is_causal, path)
        return summarise(ptxas_report(path))


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("kernels", nargs="*", metavar="KERNEL", help=f"any of {', '.join(KERNELS)} (default: all)")
    p.add_argument("--json", action="store_true")
    p.add_argument("--keep", help="a folder to keep each kernel's PTX in")
    args = p.parse_args(argv)
    unknown = [name for name in args.kernels if name not in KERNELS]
    if unknown:
        p.error(f"unknown kernel(s) {unknown}: choose from {', '.join(KERNELS)}")
    if ptxas_path() is None:
        sys.exit("this Triton has no bundled ptxas")
    if args.keep:
        os.makedirs(args.keep, exist_ok=True)
    results = {}
    for name in args.kernels or KERNELS:
        for is_causal in (False, True):
            key = f"{name}{' causal' if is_causal else ''}"
            results[key] = check(name, is_causal, args.keep)
            if not args.json:
                r = results[key]
                print(f"{key:16s} {' '.join(r['codes']) or 'clean':24s} registers {r['registers']} "
                      f"spill stores {r['spill_stores']}", flush=True)
                for w in r["warnings"]:
                    print(f"    {w}", flush=True)
    if args.json:
        print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
