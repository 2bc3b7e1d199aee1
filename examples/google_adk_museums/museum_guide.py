"""The agents: a Google ADK ``coordinator`` with a tool and a ``guide`` sub-agent.

The ``coordinator`` looks the museum up with :func:`find_museum`, then transfers the visitor to
its sub-agent, the ``guide``, which answers in one sentence from what the coordinator found
(ADK hands the sub-agent the session so far). They are the agents you would write anyway
(``LlmAgent`` with ``sub_agents``, models through ``LiteLlm``); the only agl code is
:func:`museum_guide`, the rollout: it gets the task and the LLMs the run serves, runs the
coordinator and returns the reward. agl's ADK instrumentation makes each agent run an agent
span named after the agent, which is how every LLM call is attributed to ``coordinator`` or
``guide``.
"""

from __future__ import annotations

import os
from typing import Any

# LiteLLM fetches a model price list from the network at import unless told not to.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from google.adk.agents import LlmAgent
from google.adk.models.lite_llm import LiteLlm
from google.adk.runners import InMemoryRunner
from google.genai import types
from museums import find, reward

import agl

__all__ = ["COORDINATE", "GUIDE", "build_coordinator", "find_museum", "museum_guide"]

COORDINATE = (
    "You are the coordinator. Look the museum up with the find_museum tool, then transfer "
    "the visitor to the guide."
)
GUIDE = "You are the guide. Answer the visitor in one sentence with the exact number found."


def find_museum(name: str) -> dict[str, Any]:
    """Opening hours and ticket price of a museum."""
    return find(name) or {"error": f"no museum called {name!r}"}


def _model(llm: agl.LLM) -> LiteLlm:
    sampling = {
        key: value
        for key, value in llm.sampling_parameters.items()
        if key in ("temperature", "max_tokens") and value is not None
    }
    api_key = llm.api_key or os.environ.get("OPENAI_API_KEY") or "unused"
    return LiteLlm(model=f"openai/{llm.model}", api_base=llm.endpoint, api_key=api_key, **sampling)


def build_coordinator(coordinator_llm: agl.LLM, guide_llm: agl.LLM) -> LlmAgent:
    """The coordinator (the tool, the guide as its sub-agent), each on its own LLM."""
    guide = LlmAgent(
        name="guide",
        model=_model(guide_llm),
        description="Answers visitors' questions about a museum.",
        instruction=GUIDE,
    )
    return LlmAgent(
        name="coordinator",
        model=_model(coordinator_llm),
        description="Finds the museum a visitor asks about.",
        instruction=COORDINATE,
        tools=[find_museum],
        sub_agents=[guide],
    )


@agl.rollout
async def museum_guide(
    task: dict[str, Any], llm: agl.LLM, coordinator_llm: agl.LLM | None = None
) -> float:
    """Answer ``task["question"]``; reward: whether the guide states ``task["answer"]``.

    ``llm`` is the model the run serves (the guide's, and the coordinator's too unless the run
    publishes a ``coordinator_llm`` of its own: a fixed model keeps a frozen agent fixed).
    """
    coordinator = build_coordinator(coordinator_llm or llm, llm)
    runner = InMemoryRunner(agent=coordinator, app_name="museums")
    try:
        session = await runner.session_service.create_session(app_name="museums", user_id="v")
        message = types.Content(role="user", parts=[types.Part(text=task["question"])])
        answer = ""
        async for event in runner.run_async(
            user_id="v", session_id=session.id, new_message=message
        ):
            parts = event.content.parts if event.content and event.content.parts else []
            text = "".join(part.text or "" for part in parts)
            if event.author == "guide" and text:
                answer = text
    finally:
        await runner.close()
    return reward(answer, task["answer"])
