#!/usr/bin/env bash
# Run every check CI runs: lint, format, types, then the test suite. Any failure fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
uv() { if command -v uv >/dev/null 2>&1; then command uv "$@"; else python3 -m uv "$@"; fi; }

echo "== ruff";   uv run --no-sync ruff check .
echo "== format"; uv run --no-sync ruff format --check .
echo "== mypy";   uv run --no-sync mypy
echo "== pytest"
status=0
uv run --no-sync pytest "$@" || status=$?
if [ "$status" -eq 5 ]; then
    echo "pytest collected no tests: that is a failure here" >&2
fi
exit "$status"
