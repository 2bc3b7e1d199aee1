"""The per-step table of every agent's calls and transitions, from a run's metrics."""

from __future__ import annotations

import io

from rich.console import Console

from agl.lightning import agent_steps_table


def test_each_step_lists_every_agent_with_its_calls_and_transitions() -> None:
    rows = [
        {"step": 1, "agents/writer/calls": 4.0, "agents/writer/transitions": 3.0,
         "agents/checker/calls": 6.0, "reward/mean": 0.5},
        {"step": 1, "val/reward/mean": 0.25},  # a validation row: nothing per agent
        {"step": 2, "agents/writer/calls": 4.0, "agents/writer/transitions": None,
         "agents/-/calls": 1.0},
    ]  # fmt: skip
    buffer = io.StringIO()
    Console(file=buffer, width=100).print(agent_steps_table(rows))
    lines = [line.split()[1:8:2] for line in buffer.getvalue().splitlines() if "│" in line]
    assert lines == [
        ["1", "checker", "6", "0"],
        ["1", "writer", "4", "3"],
        ["2", "-", "1", "0"],
        ["2", "writer", "4", "0"],
    ]
