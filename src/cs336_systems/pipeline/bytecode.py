"""Python's compiled bytecode for the jobs, where the installed packages carry none.

Every measuring job is a fresh Python that imports torch (E1's Liger-Kernel anchor also brings in
transformers and peft). Python reads a module's bytecode from the ``__pycache__`` folder beside it
and writes it there on the first import. Where it cannot, every job compiles every module it imports
again: an image that sets ``PYTHONDONTWRITEBYTECODE`` over packages installed without bytecode, as on
the lent GPU machines, or site-packages the user may not write. There, on one H200, a process that
imported torch and the E1 ladder took 4.7-5.1 s, and 2.2 s once its bytecode was kept; with
Liger-Kernel 14-18 s against 8.5-9.4 s (lab/reference-runs/job-times/README.md). At ~90 measuring jobs in the full
preset, that is minutes of the one-GPU DAG.

So where torch's own package has no bytecode beside it, the Snakefile points the jobs at one folder
for all of it (``PYTHONPYCACHEPREFIX``): the first job that imports a module writes its bytecode
there, and the others read it. Python then neither reads nor writes ``__pycache__`` folders beside
the sources, so the installed packages stay as they are; ``PYTHONDONTWRITEBYTECODE`` is lifted for
the jobs, since that folder is the one place written. A prefix the user set is kept as it is, with
whatever else they set. Where torch has its bytecode (a pip install that could write it, the
project's Docker image), nothing changes.
"""
from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Mapping, MutableMapping

CACHE_FOLDER = os.path.join(".snakemake", "pycache")


def has_bytecode(package: str = "torch") -> bool:
    """Whether ``package`` (a top-level package: found without importing it) keeps this Python's
    bytecode beside its ``__init__.py``."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.origin or not spec.origin.endswith("__init__.py"):
        return True             # nothing to judge by (absent, or a namespace package): leave the environment alone
    cache = os.path.join(os.path.dirname(spec.origin), "__pycache__")
    tag = sys.implementation.cache_tag
    try:
        return any(name.startswith("__init__.") and tag in name for name in os.listdir(cache))
    except OSError:
        return False


def job_environment(environ: Mapping[str, str], cache_dir: str, bytecode_installed: bool) -> dict[str, str | None]:
    """The changes the jobs' environment needs (a name mapped to None is removed): none where the
    packages carry bytecode or the user chose a prefix; else the prefix, writable."""
    if bytecode_installed or environ.get("PYTHONPYCACHEPREFIX"):
        return {}
    return {"PYTHONPYCACHEPREFIX": os.path.abspath(cache_dir), "PYTHONDONTWRITEBYTECODE": None}


def apply(environ: MutableMapping[str, str], changes: dict[str, str | None]) -> None:
    """Make ``changes`` (``job_environment``'s) in ``environ``, which the jobs inherit."""
    for name, value in changes.items():
        if value is None:
            environ.pop(name, None)
        else:
            environ[name] = value
