"""The source files a module runs, so Snakemake can make them inputs of the rules that run it.

A rule that runs ``python -m cs336_systems.benchmark`` lists ``module_sources("cs336_systems.benchmark")``
as inputs: the module's file, the ``__init__`` files of its packages, and — transitively — every
module of our own packages it imports at module level or inside functions. Editing the flash
kernel then makes the flash rules stale and nothing else. Imports are read from the syntax tree,
not executed, so this costs milliseconds and needs no torch.

Paths are relative to the working directory (Snakemake's: the folder of the Snakefile). Where the
packages are is asked of Python's import system, which knows them from the install, not worked
out from this file's place in the tree.
"""
from __future__ import annotations

import ast
import importlib.util
import os
from functools import lru_cache
from pathlib import Path

OUR_PACKAGES = ("cs336_systems", "cs336_basics")


@lru_cache(maxsize=None)
def _package_root(package: str) -> Path | None:
    """The folder that holds ``package`` (for ``src/cs336_systems``: ``src``), without importing it."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))).resolve().parent


def module_file(name: str) -> Path | None:
    """Path of our module ``name`` (``a.b.c``), or None if it is not one of ours."""
    top = name.split(".")[0]
    root = _package_root(top) if top in OUR_PACKAGES else None
    if root is None:
        return None
    base = root.joinpath(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


@lru_cache(maxsize=None)      # every rule's closure walks the same files: parse each once per process
def _imported_names(path: Path, module: str) -> frozenset[str]:
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1])
                stem = f"{base}.{node.module}" if node.module else base
            else:
                stem = node.module or ""
            names.add(stem)
            names.update(f"{stem}.{alias.name}" for alias in node.names)  # `from pkg import module`
    return frozenset(names)


def _parents(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


@lru_cache(maxsize=None)
def module_sources(*modules: str) -> tuple[str, ...]:
    """Sorted paths, relative to the working directory, of every source file that ``modules`` may run."""
    seen: set[Path] = set()
    todo = list(modules)
    while todo:
        name = todo.pop()
        path = module_file(name)
        if path is None or path in seen:
            continue
        seen.add(path)
        todo.extend(_parents(name))
        todo.extend(_imported_names(path, name))
    missing = [m for m in modules if module_file(m) is None]
    if missing:
        raise ValueError(f"not a module of this project: {', '.join(missing)}")
    return tuple(sorted(os.path.relpath(p) for p in seen))
