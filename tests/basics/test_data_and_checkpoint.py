"""get_batch windows and checkpoint round-trips."""

import io

import numpy as np
import pytest
import torch

from cs336_basics.data import get_batch
from cs336_basics.model import TransformerLM
from cs336_basics.nn_utils import cross_entropy
from cs336_basics.optimizer import AdamW
from cs336_basics.serialization import load_checkpoint, save_checkpoint


def test_get_batch_windows():
    # Offset arange so values never equal indices by accident.
    dataset = np.arange(1000, 1100, dtype=np.int32)
    starts_seen = set()
    for _ in range(50):
        x, y = get_batch(dataset, batch_size=8, context_length=10, device="cpu")
        assert x.shape == y.shape == (8, 10)
        assert x.dtype == y.dtype == torch.long
        assert x.device.type == "cpu"
        assert torch.equal(y, x + 1)
        # Each row is a contiguous window that lies fully inside the dataset.
        assert torch.equal(x - x[:, :1], torch.arange(10).expand(8, 10))
        assert x.min() >= 1000 and y.max() <= 1099
        starts_seen.update(x[:, 0].tolist())
    assert len(starts_seen) > 20  # starts are random, not fixed


def test_get_batch_memmap_and_exact_length(tmp_path):
    path = tmp_path / "tokens.bin"
    np.arange(11, dtype=np.uint16).tofile(path)
    data = np.memmap(path, dtype=np.uint16, mode="r")
    x, y = get_batch(data, batch_size=4, context_length=10, device="cpu")  # only one valid window
    assert torch.equal(x, torch.arange(10).expand(4, 10))
    assert torch.equal(y, torch.arange(1, 11).expand(4, 10))


def test_get_batch_too_short():
    with pytest.raises(ValueError, match="context_length"):
        get_batch(np.arange(10), batch_size=2, context_length=10, device="cpu")


def _new_run():
    model = TransformerLM(40, 16, 16, 2, 2, 32, 10000.0)
    return model, AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)


def _train(model, opt, batches):
    for x, y in batches:
        opt.zero_grad()
        cross_entropy(model(x), y).backward()
        opt.step()


def _assert_states_equal(a, b):
    assert a.keys() == b.keys()
    for key in a:
        if isinstance(a[key], dict):
            _assert_states_equal(a[key], b[key])
        elif torch.is_tensor(a[key]):
            assert torch.equal(a[key], b[key]), key
        else:
            assert a[key] == b[key], key


@pytest.mark.parametrize("target", ["bytesio", "path"])
def test_checkpoint_round_trip(target, tmp_path):
    data = np.random.randint(0, 40, size=500)
    batches = [get_batch(data, 4, 12, "cpu") for _ in range(6)]
    model, opt = _new_run()
    _train(model, opt, batches[:3])

    out = io.BytesIO() if target == "bytesio" else tmp_path / "ckpt.pt"
    save_checkpoint(model, opt, 3, out)
    if target == "bytesio":
        out.seek(0)

    restored, restored_opt = _new_run()
    assert load_checkpoint(out, restored, restored_opt) == 3
    _assert_states_equal(model.state_dict(), restored.state_dict())
    _assert_states_equal(opt.state_dict(), restored_opt.state_dict())

    # Continuing from the checkpoint must reproduce uninterrupted training bit for bit.
    _train(model, opt, batches[3:])
    _train(restored, restored_opt, batches[3:])
    _assert_states_equal(model.state_dict(), restored.state_dict())
