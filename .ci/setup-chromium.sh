#!/usr/bin/env bash
# CI: what the browser tests (tests/writeup, and the smoke writeup in tests/workflow) need to open
# the writeup in a real headless browser: Debian's chromium, and Playwright (the project's `test`
# extra) in the active venv to drive it. Playwright never downloads a browser of its own: the tests
# hand it this chromium (CS336_CHROMIUM names another). Quick when done before.
#   bash .ci/setup-chromium.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

browser=""
for name in "${CS336_CHROMIUM:-}" chromium chromium-browser; do
    [ -n "$name" ] && command -v "$name" >/dev/null 2>&1 && { browser="$(command -v "$name")"; break; }
done

if [ -z "$browser" ]; then
    echo "setup-chromium: installing Debian's chromium"
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    apt=(env DEBIAN_FRONTEND=noninteractive apt-get -q -o DPkg::Lock::Timeout=600)
    $sudo "${apt[@]}" update
    $sudo "${apt[@]}" install -y --no-install-recommends chromium fonts-dejavu-core
    browser="$(command -v chromium)"
fi

if ! python -c 'import playwright.sync_api' >/dev/null 2>&1; then
    if [ -z "${VIRTUAL_ENV:-}" ]; then
        echo "setup-chromium: no virtual environment is active; activate the project's .venv first" >&2
        exit 1
    fi
    echo "setup-chromium: installing the project's [test] extra (playwright) into $VIRTUAL_ENV"
    python -m pip install -q -e '.[test]'
fi

# The check: Playwright starts this chromium headless and reads a page back.
BROWSER="$browser" python - <<'EOF'
import importlib.metadata
import os

from playwright.sync_api import sync_playwright

with sync_playwright() as p:
    browser = p.chromium.launch(executable_path=os.environ["BROWSER"], args=["--no-sandbox", "--disable-gpu"])
    page = browser.new_page()
    page.set_content("<p id='x'>ok</p>")
    assert page.inner_text("#x") == "ok"
    print(f"setup-chromium: {os.environ['BROWSER']} {browser.version},"
          f" driven by playwright {importlib.metadata.version('playwright')}")
    browser.close()
EOF
