"""Without CUDA, the Triton kernels run in Triton's interpreter on the CPU.

``TRITON_INTERPRET`` must be set before Triton is first imported anywhere in the process (seen with
Triton 3.9: a kernel launched after an earlier import fails with "Cannot call
@triton.jit'd outside of the scope of a kernel"). Any test module may import Triton indirectly
(building a model imports torch's compiler stack), so this lives in the root conftest, which
pytest loads before it imports a single test module.
"""
import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
