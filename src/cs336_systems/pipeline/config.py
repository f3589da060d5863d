"""Validate and resolve the pipeline's config (``config.yaml`` plus ``--config`` overrides).

Two steps, both stopping with one line that names the key and what is allowed:
- the shape, by Snakemake's own ``validate`` with the JSON schema the Snakefile hands over
  (``workflow/schemas/config.schema.yaml``; its defaults fill absent keys), to which the registry
  adds the blocks every preset holds (``deliverables.config_blocks``);
- the names, against the tables that define them: model sizes and modes (``models``), attention
  back ends and B5 implementations (``attention.backends``), data-parallel variants
  (``distributed.variants``) and writeup sections (``deliverables``). The schema says only "a
  string" for these, so each list lives in one place.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import jsonschema
import yaml

from cs336_systems import deliverables
from cs336_systems.attention.backends import BACKENDS, BENCH_IMPLS
from cs336_systems.distributed import variants as ddp_variants
from cs336_systems.models import MODEL_SIZES, MODES
from cs336_systems.training_step import rungs as e1_rungs

RUN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")   # a folder name, never '.', '..' or a path
SECTION = re.compile(r"^([A-Z][0-9]{1,2})([a-z]?)$")     # an ID, or an ID with a part letter (B2a)


class ConfigError(ValueError):
    """A user mistake in the config; its message is one line meant to be read as it is."""


def _where(error: jsonschema.ValidationError) -> str:
    return ".".join(str(p) for p in error.absolute_path) or "(top level)"


def _explain(error: jsonschema.ValidationError) -> str:
    if error.validator == "additionalProperties":
        allowed = sorted(error.schema.get("properties", {}))
        unknown = sorted(set(error.instance) - set(allowed))
        return f"unknown key {', '.join(map(repr, unknown))} (allowed: {', '.join(allowed)})"
    if error.validator == "pattern" and error.schema.get("description"):
        return f"{error.instance!r} is not allowed ({error.schema['description']})"
    if error.validator in ("oneOf", "anyOf") and error.schema.get("description"):
        # "not valid under any of the given schemas" names no schema; the key's description says what fits
        return f"{error.instance!r} is not allowed (expected {' '.join(error.schema['description'].split())})"
    if error.validator == "enum":
        return f"{error.instance!r} is not allowed (allowed: {', '.join(map(str, error.validator_value))})"
    return error.message


def with_registry_blocks(schema: str | os.PathLike) -> dict[str, Any]:
    """The schema in the file ``schema`` with each deliverable's block (the registry's) required in
    every preset. A block the file does not define is allowed as a mapping: its rules read its keys."""
    loaded = yaml.safe_load(Path(schema).read_text())
    preset = loaded["$defs"]["preset"]
    required = preset.setdefault("required", [])
    for block in deliverables.config_blocks():
        if block not in required:
            required.append(block)
        preset["properties"].setdefault(block, {"type": "object", "description": f"settings of {block}'s rules"})
    return loaded


def validate(config: dict[str, Any], schema: str | os.PathLike) -> None:
    """Snakemake's ``validate`` of ``config`` (filled with the schema's defaults, in place) against
    ``schema`` with the registry's blocks; ``ConfigError`` with one line naming the offending key."""
    from snakemake.exceptions import WorkflowError
    from snakemake.utils import validate as snakemake_validate

    try:
        # Snakemake's validate reads a schema from a file only.
        with tempfile.TemporaryDirectory() as folder:
            complete = Path(folder) / "config.schema.json"
            complete.write_text(json.dumps(with_registry_blocks(schema)))
            snakemake_validate(config, str(complete), set_default=True)
    except WorkflowError as error:
        cause = error.__context__
        if not isinstance(cause, jsonschema.ValidationError):
            raise ConfigError(f"config error: {str(error).splitlines()[0]}") from None
        raise ConfigError(f"config error at {_where(cause)}: {_explain(cause)}") from None


# Keys whose values are names from one of our tables: a key alone holds its kind of name in any
# block; (block, key) only in that block (B1's own `variants` are eager and compiled).
_VARIANT = ("a data-parallel variant", ddp_variants.names(), ddp_variants.is_name)
_NAMED = {    # kind -> (what it is, the names to list, whether a value is one)
    "size": ("a model size", list(MODEL_SIZES), MODEL_SIZES.__contains__),
    "sizes": ("a model size", list(MODEL_SIZES), MODEL_SIZES.__contains__),
    "mode": ("a mode", list(MODES), MODES.__contains__),
    "modes": ("a mode", list(MODES), MODES.__contains__),
    "attention": ("an attention back end", list(BACKENDS), BACKENDS.__contains__),
    ("B5", "impls"): ("a B5 implementation", list(BENCH_IMPLS), BENCH_IMPLS.__contains__),
    ("DDP", "variants"): _VARIANT,
    ("DDP", "traced"): _VARIANT,
    ("E1", "rungs"): ("a rung of the E1 ladder", list(e1_rungs.RUNG_NAMES), e1_rungs.RUNG_NAMES.__contains__),
    ("E1", "rungs_elsewhere"): ("a rung of the E1 ladder", list(e1_rungs.RUNG_NAMES), e1_rungs.RUNG_NAMES.__contains__),
    ("E1", "anchors"): ("an E1 anchor", list(e1_rungs.ANCHOR_NAMES), e1_rungs.ANCHOR_NAMES.__contains__),
    ("E1", "profiled"): ("an E1 rung or anchor", list(e1_rungs.BY_NAME), e1_rungs.BY_NAME.__contains__),
}


