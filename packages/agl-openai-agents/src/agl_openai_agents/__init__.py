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

from typing import TYPE_CHECKING, Any

from agl.tracing import ScriptInstrumentation

if TYPE_CHECKING:
    import agl
    from agl_openai_agents.instrumentor import OpenAIAgentsInstrumentor

__all__ = ["OpenAIAgentsInstrumentor", "instrument", "uninstrument"]


def _build(tracer: agl.Tracer) -> OpenAIAgentsInstrumentor:
    from agl_openai_agents.instrumentor import OpenAIAgentsInstrumentor

    return OpenAIAgentsInstrumentor(tracer)


_script: ScriptInstrumentation[OpenAIAgentsInstrumentor] = ScriptInstrumentation(_build)


def instrument(tracer: agl.Tracer) -> OpenAIAgentsInstrumentor:
    """Trace the OpenAI Agents SDK into ``tracer``'s rollouts until :func:`uninstrument`.

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
    if name == "OpenAIAgentsInstrumentor":
        from agl_openai_agents.instrumentor import OpenAIAgentsInstrumentor

        return OpenAIAgentsInstrumentor
    raise AttributeError(f"module 'agl_openai_agents' has no attribute {name!r}")
