"""examples/run_agent.py: an agent over a dataset through the trainer, traces kept on disk."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_run_agent_example_runs_and_every_trace_is_inspectable(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "run_agent.py"), "--run-dir", str(run_dir)],
        capture_output=True,
        text=True,
        timeout=180,
        check=True,
    )
    # 20 tasks, b == 3 answered wrongly by the stand-in model: 15 of 20 right.
    assert "over 50 rollouts" in result.stdout
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    train = [row["reward/mean"] for row in metrics if "reward/mean" in row]
    assert sum(train) / len(train) == 0.75
    assert (run_dir / "reward.png").stat().st_size > 0

    store = f"sqlite:///{run_dir}/store.db"
    listed = subprocess.run(
        [sys.executable, "-m", "agl", "rollouts", "list", "--store", store, "--json",
         "--limit", "100"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    rollouts = json.loads(listed.stdout)
    assert rollouts["total"] == 50
    assert {r["status"] for r in rollouts["rollouts"]} == {"succeeded"}
    first = rollouts["rollouts"][0]["rollout_id"]
    shown = subprocess.run(
        [sys.executable, "-m", "agl", "rollouts", "show", first, "--store", store, "--json"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    detail = json.loads(shown.stdout)
    assert detail["final_reward"] in (0.0, 1.0)
    tree = json.dumps(detail["attempts"])
    assert '"gateway"' in tree  # the LLM call, recorded by the gateway with its token ids
