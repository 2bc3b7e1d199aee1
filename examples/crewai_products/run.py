"""A CrewAI crew of two: one pass over the questions with a table per agent, or RL for the writer.

::

    # one pass over the validation questions, with a scripted stand-in model (no model needed)
    uv run --no-sync python examples/crewai_products/run.py
    # the same with a real model behind any OpenAI-compatible server (vLLM, a hosted API)
    uv run --no-sync python examples/crewai_products/run.py --split all \\
        --endpoint http://localhost:8000/v1 --model Qwen/Qwen2.5-7B-Instruct
    # train only the writer with LightningRL (agl-torch), on a tiny model built in code
    uv run --no-sync python examples/crewai_products/run.py --train --steps 3

The agent (``support_crew.py``) is a sequential CrewAI crew: a ``researcher`` looks the product
up with a catalog tool, a ``writer`` answers the customer from the researcher's report; the
reward is whether the answer states the catalog's value (``products.py``). The runners trace it
with agl's CrewAI instrumentation (``agl-crewai``), which names each task's span after its
agent's role and records the model calls with their response ids.

The command line is :class:`agl.Script`'s: the default run prints a table per agent (its LLM
calls, the mean reward of the rollouts it took part in);
``--train`` maps the agents to algorithms,
``{"writer": LightningRLTorch(...), "*": None}``:
every step runs the whole crew, but only the writer's calls become transitions and only the
model (the LLM resource, served through agl's gateway) is trained with them; the
researcher's calls are counted and left alone (here it calls the same model, which the
writer's updates change: give it a resource of its own to keep it fixed). It prints each
step's calls per agent and the transitions trained on, from the run's metrics.
"""

from __future__ import annotations

from typing import Any

import products
import stand_in
from support_crew import RESEARCH, WRITE, support_crew

import agl


def writer_rl(run: agl.ScriptRun, algorithm: type[Any] | None = None) -> dict[str, Any]:
    """``--train``: LightningRL for the writer only, on a tiny model built in code."""
    from agl_torch.demo import tiny_rl
    from agl_torch.rl import LightningRLTorch

    corpus = [RESEARCH, WRITE, *(q["question"] for q in products.questions())]
    corpus += [str(p) for p in products.catalog()]
    return {"writer": tiny_rl(run, corpus, algorithm=algorithm or LightningRLTorch), "*": None}


SCRIPT = agl.Script(
    "crewai-products",
    agent=support_crew,
    tasks=products.questions,
    instrument=["crewai"],
    algorithm=writer_rl,
    stand_in=lambda tasks: stand_in.script(tasks, stand_in.default_plan(tasks)),
    trained="only the writer was trained",
)

if __name__ == "__main__":
    SCRIPT.main(description=(__doc__ or "").splitlines()[0])
