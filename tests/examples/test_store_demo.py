"""examples/store_demo.py runs and does what it says."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import agl
from agl import RolloutStatus

ROOT = Path(__file__).resolve().parents[2]


def test_store_demo_runs_every_task_and_keeps_them_on_disk(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "store_demo.py"), "--run-dir", str(tmp_path),
         "--tasks", "24", "--runners", "3"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )  # fmt: skip
    assert "24 of 24 rollouts finished" in result.stdout
    assert "reason=crash" in result.stdout  # the crashed attempt was retried

    async def read() -> agl.StoreStatistics:
        async with agl.open_store(f"sqlite:///{tmp_path}/agl.db") as store:
            return await store.statistics()

    stats = asyncio.run(read())
    assert stats.rollouts_by_status[RolloutStatus.SUCCEEDED] == 24
    assert (stats.attempts, stats.spans, stats.workers) == (25, 96, 3)
