"""Small functions the rule files call (kept out of the .smk files so they stay rules only)."""
from __future__ import annotations

import os

from cs336_systems.pipeline.sources import module_sources


def code(*modules: str) -> list[str]:
    """The source files a rule's command runs: inputs, so editing them makes the rule stale."""
    return list(module_sources(*modules))


def out_dir(name: str):
    """A params function: the folder of output ``name``, for commands that write several files there."""
    return lambda wildcards, output: os.path.dirname(output[name])
