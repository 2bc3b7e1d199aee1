"""The agents: a PydanticAI ``triage`` agent that finds the order id, then a ``support`` agent
with a tool and a typed output.

``triage`` reads the customer's message and answers with the order id alone (plain text).
``support`` gets that id and the message, looks the order up with its :func:`lookup_order`
tool and answers with an :class:`OrderReply`, a pydantic model PydanticAI validates (asking the
model again when it does not fit). They are the agents you would write anyway; the only agl
code is :func:`order_support`, the rollout: it gets the task and the LLM the run serves, runs
the two agents and returns the reward, whether the reply states the order's fact. agl's
PydanticAI instrumentation makes each agent run an agent span named after the agent, which is
how every LLM call is attributed to ``triage`` or ``support``.
"""

from __future__ import annotations

import json
from typing import Any

from orders import lookup, reward
from pydantic import BaseModel
from pydantic_ai import Agent, ModelSettings
from pydantic_ai.exceptions import UnexpectedModelBehavior
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

import agl

__all__ = ["SUPPORT", "TRIAGE", "OrderReply", "build_agents", "lookup_order", "order_support"]

TRIAGE = "You are triage. Reply with the customer's order id and nothing else."
SUPPORT = (
    "You are support. Look the order up with the lookup_order tool and reply with its status "
    "and the days until it arrives, exactly as the tool gives them."
)


class OrderReply(BaseModel):
    """What ``support`` answers: the order's facts and a sentence for the customer."""

    order_id: str
    status: str
    eta_days: int
    message: str


def lookup_order(order_id: str) -> str:
    """The order's item, status and days until delivery."""
    facts = lookup(order_id)
    return json.dumps(facts) if facts else f"no order {order_id!r}"


def build_agents(model: OpenAIChatModel, settings: ModelSettings) -> tuple[Agent, Agent]:
    """``triage`` (text output) and ``support`` (the tool, :class:`OrderReply` output)."""
    triage = Agent(model, name="triage", instructions=TRIAGE, model_settings=settings)
    support = Agent(
        model,
        name="support",
        instructions=SUPPORT,
        output_type=OrderReply,
        tools=[lookup_order],
        model_settings=settings,
    )
    return triage, support


@agl.rollout
async def order_support(task: dict[str, Any], llm: agl.LLM) -> float:
    """Answer ``task["question"]``; reward: whether the reply states ``task["answer"]``.

    ``llm`` is the model the run serves; its sampling parameters (temperature, max_tokens) go
    to every call. A reply that never fits :class:`OrderReply` earns 0.
    """
    settings: ModelSettings = {
        key: value  # type: ignore[misc]
        for key, value in llm.sampling_parameters.items()
        if key in ("temperature", "max_tokens") and value is not None
    }
    async with llm.openai_client(max_retries=0) as client:
        model = OpenAIChatModel(llm.model, provider=OpenAIProvider(openai_client=client))
        triage, support = build_agents(model, settings)
        order_id = (await triage.run(task["question"])).output.strip()
        try:
            reply = (await support.run(f"Order {order_id}. {task['question']}")).output
        except UnexpectedModelBehavior:
            reply = None
    return reward(reply, task["field"], task["answer"])
