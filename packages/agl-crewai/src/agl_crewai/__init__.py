"""agl for CrewAI: trace every crew, agent, task, tool and model call for training.

A runner does it by name, ``agl.Runner(agent, store, instrument=["crewai"])``; a script that
runs its own rollouts calls :func:`instrument` with its tracer::

    import agl_crewai

    agl_crewai.instrument(tracer)
    async with tracer.rollout(rollout_id, attempt_id):
        await crew.kickoff_async()
    agl_crewai.uninstrument()

Each agent's span names its agent by role (``agl.agent.name``), so LightningRL can train the
agents you choose (:mod:`agl_crewai.instrumentor` tells the whole story). ``import agl_crewai``
loads neither CrewAI nor openinference.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agl.tracing import script_api

if TYPE_CHECKING:
    from agl_crewai.instrumentor import CrewAIInstrumentor

__all__ = ["CrewAIInstrumentor", "instrument", "uninstrument"]

instrument, uninstrument, __getattr__ = script_api(
    "agl_crewai.instrumentor:CrewAIInstrumentor", "CrewAI"
)
