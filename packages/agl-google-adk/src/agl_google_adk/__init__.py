"""agl for Google's Agent Development Kit (ADK): trace every agent, sub-agent, tool and model
call for training.

A runner does it by name, ``agl.Runner(agent, store, instrument=["google-adk"])``; a script that
runs its own rollouts calls :func:`instrument` with its tracer::

    import agl_google_adk

    agl_google_adk.instrument(tracer)
    async with tracer.rollout(rollout_id, attempt_id):
        async for event in runner.run_async(user_id="u", session_id=session.id, new_message=msg):
            ...
    agl_google_adk.uninstrument()

Each agent run (a coordinator, the sub-agent it transfers to) is an agent span named after the
agent, so LightningRL can train the agents you choose (:mod:`agl_google_adk.instrumentor`
tells the whole story). ``import agl_google_adk`` does not load ADK.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agl.tracing import script_api

if TYPE_CHECKING:
    from agl_google_adk.instrumentor import GoogleADKInstrumentor

__all__ = ["GoogleADKInstrumentor", "instrument", "uninstrument"]

instrument, uninstrument, __getattr__ = script_api(
    "agl_google_adk.instrumentor:GoogleADKInstrumentor", "Google ADK"
)
