"""The Dockerfile, built for real and run: the smoke DAG inside the image, with the network off.

No container registry is reachable from CI, so the base image is made here: a minimal Debian
(debootstrap, from the mirror apt uses) with the host's CA certificates (HTTPS from inside the build
goes through a proxy that needs them), imported into podman. The Dockerfile is built on it with
PyTorch's CPU build (the wheel the host's pip picks for the host's torch, served to the build over
127.0.0.1) and without Nsight Systems (NVIDIA's apt repository is not in a plain Debian base).
Not checked here: the real CUDA base image, the GPU runtime, nsys inside the image (see docs/containers.md).

podman runs with its own configuration and its own storage under CACHE (never the host's): the
limits and the OCI runtime these machines need, and the overlay driver. The base image and the
built image's layers stay there on purpose, so a second run reuses them (the debootstrap and the
pip downloads are the slow part); `rm -rf /var/tmp/cs336-container-test` frees the ~2.5 GB.

Without podman, runc or debootstrap (or without root) the test is skipped, unless CI=true: then it
fails. `.ci/setup-docker.sh` installs them.
"""

import fcntl
import functools
import hashlib
import http.server
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from workflow.test_snakemake import make_copy

REPO = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("CS336_CONTAINER_CACHE", "/var/tmp/cs336-container-test"))
SUITE = "bookworm"
BASE_IMAGE = f"localhost/cs336-debian-base:{SUITE}"
IMAGE = "localhost/cs336-systems:test"
IMAGE_UID = 1000                     # the Dockerfile's USER_UID default
BUILD_LIMIT_S = 900
RUN_LIMIT_S = 900
WHEEL_PORT = 47336

CONTAINERS_CONF = """\
[containers]
# The default open-files and process limits are refused on these machines.
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]
[engine]
# crun refuses the hybrid cgroup set-up; runc does not.
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
"""

STORAGE_CONF = """\
[storage]
driver = "overlay"
graphroot = "{root}/storage"
runroot = "{root}/run"
"""

pytestmark = pytest.mark.slow


def _require_tools():
    missing = [tool for tool in ("podman", "runc", "debootstrap") if shutil.which(tool) is None]
    problem = f"missing {', '.join(missing)} (bash .ci/setup-docker.sh installs them)" if missing else None
    if problem is None and os.geteuid() != 0:
        problem = "debootstrap and podman's storage here need root"
    if problem:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true and the container image cannot be built: {problem}")
        pytest.skip(problem)


def _show(proc) -> str:
    return f"exit {proc.returncode}\n--- stdout\n{proc.stdout[-3000:]}\n--- stderr\n{proc.stderr[-3000:]}"


def _run(*args, timeout=300, check=True, **kwargs) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=timeout, **kwargs)
    if check:
        assert proc.returncode == 0, f"{' '.join(map(str, args))}\n{_show(proc)}"
    return proc


