"""E1: one AdamW training step with the notebook's techniques added one at a time, against plain PyTorch.

- ``rungs``: the ladder and its anchors as data (what each rung adds; torch-free, so the rules read it);
- ``step``: builds the shared workload (``cs336_systems.workload``) for one rung;
- ``ladder``: ``python -m cs336_systems.training_step.ladder``, one rung at one point, one record.
"""
