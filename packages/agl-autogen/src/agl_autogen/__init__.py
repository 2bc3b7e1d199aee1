"""agl for AutoGen (autogen-agentchat): trace every agent, tool and model call for training.

A runner does it by name, ``agl.Runner(agent, store, instrument=["autogen"])``; a script that
runs its own rollouts calls :func:`instrument` with its tracer::

    import agl_autogen

    agl_autogen.instrument(tracer)
    async with tracer.rollout(rollout_id, attempt_id):
        await team.run(task="write a haiku about otters")
    agl_autogen.uninstrument()

Each agent's span names its agent (``agl.agent.name``), so LightningRL can train the agents you
choose (:mod:`agl_autogen.instrumentor` tells the whole story). ``import agl_autogen`` loads
neither AutoGen nor openinference.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agl.tracing import script_api

if TYPE_CHECKING:
    from agl_autogen.instrumentor import AutogenInstrumentor

__all__ = ["AutogenInstrumentor", "instrument", "uninstrument"]

instrument, uninstrument, __getattr__ = script_api(
    "agl_autogen.instrumentor:AutogenInstrumentor", "AutoGen"
)
