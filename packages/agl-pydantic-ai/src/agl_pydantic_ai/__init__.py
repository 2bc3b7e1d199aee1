"""agl for PydanticAI: trace every agent, tool and model call for training.

A runner does it by name, ``agl.Runner(agent, store, instrument=["pydantic-ai"])``; a script that
runs its own rollouts calls :func:`instrument` with its tracer::

    import agl_pydantic_ai

    agl_pydantic_ai.instrument(tracer)
    async with tracer.rollout(rollout_id, attempt_id):
        await agent.run("Where do otters sleep?")
    agl_pydantic_ai.uninstrument()

Each agent run is an agent span named after the agent, so LightningRL can train the agents you
choose (:mod:`agl_pydantic_ai.instrumentor` tells the whole story). ``import agl_pydantic_ai``
does not load PydanticAI.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agl.tracing import script_api

if TYPE_CHECKING:
    from agl_pydantic_ai.instrumentor import PydanticAIInstrumentor

__all__ = ["PydanticAIInstrumentor", "instrument", "uninstrument"]

instrument, uninstrument, __getattr__ = script_api(
    "agl_pydantic_ai.instrumentor:PydanticAIInstrumentor", "PydanticAI"
)
