"""A4: the toy model's dtype table and the layer-norm measurement, against PyTorch's own ops."""
import json
import math

import pytest
import torch
import torch.nn.functional as F

from cs336_systems.precision import autocast_dtypes as ad


def _independent_dtypes(device: str, dtype: torch.dtype) -> dict[str, str]:
    """The same chain of ops on fresh tensors, by the functional API, under the same autocast:
    what torch itself does, computed without the module, its hooks or its code."""
    x, w1, w2 = torch.randn(4, 7), torch.randn(10, 7), torch.randn(3, 10)
    gamma, beta = torch.ones(10, requires_grad=True), torch.zeros(10, requires_grad=True)
    with torch.autocast(device, dtype=dtype):
        h1 = F.linear(x, w1)
        h2 = F.relu(h1)
        h3 = F.layer_norm(h2, (10,), gamma, beta)
        logits = F.linear(h3, w2)
        loss = F.cross_entropy(logits, torch.randint(0, 3, (4,)))
    loss.backward()
    name = lambda t: str(t.dtype).removeprefix("torch.")
    return {"fc1 output": name(h1), "ReLU output": name(h2), "LayerNorm output": name(h3),
            "logits (fc2 output)": name(logits), "loss": name(loss), "parameter gradients": name(gamma.grad)}


@pytest.mark.parametrize("dtype_name", ["fp16", "bf16"])
def test_cpu_table_matches_torch_ops_and_autocast_docs(dtype_name):
    dtype = ad.DTYPES[dtype_name]
    table = ad.toy_dtypes("cpu", dtype, batch=int(torch.randint(2, 9, ())), in_features=int(torch.randint(3, 20, ())))
    assert list(table) == list(ad.STAGES)
    independent = _independent_dtypes("cpu", dtype)
    for stage, expected in independent.items():
        assert table[stage] == expected, stage
    # What the autocast documentation promises on every device: weights untouched, linear in the
    # autocast dtype, cross-entropy in fp32, gradients in the parameters' dtype.
    low = str(dtype).removeprefix("torch.")
    assert table["parameters (inside autocast)"] == "float32"
    assert table["fc1 output"] == low and table["logits (fc2 output)"] == low
    assert table["loss"] == "float32" and table["parameter gradients"] == "float32"


def test_toy_model_is_the_assignments():
    model = ad.ToyModel(5, 3)
    assert model.fc1.bias is None and model.fc2.bias is None
    assert (model.fc1.in_features, model.fc1.out_features, model.fc2.out_features) == (5, 10, 3)
    assert isinstance(model.ln, torch.nn.LayerNorm) and model.ln.normalized_shape == (10,)
    x = torch.randn(2, 5)
    expected = model.fc2(F.layer_norm(F.relu(x @ model.fc1.weight.T), (10,), model.ln.weight, model.ln.bias))
    torch.testing.assert_close(model(x), expected)


@pytest.mark.gpu
def test_cuda_layer_norm_runs_in_fp32_under_autocast():
    for dtype in ad.DTYPES.values():
        table = ad.toy_dtypes("cuda", dtype)
        assert table["LayerNorm output"] == "float32"
        assert table == _independent_dtypes_cuda(dtype) | {"parameters (inside autocast)": "float32"}


def _independent_dtypes_cuda(dtype):
    with torch.device("cuda"):
        return _independent_dtypes("cuda", dtype)


def test_layer_norm_variants_against_float64():
    x = 3.0 + torch.randn(64, 256, dtype=torch.float64)
    ref = F.layer_norm(x, (256,), eps=ad.LN_EPS)
    # In float64 the formulas are layer norm itself.
    torch.testing.assert_close(ad.layer_norm_two_pass(x), ref)
    torch.testing.assert_close(ad.layer_norm_one_pass(x), ref, rtol=1e-6, atol=1e-6)


def test_layer_norm_errors_show_the_cancellation():
    rows = ad.layer_norm_errors("cpu", rows=32, width=256, seed=int(torch.randint(0, 1000, ())))
    get = {(r["offset"], r["spread"], r["dtype"], r["variant"]): r for r in rows}
    one_pass = "formula, one-pass E[x²]−E[x]², in low precision"
    # x² of a value near 1000 overflows fp16 (largest 65504): the one-pass variance is not finite.
    assert math.isinf(get[(1000.0, 1.0, "fp16", one_pass)]["rel_error"])
    # bf16 does not overflow, but cancellation destroys it: error far beyond bf16's rounding (2^-8).
    assert get[(1000.0, 1.0, "bf16", one_pass)]["rel_error"] > 1.0
    for dtype in ("fp16", "bf16"):
        fp32 = get[(1000.0, 1.0, dtype, "formula, two-pass, in fp32")]["rel_error"]
        low = get[(1000.0, 1.0, dtype, "formula, two-pass, in low precision")]["rel_error"]
        assert fp32 < 1e-5 < low
        assert get[(0.0, 1.0, dtype, "F.layer_norm under autocast")]["output_dtype"] == "float32"


def test_cli_records_cuda_as_skipped_on_cpu(tmp_path):
    out = tmp_path / "dtypes.json"
    assert ad.main(["--devices", "cuda", "cpu", "--dtypes", "bf16", "--out", str(out)]) == 0
    records = json.loads(out.read_text())
    by = {(r["params"]["part"], r["params"]["device"]): r for r in records}
    if not torch.cuda.is_available():
        assert by[("dtypes", "cuda")]["status"] == "skipped" and "CUDA" in by[("dtypes", "cuda")]["reason"]
        assert by[("layernorm", "cuda")]["status"] == "skipped"
    assert by[("dtypes", "cpu")]["status"] == "ok"
    assert by[("dtypes", "cpu")]["metrics"]["stages"]["fc1 output"] == "bfloat16"
    assert by[("layernorm", "cpu")]["status"] == "ok"


def test_rejected_autocast_dtype_is_a_result(monkeypatch):
    def refuse(device, dtype):
        raise RuntimeError("autocast: this dtype is not supported here\nmore")
    monkeypatch.setattr(ad, "toy_dtypes", refuse)
    monkeypatch.setattr(ad, "layer_norm_errors", lambda device, seed=0: [])
    records = ad.measure(["cpu"], ["fp16"])
    assert records[0]["status"] == "error" and "not supported" in records[0]["message"]


def test_bad_cli_input_is_one_line(capsys):
    with pytest.raises(SystemExit) as exit_info:
        ad.main(["--devices", "tpu", "--out", "x.json"])
    assert exit_info.value.code == 2
    assert "invalid choice: 'tpu'" in capsys.readouterr().err
