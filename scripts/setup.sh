#!/usr/bin/env bash
# Set up the development environment: uv (if missing) and every workspace package with the
# dev tools, from the lock file. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v uv >/dev/null 2>&1; then
    python3 -m pip install --quiet --disable-pip-version-check uv
fi
uv() { if command -v uv >/dev/null 2>&1; then command uv "$@"; else python3 -m uv "$@"; fi; }

# uv does not read pip's configuration: pass on pip's local wheel folder (the CPU build of torch)
# when the machine's pip configuration names one.
if [ -z "${UV_FIND_LINKS:-}" ]; then
    links="${PIP_FIND_LINKS:-$(python3 -m pip config get global.find-links 2>/dev/null || true)}"
    if [ -n "$links" ]; then export UV_FIND_LINKS="$links"; fi
fi

uv sync --locked --all-packages
