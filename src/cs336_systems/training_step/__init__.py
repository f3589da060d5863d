"""E1: one AdamW training step with the notebook's techniques added one at a time, against plain PyTorch.

- ``rungs``: the ladder and its anchors as data (what each rung adds; torch-free, so the rules read it);
- ``step``: one point's model, batch and AdamW moments, shared by its rungs, and each rung's step;
- ``ladder``: ``python -m cs336_systems.training_step.ladder``, every rung of one point in one job,
  taking turns in rounds, one record per rung;
- ``profile``: one rung's kernels by kind.
"""