def _mirror() -> str:
    """The Debian mirror apt already uses (deb822 or one-line sources)."""
    for path in [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*"))]:
        try:
            lines = path.read_text().splitlines()
        except OSError:
            continue
        for line in lines:
            words = line.split()
            if not words:
                continue
            urls = words[1:] if words[0] == "URIs:" else [w for w in words[1:] if "://" in w][:1] if words[0] == "deb" else []
            for url in urls:
                if url.rstrip("/").endswith("/debian"):
                    return url
    return "http://deb.debian.org/debian"


def _remove_rootfs(rootfs: Path) -> None:
    """rm -r, after unmounting what an interrupted debootstrap left mounted in it (/proc, /sys)."""
    mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
    for mount in sorted((m for m in mounts if m.startswith(f"{rootfs}/")), reverse=True):
        subprocess.run(["umount", "--lazy", mount], check=False)
    shutil.rmtree(rootfs, ignore_errors=True)


def _ca_certificates() -> list[Path]:
    return sorted(Path("/usr/local/share/ca-certificates").glob("**/*.crt"))


@pytest.fixture(scope="module")
def podman(tmp_path_factory):
    """A function that runs podman with this test's own configuration and storage."""
    _require_tools()
    CACHE.mkdir(parents=True, exist_ok=True)
    (CACHE / "containers.conf").write_text(CONTAINERS_CONF)
    (CACHE / "storage.conf").write_text(STORAGE_CONF.format(root=CACHE))
    env = {**os.environ, "CONTAINERS_CONF": str(CACHE / "containers.conf"),
           "CONTAINERS_STORAGE_CONF": str(CACHE / "storage.conf")}

    def podman(*args, **kwargs):
        return _run("podman", *args, env=env, **kwargs)

    # One session at a time builds in CACHE (two debootstraps into one folder break each other).
    with open(CACHE / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield podman


@pytest.fixture(scope="module")
def base_image(podman):
    """A minimal Debian (no Python: the Dockerfile installs it, as on a bare CUDA base) with the host's CA certificates and a pip.conf that
    points pip at them; imported once and kept (label = the CA digest, so new CAs rebuild it)."""
    certs = _ca_certificates()
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in certs) + _mirror().encode()).hexdigest()[:16]
    found = podman("image", "inspect", "--format", "{{index .Labels \"cs336.base\"}}", BASE_IMAGE, check=False)
    if found.returncode == 0 and found.stdout.strip() == digest:
        return BASE_IMAGE
    rootfs = CACHE / "rootfs"
    _remove_rootfs(rootfs)
    _run("debootstrap", "--variant=minbase", "--include=ca-certificates", SUITE, rootfs, _mirror(), timeout=900)
    local = rootfs / "usr/local/share/ca-certificates"
    local.mkdir(parents=True, exist_ok=True)
    for cert in certs:
        shutil.copy2(cert, local / cert.name)
    _run("chroot", rootfs, "update-ca-certificates", timeout=120)
    # pip in a venv uses its own certificate bundle unless told otherwise; the host's pip is told so too.
    (rootfs / "etc/pip.conf").write_text("[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n")
    shutil.rmtree(rootfs / "var/lib/apt/lists", ignore_errors=True)
    (rootfs / "var/lib/apt/lists/partial").mkdir(parents=True)
    tar = subprocess.Popen(["tar", "-C", str(rootfs), "--numeric-owner", "-c", "."], stdout=subprocess.PIPE)
    try:
        podman("import", "--change", f"LABEL cs336.base={digest}", "--change", "CMD [\"/bin/bash\"]", "-",
               BASE_IMAGE, stdin=tar.stdout, timeout=600)
    finally:
        tar.stdout.close()
        assert tar.wait() == 0
    _remove_rootfs(rootfs)
    return BASE_IMAGE


def _torch_wheel() -> Path | None:
    """PyTorch's CPU wheel for the host's torch, as the host's pip finds it (cached under CACHE)."""
    import torch

    version = torch.__version__
    if "+cpu" not in version:
        return None
    wheels = CACHE / "wheels"
    found = sorted(wheels.glob(f"torch-{version}-*.whl"))
    if not found:
        _run(sys.executable, "-m", "pip", "download", "--no-deps", "-d", wheels, f"torch=={version}", timeout=900)
        found = sorted(wheels.glob(f"torch-{version}-*.whl"))
    return found[-1] if found else None


@pytest.fixture(scope="module")
def wheel_server():
    """Serves CACHE/wheels on 127.0.0.1, for the build (which shares the host's network)."""
    wheel = _torch_wheel()
    if wheel is None:
        import torch
        yield f"torch=={torch.__version__.split('+')[0]} --index-url https://download.pytorch.org/whl/cpu"
        return
    handler = functools.partial(_QuietHandler, directory=str(wheel.parent))
    try:     # a fixed port keeps TORCH_SPEC, and with it the build's layer cache, the same run to run
        server = http.server.ThreadingHTTPServer(("127.0.0.1", WHEEL_PORT), handler)
    except OSError:
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/{wheel.name.replace('+', '%2B')}"
    finally:
        server.shutdown()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def image(podman, base_image, wheel_server):
    before = podman("image", "inspect", "--format", "{{.Id}}", IMAGE, check=False).stdout.strip()
    start = time.monotonic()
    proc = podman("build", "--network", "host", "--layers",
                  "--build-arg", f"BASE_IMAGE={base_image}",
                  "--build-arg", f"TORCH_SPEC={wheel_server}",
                  "--build-arg", "INSTALL_NSYS=0",
                  "-t", IMAGE, "-f", REPO / "Dockerfile", REPO, timeout=BUILD_LIMIT_S, check=False)
    elapsed = time.monotonic() - start
    assert proc.returncode == 0, f"podman build failed after {elapsed:.0f} s\n{_show(proc)}"
    print(f"podman build: {elapsed:.0f} s")
    # The previous build's image, untagged now, goes with the layers only it used (the cache is the
    # newest build's layers, not every build's).
    after = podman("image", "inspect", "--format", "{{.Id}}", IMAGE).stdout.strip()
    if before and before != after:
        podman("rmi", before, check=False)
    return IMAGE


@pytest.fixture(scope="module")
def checkout(tmp_path_factory):
    """A copy of the checkout, owned by the image's user, to mount at /work."""
    dest = make_copy(tmp_path_factory.mktemp("checkout"))
    for path in [dest, *dest.rglob("*")]:
        os.lchown(path, IMAGE_UID, IMAGE_UID)
    return dest


