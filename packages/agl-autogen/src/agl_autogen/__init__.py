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

import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import agl
    from agl_autogen.instrumentor import AutogenInstrumentor

__all__ = ["AutogenInstrumentor", "instrument", "uninstrument"]


class _Active:
    """The instrumentor :func:`instrument` started, if it is still active."""

    lock = threading.Lock()
    instrumentor: AutogenInstrumentor | None = None


def instrument(tracer: agl.Tracer) -> AutogenInstrumentor:
    """Trace AutoGen into ``tracer``'s rollouts until :func:`uninstrument`.

    Calling it again with the same tracer does nothing; with another tracer, it moves the
    tracing there.

    Returns:
        The instrumentor, for code that wants to manage it itself.
    """
    from agl_autogen.instrumentor import AutogenInstrumentor

    with _Active.lock:
        active = _Active.instrumentor
        if active is not None and active.tracer is tracer:
            return active
        if active is not None:
            active.uninstrument()
            _Active.instrumentor = None
        instrumentor = AutogenInstrumentor(tracer)
        instrumentor.instrument()
        _Active.instrumentor = instrumentor
        return instrumentor


def uninstrument() -> None:
    """Stop what :func:`instrument` started (nothing happens if it is not active)."""
    with _Active.lock:
        if _Active.instrumentor is not None:
            _Active.instrumentor.uninstrument()
            _Active.instrumentor = None


def __getattr__(name: str) -> Any:
    if name == "AutogenInstrumentor":
        from agl_autogen.instrumentor import AutogenInstrumentor

        return AutogenInstrumentor
    raise AttributeError(f"module 'agl_autogen' has no attribute {name!r}")
