"""The smoke run every DAG test shares: README's main command, as written, in a copy of the tree."""
import shlex
import time

import pytest

from workflow.readme import main_command
from workflow.test_snakemake import SMOKE_LIMIT_S, make_copy, snakemake


@pytest.fixture(scope="session")
def smoke(tmp_path_factory):
    """(copy, finished process, seconds) of README's main command on this (CUDA-less) machine, which
    picks the smoke preset by itself. Tests that change the copy put it back as they found it."""
    copy = make_copy(tmp_path_factory.mktemp("repo"))
    start = time.monotonic()
    proc = snakemake(copy, *shlex.split(main_command())[1:], timeout=SMOKE_LIMIT_S)
    return copy, proc, time.monotonic() - start


@pytest.hookimpl(tryfirst=True)  # before `-m "not slow"` deselects
def pytest_collection_modifyitems(items):
    """A test that uses the smoke run is slow: the run takes minutes on two cores."""
    for item in items:
        if "smoke" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)
