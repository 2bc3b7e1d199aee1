"""Claude Code and the Codex CLI as agl agents: calls recorded token-exact, an RL step on them.

::

    bash examples/cli_agents/setup.sh               # the two programs, pinned, into ./node
    # one pass: each program once, with a scripted stand-in model; a table per agent
    uv run --no-sync python examples/cli_agents/run.py
    # one RL step on their calls (agl-torch), 2 rollouts per task; or more of each
    uv run --no-sync python examples/cli_agents/run.py --train
    uv run --no-sync python examples/cli_agents/run.py --train --samples 4 --steps 2

Each rollout runs one real program (:class:`agl.CommandAgent`, ``cli_programs.py``) in a fresh
directory on a small file task; the reward reads the file it wrote. Its model calls go to agl's
gateway, which records each with the engine's token ids: no instrumentor sees inside a program,
so the dev run serves the model through the gateway too (``gateway=True``), and the table per
agent counts each program's calls. ``--train`` (``one_rl_step.py``) turns the rollouts into
LightningRL transitions and takes an RL step on them with agl-torch.

The model is a stand-in (``stand_in.py``): agl's scripted server speaking vLLM's wire with its
token ids, which answers with the shell command that writes the file (a wrong line in every
second rollout). A model small enough to build here could not drive these programs; the policy
trained is a tiny model built in code, and the step shows the machinery, not learning.
"""

from __future__ import annotations

import argparse

import cli_programs
import stand_in
from one_rl_step import OneRLStep

import agl


def one_rl_step(run: agl.ScriptRun) -> OneRLStep:
    """``--train``: RL steps on the calls the model (``run.llm``) served the programs."""
    assert run.llm is not None  # the stand-in, or --endpoint's model
    samples = run.options["samples"]
    return OneRLStep(run.llm, run.run_dir / "tiny-model", samples=samples, steps=run.steps)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--samples", type=int, default=2, help="--train's rollouts per task")


SCRIPT = agl.Script(
    "cli-agents",
    agent=cli_programs.CliAgents(),
    tasks=lambda split: cli_programs.tasks(),  # one task per program, whichever the split
    algorithm=one_rl_step,
    stand_in=lambda tasks: stand_in.script(),
    max_model_len=65536,  # the programs' prompts hold their tools and instructions
    gateway=True,
    steps=1,
    concurrency=1,  # in turn: the stand-in's right and wrong answers alternate
    add_arguments=add_arguments,
)

if __name__ == "__main__":
    SCRIPT.main(description=(__doc__ or "").splitlines()[0])