def _in_image(podman, checkout, *args, timeout=RUN_LIMIT_S):
    return podman("run", "--rm", "--network", "none", "-v", f"{checkout}:/work", IMAGE, *args,
                  timeout=timeout, check=False)


def test_image_leaves_out_results_caches_and_git(podman, image):
    proc = podman("run", "--rm", "--network", "none", "--entrypoint", "ls", image, "-A", "/opt/cs336")
    listing = set(proc.stdout.split())
    assert {"Snakefile", "src", "cs336-basics", "workflow", "writeup"} <= listing, listing
    assert not listing & {".git", ".venv", "results", ".snakemake", ".pytest_cache"}, listing
    proc = podman("run", "--rm", "--network", "none", "--entrypoint", "ls", image, "-A", "/opt/cs336/writeup")
    assert proc.stdout.split() == ["templates"]
    proc = podman("run", "--rm", "--network", "none", "--entrypoint", "id", image, "-u")
    assert proc.stdout.strip() == str(IMAGE_UID)            # not root


def test_the_image_holds_liger_kernel_as_the_liger_extra_pins_it(podman, image):
    """E1's Liger anchor runs in the image on a GPU: Liger-Kernel is installed, the version the
    ``liger`` extra pins."""
    import tomllib

    pins = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["liger"]
    proc = podman("run", "--rm", "--network", "none", "--entrypoint", "python", image, "-c",
                  "import importlib.metadata as m; print('liger-kernel==' + m.version('liger-kernel'))")
    assert proc.stdout.split() == pins


def test_the_mounted_checkout_is_the_code_that_runs(podman, image, checkout):
    probe = ("import cs336_systems, cs336_basics\n"
             "from cs336_systems.pipeline import sources\n"
             "print(cs336_systems.__file__, cs336_basics.__file__, sources._package_root('cs336_systems'), sep='\\n')")
    # Through the entry point, and through a plain `bash -c` as Snakemake's apptainer jobs run.
    for args in (["python", "-c", probe], ["bash", "-c", 'python -c "$0"', probe]):
        proc = _in_image(podman, checkout, *args, timeout=120)
        assert proc.returncode == 0, _show(proc)
        assert proc.stdout.split() == ["/work/src/cs336_systems/__init__.py",
                                       "/work/cs336-basics/cs336_basics/__init__.py", "/work/src"]


# What the image must run, one section of each kind of dependency: A1 (timed steps, records), A2
# (torch.profiler), A3, B3 (our Triton kernels in Triton's interpreter), C1 (Gloo process groups),
# and the reports and the writeup (pandas, matplotlib, Jinja, the Markdown renderer). The whole DAG
# runs on the host in the shared smoke run (tests/workflow/conftest.py); here the image's own
# packages are what is tested, at half the time of every section.
IMAGE_SECTIONS = "A1,A2,A3,B3,C1"


def test_smoke_dag_runs_in_the_image_without_network(podman, image, checkout):
    start = time.monotonic()
    proc = _in_image(podman, checkout, "snakemake", "--cores", "2", "--config", "preset=smoke",
                     f"sections={IMAGE_SECTIONS}")
    elapsed = time.monotonic() - start
    assert proc.returncode == 0, _show(proc)
    print(f"smoke DAG in the image: {elapsed:.0f} s")
    assert any("preset smoke" in line for line in proc.stderr.splitlines()[:3]), proc.stderr[:2000]
    for name in ("writeup.md", "writeup.html"):
        path = checkout / "writeup" / "smoke" / name
        assert path.stat().st_size > 0
        assert path.stat().st_uid == IMAGE_UID              # written by the image's user, onto the host
    # Every record the DAG wrote: measured (ok) or, for a back end the CPU lacks, skipped; never an
    # error or OOM. A record file holds one record or a list of them.
    records = []
    for path in sorted((checkout / "results" / "smoke").glob("*/records/*.json")) + \
            sorted((checkout / "results" / "smoke" / "A1" / "warmup").glob("*.json")):
        data = json.loads(path.read_text())
        records += [(path, r) for r in (data if isinstance(data, list) else [data]) if "status" in r]
    assert {path.parent.parent.name for path, _ in records} == set(IMAGE_SECTIONS.split(","))
    for path, record in records:
        assert record["status"] in ("ok", "skipped"), (path.name, record.get("message"))
        assert record["status"] == "ok" or path.parent.parent.name != "A1", (path.name, record.get("message"))
        assert record["provenance"]["torch"].endswith("+cpu")
    md = (checkout / "writeup" / "smoke" / "writeup.md").read_text()
    assert "## A1." in md and "## A3." in md
