"""``agl runner`` as a process: its start line names the instrumentors in use, and
``--instrument`` adds to what ``import agl.auto`` turns on unless ``--no-auto-instrument``.

The framework adapters but agl-langchain are disabled, so "every installed instrumentor" is
``langchain`` and ``openai`` and the runner does not load every framework of the workspace.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import agl
from agl import RolloutRequest
from agl.testing.processes import Processes, runner_summary, write_agent

pytest.importorskip("agl_langchain")

OTHER_ADAPTERS = (
    "agent-framework", "autogen", "crewai", "google-adk", "llama-index", "openai-agents",
    "pydantic-ai",
)  # fmt: skip
ENV = {"AGL_DISABLE_PLUGINS": ",".join(OTHER_ADAPTERS)}

AUTO_AGENT = """
import agl
import agl.auto  # noqa: F401


@agl.rollout
def agent(task):
    return 1.0
"""


def _start_line(processes: Processes, tmp_path: Path, name: str, *options: str) -> str:
    """Run ``agl runner OPTIONS`` on one rollout; return the line it starts with."""
    db = tmp_path / f"{name}.db"

    async def enqueue() -> None:
        async with agl.open_store(f"sqlite:///{db}") as store:
            await store.enqueue_rollouts([RolloutRequest(input=1)])

    asyncio.run(enqueue())
    agent = write_agent(tmp_path, "auto_agent", AUTO_AGENT)
    runner = processes.runner(
        name, f"sqlite:///{db}", agent, "--max-rollouts", "1", *options, env=ENV
    )
    assert runner.exit_code(timeout=300) == 0, runner.log()
    assert runner_summary(runner)["succeeded"] == 1
    [line] = [line for line in runner.log().splitlines() if line.startswith(f"agl runner {name}:")]
    return line


def test_instrument_adds_to_agl_auto_and_the_start_line_says_so(
    tmp_path: Path, processes: Processes
) -> None:
    line = _start_line(processes, tmp_path, "adds", "--instrument", "openai")
    assert line.endswith("tracing openai, langchain; langchain from import agl.auto"), line
    line = _start_line(processes, tmp_path, "auto")
    assert line.endswith("tracing langchain, openai (import agl.auto: every installed one)"), line


def test_no_auto_instrument_leaves_only_the_named_ones(
    tmp_path: Path, processes: Processes
) -> None:
    line = _start_line(
        processes, tmp_path, "only", "--instrument", "openai", "--no-auto-instrument"
    )
    assert line.endswith("tracing openai"), line
    line = _start_line(processes, tmp_path, "none", "--no-auto-instrument")
    assert "tracing nothing (--instrument NAME traces a library" in line, line
