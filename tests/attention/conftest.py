"""Without CUDA, the Triton kernels run in Triton's interpreter on the CPU.

``TRITON_INTERPRET`` is read when a kernel is decorated, so it must be set before
``cs336_systems.attention.flash_triton`` is first imported — here, before any test module loads.
"""
import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
