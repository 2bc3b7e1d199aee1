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
# Tests must not depend on the terminal's width or the temp path's length: they run here in a
# 40-column terminal with a temp path of ~200 characters, so a test that does fails in CI, not
# on a user's machine. (A test that reads a rich table sets the width it reads at.)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
basetemp="$scratch/$(printf 'a-long-temporary-path-%.0s' 1 2 3 4 5 6 7)"
status=0
# -n: one pytest worker per core, at most 2 (CI's machines have 2); worksteal balances the few
# long learning tests against the many short ones. --durations: the slowest tests, so the run's
# time (under 25 minutes) stays in view.
workers=$(python3 -c 'import os; print(max(1, min(2, len(os.sched_getaffinity(0)))))')
COLUMNS=40 uv run --no-sync pytest -n "$workers" --dist worksteal --basetemp "$basetemp" \
    --durations=25 "$@" || status=$?
if [ "$status" -eq 5 ]; then
    echo "pytest collected no tests: that is a failure here" >&2
fi
exit "$status"
