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

import qa_agent
import stand_in
from qa_training import INSTRUMENT

import agl


def train(run: agl.ScriptRun) -> agl.FitResult:
    """``--train``: the answerer learns, by ``--method``; the researcher stays frozen."""
    import qa_training

    method = run.options["method"]
    return qa_training.train(
        run.run_dir, method=method, steps=run.steps, seed=run.seed, console=run.console
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--method",
        choices=["successes", "grpo"],
        default="successes",
        help="--train's update: fine-tuning on each step's right answers, or GRPO",
    )


SCRIPT = agl.Script(
    "agents-qa",
    agent=qa_agent.qa_agent,
    tasks=qa_agent.questions,
    instrument=INSTRUMENT,
    train=train,
    stand_in=lambda tasks: stand_in.script(tasks, stand_in.default_plan(tasks)),
    steps=20,
    trained="only the answerer was trained (the researcher's calls were counted and left alone)",
    add_arguments=add_arguments,
)

if __name__ == "__main__":
    SCRIPT.main(description=(__doc__ or "").splitlines()[0])
