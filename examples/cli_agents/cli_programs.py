"""The agents: Claude Code and the Codex CLI, each an :class:`agl.CommandAgent`, and the reward.

Each rollout runs the program its task names in a fresh directory on a small file task ("Create
a file named NAME containing the single line: LINE"); the reward reads the file it wrote. The
programs are the ones ``setup.sh`` installs into ``./node``, else those on ``PATH``.

Claude Code runs with ``--bare`` and Codex with short instructions (``codex_instructions.md``)
and without its goal and sub-agent tools, which keeps their prompts at about 4 and 9 thousand
tokens (Codex's own instructions alone are 18 KB) so an RL step takes seconds on a CPU; with a
real model, drop them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import stand_in

import agl

__all__ = ["BIN", "HARNESSES", "CliAgents", "tasks", "wrote_the_line"]

HERE = Path(__file__).resolve().parent
BIN = HERE / "node" / "node_modules" / ".bin"
"""Where ``setup.sh`` installs the programs."""
HARNESSES = ("claude-code", "codex")


def wrote_the_line(result: agl.CommandResult) -> float:
    """The reward: 1.0 when the task's file holds exactly its line."""
    return 1.0 if result.read(result.task["file"]) == result.task["line"] + "\n" else 0.0


def _program(name: str) -> str:
    """``setup.sh``'s install of ``name``, else ``name`` (found on ``PATH`` when it runs)."""
    own = BIN / name
    return str(own) if own.exists() else name


class CliAgents(agl.LitAgent):
    """Hands each task to the program its ``harness`` names (a :class:`agl.CommandAgent`)."""

    def __init__(self, timeout: float = 180) -> None:
        codex_instructions = json.dumps(str(HERE / "codex_instructions.md"))  # a TOML string
        self.agents = {
            "claude-code": agl.CommandAgent(
                [
                    _program("claude"),
                    "-p",
                    "{task[prompt]}",
                    "--bare",
                    "--dangerously-skip-permissions",
                ],
                reward=wrote_the_line,
                timeout=timeout,
            ),
            "codex": agl.CommandAgent(
                [
                    _program("codex"),
                    "exec",
                    "--skip-git-repo-check",
                    "--sandbox",
                    "workspace-write",
                    "-c",
                    f"model_instructions_file={codex_instructions}",
                    "-c",
                    "features.goals=false",
                    "-c",
                    "agents.enabled=false",
                    "{task[prompt]}",
                ],
                reward=wrote_the_line,
                timeout=timeout,
            ),
        }

    async def rollout(self, task: Any, llm: agl.LLM, attempt: agl.Attempt) -> Any:
        return await self.agents[task["harness"]].rollout(task, llm, attempt)


def tasks(harnesses: Sequence[str] = HARNESSES) -> list[dict[str, str]]:
    """One file task per harness."""
    lines = {"claude-code": ("notes.txt", "ship it"), "codex": ("todo.txt", "write tests")}
    return [stand_in.task(harness, *lines[harness]) for harness in harnesses]
