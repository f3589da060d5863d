"""Checks every experiment's command line shares, so a user mistake is one argparse error line.

    args = parser.parse_args(argv)
    require_at_least(parser, args, 1, "context", "batch", "steps")
    require_at_least(parser, args, 0, "warmup")
    device = parse_device(parser, args.device)
"""
from __future__ import annotations

import argparse

import torch


def require_at_least(parser: argparse.ArgumentParser, args: argparse.Namespace, least: int, *names: str) -> None:
    """Stop with ``--name must be at least N`` (``0 or more`` for 0) for the first option below ``least``."""
    for name in names:
        if getattr(args, name) < least:
            bound = "0 or more" if least == 0 else f"at least {least}"
            parser.error(f"--{name.replace('_', '-')} must be {bound}")


def parse_device(parser: argparse.ArgumentParser, value: str) -> torch.device:
    """``value`` as a torch device; an unknown name, or CUDA on a machine without it, stops the run."""
    try:
        device = torch.device(value)
    except RuntimeError as exc:
        parser.error(f"--device: {exc}")
    if device.type == "cuda" and not torch.cuda.is_available():
        parser.error(f"--device {value}: CUDA is not available on this machine (try --device cpu)")
    return device
