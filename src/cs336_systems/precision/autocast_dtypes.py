"""A4: what autocast does to each tensor of a toy model, and how precise layer norm is in fp16 / bf16.

    python -m cs336_systems.precision.autocast_dtypes --devices cuda cpu --dtypes fp16 bf16 --out dtypes.json

(a) The toy model ``fc1 → ReLU → LayerNorm → fc2`` runs one forward and backward pass under
``torch.autocast(device, dtype)``; forward hooks read the dtype of every intermediate off the real
run (nothing is looked up in a table). (b) Layer norm computed from its formula in fp16 / bf16, and
by ``F.layer_norm`` with and without autocast, against float64 on inputs with a large mean or a
small spread, the cases where its reductions and its ``rsqrt(var + eps)`` are sensitive.

The output is a JSON list of records, one per (device, autocast dtype) for the table and one per
device for the layer-norm errors. A device that this machine does not have gives ``skipped``
records for its rows; an autocast dtype the device rejects gives an ``error`` record with torch's
message: both are results, so the process still exits 0.
"""
from __future__ import annotations

import argparse
import sys

import torch
import torch.nn.functional as F
from torch import nn

from cs336_systems.records import log, make_record, write_json_atomic
from cs336_systems.timing import attempt

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
DEVICES = ("cuda", "cpu")
# The rows of the dtype table, in the order data flows through the toy model.
STAGES = ("parameters (inside autocast)", "fc1 output", "ReLU output", "LayerNorm output", "logits (fc2 output)",
          "loss", "parameter gradients")
LN_EPS = 1e-5
# (mean offset, spread) of the layer-norm inputs: a plain case, large offsets (the mean subtraction and
# a one-pass variance cancel), and a tiny spread (the variance nears eps and fp16's smallest numbers).
LN_CASES = ((0.0, 1.0), (100.0, 1.0), (1000.0, 1.0), (0.0, 1e-3))


class ToyModel(nn.Module):
    """The assignment's toy model, exactly: Linear(in, 10, no bias) → ReLU → LayerNorm(10) → Linear(10, out, no bias)."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.fc1 = nn.Linear(in_features, 10, bias=False)
        self.relu = nn.ReLU()
        self.ln = nn.LayerNorm(10)
        self.fc2 = nn.Linear(10, out_features, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.ln(self.relu(self.fc1(x))))


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _dtypes_of(tensors) -> str:
    """One dtype name, or ``a/b`` when tensors differ (say, some parameters cast and some not)."""
    return "/".join(sorted({_name(t.dtype) for t in tensors}))


def toy_dtypes(device: str, dtype: torch.dtype, batch: int = 8, in_features: int = 16,
               out_features: int = 5) -> dict[str, str]:
    """Run the toy model once under ``torch.autocast(device, dtype)`` and report each stage's dtype."""
    model = ToyModel(in_features, out_features).to(device)
    x = torch.randn(batch, in_features, device=device)
    targets = torch.randint(0, out_features, (batch,), device=device)
    seen: dict[str, str] = {}
    hooks = [getattr(model, name).register_forward_hook(
        lambda module, inputs, output, stage=stage: seen.__setitem__(stage, _name(output.dtype)))
        for name, stage in (("fc1", "fc1 output"), ("relu", "ReLU output"), ("ln", "LayerNorm output"),
                            ("fc2", "logits (fc2 output)"))]
    try:
        with torch.autocast(device_type=torch.device(device).type, dtype=dtype):
            # Autocast casts copies for each op; the parameters themselves are untouched.
            seen["parameters (inside autocast)"] = _dtypes_of(model.parameters())
            logits = model(x)
            loss = F.cross_entropy(logits, targets)
        seen["loss"] = _name(loss.dtype)
        loss.backward()
    finally:
        for hook in hooks:
            hook.remove()
    seen["parameter gradients"] = _dtypes_of(p.grad for p in model.parameters())
    return {stage: seen[stage] for stage in STAGES}


# --- layer norm in low precision ------------------------------------------------------------

def layer_norm_two_pass(x: torch.Tensor, eps: float = LN_EPS) -> torch.Tensor:
    """Layer norm from its formula with every intermediate rounded to ``x.dtype`` (mean, x − mean,
    variance of the centred values, rsqrt); torch's reductions accumulate in fp32 inside but round their result."""
    mean = x.mean(dim=-1, keepdim=True)
    centred = x - mean
    var = (centred * centred).mean(dim=-1, keepdim=True)
    return centred * torch.rsqrt(var + eps)


