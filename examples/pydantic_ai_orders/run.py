"""Two PydanticAI agents: one pass with a table per agent, or RL for the support agent.

::

    # one pass over the validation questions, with a scripted stand-in model (no model needed)
    uv run --no-sync python examples/pydantic_ai_orders/run.py
    # the same with a real model behind any OpenAI-compatible server (vLLM, a hosted API)
    uv run --no-sync python examples/pydantic_ai_orders/run.py --split all \\
        --endpoint http://localhost:8000/v1 --model Qwen/Qwen2.5-7B-Instruct
    # train only the support agent with LightningRL (agl-torch), on a tiny model built in code
    uv run --no-sync python examples/pydantic_ai_orders/run.py --train --steps 3

The agents (``support_agents.py``) are two PydanticAI agents: ``triage`` finds the order id in
the customer's message, ``support`` looks the order up with a tool and answers with a typed
``OrderReply``; the reward is whether the reply states the order's fact (``orders.py``). The
runners trace them with agl's PydanticAI instrumentation (``agl-pydantic-ai``). The command
line is :class:`agl.Script`'s: the default run prints a table per agent; ``--train`` maps the
agents to algorithms, ``{"support": LightningRLTorch(...), "*": None}``, so every step runs
both agents but only support's calls become transitions (triage's are counted and left alone).
"""

from __future__ import annotations

from typing import Any

import orders
import stand_in
from support_agents import SUPPORT, TRIAGE, order_support

import agl


def support_rl(run: agl.ScriptRun, algorithm: type[Any] | None = None) -> dict[str, Any]:
    """``--train``: LightningRL for the support agent only, on a tiny model built in code."""
    from agl_torch.demo import tiny_rl
    from agl_torch.rl import LightningRLTorch

    corpus = [TRIAGE, SUPPORT, *(q["question"] for q in orders.questions())]
    corpus += [str(orders.lookup(q["order_id"])) for q in orders.questions()]
    return {"support": tiny_rl(run, corpus, algorithm=algorithm or LightningRLTorch), "*": None}


SCRIPT = agl.Script(
    "pydantic-ai-orders",
    agent=order_support,
    tasks=orders.questions,
    instrument=["pydantic-ai"],
    algorithm=support_rl,
    stand_in=lambda tasks: stand_in.script(tasks, stand_in.default_plan(tasks)),
    trained="only the support agent was trained",
)

if __name__ == "__main__":
    SCRIPT.main(description=(__doc__ or "").splitlines()[0])
