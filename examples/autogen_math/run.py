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
recorded twice, counts once). ``Trainer.dev`` prints every rollout, then this script prints a
table per agent: its LLM calls and the mean reward of the rollouts it took part in.

``--train`` (``math_training.py``) warms agl-torch's tiny model up on a sloppy teacher's
demonstrations, recorded in AutoGen's own requests, then trains the solver, served through
agl's gateway: each step runs LightningRL's GRPO (``--method grpo``, the default) or
fine-tunes on the step's right samples (``--method successes``); it prints each step's calls
and transitions per agent from the run's metrics, and the validation reward before and after
(the curve: ``reward.png`` in the run directory).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from math_agent import math_agent, problems
from math_training import INSTRUMENT
from rich.console import Console

import agl
from agl import read_metrics
from agl.lightning import agent_stats, agent_steps_table, agents_table

__all__ = ["INSTRUMENT", "dev", "main"]


def dev(
    tasks: Sequence[Mapping[str, Any]],
    llm: agl.LLM,
    *,
    run_dir: Path,
    console: bool | Console = True,
) -> agl.FitResult:
    """Run the agent once over ``tasks`` with ``llm``; nothing is trained."""
    trainer = agl.Trainer(
        run_dir=run_dir,
        resources={"llm": llm},
        concurrency=8,
        instrument=INSTRUMENT,
        console=console,
        progress=console is not False,
        plot=False,
    )
    return trainer.dev(math_agent, list(tasks))


def main(argv: Sequence[str] | None = None) -> None:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--run-dir", type=Path, default=Path("runs/autogen-math"))
    parser.add_argument("--endpoint", help="an OpenAI-compatible base URL (default: stand-in)")
    parser.add_argument("--model", default="stand-in", help="the model name to ask for")
    parser.add_argument("--train", action="store_true", help="train the solver with RL")
    parser.add_argument("--steps", type=int, default=12, help="RL steps (--train)")
    parser.add_argument(
        "--method",
        choices=["grpo", "successes"],
        default="grpo",
        help="--train's update: GRPO, or fine-tuning on each step's right samples",
    )
    parser.add_argument("--seed", type=int, default=0, help="seeds --train's data and model")
    parser.add_argument("--quiet", action="store_true", help="no progress or run summaries")
    args = parser.parse_args(argv)
    out = Console()
    log: bool | Console = not args.quiet
    tasks = problems()

    if args.train:
        from math_training import train

        started = time.monotonic()
        result = train(
            args.run_dir, method=args.method, steps=args.steps, seed=args.seed, console=log
        )
        minutes = (time.monotonic() - started) / 60
        out.print(agent_steps_table(read_metrics(args.run_dir)))
        vals = [row["val/reward/mean"] for row in result.history if "val/reward/mean" in row]
        out.print(
            f"validation reward {vals[0]:.3f} -> {vals[-1]:.3f}; {minutes:.1f} min in all "
            f"(RL {result.duration_s / 60:.1f} min); curve: {args.run_dir / 'reward.png'}"
        )
        return

    if args.endpoint is not None:
        llm = agl.LLM(endpoint=args.endpoint, model=args.model)
        result = dev(tasks, llm, run_dir=args.run_dir, console=log)
    else:
        import stand_in

        from agl.testing.openai_server import OpenAIServer

        plan = stand_in.default_plan(tasks)
        with OpenAIServer(stand_in.script(tasks, plan)) as server:
            llm = agl.LLM(endpoint=server.url, model=args.model)
            result = dev(tasks, llm, run_dir=args.run_dir, console=log)
    out.print(agents_table(agent_stats(result.results)))
    rewards = [r.reward or 0.0 for r in result.results]
    out.print(
        f"mean reward {statistics.fmean(rewards):.3f} over {len(rewards)} problems; "
        f"traces: agl rollouts list --store {result.store_url}"
    )


if __name__ == "__main__":
    main()
