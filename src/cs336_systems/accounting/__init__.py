"""Closed-form accounting: parameters, memory, FLOPs and communication, no hardware needed.

- ``hardware``: accelerator and cluster constants, each with its source;
- ``transformer``: parameter counts, memory by kind and dtype, FLOPs (XXL and the project's LM);
- ``parallelism``: ring-collective volumes and per-step traffic of DP, FSDP, TP, FSDP+TP;
- ``c9``: DELIVERABLES C9 (a)–(d) for the XXL model;
- ``scaling``: how many H100s each strategy scales to before a step is communication-bound.

``python -m cs336_systems.accounting.study`` turns these into the C9 record, and
``python -m cs336_systems.report.c9`` the record into tables, a figure and the summary.
"""
from cs336_systems.accounting.hardware import H100_SXM, H200_SXM, TPU_V5P, Accelerator, Cluster
from cs336_systems.accounting.transformer import XXL, MLPStack

__all__ = ["Accelerator", "Cluster", "H100_SXM", "H200_SXM", "TPU_V5P", "XXL", "MLPStack"]
