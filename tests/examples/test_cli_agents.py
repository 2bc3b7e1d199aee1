"""The CLI agents example: the real Claude Code and Codex CLI, through agl's gateway, an RL step.

Slow: it installs the pinned programs with npm (once, into a cache folder: the ``cli_programs``
fixture) and runs each twice on a file task, with agl's scripted server playing the model (a
model small enough for a test cannot drive them). Skipped where npm is missing. Its command
line and the dev run's table per agent are tested in ``test_scripts.py``; the fast tests of
:class:`agl.CommandAgent` are in ``tests/core/test_command_agent.py``.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import pytest

from agl import semconv
from agl.lightning import extract_calls
from agl.testing.gateway_rollouts import spans_of_type

from .conftest import cli_packages, load


def test_setup_installs_the_versions_agl_names() -> None:
    setup = (load("cli_agents").folder / "setup.sh").read_text(encoding="utf-8")
    assert all(package in setup for package in cli_packages().values())


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_claude_code_and_codex_are_recorded_token_exact_and_trained_on(
    cli_programs: Path, tmp_path: Path
) -> None:
    pytest.importorskip("agl_torch", reason="the RL step needs agl-torch")
    run = load("cli_agents").run
    made: list[Any] = []

    def one_rl_step(settings: Any) -> Any:
        made.append(run.one_rl_step(settings))
        return made[-1]

    script = dataclasses.replace(run.SCRIPT, algorithm=one_rl_step)
    script.main(["--train", "--run-dir", str(tmp_path / "run"), "--quiet"])
    [algorithm] = made

    results = algorithm.results
    assert [r.rollout.input["harness"] for r in results] == [
        "claude-code", "claude-code", "codex", "codex",
    ]  # fmt: skip
    assert [r.reward for r in results] == [1.0, 0.0, 1.0, 0.0], [r.error for r in results]
    for result in results:
        calls = spans_of_type(result.spans, semconv.SPAN_TYPE_GATEWAY)
        assert len(calls) == 2  # the shell tool's call, then the final text
        harness = result.rollout.input["harness"]
        wire = {"claude-code": "messages", "codex": "responses"}[harness]
        for call in calls:
            assert call.attributes[semconv.AGL_WIRE] == wire
            assert call.attributes[semconv.AGL_PROMPT_TOKEN_IDS]
            assert call.attributes[semconv.AGL_RESPONSE_TOKEN_IDS]
        # each call is its program's: the agent is named after it
        program = {"claude-code": "claude", "codex": "codex"}[harness]
        assert [call.agent for call in extract_calls(result.spans).calls] == [program] * 2
        [ran] = spans_of_type(result.spans, semconv.SPAN_TYPE_OBJECT)
        command = json.loads(str(ran.attributes[semconv.AGL_OBJECT_JSON]))
        assert command["exit_code"] == 0
        assert not command["timed_out"]
        assert "Done: the file is written." in command["stdout"]

    batch = algorithm.batch
    # Each program resends its conversation token for token: its two calls are one sample.
    assert len(batch) == 4, batch.report.summary()
    assert sorted(t.advantage > 0 for t in batch) == [False, False, True, True]
    assert all(t.response_logprobs for t in batch)
    assert algorithm.metrics["updates"] == 1
    assert math.isfinite(algorithm.metrics["loss"])
