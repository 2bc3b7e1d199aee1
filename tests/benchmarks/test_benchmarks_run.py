"""Every benchmark script runs to the end on a small workload, with its own checks passing.

The figures are not looked at (speed lives in the benchmarks, never in tests); what is checked
is that each script still runs against the current code and that the correctness checks it
makes on its results (all rollouts succeeded, spans stored, batch contents) still hold.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


@pytest.mark.parametrize(
    ("script", "arguments", "expected"),
    [
        # http-memory and postgresql (one server) are left to the full run: postgresql-3 runs
        # the same server code, over one database, and keeps CI's time down.
        (
            "store.py",
            ["--quick", "--backends", "memory,sqlite,http,postgresql-3"],
            "import agl (median",
        ),
        (
            "store_single.py",
            ["--rounds", "1", "--rollouts", "32", "--bare"],
            "median of 1 rounds (32 rollouts each)",
        ),
        ("capture.py", ["--calls", "80", "--seconds", "1", "--connections", "8"], "gateway"),
        ("wires.py", ["--calls", "10"], "recorded calls by wire"),
        (
            "runner.py",
            ["--rollouts", "64", "--concurrency", "16", "--agent", "http"],
            "'succeeded': 80",
        ),
        ("runner.py", ["--rollouts", "32", "--concurrency", "16"], "'succeeded': 48"),
        ("lightning.py", ["--rollouts", "100", "--repeat", "1"], "to_arrays (384 samples"),
        ("postgres_cpu.py", ["--rollouts", "40", "--dequeuers", "1,2"], "2 dequeuers"),
        (
            "torch_loop.py",
            ["--batch", "4", "--new-tokens", "4", "--repeat", "1", "--steps", "0"],
            "rl_step, 4 x 44 tokens",
        ),
        (
            "generate.py",
            ["--sizes", "tiny", "--batch", "4", "--new-tokens", "4", "--repeat", "1"],
            "rows with the same tokens",
        ),
        (
            "async_loop.py",
            [
                *("--steps", "2", "--sync-runs", "1", "--staleness", "1", "--cap", "0.3"),
                *("--warmup-epochs", "1", "--tasks-per-step", "2", "--samples", "2"),
                *("--val", "2", "--out", "{tmp}"),
            ],
            "max_staleness=1: ",
        ),
        (
            "learning.py",
            [
                *("--seeds", "1", "--steps", "1", "--tasks-per-step", "2", "--samples", "2"),
                *("--val", "2", "--warmup-epochs", "1", "--demos", "10", "--out", "{tmp}"),
            ],
            "| second-only |",
        ),
        (
            "store_scale.py",
            ["--rollouts", "3000", "--batch", "1000", "--spans", "3000", "--gets", "20"],
            "while /v1/statistics counts 3,000 spans",
        ),
        (
            "store_memory.py",
            ["--otlp-mb", "1", "--otlp-spans", "2000", "--spans", "2000"],
            "reading one rollout's 2,000 spans",
        ),
        (
            "store_counts.py",
            [
                *("--spans", "3000", "--rollouts", "6", "--rounds", "2", "--reads", "3"),
                *("--contended-spans", "480"),
            ],
            "spans/s one hot row",
        ),
        ("span_buffer.py", ["--mb", "1"], "gateway "),
    ],
    ids=[
        "store",
        "store_single",
        "capture",
        "wires",
        "runner-http",
        "runner-openai",
        "lightning",
        "postgres_cpu",
        "torch_loop",
        "generate",
        "async_loop",
        "learning",
        "store_scale",
        "store_memory",
        "store_counts",
        "span_buffer",
    ],
)
def test_the_benchmark_runs_on_a_small_workload(
    script: str, arguments: list[str], expected: str, tmp_path: Path
) -> None:
    arguments = [argument.replace("{tmp}", str(tmp_path)) for argument in arguments]
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), *arguments],
        check=False,
        capture_output=True,
        text=True,
        timeout=280,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    assert expected in output, output[-4000:]
