"""Profiling: NVTX ranges and Nsight Systems / torch.profiler tables (A2), FLOP counts and MFU
(``flops``, ``mfu``; A1), how busy a profiled GPU was (``busy``), and one step's kernels by kind in
fp32 and bf16 (``step_kernels``; A4(c))."""
