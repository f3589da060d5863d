"""The jobs' bytecode folder (pipeline/bytecode.py): set only where torch's install keeps none, and
then a job's imports leave their bytecode there for the next job, even under PYTHONDONTWRITEBYTECODE."""
import os
import subprocess
import sys

import pytest

from cs336_systems.pipeline import bytecode


def _package(root, name, *, with_bytecode: bool):
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text("VALUE = 42\n")
    if with_bytecode:
        (folder / "__pycache__").mkdir()
        (folder / "__pycache__" / f"__init__.{sys.implementation.cache_tag}.pyc").write_bytes(b"")
    return folder


@pytest.mark.parametrize("with_bytecode", [True, False])
def test_has_bytecode_looks_beside_the_package_without_importing_it(tmp_path, monkeypatch, with_bytecode):
    name = f"pkg_bytecode_{with_bytecode}"
    _package(tmp_path, name, with_bytecode=with_bytecode)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert bytecode.has_bytecode(name) is with_bytecode
    assert name not in sys.modules


def test_an_absent_package_leaves_the_environment_alone():
    assert bytecode.has_bytecode("no_such_package_here_at_all") is True


def test_the_changes_only_where_the_install_has_no_bytecode_and_the_user_set_no_prefix(tmp_path):
    cache = str(tmp_path / "pyc")
    assert bytecode.job_environment({}, cache, bytecode_installed=True) == {}
    assert bytecode.job_environment({"PYTHONPYCACHEPREFIX": "/mine"}, cache, bytecode_installed=False) == {}
    changes = bytecode.job_environment({"PYTHONDONTWRITEBYTECODE": "1"}, cache, bytecode_installed=False)
    assert changes == {"PYTHONPYCACHEPREFIX": cache, "PYTHONDONTWRITEBYTECODE": None}
    environ = {"PYTHONDONTWRITEBYTECODE": "1", "PATH": "/bin"}
    bytecode.apply(environ, changes)
    assert environ == {"PATH": "/bin", "PYTHONPYCACHEPREFIX": cache}


def test_a_job_under_the_changes_leaves_bytecode_for_the_next_and_none_beside_the_sources(tmp_path, monkeypatch):
    """What the lent machines do (PYTHONDONTWRITEBYTECODE over a package with no bytecode): a job
    started with the changes writes the package's bytecode into the folder, and nothing beside it."""
    package = _package(tmp_path / "site", "pkg_for_jobs", with_bytecode=False)
    environ = {**os.environ, "PYTHONPATH": str(tmp_path / "site"), "PYTHONDONTWRITEBYTECODE": "1"}
    environ.pop("PYTHONPYCACHEPREFIX", None)
    job = [sys.executable, "-c", "import pkg_for_jobs; assert pkg_for_jobs.VALUE == 42"]

    subprocess.run(job, env=environ, check=True)
    assert not list(tmp_path.rglob("*.pyc"))          # as the machines are: nothing kept

    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    installed = bytecode.has_bytecode("pkg_for_jobs")
    assert installed is False
    bytecode.apply(environ, bytecode.job_environment(environ, str(tmp_path / "pyc"), installed))
    subprocess.run(job, env=environ, check=True)
    # the folder mirrors the sources' paths (and holds whatever else the job imported)
    kept = tmp_path / "pyc" / str(package).lstrip(os.sep) / f"__init__.{sys.implementation.cache_tag}.pyc"
    assert kept.is_file()
    assert not (package / "__pycache__").exists()
