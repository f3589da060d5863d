"""Load, validate and resolve the pipeline's config (``config.yaml`` plus ``--config`` overrides).

Validation uses the JSON schema in ``workflow/schemas/config.schema.yaml``; the allowed model sizes
are filled in from ``cs336_systems.models.MODEL_SIZES`` so the size table lives in one place.
A bad value stops the workflow with one line that names the key and what is allowed.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import yaml

SCHEMA_PATH = Path(__file__).resolve().parents[3] / "workflow" / "schemas" / "config.schema.yaml"
RUN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")   # a folder name, never '.', '..' or a path


class ConfigError(ValueError):
    """A user mistake in the config; its message is one line meant to be read as it is."""


def model_size_names() -> list[str]:
    # models.py imports torch; read the table's keys without importing it.
    import ast
    source = (Path(__file__).resolve().parents[1] / "models.py").read_text()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", None) == "MODEL_SIZES":
            return [key.value for key in node.value.keys]
    raise RuntimeError("MODEL_SIZES not found in models.py")


def load_schema() -> dict:
    schema = yaml.safe_load(SCHEMA_PATH.read_text())
    schema["$defs"]["size"]["enum"] = model_size_names()
    return schema


def _where(error: jsonschema.ValidationError) -> str:
    return ".".join(str(p) for p in error.absolute_path) or "(top level)"


def _explain(error: jsonschema.ValidationError) -> str:
    if error.validator == "additionalProperties":
        allowed = sorted(error.schema.get("properties", {}))
        unknown = sorted(set(error.instance) - set(allowed))
        return f"unknown key {', '.join(map(repr, unknown))} (allowed: {', '.join(allowed)})"
    if error.validator == "pattern" and error.schema.get("description"):
        return f"{error.instance!r} is not allowed ({error.schema['description']})"
    if error.validator == "enum":
        return f"{error.instance!r} is not allowed (allowed: {', '.join(map(str, error.validator_value))})"
    return error.message


def validate(config: dict[str, Any]) -> None:
    """Raise ``ConfigError`` with one line naming the first offending key."""
    validator = jsonschema.Draft202012Validator(load_schema())
    errors = sorted(validator.iter_errors(config), key=lambda e: (len(e.absolute_path), _where(e)))
    if errors:
        best = jsonschema.exceptions.best_match(errors)
        raise ConfigError(f"config error at {_where(best)}: {_explain(best)}")


def cuda_visible() -> bool:
    """Whether this machine shows a CUDA GPU, decided without importing torch."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
        return False
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return Path("/proc/driver/nvidia/gpus").is_dir() and any(Path("/proc/driver/nvidia/gpus").iterdir())
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return False
    return out.returncode == 0 and "GPU" in out.stdout


_BOOLEAN_WORDS = {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}


def _from_command_line(config: dict[str, Any]) -> dict[str, Any]:
    """Undo Snakemake's guesses for ``--config key=value`` (numbers become numbers, all else strings)."""
    config = dict(config)
    if isinstance(config.get("run"), (int, float)):                     # run=2024
        config["run"] = str(config["run"])
    flag = config.get("reuse_records")
    if isinstance(flag, (str, int)) and not isinstance(flag, bool) and str(flag).lower() in _BOOLEAN_WORDS:
        config["reuse_records"] = _BOOLEAN_WORDS[str(flag).lower()]     # reuse_records=true
    return config


@dataclass(frozen=True)
class Resolved:
    preset: str          # "full" or "smoke"
    run: str             # folder name under results/
    grid: dict           # the preset's experiment settings
    why: str             # how the preset was chosen, for the first line the user sees
    reuse_records: bool  # keep records on disk even if the code that made them changed
    sections: tuple[str, ...] | None   # the writeup sections to build; None: every one with rules

    def builds(self, ident: str, part: str = "") -> bool:
        """Whether this run builds deliverable ``ident`` whole, or, given ``part``, that part of it
        ("B2a": B2 from its part (a) alone, for a run that measured only that part)."""
        if self.sections is None:
            return True
        return ident in self.sections or bool(part) and ident + part in self.sections

    def writes(self, ident: str) -> bool:
        """Whether the writeup has a section ``ident`` in this run (whole, or some part of it)."""
        return self.builds(ident) or any(s[:-1] == ident and s[-1].isalpha() for s in self.sections)


def resolve(config: dict[str, Any]) -> Resolved:
    """Validate ``config`` and pick the preset and run folder."""
    config = _from_command_line(config)
    validate(config)
    preset = config["preset"]
    if preset == "auto":
        preset, why = ("full", "auto: CUDA is visible") if cuda_visible() else ("smoke", "auto: no CUDA GPU visible")
    else:
        why = "chosen in the config"
    run = config.get("run") or preset
    if not RUN_NAME.match(run):
        raise ConfigError(f"config error at run: {run!r} is not allowed (a folder name: letters, digits, '.', '_', '-',"
                          " starting with a letter or digit)")
    sections = config.get("sections") or "all"
    sections = None if sections == "all" else tuple(s.strip() for s in sections.split(",") if s.strip())
    return Resolved(preset, run, config["presets"][preset], why, bool(config.get("reuse_records", False)), sections)