def _named_values(node: Any, path: tuple) -> Iterator[tuple[tuple, Any, str]]:
    """(path, table key, value) of every string under a key of ``_NAMED``, lists item by item."""
    if not isinstance(node, dict):
        return
    for key, value in node.items():
        kind = (path[-1], key) if (path[-1], key) in _NAMED else key if key in _NAMED else None
        if kind is not None and isinstance(value, str):
            yield (*path, key), kind, value
        elif kind is not None and isinstance(value, list):
            yield from (((*path, key, i), kind, item) for i, item in enumerate(value) if isinstance(item, str))
        else:
            yield from _named_values(value, (*path, key))


def check_names(config: dict[str, Any]) -> None:
    """``ConfigError`` for the first name that none of our tables knows, or a traced variant not run."""
    for path, kind, value in _named_values(config.get("presets", {}), ("presets",)):
        what, allowed, known = _NAMED[kind]
        if not known(value):
            raise ConfigError(f"config error at {'.'.join(map(str, path))}: {value!r} is not allowed "
                              f"(not {what}; allowed: {', '.join(allowed)})")
    for name, preset in config.get("presets", {}).items():
        ddp = preset.get("DDP", {})
        untraceable = [v for v in ddp.get("traced", []) if v not in ddp.get("variants", [])]
        if untraceable:
            raise ConfigError(f"config error at presets.{name}.DDP.traced: {', '.join(map(repr, untraceable))} "
                              "not in DDP.variants (only variants that run leave a trace)")
        batch = ddp.get("global_batch")
        unbatched = [p for p in ddp.get("precisions", ["fp32"]) if isinstance(batch, dict) and p not in batch]
        if unbatched:
            raise ConfigError(f"config error at presets.{name}.DDP.global_batch: no batch for "
                              f"{', '.join(map(repr, unbatched))} (give one number, or one for each of DDP.precisions)")
        e1 = preset.get("E1", {})
        needs = e1_rungs.previous(e1_rungs.ONLY_WHEN_PREVIOUS_OOMS)
        listed = e1.get("rungs", [])
        if e1_rungs.ONLY_WHEN_PREVIOUS_OOMS in listed and needs not in listed[:listed.index(e1_rungs.ONLY_WHEN_PREVIOUS_OOMS)]:
            raise ConfigError(f"config error at presets.{name}.E1.rungs: {e1_rungs.ONLY_WHEN_PREVIOUS_OOMS!r} needs "
                              f"{needs!r} before it (it runs only where that rung runs out of memory in the job's warm-up)")
        elsewhere = e1.get("rungs_elsewhere", [])
        stray = [r for r in elsewhere if r not in listed]
        if stray:
            raise ConfigError(f"config error at presets.{name}.E1.rungs_elsewhere: {', '.join(map(repr, stray))} "
                              "not in E1.rungs (the points away from the goal measure some of the ladder's rungs)")
        if e1_rungs.ONLY_WHEN_PREVIOUS_OOMS in elsewhere and needs not in elsewhere:
            raise ConfigError(f"config error at presets.{name}.E1.rungs_elsewhere: {e1_rungs.ONLY_WHEN_PREVIOUS_OOMS!r} "
                              f"runs only where {needs!r} runs out of memory in the same job; name both")


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


def _sections(value: str | None) -> tuple[str, ...] | None:
    if not value or value == "all":
        return None
    chosen = tuple(s.strip() for s in value.split(",") if s.strip())
    unknown = [s for s in chosen if SECTION.match(s) is None or SECTION.match(s).group(1) not in deliverables.IDS]
    if unknown:
        raise ConfigError(f"config error at sections: {', '.join(map(repr, unknown))} is not allowed "
                          f"(deliverable IDs: {', '.join(deliverables.IDS)}, or an ID with its part letter, B2a)")
    return chosen


def resolve(config: dict[str, Any], schema: str | os.PathLike) -> Resolved:
    """Validate ``config`` against ``schema`` and our tables; pick the preset and run folder."""
    config = _from_command_line(config)
    validate(config, schema)
    check_names(config)
    preset = config["preset"]
    if preset == "auto":
        preset, why = ("full", "auto: CUDA is visible") if cuda_visible() else ("smoke", "auto: no CUDA GPU visible")
    else:
        why = "chosen in the config"
    run = config.get("run") or preset
    if not RUN_NAME.match(run):
        raise ConfigError(f"config error at run: {run!r} is not allowed (a folder name: letters, digits, '.', '_', '-',"
                          " starting with a letter or digit)")
    return Resolved(preset, run, config["presets"][preset], why, bool(config.get("reuse_records", False)),
                    _sections(config.get("sections")))
