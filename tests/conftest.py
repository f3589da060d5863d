"""The suite's shared set-up: Triton's interpreter without CUDA, the ``gpu`` marker, per-test seeds.

``TRITON_INTERPRET`` must be set before Triton is first imported anywhere in the process (seen with
Triton 3.9: a kernel launched after an earlier import fails with "Cannot call
@triton.jit'd outside of the scope of a kernel"). Any test module may import Triton indirectly
(building a model imports torch's compiler stack), so this lives in the root conftest, which
pytest loads before it imports a single test module.

``@pytest.mark.gpu`` (or ``gpu(n)`` for n devices) is the one switch for CUDA tests: the hook below
skips them where fewer devices are visible; a test needs no ``skipif`` of its own.

``smoke`` is README's main command run once for the whole session (the smoke preset, in a copy of
the tree); a test that takes it is marked ``slow``.

Every test starts with ``random``, NumPy and torch seeded from its own node id (mixed with
``--seed``, 0 unless given), before its fixtures are set up: its inputs are still arbitrary values,
but the same ones on every run, so a failure reproduces. A failing test's report names its seed. A
test that wants a generator of its own takes the ``seed`` fixture (``random.Random(seed)``,
``torch.Generator().manual_seed(seed)``). Another ``--seed`` draws other inputs everywhere.
"""
import os
import random
import zlib

import numpy as np
import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

_SEED = pytest.StashKey[int]()


def pytest_addoption(parser):
    parser.addoption("--seed", type=int, default=0, metavar="N",
                     help="mixed into every test's random seed (default 0); another N draws other inputs")


def seed_of(nodeid: str, base: int) -> int:
    """A 32-bit seed (NumPy's limit) that depends only on the test's id and ``--seed``."""
    return zlib.crc32(nodeid.encode(), base % 2**32)


@pytest.hookimpl(tryfirst=True)  # before `-m "not slow"` deselects
def pytest_collection_modifyitems(config, items):
    visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
    for item in items:
        if "smoke" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)      # the smoke run takes minutes on two cores
        marker = item.get_closest_marker("gpu")
        needed = marker.args[0] if marker and marker.args else 1
        if marker and visible < needed:
            need = "CUDA" if needed == 1 else f"{needed} CUDA devices"
            item.add_marker(pytest.mark.skip(reason=f"needs {need}, {visible} visible"))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    seed = item.stash[_SEED] = seed_of(item.nodeid, item.config.getoption("seed"))
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.failed and _SEED in item.stash:
        base = item.config.getoption("seed")
        report.sections.append(("random seed", f"{item.stash[_SEED]} (from the test's id and --seed={base}); "
                                               f"`pytest '{item.nodeid}' --seed={base}` draws the same inputs"))
    return report


@pytest.fixture(scope="session")
def smoke(tmp_path_factory):
    """(copy, finished process, seconds) of README's main command in a copy of the tree, on this
    (CUDA-less) machine, which picks the smoke preset by itself: the one smoke run the DAG's tests and
    the tests that read its records share. Tests that change the copy put it back as they found it."""
    import shlex
    import time

    from workflow.readme import main_command
    from workflow.test_snakemake import SMOKE_LIMIT_S, make_copy, snakemake

    copy = make_copy(tmp_path_factory.mktemp("repo"))
    start = time.monotonic()
    proc = snakemake(copy, *shlex.split(main_command())[1:], timeout=SMOKE_LIMIT_S)
    return copy, proc, time.monotonic() - start


@pytest.fixture
def seed(request) -> int:
    """This test's seed, for a generator of its own."""
    return request.node.stash[_SEED]