def layer_norm_one_pass(x: torch.Tensor, eps: float = LN_EPS) -> torch.Tensor:
    """Var = E[x²] − E[x]², everything rounded to ``x.dtype``: the textbook cancellation for a large mean."""
    mean = x.mean(dim=-1, keepdim=True)
    var = (x * x).mean(dim=-1, keepdim=True) - mean * mean
    return (x - mean) * torch.rsqrt(var + eps)


def _relative_error(y: torch.Tensor, reference: torch.Tensor) -> float:
    """Normwise ‖y − ref‖ / ‖ref‖ in float64; a NaN or inf anywhere makes it inf."""
    y = y.double()
    if not torch.isfinite(y).all():
        return float("inf")
    return float((y - reference).norm() / reference.norm())


LN_ROWS, LN_WIDTH = 256, 1024


def layer_norm_errors(device: str, rows: int = LN_ROWS, width: int = LN_WIDTH, seed: int = 0) -> list[dict]:
    """Relative error of layer norm in fp16 / bf16 against float64, per input case and variant.

    The reference is float64 layer norm of the *already rounded* input, so the error is what the
    computation adds, not the rounding of the input. ``F.layer_norm under autocast`` takes the fp32
    input and lets autocast decide; its ``output dtype`` says what autocast ran it in.
    """
    generator = torch.Generator().manual_seed(seed)
    out = []
    for offset, spread in LN_CASES:
        x32 = (offset + spread * torch.randn(rows, width, generator=generator, dtype=torch.float64)).float().to(device)
        for dtype_name, dtype in DTYPES.items():
            low = x32.to(dtype)
            ref = F.layer_norm(low.double(), (width,), eps=LN_EPS)
            variants = {
                "formula, two-pass, in low precision": lambda: layer_norm_two_pass(low),
                "formula, one-pass E[x²]−E[x]², in low precision": lambda: layer_norm_one_pass(low),
                "F.layer_norm on a low-precision input": lambda: F.layer_norm(low, (width,), eps=LN_EPS),
                "formula, two-pass, in fp32": lambda: layer_norm_two_pass(low.float()),
            }
            for variant, fn in variants.items():
                y = fn()
                out.append({"offset": offset, "spread": spread, "dtype": dtype_name, "variant": variant,
                            "output_dtype": _name(y.dtype), "rel_error": _relative_error(y, ref)})
            with torch.autocast(device_type=torch.device(device).type, dtype=dtype):
                y = F.layer_norm(low.float(), (width,), eps=LN_EPS)
            out.append({"offset": offset, "spread": spread, "dtype": dtype_name, "variant": "F.layer_norm under autocast",
                        "output_dtype": _name(y.dtype), "rel_error": _relative_error(y, ref)})
    return out


def device_unavailable(device: str) -> str | None:
    """Why ``device`` cannot run here, or None."""
    if torch.device(device).type == "cuda" and not torch.cuda.is_available():
        return "CUDA is not available on this machine"
    return None


def measure(devices: list[str], dtypes: list[str], seed: int = 0) -> list[dict]:
    records = []
    for device in devices:
        why = device_unavailable(device)
        for dtype_name in dtypes:
            params = {"part": "dtypes", "device": device, "autocast_dtype": dtype_name}
            if why:
                records.append(make_record("A4", params, "skipped", reason=why))
                continue
            torch.manual_seed(seed)
            # an op autocast rejects is a result (an error record), not a crash
            status, table, message = attempt(lambda: toy_dtypes(device, DTYPES[dtype_name]))
            records.append(make_record("A4", params, status, {"stages": table} if table else None, reason=message))
            log(f"A4 dtypes {device} {dtype_name}: {status} {table or message}")
        params = {"part": "layernorm", "device": device, "eps": LN_EPS, "cases": [list(c) for c in LN_CASES],
                  "rows": LN_ROWS, "width": LN_WIDTH}
        if why:
            records.append(make_record("A4", params, "skipped", reason=why))
            continue
        status, rows, message = attempt(lambda: layer_norm_errors(device, seed=seed))
        records.append(make_record("A4", params, status, {"rows": rows} if rows else None, reason=message))
        log(f"A4 layer norm {device}: {status}")
    return records


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m cs336_systems.precision.autocast_dtypes",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--devices", nargs="+", choices=DEVICES, default=list(DEVICES),
                   help="devices to try; one this machine lacks is recorded as skipped")
    p.add_argument("--dtypes", nargs="+", choices=list(DTYPES), default=list(DTYPES), help="autocast dtypes")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True, help="where the JSON list of records goes")
    args = p.parse_args(argv)
    write_json_atomic(args.out, measure(args.devices, args.dtypes, args.seed))
    log(f"A4 -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
