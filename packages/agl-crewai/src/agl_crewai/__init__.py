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

from typing import TYPE_CHECKING, Any

from agl.tracing import ScriptInstrumentation

if TYPE_CHECKING:
    import agl
    from agl_crewai.instrumentor import CrewAIInstrumentor

__all__ = ["CrewAIInstrumentor", "instrument", "uninstrument"]


def _build(tracer: agl.Tracer) -> CrewAIInstrumentor:
    from agl_crewai.instrumentor import CrewAIInstrumentor

    return CrewAIInstrumentor(tracer)


_script: ScriptInstrumentation[CrewAIInstrumentor] = ScriptInstrumentation(_build)


def instrument(tracer: agl.Tracer) -> CrewAIInstrumentor:
    """Trace CrewAI into ``tracer``'s rollouts until :func:`uninstrument`.

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
    if name == "CrewAIInstrumentor":
        from agl_crewai.instrumentor import CrewAIInstrumentor

        return CrewAIInstrumentor
    raise AttributeError(f"module 'agl_crewai' has no attribute {name!r}")
