"""The CLI agents example: the real Claude Code and Codex CLI, through agl's gateway, one RL step.

Slow: it installs the pinned programs with npm (about 400 MB, once, into a cache folder:
``$AGL_CLI_AGENTS_CACHE``, else ``~/.cache/agl-tests/cli-agents``) and runs each twice on a
file task, with agl's scripted server playing the model (a model small enough for a test cannot
drive them). Skipped where npm is missing. The fast tests of :class:`agl.CommandAgent` are in
``tests/core/test_command_agent.py``.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from agl import semconv
from agl._run._command_harness import HARNESSES
from agl.testing.gateway_rollouts import spans_of_type

from .conftest import load

PACKAGES = [harness.install.split()[-1] for harness in HARNESSES.values()]
"""``@anthropic-ai/claude-code@2.1.328``, ``@openai/codex@0.169.0``: the versions agl names in
its install hints, which ``setup.sh`` installs too."""


def installed_programs() -> Path:
    """The folder holding ``claude`` and ``codex``, installed into the cache when missing."""
    if shutil.which("npm") is None:
        pytest.skip("npm is not installed: the example's programs install with npm")
    default = Path.home() / ".cache" / "agl-tests" / "cli-agents"
    cache = Path(os.environ.get("AGL_CLI_AGENTS_CACHE", default))
    bin_dir = cache / "node_modules" / ".bin"
    versions = {"claude": "2.1.328", "codex": "0.169.0"}
    if not all(_version(bin_dir / name).startswith(v) for name, v in versions.items()):
        cache.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["npm", "install", "--prefix", str(cache), "--no-audit", "--no-fund", *PACKAGES],
            check=True,
            timeout=600,
        )
    return bin_dir


def _version(program: Path) -> str:
    if not program.exists():
        return ""
    done = subprocess.run(
        [program, "--version"], check=False, capture_output=True, text=True, timeout=60
    )
    return done.stdout.strip().removeprefix("codex-cli ")


def test_setup_installs_the_versions_agl_names() -> None:
    setup = (load("cli_agents").folder / "setup.sh").read_text(encoding="utf-8")
    assert all(package in setup for package in PACKAGES)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_claude_code_and_codex_are_recorded_token_exact_and_trained_on(tmp_path: Path) -> None:
    pytest.importorskip("agl_torch", reason="the RL step needs agl-torch")
    bin_dir = installed_programs()
    run = load("cli_agents").run
    algorithm = run.main(["--bin", str(bin_dir), "--run-dir", str(tmp_path / "run"), "--quiet"])

    results = algorithm.results
    assert [r.rollout.input["harness"] for r in results] == [
        "claude-code", "claude-code", "codex", "codex",
    ]  # fmt: skip
    assert [r.reward for r in results] == [1.0, 0.0, 1.0, 0.0], [r.error for r in results]
    for result in results:
        calls = spans_of_type(result.spans, semconv.SPAN_TYPE_GATEWAY)
        assert len(calls) == 2  # the shell tool's call, then the final text
        wire = {"claude-code": "messages", "codex": "responses"}[result.rollout.input["harness"]]
        for call in calls:
            assert call.attributes[semconv.AGL_WIRE] == wire
            assert call.attributes[semconv.AGL_PROMPT_TOKEN_IDS]
            assert call.attributes[semconv.AGL_RESPONSE_TOKEN_IDS]
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
