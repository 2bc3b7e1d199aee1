"""agl for LlamaIndex: trace every agent, tool, retrieval and model call for training.

A runner does it by name, ``agl.Runner(agent, store, instrument=["llama-index"])``; a script that
runs its own rollouts calls :func:`instrument` with its tracer::

    import agl_llama_index

    agl_llama_index.instrument(tracer)
    async with tracer.rollout(rollout_id, attempt_id):
        await workflow.run(user_msg="What does the lighthouse keeper log?")
    agl_llama_index.uninstrument()

Each step of an agent's turn is an agent span named after the agent, so LightningRL can train
the agents you choose, and each model call is one LLM span with the server's response id
(:mod:`agl_llama_index.instrumentor` tells the whole story). ``import agl_llama_index`` loads
neither LlamaIndex nor openinference.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agl.tracing import script_api

if TYPE_CHECKING:
    from agl_llama_index.instrumentor import LlamaIndexInstrumentor

__all__ = ["LlamaIndexInstrumentor", "instrument", "uninstrument"]

instrument, uninstrument, __getattr__ = script_api(
    "agl_llama_index.instrumentor:LlamaIndexInstrumentor", "LlamaIndex"
)
