"""Claude Code and the Codex CLI as agl agents: calls recorded token-exact, one RL step on them.

::

    bash examples/cli_agents/setup.sh               # the two programs, pinned, into ./node
    uv run --no-sync python examples/cli_agents/run.py
    uv run --no-sync python examples/cli_agents/run.py --harness codex --samples 4

Each rollout runs one real program (:class:`agl.CommandAgent`) in a fresh directory on a small
file task ("Create a file named NAME containing the single line: LINE"); its model calls go to
agl's gateway, which the trainer starts in front of the model (``ctx.serve_llm``) and which
records each call with the engine's token ids. The reward reads the file the program wrote.
The finished rollouts become LightningRL transitions (:class:`agl.TransitionBuilder`), and
agl-torch's :class:`~agl_torch.learner.Learner` takes one RL step on them.

The model is a stand-in (``stand_in.py``): agl's scripted server speaking vLLM's wire with its
token ids, which answers with the shell command that writes the file (a wrong line in every
second rollout). A model small enough to build here could not drive these programs; the policy
trained is a tiny model built in code, and the step shows the machinery (token ids from the
programs' calls, rewards, advantages, the update), not learning. Claude Code runs with
``--bare`` and Codex with short instructions (``codex_instructions.md``) and without its goal
and sub-agent tools, which keeps their prompts at about 4 and 9 thousand tokens (Codex's own
instructions alone are 18 KB) so the step takes seconds on a CPU; with a real model, drop them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import stand_in

import agl
from agl.testing.openai_server import OpenAIServer

__all__ = ["BIN", "HARNESSES", "CliAgents", "OneRLStep", "main", "tasks", "wrote_the_line"]

HERE = Path(__file__).resolve().parent
BIN = HERE / "node" / "node_modules" / ".bin"
"""Where ``setup.sh`` installs the programs."""
HARNESSES = ("claude-code", "codex")


def wrote_the_line(result: agl.CommandResult) -> float:
    """The reward: 1.0 when the task's file holds exactly its line."""
    return 1.0 if result.read(result.task["file"]) == result.task["line"] + "\n" else 0.0


class CliAgents(agl.LitAgent):
    """Hands each task to the program its ``harness`` names (a :class:`agl.CommandAgent`)."""

    def __init__(self, bin_dir: Path = BIN, timeout: float = 180) -> None:
        env = {"PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
        codex_instructions = json.dumps(str(HERE / "codex_instructions.md"))  # a TOML string
        self.agents = {
            "claude-code": agl.CommandAgent(
                ["claude", "-p", "{task[prompt]}", "--bare", "--dangerously-skip-permissions"],
                reward=wrote_the_line,
                timeout=timeout,
                env=env,
            ),
            "codex": agl.CommandAgent(
                [
                    "codex",
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
                env=env,
            ),
        }

    async def rollout(self, task: Any, llm: agl.LLM, attempt: agl.Attempt) -> Any:
        return await self.agents[task["harness"]].rollout(task, llm, attempt)


def tasks(harnesses: Sequence[str] = HARNESSES) -> list[dict[str, str]]:
    """One file task per harness."""
    lines = {"claude-code": ("notes.txt", "ship it"), "codex": ("todo.txt", "write tests")}
    return [stand_in.task(harness, *lines[harness]) for harness in harnesses]


class OneRLStep(agl.Algorithm):
    """Serve the model through agl's gateway, run the tasks, take one RL step on the calls.

    Attributes (after the run): ``results`` (the rollouts), ``batch`` (their transitions) and
    ``metrics`` (the step's).
    """

    name = "one-rl-step"

    def __init__(self, engine_url: str, policy_dir: Path, samples: int = 2) -> None:
        self.engine_url = engine_url
        self.policy_dir = policy_dir
        self.samples = samples
        self.results: list[agl.RolloutResult] = []
        self.batch: agl.TransitionBatch | None = None
        self.metrics: dict[str, float] = {}

    async def run(self, ctx: agl.AlgorithmContext) -> None:
        llm = await ctx.serve_llm([self.engine_url], "policy")
        update = await ctx.publish({"llm": llm})
        self.results = await ctx.run_rollouts(
            ctx.train_tasks, n=self.samples, resources_id=update.resources_id
        )
        # The stand-in's rewards differ within each group by design; keep uniform ones anyway.
        self.batch = agl.TransitionBuilder(drop_zero_variance=False, trajectory=True).build(
            self.results
        )
        self.metrics = await asyncio.to_thread(self._rl_step, self.batch)
        rewards = [r.reward or 0.0 for r in self.results]
        ctx.log(0, {"reward/mean": statistics.fmean(rewards), **self.metrics})

    def _rl_step(self, batch: agl.TransitionBatch) -> dict[str, float]:
        from agl_torch.learner import Learner, LearnerSettings
        from agl_torch.policy import load_policy
        from agl_torch.tiny import build_tiny_model

        # The ids are the stand-in's (a byte tokenizer, ids < 259); any vocabulary that large
        # takes them. A real run trains the model that served the calls.
        build_tiny_model(self.policy_dir, vocab_size=512, max_position_embeddings=16384)
        model, tokenizer = load_policy(self.policy_dir, quiet=True)
        learner = Learner(model, tokenizer, LearnerSettings(lr=1e-4))
        return learner.rl_step(list(batch))


def main(argv: Sequence[str] | None = None) -> OneRLStep:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--run-dir", type=Path, default=Path("runs/cli-agents"))
    parser.add_argument("--bin", type=Path, default=BIN, help="where claude and codex are")
    parser.add_argument("--harness", choices=HARNESSES, action="append", help="(default: both)")
    parser.add_argument("--samples", type=int, default=2, help="rollouts per task")
    parser.add_argument("--quiet", action="store_true", help="no progress or run summaries")
    args = parser.parse_args(argv)
    harnesses = args.harness or list(HARNESSES)
    programs = {"claude-code": "claude", "codex": "codex"}
    missing = [programs[h] for h in harnesses if not (args.bin / programs[h]).exists()]
    if missing:
        sys.exit(f"{', '.join(missing)} not in {args.bin}: run bash {HERE / 'setup.sh'} first")

    with OpenAIServer(stand_in.script(), max_model_len=65536) as engine:
        algorithm = OneRLStep(engine.url, args.run_dir / "tiny-model", samples=args.samples)
        agl.Trainer(
            algorithm=algorithm,
            run_dir=args.run_dir,
            concurrency=1,  # in turn: the stand-in's right and wrong answers alternate
            console=not args.quiet,
            progress=not args.quiet,
            plot=False,
        ).fit(CliAgents(args.bin), tasks(harnesses))
    for result in algorithm.results:
        task: Any = result.rollout.input
        outcome = result.error or f"reward {result.reward}, {result.llm_calls} LLM calls"
        print(f"{task['harness']:12} {outcome}")
    batch = algorithm.batch
    assert batch is not None
    tokens = sum(len(t.prompt_ids) + len(t.response_ids) for t in batch)
    print(f"{len(batch)} transitions ({tokens} tokens); {batch.report.summary()}")
    print(f"RL step: {json.dumps(algorithm.metrics)}")
    return algorithm


if __name__ == "__main__":
    main()
