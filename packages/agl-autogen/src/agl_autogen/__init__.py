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

from typing import TYPE_CHECKING, Any

from agl.tracing import ScriptInstrumentation

if TYPE_CHECKING:
    import agl
    from agl_autogen.instrumentor import AutogenInstrumentor

__all__ = ["AutogenInstrumentor", "instrument", "uninstrument"]


def _build(tracer: agl.Tracer) -> AutogenInstrumentor:
    from agl_autogen.instrumentor import AutogenInstrumentor

    return AutogenInstrumentor(tracer)


_script: ScriptInstrumentation[AutogenInstrumentor] = ScriptInstrumentation(_build)


def instrument(tracer: agl.Tracer) -> AutogenInstrumentor:
    """Trace AutoGen into ``tracer``'s rollouts until :func:`uninstrument`.

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
    if name == "AutogenInstrumentor":
        from agl_autogen.instrumentor import AutogenInstrumentor

        return AutogenInstrumentor
    raise AttributeError(f"module 'agl_autogen' has no attribute {name!r}")
