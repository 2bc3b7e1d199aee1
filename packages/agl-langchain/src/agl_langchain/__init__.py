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
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agl.tracing import ScriptInstrumentation

if TYPE_CHECKING:
    import agl
    from agl_langchain.instrumentor import LangChainInstrumentor

__all__ = ["LangChainInstrumentor", "instrument", "uninstrument"]


def _build(tracer: agl.Tracer) -> LangChainInstrumentor:
    from agl_langchain.instrumentor import LangChainInstrumentor

    return LangChainInstrumentor(tracer)


_script: ScriptInstrumentation[LangChainInstrumentor] = ScriptInstrumentation(_build)


def instrument(tracer: agl.Tracer) -> LangChainInstrumentor:
    """Trace LangChain and LangGraph into ``tracer``'s rollouts until :func:`uninstrument`.

    Calling it again with the same tracer does nothing; with another tracer, it moves the
    tracing there.

    Returns:
        The instrumentor, for code that wants to manage it itself.
    """
    return _script.instrument(tracer)


def uninstrument() -> None:
    """Stop what :func:`instrument` started (nothing happens if it is not active)."""
    _script.uninstrument()


def __getattr__(name: str) -> Any:
    if name == "LangChainInstrumentor":
        from agl_langchain.instrumentor import LangChainInstrumentor

        return LangChainInstrumentor
    raise AttributeError(f"module 'agl_langchain' has no attribute {name!r}")
