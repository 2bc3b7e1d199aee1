"""LangGraph text-to-SQL: three agents on a real SQLite database; RL for the writer and rewriter.

::

    # one pass over the validation questions, with a scripted stand-in model (no model needed)
    uv run --no-sync python examples/langgraph_sql/run.py
    # the same with a real model behind any OpenAI-compatible server (vLLM, a hosted API)
    uv run --no-sync python examples/langgraph_sql/run.py --split all \\
        --endpoint http://localhost:8000/v1 --model Qwen/Qwen2.5-Coder-7B-Instruct
    # train the writer and the rewriter with LightningRL (agl-torch), the checker frozen, on a
    # tiny model built in code and warmed up on a sloppy teacher's demonstrations (~6 min)
    uv run --no-sync python examples/langgraph_sql/run.py --train

The agent (``sql_agent.py``) is a LangGraph ``StateGraph`` whose nodes ``writer``, ``checker``
and ``rewriter`` each call ``ChatOpenAI``; the reward runs its final query and the gold query on
the database (``company_db.py``) and compares the rows. The runners trace it with agl's
LangChain instrumentation (``agl-langchain``), which names every node's span after the node, so
each LLM call belongs to an agent:

- the default run (``Trainer.dev``) prints every rollout, then a table per agent: its LLM calls
  and the mean reward of the rollouts it took part in;
- ``--train`` (``sql_training.py``) asks generated questions (``sql_questions.py``), warms the
  tiny model up on a sloppy teacher's demonstrations, then maps the agents to algorithms,
  ``{"writer": rl, "rewriter": rl, "checker": None}``: one model, served through agl's
  gateway, writes and rewrites and is trained on both agents' calls; the checker calls a
  fixed model of its own (the ``checker_llm`` resource) and its calls are counted, never
  trained. It prints each step's calls and transitions per agent, and the validation reward
  before and after (the curve: ``reward.png`` in the run directory).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import company_db
from rich.console import Console
from sql_agent import sql_agent
from sql_training import INSTRUMENT

import agl
from agl import read_metrics
from agl.lightning import agent_stats, agent_steps_table, agents_table

__all__ = ["INSTRUMENT", "dev", "main"]


def dev(
    tasks: Sequence[Mapping[str, str]],
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
    return trainer.dev(sql_agent, list(tasks))


def main(argv: Sequence[str] | None = None) -> None:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--run-dir", type=Path, default=Path("runs/langgraph-sql"))
    parser.add_argument("--split", choices=["train", "val", "all"], default="val")
    parser.add_argument("--endpoint", help="an OpenAI-compatible base URL (default: stand-in)")
    parser.add_argument("--model", default="stand-in", help="the model name to ask for")
    parser.add_argument(
        "--train", action="store_true", help="train the writer and the rewriter with RL"
    )
    parser.add_argument("--steps", type=int, default=12, help="RL steps (--train)")
    parser.add_argument("--seed", type=int, default=0, help="seeds --train's data and model")
    parser.add_argument("--quiet", action="store_true", help="no progress or run summaries")
    args = parser.parse_args(argv)
    out = Console()
    log: bool | Console = not args.quiet
    tasks = company_db.questions(args.split)

    if args.train:
        from sql_training import train

        started = time.monotonic()
        result = train(args.run_dir, steps=args.steps, seed=args.seed, console=log)
        minutes = (time.monotonic() - started) / 60
        out.print(agent_steps_table(read_metrics(args.run_dir)))
        vals = [row["val/reward/mean"] for row in result.history if "val/reward/mean" in row]
        out.print(
            f"validation reward {vals[0]:.3f} -> {vals[-1]:.3f}; {minutes:.1f} min in all "
            f"(RL {result.duration_s / 60:.1f} min); curve: {args.run_dir / 'reward.png'}"
        )
        return

    if args.endpoint is not None:
        result = dev(
            tasks,
            agl.LLM(endpoint=args.endpoint, model=args.model),
            run_dir=args.run_dir,
            console=log,
        )
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
