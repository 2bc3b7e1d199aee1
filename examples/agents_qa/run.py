"""OpenAI Agents SDK retrieval QA: two agents, a search tool, and RL for the answerer only.

::

    # one pass over the validation questions, with a scripted stand-in model (no model needed)
    uv run --no-sync python examples/agents_qa/run.py
    # the same with a real model behind any OpenAI-compatible server (vLLM, a hosted API)
    uv run --no-sync python examples/agents_qa/run.py --split all \\
        --endpoint http://localhost:8000/v1 --model Qwen/Qwen2.5-7B-Instruct
    # train the answerer (agl-torch), on a tiny model built in code
    uv run --no-sync python examples/agents_qa/run.py --train [--method grpo]

The agent (``qa_agent.py``) is two Agents SDK agents: the ``researcher`` searches a small local
corpus about invented things with a ``search`` function tool (two searches per question: each
question is multi-hop) and hands off to the ``answerer``, which writes the short answer; the
reward is whether the answer, normalized, holds the gold one. The runners trace it with agl's
Agents SDK instrumentation (``agl-openai-agents``), which names every agent turn's span after
the agent, so each LLM call belongs to an agent:

- the default run (``Trainer.dev``) prints every rollout, then a table per agent: its LLM calls
  and the mean reward of the rollouts it took part in;
- ``--train`` maps the agents to algorithms, ``{"answerer": SFTTorch(...), "researcher":
  None}`` (``LightningRLTorch(...)`` with ``--method grpo``): every step runs both agents,
  but only the answerer's calls become transitions and only its model (the LLM resource,
  served through agl's gateway) is trained; the researcher's calls are counted and left alone.
  It prints each step's calls and transitions per agent, from the run's metrics
  (``agents/<name>/calls``, ``agents/<name>/transitions``).

``--train`` (``qa_training.py``) asks its questions about a generated world of invented
companies, founders and towns (``qa_world.py``), keeps the researcher a fixed model (the
scripted stand-in, published as the run's ``researcher_llm``), warms agl-torch's tiny model up
on a sloppy teacher's answers, recorded in the Agents SDK's own requests, then trains the
answerer, served through agl's gateway, on questions the warm model never saw: each step
fine-tunes on the samples that found the answer (``--method successes``, the default) or runs
LightningRL's GRPO (``--method grpo``). It prints the validation reward before and after (the
curve: ``reward.png`` in the run directory).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import qa_agent
from qa_agent import questions
from qa_training import INSTRUMENT
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
    """Run the agents once over ``tasks`` with ``llm``; nothing is trained."""
    trainer = agl.Trainer(
        run_dir=run_dir,
        resources={"llm": llm},
        concurrency=8,
        instrument=INSTRUMENT,
        console=console,
        progress=console is not False,
        plot=False,
    )
    return trainer.dev(qa_agent.qa_agent, list(tasks))


def main(argv: Sequence[str] | None = None) -> None:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--run-dir", type=Path, default=Path("runs/agents-qa"))
    parser.add_argument("--split", choices=["train", "val", "all"], default=None)
    parser.add_argument("--endpoint", help="an OpenAI-compatible base URL (default: stand-in)")
    parser.add_argument("--model", default="stand-in", help="the model name to ask for")
    parser.add_argument("--train", action="store_true", help="train the answerer with RL")
    parser.add_argument("--steps", type=int, default=20, help="RL steps (--train)")
    parser.add_argument("--seed", type=int, default=0, help="seeds --train's data and model")
    parser.add_argument(
        "--method",
        choices=["successes", "grpo"],
        default="successes",
        help="--train's update: fine-tuning on each step's right answers, or GRPO",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress or run summaries")
    args = parser.parse_args(argv)
    out = Console()
    log: bool | Console = not args.quiet
    tasks = questions(args.split or "val")

    if args.train:
        from qa_training import train

        started = time.monotonic()
        result = train(
            args.run_dir, method=args.method, steps=args.steps, seed=args.seed, console=log
        )
        minutes = (time.monotonic() - started) / 60
        out.print(agent_steps_table(read_metrics(args.run_dir)))
        vals = [row["val/reward/mean"] for row in result.history if "val/reward/mean" in row]
        out.print(
            f"validation reward {vals[0]:.3f} -> {vals[-1]:.3f}; {minutes:.1f} min in all "
            f"(RL {result.duration_s / 60:.1f} min); only the answerer was trained (the "
            "researcher's calls were counted and left alone); curve: "
            f"{args.run_dir / 'reward.png'}"
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
        f"mean reward {statistics.fmean(rewards):.3f} over {len(rewards)} questions; "
        f"traces: agl rollouts list --store {result.store_url}"
    )


if __name__ == "__main__":
    main()
