# Makes .carry/ (../../../shared/gpu/prepare-carry.sh's) small enough to travel beside the tree:
# the tracked tree is ~53 MiB on disk and a call takes 64 MiB in all, while prepare-carry's wheels
# are ~32 MB. Moves to .carry-spare/ the wheels the GPU image already has (its package list in the
# device tool's KINDS.md) and nvtx (A2 only: keep it for a run that profiles), and strips pulp's
# bundled CBC solvers (16 MB; Snakemake falls back to its greedy scheduler, which is all one GPU
# needs). What is left must then be installed on the machine without resolving (the image's
# versions stand in for the wheels set aside): the first lines this adds to .carry/env.sh do that,
# so the scripts here, which source it, run unchanged.
# Run from the repository root, after prepare-carry:  bash lab/reference-runs/slim_carry.sh [keep-nvtx]
set -eu
mkdir -p .carry-spare
for name in attrs certifi charset_normalizer idna jinja2 markupsafe markdown_it_py mdurl packaging psutil \
            pyyaml requests tabulate urllib3 wrapt greenlet; do
  for f in .carry/wheels/${name}-*.whl; do [ -e "$f" ] && mv "$f" .carry-spare/; done
done
[ "${1:-}" = keep-nvtx ] || { for f in .carry/wheels/nvtx-*.whl; do [ -e "$f" ] && mv "$f" .carry-spare/; done; }
python3 - <<'PY'
import glob, os, zipfile
for src in glob.glob(".carry/wheels/pulp-*.whl"):
    tmp = src + ".new"
    with zipfile.ZipFile(src) as zi, zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zo:
        for info in zi.infolist():
            if "/solverdir/" not in info.filename:
                zo.writestr(info, zi.read(info.filename))
    os.replace(tmp, src)
PY
if ! grep -q 'slim_carry' .carry/env.sh; then
  chmod u+w .carry/env.sh
  { echo '# slim_carry.sh: the wheels left, without resolving (their dependencies are the image'"'"'s)'
    echo 'if [ ! -e /tmp/site/.done ]; then'
    echo '  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .carry/wheels/*.whl \'
    echo '    $(ls .carry/nodeps/*.whl 2>/dev/null) >/tmp/site-install.log 2>&1 && touch /tmp/site/.done /tmp/site/.nodeps'
    echo 'fi'
    cat .carry/env.sh; } > .carry/env.sh.new
  mv .carry/env.sh.new .carry/env.sh
fi
grep -qx '/.carry-spare/' .git/info/exclude || echo '/.carry-spare/' >> .git/info/exclude
# A2 under nsys needs nvtx (keep-nvtx) and .carry/debs (the importer's libdw1 and libelf1): without
# them its jobs end in "nsys profile exited 0 without a result".
[ -d .carry/debs ] || echo "note: no .carry/debs: A2's nsys profiles cannot become reports on the machine" >&2
echo "tracked tree $(git ls-files -z | du --files0-from=- -c 2>/dev/null | tail -1 | cut -f1) KiB, .carry $(du -s .carry | cut -f1) KiB (the limit: 65536 KiB together)"
