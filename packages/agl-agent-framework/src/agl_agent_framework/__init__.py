"""agl for the Microsoft Agent Framework: trace every agent, workflow executor, tool and model
call for training.

A runner does it by name, ``agl.Runner(agent, store, instrument=["agent-framework"])``; a script
that runs its own rollouts calls :func:`instrument` with its tracer::

    import agl_agent_framework

    agl_agent_framework.instrument(tracer)
    async with tracer.rollout(rollout_id, attempt_id):
        await workflow.run("Write a haiku about otters.")
    agl_agent_framework.uninstrument()

Each agent run and each executor of a workflow is an agent span named after it, so LightningRL
can train the agents you choose (:mod:`agl_agent_framework.instrumentor` tells the whole story).
``import agl_agent_framework`` does not load the Agent Framework.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agl.tracing import script_api

if TYPE_CHECKING:
    from agl_agent_framework.instrumentor import AgentFrameworkInstrumentor

__all__ = ["AgentFrameworkInstrumentor", "instrument", "uninstrument"]

instrument, uninstrument, __getattr__ = script_api(
    "agl_agent_framework.instrumentor:AgentFrameworkInstrumentor", "the Microsoft Agent Framework"
)
