# The lab notebook's DAG in a CUDA image. Snakemake is the entry point; the checkout is mounted at
# /work, so results and the writeup land on the host:
#
#   docker build -t cs336-systems .
#   docker run --rm --gpus all --user "$(id -u):$(id -g)" -v "$PWD":/work cs336-systems \
#       snakemake --cores 1 --resources gpu=2
#
# Build arguments:
#   BASE_IMAGE    an image with CUDA (and ideally PyTorch). The default is PyTorch's CUDA runtime
#                 image for the torch + CUDA of the committed GPU run (torch 2.11.0+cu130). Any
#                 Debian or Ubuntu image works; Python comes from apt when the base has none.
#   TORCH_SPEC    what `pip install` gets for torch, e.g. "torch==2.11.0 --index-url
#                 https://download.pytorch.org/whl/cpu" or a wheel's URL. Empty (the default): keep
#                 the base image's torch (PyTorch images), or let the project's requirements pick one.
#   INSTALL_NSYS  1 (default): install Nsight Systems' CLI (nsys, for A2) from NVIDIA's CUDA apt
#                 repository; 0: leave it out (CI's build from a plain Debian base has no such repo).
#
# How code paths resolve. The project is installed editable from /opt/cs336, a copy of the sources,
# so the image runs without a checkout and without the network. But when the working directory is
# a checkout (the mounted /work), docker/env.sh puts that checkout's src/ and cs336-basics/ first on
# PYTHONPATH, for Snakemake and for every job. The pipeline finds its files relative to the package
# (the rules' code inputs, workflow/schemas, writeup/templates), so everything then comes from the
# checkout: the code that runs is the code you edit, and editing it makes the right rules stale. A
# non-editable install into site-packages would break those paths; hence the editable one.

ARG BASE_IMAGE=pytorch/pytorch:2.11.0-cuda13.0-cudnn9-runtime
FROM ${BASE_IMAGE}

SHELL ["/bin/bash", "-o", "pipefail", "-c"]
USER 0
ENV DEBIAN_FRONTEND=noninteractive \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONUNBUFFERED=1

# git: records carry the checkout's commit. A C/C++ compiler: Triton builds its kernel launchers
# with one at run time, and torch.compile's CPU back end emits C++. Python, venv and headers only
# when the base has no Python (a bare CUDA image); PyTorch's images bring their own.
RUN apt-get update \
    && packages="git ca-certificates gcc g++ libc6-dev" \
    && if ! command -v python3 >/dev/null; then packages="$packages python3 python3-venv python3-dev"; fi \
    && apt-get install -y --no-install-recommends $packages \
    && rm -rf /var/lib/apt/lists/*

# Nsight Systems' CLI from NVIDIA's CUDA apt repository: the CUDA images carry it; on an Ubuntu or
# Debian base without it (PyTorch's runtime images), its keyring package is fetched first. The
# package is nsight-systems-cli where that name exists, else the newest nsight-systems-<version>.
ARG INSTALL_NSYS=1
RUN if [ "$INSTALL_NSYS" != 1 ]; then echo "INSTALL_NSYS=$INSTALL_NSYS: no Nsight Systems"; exit 0; fi \
    && apt-get update \
    && if ! grep -rqs developer.download.nvidia.com /etc/apt/sources.list /etc/apt/sources.list.d; then \
        . /etc/os-release \
        && arch="$(dpkg --print-architecture | sed 's/amd64/x86_64/; s/arm64/sbsa/')" \
        && url="https://developer.download.nvidia.com/compute/cuda/repos/${ID}$(echo "$VERSION_ID" | tr -d .)/${arch}/cuda-keyring_1.1-1_all.deb" \
        && python3 -c 'import sys, urllib.request; urllib.request.urlretrieve(sys.argv[1], sys.argv[2])' "$url" /tmp/cuda-keyring.deb \
        && dpkg -i /tmp/cuda-keyring.deb && rm /tmp/cuda-keyring.deb \
        && apt-get update; \
    fi \
    && names="$(apt-cache pkgnames nsight-systems | sort -V)" \
    && package="" \
    && for pattern in '^nsight-systems-cli$' '^nsight-systems-cli-[0-9.]+$' '^nsight-systems-[0-9.]+$'; do \
        package="$(printf '%s\n' "$names" | grep -E "$pattern" | tail -n 1)" || true; \
        if [ -n "$package" ]; then break; fi; \
    done \
    && if [ -z "$package" ]; then echo "no Nsight Systems package in the apt sources" >&2; exit 1; fi \
    && apt-get install -y --no-install-recommends "$package" \
    && rm -rf /var/lib/apt/lists/* \
    && if ! command -v nsys >/dev/null; then \
        ln -s "$(find /opt/nvidia -path '*/bin/nsys' \( -type f -o -type l \) | sort -V | tail -n 1)" /usr/local/bin/nsys; \
    fi \
    && nsys --version

# A venv that also sees the base's site-packages: a PyTorch base's torch (and triton) count as
# installed and are not downloaded again.
ENV VIRTUAL_ENV=/opt/venv
ENV PATH=/opt/venv/bin:$PATH
ARG TORCH_SPEC=""
RUN python3 -m venv --system-site-packages /opt/venv \
    && if [ -n "$TORCH_SPEC" ]; then pip install --no-cache-dir $TORCH_SPEC; fi \
    && python -c 'import sys; assert sys.version_info >= (3, 11), sys.version'

# The project, with the README's set-up line (less the test extra). First its dependencies alone,
# from the two pyproject.toml files with the packages still empty, so that this slow layer stays
# cached while only the sources change; then the sources, and the same line again (quick).
WORKDIR /opt/cs336
COPY pyproject.toml ./
COPY cs336-basics/pyproject.toml cs336-basics/
RUN mkdir -p src && touch README.md \
    && pip install --no-cache-dir -e ./cs336-basics -e .
# E1's Liger-Kernel anchor: the `liger` extra, as pinned in pyproject.toml, without its dependencies
# (torch and Triton, which a CUDA base has; where a base has no Triton, as a CPU image, Liger cannot
# import, and the anchor, CUDA-only, is skipped on such a machine anyway).
RUN pip install --no-cache-dir --no-deps $(python -c 'import tomllib; \
        print(*tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["liger"])')
COPY . /opt/cs336
RUN pip install --no-cache-dir --no-deps -e ./cs336-basics -e . \
    && python -c 'import torch, snakemake, cs336_systems, cs336_basics; print("torch", torch.__version__)'
# Triton 3.6 (the default base's) runs our kernels in its interpreter, as a smoke run on a host
# without a GPU does, only with NumPy < 2.4; newer Tritons need no pin.
RUN if python -c 'import sys, triton; sys.exit(tuple(map(int, triton.__version__.split(".")[:2])) > (3, 6))'; then \
        pip install --no-cache-dir 'numpy<2.4'; \
    fi

COPY docker/env.sh /usr/local/lib/cs336/env.sh
COPY docker/entrypoint.sh /usr/local/bin/cs336-entrypoint
ARG USER_UID=1000
RUN useradd --create-home --non-unique --uid "$USER_UID" --shell /bin/bash cs336 \
    && mkdir -p /work && chown cs336 /work

USER ${USER_UID}
WORKDIR /work
ENV BASH_ENV=/usr/local/lib/cs336/env.sh
ENTRYPOINT ["/usr/local/bin/cs336-entrypoint"]
CMD ["--cores", "1", "--resources", "gpu=1"]
