"""Profiling: NVTX ranges for Nsight Systems."""
