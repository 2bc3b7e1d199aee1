"""The agent: a Microsoft Agent Framework workflow of two agents, a forecaster with a tool and
a writer.

The ``forecaster`` looks the town up with :func:`get_forecast` and reports the facts; the
``writer`` answers the traveller in one sentence from that report (a workflow edge hands it the
forecaster's whole conversation). It is the workflow you would write anyway
(``WorkflowBuilder``); the only agl code is :func:`travel_workflow`, the rollout: it gets the
task and the LLM the run serves, runs the workflow and returns the reward. agl's Agent
Framework instrumentation makes each agent (and each executor of the workflow) an agent span
named after it, which is how every LLM call is attributed to ``forecaster`` or ``writer``.
"""

from __future__ import annotations

import json
import os
from typing import Any

os.environ.setdefault("AGENT_FRAMEWORK_USER_AGENT_DISABLED", "true")

from agent_framework import Agent, AgentResponse, WorkflowBuilder, tool
from agent_framework.openai import OpenAIChatCompletionClient
from weather import forecast, reward

import agl

__all__ = ["FORECASTER", "WRITER", "build_workflow", "get_forecast", "travel_workflow"]

FORECASTER = (
    "You are the forecaster. Look the traveller's town up with the get_forecast tool and "
    "report the forecast exactly as the tool gives it."
)
WRITER = (
    "You are the writer. Answer the traveller in one sentence, with the exact number from the "
    "forecaster's report."
)


@tool
def get_forecast(town: str) -> str:
    """Tomorrow's forecast for a town: high, rain and wind."""
    facts = forecast(town)
    return json.dumps(facts) if facts else f"no forecast for {town!r}"


def build_workflow(client: OpenAIChatCompletionClient, options: dict[str, Any]) -> Any:
    """The forecaster, then the writer."""
    forecaster = Agent(
        client, FORECASTER, name="forecaster", tools=[get_forecast], default_options=options
    )
    writer = Agent(client, WRITER, name="writer", default_options=options)
    return WorkflowBuilder(start_executor=forecaster).add_edge(forecaster, writer).build()


@agl.rollout
async def travel_workflow(task: dict[str, Any], llm: agl.LLM) -> float:
    """Answer ``task["question"]``; reward: whether the answer states ``task["answer"]``.

    ``llm`` is the model the run serves; its sampling parameters (temperature, max_tokens) go
    to every call.
    """
    options = {
        key: value
        for key, value in llm.sampling_parameters.items()
        if key in ("temperature", "max_tokens") and value is not None
    }
    async with llm.openai_client(max_retries=0) as openai:
        client = OpenAIChatCompletionClient(model=llm.model, async_client=openai)
        events = await build_workflow(client, options).run(task["question"])
    answers = [o for o in events.get_outputs() if isinstance(o, AgentResponse)]
    return reward(answers[-1].text if answers else "", task["answer"])
