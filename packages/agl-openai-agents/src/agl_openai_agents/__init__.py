"""agl for the OpenAI Agents SDK: trace every agent, handoff, tool and model call for training.

A runner does it by name, ``agl.Runner(agent, store, instrument=["openai-agents"])``; a script
that runs its own rollouts calls :func:`instrument` with its tracer::

    import agl_openai_agents

    agl_openai_agents.instrument(tracer)
    async with tracer.rollout(rollout_id, attempt_id):
        await Runner.run(triage, "my printer is on fire")
    agl_openai_agents.uninstrument()

Each agent's span names its agent (``agl.agent.name``), handoffs included, so LightningRL can
train the agents you choose (:mod:`agl_openai_agents.instrumentor` tells the whole story).
``import agl_openai_agents`` loads neither the Agents SDK nor openinference.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agl.tracing import script_api

if TYPE_CHECKING:
    from agl_openai_agents.instrumentor import OpenAIAgentsInstrumentor

__all__ = ["OpenAIAgentsInstrumentor", "instrument", "uninstrument"]

instrument, uninstrument, __getattr__ = script_api(
    "agl_openai_agents.instrumentor:OpenAIAgentsInstrumentor", "the OpenAI Agents SDK"
)
