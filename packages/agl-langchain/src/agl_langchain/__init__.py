"""agl for LangChain and LangGraph: trace every chain, node, tool and LLM call for training.

A runner does it by name, ``agl.Runner(agent, store, instrument=["langchain"])``; a script that
runs its own rollouts calls :func:`instrument` with its tracer::

    import agl_langchain

    agl_langchain.instrument(tracer)
    async with tracer.rollout(rollout_id, attempt_id):
        await graph.ainvoke({"topic": "otters"})
    agl_langchain.uninstrument()

Each LangGraph node's span names its agent (``agl.agent.name``), so LightningRL can train the
agents you choose (:mod:`agl_langchain.instrumentor` tells the whole story). ``import
agl_langchain`` loads neither LangChain nor openinference.

An agent that makes its ``ChatOpenAI`` per attempt asks :func:`chat_model` for it: models
share their HTTP clients, so making one costs no CA-bundle parse on the runner's event loop::

    model = agl_langchain.chat_model(llm, max_retries=0)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agl.tracing import script_api
from agl_langchain._chat_model import chat_model, close_chat_models

if TYPE_CHECKING:
    from agl_langchain.instrumentor import LangChainInstrumentor

__all__ = [
    "LangChainInstrumentor",
    "chat_model",
    "close_chat_models",
    "instrument",
    "uninstrument",
]

instrument, uninstrument, __getattr__ = script_api(
    "agl_langchain.instrumentor:LangChainInstrumentor", "LangChain and LangGraph"
)
