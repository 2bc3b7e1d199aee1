"""LangGraph text-to-SQL: three agents on a real SQLite database, and RL for the writer only.

::

    # one pass over the validation questions, with a scripted stand-in model (no model needed)
    uv run --no-sync python examples/langgraph_sql/run.py
    # the same with a real model behind any OpenAI-compatible server (vLLM, a hosted API)
    uv run --no-sync python examples/langgraph_sql/run.py --split all \\
        --endpoint http://localhost:8000/v1 --model Qwen/Qwen2.5-Coder-7B-Instruct
    # train only the writer with LightningRL (agl-torch), on a tiny model built in code
    uv run --no-sync python examples/langgraph_sql/run.py --train --steps 3

The agent (``sql_agent.py``) is a LangGraph ``StateGraph`` whose nodes ``writer``, ``checker``
and ``rewriter`` each call ``ChatOpenAI``; the reward runs its final query and the gold query on
the database (``company_db.py``) and compares the rows. The runners trace it with agl's
LangChain instrumentation (``agl-langchain``), which names every node's span after the node, so
each LLM call belongs to an agent:

- the default run (``Trainer.dev``) prints every rollout, then a table per agent: its LLM calls
  and the mean reward of the rollouts it took part in;
- ``--train`` maps the agents to algorithms, ``{"writer": LightningRLTorch(...), "*": None}``:
  every step runs the whole graph, but only the writer's calls become transitions and only
  the writer's model (the LLM resource, served through agl's gateway) is trained; the checker's
  and rewriter's calls are counted and left alone (they call the same model here, which the
  writer's updates change: give them a resource of their own to keep them fixed). It prints
  each step's calls and transitions per agent.

The tiny model starts from random weights, so its queries are noise and every reward is 0:
the run shows the machinery (token ids, attribution, the update), not learning. It keeps
groups whose rewards are all equal (advantage 0) so that the transitions exist to look at;
with a real model, leave :class:`agl.TransitionBuilder` at its default and drop them.
"""

from __future__ import annotations

import argparse
import math
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import company_db
from rich.console import Console
from sql_agent import CHECKER_PROMPT, REWRITER_PROMPT, WRITER_PROMPT, sql_agent

import agl
from agl import read_metrics
from agl.lightning import agent_stats, agent_steps_table, agents_table

__all__ = [
    "INSTRUMENT",
    "dev",
    "main",
    "train",
]

INSTRUMENT = ["langchain", "openai"]
"""What the runners trace: LangChain and LangGraph (``agl-langchain``: each node's span names its
agent, each LLM span carries the response id that joins it to the gateway's token ids), and the
openai client underneath ``ChatOpenAI`` (the same call, recorded twice, counts once)."""


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


def train(
    tasks: Sequence[Mapping[str, str]],
    *,
    run_dir: Path,
    steps: int = 3,
    tasks_per_step: int = 2,
    n_samples: int = 2,
    max_tokens: int = 32,
    lr: float = 1e-3,
    console: bool | Console = True,
    algorithm: type[Any] | None = None,
) -> agl.FitResult:
    """Train the writer (only) with LightningRL on a tiny model built in code.

    ``algorithm`` replaces :class:`~agl_torch.rl.LightningRLTorch` with a subclass of it (to
    look at each step's batch, say).
    """
    from agl_torch.rl import LightningRLTorch
    from agl_torch.settings import CheckpointSettings, LearnerSettings
    from agl_torch.tiny import build_tiny_model

    # A tokenizer trained on the task's own text keeps the prompts short.
    everything = company_db.questions()
    corpus = [company_db.schema(), WRITER_PROMPT, CHECKER_PROMPT, REWRITER_PROMPT]
    corpus += [f"Question: {q['question']}\n```sql\n{q['sql']}\n```" for q in everything]
    model = build_tiny_model(
        run_dir / "tiny-model", corpus=corpus, vocab_size=512, max_position_embeddings=2048
    )
    writer = (algorithm or LightningRLTorch)(
        model,
        loop=agl.LoopSettings(
            n_epochs=math.ceil(steps * tasks_per_step / len(tasks)),  # as many as `steps` needs
            n_samples=n_samples,
            batch_size=tasks_per_step,
            max_steps=steps,
        ),
        learner=LearnerSettings(lr=lr),
        sampling=agl.SamplingSettings(max_tokens=max_tokens),
        # Random weights: every reward is 0. Keep those groups (advantage 0) to show them.
        transitions=agl.TransitionBuilder(drop_zero_variance=False),
        checkpoints=CheckpointSettings(every=0),
    )
    trainer = agl.Trainer(
        algorithm={"writer": writer, "*": None},
        run_dir=run_dir,
        concurrency=tasks_per_step * n_samples,
        instrument=INSTRUMENT,
        console=console,
        progress=console is not False,
        plot=False,
    )
    return trainer.fit(sql_agent, list(tasks))


def main(argv: Sequence[str] | None = None) -> None:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--run-dir", type=Path, default=Path("runs/langgraph-sql"))
    parser.add_argument("--split", choices=["train", "val", "all"], default=None)
    parser.add_argument("--endpoint", help="an OpenAI-compatible base URL (default: stand-in)")
    parser.add_argument("--model", default="stand-in", help="the model name to ask for")
    parser.add_argument("--train", action="store_true", help="train the writer with RL")
    parser.add_argument("--steps", type=int, default=3, help="RL steps (--train)")
    parser.add_argument("--quiet", action="store_true", help="no progress or run summaries")
    args = parser.parse_args(argv)
    out = Console()
    log: bool | Console = not args.quiet
    tasks = company_db.questions(args.split or ("train" if args.train else "val"))

    if args.train:
        train(tasks, run_dir=args.run_dir, steps=args.steps, console=log)
        rows = read_metrics(args.run_dir)
        out.print(agent_steps_table(rows))
        other = sum(row.get("transitions/other_agents_calls") or 0 for row in rows)
        out.print(
            f"only the writer was trained; {other:.0f} calls of other agents were left out "
            f"(other_agents_calls). Run dir: {args.run_dir}"
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
