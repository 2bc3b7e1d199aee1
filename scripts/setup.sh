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

# torch: the lock holds PyPI's build, which on Linux brings ~3 GB of CUDA libraries. A machine
# whose pip configuration offers a local CPU build of the same torch version (a find-links folder
# with torch-<version>+cpu-*.whl) installs that one instead, and skips the CUDA packages.
torch_version=$(python3 -c 'import tomllib; print(next(p["version"] for p in tomllib.load(open("uv.lock", "rb"))["package"] if p["name"] == "torch"))')
cpu_wheel=""
for folder in ${UV_FIND_LINKS:-}; do
    for wheel in "$folder"/torch-"$torch_version"+cpu-*.whl; do
        if [ -f "$wheel" ]; then cpu_wheel="$wheel"; fi
    done
done
skip=()
if [ -n "$cpu_wheel" ]; then
    # torch and what only its CUDA build needs (nvidia-*, cuda-*, triton)
    while read -r name; do skip+=(--no-install-package "$name"); done < <(python3 -c '
import re, tomllib
for p in tomllib.load(open("uv.lock", "rb"))["package"]:
    if p["name"] == "torch" or re.match(r"(nvidia-|cuda-|triton$)", p["name"]):
        print(p["name"])')
fi

uv sync --locked --all-packages "${skip[@]}"
if [ -n "$cpu_wheel" ]; then
    uv pip install --quiet --python .venv --no-deps "$cpu_wheel"
fi

# The dashboard's browser tests drive the distribution's Chromium (Playwright never downloads a
# browser here). Installed when missing, where apt-get can install it (as root).
if ! command -v chromium >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 \
    && [ "$(id -u)" = 0 ]; then
    echo "installing Chromium for the dashboard's browser tests (apt-get install chromium)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -qq --no-install-recommends chromium >/dev/null 2>&1 \
        || { apt-get update -qq >/dev/null 2>&1 \
            && apt-get install -y -qq --no-install-recommends chromium >/dev/null 2>&1; } \
        || echo "could not install Chromium: the browser tests will say so" >&2
fi
