"""The Gluon kernels compile for sm_90 on a CPU machine (Triton's bundled ptxas), and ptxas does
not serialise their wgmma instructions (warnings C7510-C7519, e.g. C7514/C7515: an in-flight
accumulator read or written by other instructions; C7511/C7512: too few registers for the wgmma
pipeline; each costs the whole kernel its MMA overlap). Triton 3.6 only: the GPU machines'
version, whose Gluon API these kernels are written against.

Every kernel of ``ptxas_warnings.KERNELS``, with the settings it holds (those probe.py --gluon and
the GPU tests launch), is held to this: the warp-specialised dQ (C7515 until its first dQ product
was peeled out of the loop with use_acc=False) and the two-consumer dK/dV (C7512 while its second
consumer was a worker partition) included."""
from __future__ import annotations

import flash_gluon as fg
import ptxas_warnings as pw
import pytest
import triton

pytestmark = pytest.mark.skipif(not fg.HAVE_GLUON or not triton.__version__.startswith("3.6"),
                                reason="written against Triton 3.6's Gluon")


@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("which", list(pw.KERNELS))
def test_gluon_kernels_compile_without_serialised_wgmma(which, is_causal, tmp_path):
    """Compiled in a subprocess without TRITON_INTERPRET (ptxas_warnings.write_ptx): after this
    suite's interpreter has run a kernel in the process, Gluon's code generator fails (seen with
    Triton 3.6 and an empty kernel cache)."""
    if pw.ptxas_path() is None:
        pytest.skip("this Triton has no bundled ptxas")
    ptx = tmp_path / "kernel.ptx"
    pw.write_ptx(which, is_causal, str(ptx))
    report = pw.ptxas_report(str(ptx))
    assert "wgmma" in ptx.read_text()
    assert not pw.summarise(report)["codes"], report      # any reason ptxas gives for serialising wgmma
    assert " 0 bytes spill stores" in report, report
