"""Random language-modeling batches from a 1-D token array."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import torch


def get_batch(
    dataset: npt.NDArray, batch_size: int, context_length: int, device: str | torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample ``batch_size`` random windows; targets are the inputs shifted by one token."""
    n = len(dataset)
    if n < context_length + 1:
        raise ValueError(
            f"dataset has {n} tokens; need at least context_length + 1 = {context_length + 1}"
        )
    starts = np.random.randint(0, n - context_length, size=batch_size)
    # Slicing per row reads only the needed windows, which matters for np.memmap datasets.
    windows = np.stack([np.asarray(dataset[s : s + context_length + 1]) for s in starts]).astype(np.int64)
    windows = torch.from_numpy(windows)
    inputs = windows[:, :-1].contiguous().to(device)
    targets = windows[:, 1:].contiguous().to(device)
    return inputs, targets
