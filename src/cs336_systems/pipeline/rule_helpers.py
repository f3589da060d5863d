"""Small functions the rule files call (kept out of the .smk files so they stay rules only)."""
from __future__ import annotations

import os

from cs336_systems.pipeline.sources import module_sources


def code(*modules: str, kept: bool = False) -> list:
    """The source files a rule's command runs: inputs, so editing them makes the rule stale.
    ``kept``: marked `ancient`, so outputs already on disk count as fresh whatever the code's age
    (a rebuild from records; a deliverable this machine cannot measure again)."""
    return kept_inputs(list(module_sources(*modules)), kept)


def kept_inputs(paths: list[str], kept: bool) -> list:
    """``paths`` as a rule's inputs; ``kept``: marked `ancient`, so an output already on disk stays
    fresh however new they are (a record measured from another record, when rebuilding)."""
    if not kept:
        return paths
    from snakemake.io import ancient

    return [ancient(p) for p in paths]


def records_present(paths: list[str]) -> list[str]:
    """The records among ``paths`` that the run folder holds: what a rebuild-only report reads."""
    return [p for p in paths if os.path.exists(p)]


def records_in(folder: str) -> list[str]:
    """Every JSON record ``folder`` holds, sorted: what a rebuild reads where the run measured what its
    config named then (E1's profiles: the rungs profiled), not what today's config names."""
    return sorted(os.path.join(folder, name) for name in os.listdir(folder) if name.endswith(".json")) \
        if os.path.isdir(folder) else []


def out_dir(name: str):
    """A params function: the folder of output ``name`` (or the index of an unnamed one), for commands
    that write several files there."""
    return lambda wildcards, output: os.path.dirname(output[name])


def records_on_disk(paths: list[str], rebuilding: bool) -> list[str]:
    """The records a report reads. ``rebuilding`` a committed run from its records (``reuse_records``
    with ``sections``): only those among ``paths`` that the run has, so what the config added after
    the run was measured (a DDP variant or precision) is not measured on the spot and its rows say
    "not measured in this run"; a run that has none of them measures them all."""
    if not rebuilding:
        return paths
    return records_present(paths) or paths


def report_outputs(results: str, ident: str, points=(), shown=None) -> dict:
    """A report rule's outputs, as the registry declares them: every file the report of ``ident``
    writes in ``results/<ID>/``, keyed by ``deliverables.output_name``; a ``{point}`` file is expanded
    over ``points``. ``shown`` (Snakemake's ``report``) marks tables' Markdown and figures for
    Snakemake's HTML report, filed under the deliverable."""
    from cs336_systems import deliverables

    d = deliverables.get(ident)

    def path(file: str, point=None) -> str:
        name = file.format(point=point) if point is not None else file
        where = f"{results}/{ident}/{name}"
        if shown is None or not file.endswith((".md", ".png")):
            return where
        # The label is the file's own name: Snakemake formats labels with the rule's wildcards,
        # and a report rule has none, so a "{point}" left in would fail `snakemake --report`.
        return shown(where, category=f"{ident} {d.title}", labels={"item": name})

    return {deliverables.output_name(file): [path(file, p) for p in points] if "{point}" in file else path(file)
            for file in d.files}
