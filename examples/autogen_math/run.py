"""AutoGen math with a calculator tool: one pass over the word problems, and a table per agent.

::

    # one pass over the problems, with a scripted stand-in model (no model needed)
    uv run --no-sync python examples/autogen_math/run.py
    # the same with a real model behind any OpenAI-compatible server (vLLM, a hosted API)
    uv run --no-sync python examples/autogen_math/run.py \\
        --endpoint http://localhost:8000/v1 --model Qwen/Qwen2.5-7B-Instruct
    # train the solver with LightningRL (agl-torch), on a tiny model built in code (~5 min)
    uv run --no-sync python examples/autogen_math/run.py --train [--method successes]

The agent (``math_agent.py``) is an AutoGen ``AssistantAgent`` named ``solver`` with a
``calculator`` ``FunctionTool``; the reward is whether its final message contains the right
number. The runners trace it with agl's AutoGen instrumentation (``agl-autogen``), which names
every agent turn's span after the agent, and with agl's OpenAI instrumentation (the same call,
recorded twice, counts once). The command line is :class:`agl.Script`'s: the default run prints
a table per agent (its LLM calls, the mean reward of the rollouts it took part in).

``--train`` (``math_training.py``) warms agl-torch's tiny model up on a sloppy teacher's
demonstrations, recorded in AutoGen's own requests, then trains the solver, served through
agl's gateway: each step runs LightningRL's GRPO (``--method grpo``, the default) or
fine-tunes on the step's right samples (``--method successes``); it prints each step's calls
and transitions per agent from the run's metrics, and the validation reward before and after
(the curve: ``reward.png`` in the run directory).
"""

from __future__ import annotations

import argparse

import stand_in
from math_agent import math_agent, problems
from math_training import INSTRUMENT

import agl


def train(run: agl.ScriptRun) -> agl.FitResult:
    """``--train``: warm the tiny model up, then train the solver by ``--method``."""
    import math_training

    method = run.options["method"]
    return math_training.train(
        run.run_dir, method=method, steps=run.steps, seed=run.seed, console=run.console
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--method",
        choices=["grpo", "successes"],
        default="grpo",
        help="--train's update: GRPO, or fine-tuning on each step's right samples",
    )


SCRIPT = agl.Script(
    "autogen-math",
    agent=math_agent,
    tasks=lambda split: problems(),  # one set of problems: --train asks its own
    instrument=INSTRUMENT,
    train=train,
    stand_in=lambda tasks: stand_in.script(tasks, stand_in.default_plan(tasks)),
    steps=12,
    add_arguments=add_arguments,
)

if __name__ == "__main__":
    SCRIPT.main(description=(__doc__ or "").splitlines()[0])
