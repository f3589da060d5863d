"""cs336_systems.pipeline.sources: the source files a module runs, read from import statements."""

import random
from pathlib import Path

import pytest

from cs336_systems.pipeline import sources
from cs336_systems.pipeline.sources import module_sources

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _fresh_cache():
    module_sources.cache_clear()
    yield
    module_sources.cache_clear()


def test_benchmark_sources():
    got = module_sources("cs336_systems.benchmark")
    assert list(got) == sorted(got) and len(set(got)) == len(got)
    for path in ["src/cs336_systems/__init__.py", "src/cs336_systems/benchmark.py", "src/cs336_systems/models.py",
                 "src/cs336_systems/records.py", "src/cs336_systems/timing.py",
                 "src/cs336_systems/attention/backends.py", "cs336-basics/cs336_basics/__init__.py", "cs336-basics/cs336_basics/model.py",
                 "cs336-basics/cs336_basics/nn_utils.py", "cs336-basics/cs336_basics/optimizer.py"]:
        assert path in got, path
    # Attention back ends are loaded by name, so the benchmark alone does not depend on the kernels.
    for path in ["src/cs336_systems/precision/accumulation.py", "src/cs336_systems/precision/__init__.py",
                 "src/cs336_systems/report/a1.py", "src/cs336_systems/pipeline/config.py",
                 "src/cs336_systems/attention/flash_triton.py", "src/cs336_systems/profiling/annotated_attention.py"]:
        assert path not in got, path
    assert all((REPO / p).is_file() and not Path(p).is_absolute() for p in got)


def test_an_attention_back_end_adds_its_own_sources():
    from cs336_systems.attention.backends import BACKENDS, module_of

    flash = module_sources("cs336_systems.benchmark", module_of("flash"))
    assert "src/cs336_systems/attention/flash_triton.py" in flash
    assert "src/cs336_systems/attention/backward.py" in flash
    nvtx = module_sources("cs336_systems.benchmark", module_of("nvtx"))
    assert "src/cs336_systems/profiling/annotated_attention.py" in nvtx
    assert "src/cs336_systems/attention/flash_triton.py" not in nvtx
    assert all(module_of(name) for name in BACKENDS)


def test_accumulation_sources():
    got = module_sources("cs336_systems.precision.accumulation")
    assert "src/cs336_systems/precision/accumulation.py" in got
    assert "src/cs336_systems/precision/__init__.py" in got
    assert "src/cs336_systems/records.py" in got
    assert "src/cs336_systems/benchmark.py" not in got
    assert not any(p.startswith("cs336-basics/") for p in got)


def test_several_modules_are_the_union():
    a = set(module_sources("cs336_systems.benchmark"))
    b = set(module_sources("cs336_systems.precision.accumulation"))
    assert set(module_sources("cs336_systems.benchmark", "cs336_systems.precision.accumulation")) == a | b


def test_unknown_module_raises():
    with pytest.raises(ValueError, match="cs336_systems.nope"):
        module_sources("cs336_systems.nope")
    with pytest.raises(ValueError, match="numpy"):
        module_sources("numpy")


def _write(root: Path, rel: str, text: str = "") -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_relative_and_absolute_imports_are_followed(tmp_path, monkeypatch):
    # A fake `cs336_systems` with every import form; `unused*` must stay out.
    src = tmp_path / "src"
    tag = random.randint(0, 10**6)
    _write(src, "cs336_systems/__init__.py")
    _write(src, "cs336_systems/main.py",
           f"# {tag}\nimport os\nfrom . import helper\nfrom .sub import leaf\nfrom .sub.deep import thing as t\n"
           "import cs336_systems.absolute\n\ndef later():\n    from cs336_systems.lazy import f\n")
    _write(src, "cs336_systems/helper.py", "from .sub.other import name\n")
    _write(src, "cs336_systems/absolute.py")
    _write(src, "cs336_systems/lazy.py")
    _write(src, "cs336_systems/unused.py")
    _write(src, "cs336_systems/sub/__init__.py", "from . import exported\n")
    _write(src, "cs336_systems/sub/exported.py")
    _write(src, "cs336_systems/sub/leaf.py", "from ..lazy import f\nfrom .. import absolute\n")
    _write(src, "cs336_systems/sub/other.py", "name = 1\n")
    _write(src, "cs336_systems/sub/unused2.py")
    _write(src, "cs336_systems/sub/deep.py", "thing = 2\n")
    monkeypatch.chdir(tmp_path)                       # paths come relative to the working directory
    monkeypatch.setattr(sources, "_package_root", lambda package: src if package == "cs336_systems" else None)
    got = module_sources("cs336_systems.main")
    assert got == tuple(sorted(f"src/cs336_systems/{p}" for p in [
        "__init__.py", "main.py", "helper.py", "absolute.py", "lazy.py",
        "sub/__init__.py", "sub/exported.py", "sub/leaf.py", "sub/other.py", "sub/deep.py"]))
    # The leaf alone: its package __init__ files and its parent-relative imports.
    module_sources.cache_clear()
    assert module_sources("cs336_systems.sub.leaf") == tuple(sorted(f"src/cs336_systems/{p}" for p in [
        "__init__.py", "sub/__init__.py", "sub/exported.py", "sub/leaf.py", "lazy.py", "absolute.py"]))
