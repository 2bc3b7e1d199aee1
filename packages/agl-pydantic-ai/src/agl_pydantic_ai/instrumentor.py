"""Trace PydanticAI runs as spans of the current agl rollout.

:class:`PydanticAIInstrumentor` is what ``agl.Runner(..., instrument=["pydantic-ai"])`` builds.
It does not trace PydanticAI itself: PydanticAI traces itself, in the OpenTelemetry GenAI
conventions, when told to (``Agent.instrument_all``, an agent's ``instrument=``): a span per
agent run (``invoke_agent <name>``, with ``gen_ai.agent.name``), per model call
(``chat <model>``, with model, usage, messages and the server's response id, streamed or not)
and per tool call (``execute_tool <tool>``). An agent run by another agent's tool nests under
that tool's span. agl:

- while instrumented, makes agl's settings PydanticAI's default (``Agent.instrument_all``):
  every agent that does not choose its own instrumentation records through agl's tracer
  provider (``tracer.provider``), never OpenTelemetry's global one, with content included
  (messages, tool arguments and results: what LightningRL and ``agl rollouts show`` read).
  ``uninstrument()`` puts the previous default back. An agent built with ``instrument=`` of
  its own records where that says, not in agl;
- adds agl's facts when each span ends (:func:`agl.tracing.genai_attributes`): an agent run is
  an agent span named after the agent (PydanticAI infers the name from the variable when
  ``name=`` is not given), a tool call gets ``agl.tool.*``. A typed output that PydanticAI
  asks for through its output tool (``final_result``) has no tool span: it is the model call's
  output.

Why not openinference's ``openinference-instrumentation-pydantic-ai``: it is a span processor
that rewrites PydanticAI's own spans into OpenInference attributes, which agl does not read
(the GenAI ones are already there). PydanticAI's default is one per process, so one agl tracer
at a time can trace it: instrumenting while another holds it raises :class:`agl.AglError`; a
default the application set itself (``Agent.instrument_all()`` for Logfire, say) is replaced
while instrumented, with a warning.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

from agl import AglError
from agl.tracing import NormalizingTracerProvider, PatchingInstrumentor, genai_attributes

__all__ = ["PydanticAIInstrumentor"]

logger = logging.getLogger(__name__)

_AGL = "_agl_tracer"
"""Set on agl's ``InstrumentationSettings``: the tracer they record for."""


class PydanticAIInstrumentor(PatchingInstrumentor):
    """Record PydanticAI agent, tool and model calls in a tracer's rollouts; reversible.

    Instrumenting twice is the same as once. ::

        instrumentor = PydanticAIInstrumentor(tracer)
        instrumentor.instrument()
        async with tracer.rollout(rollout_id, attempt_id):
            await agent.run("task")    # the agent, its model calls and tools: spans
        instrumentor.uninstrument()

    Args:
        tracer: The :class:`agl.Tracer` whose rollouts the spans belong to.
    """

    def apply(self, undo: contextlib.ExitStack) -> None:
        from pydantic_ai import Agent
        from pydantic_ai.models.instrumented import InstrumentationSettings

        previous: Any = Agent._instrument_default
        if getattr(previous, _AGL, None) is not None:
            raise AglError(
                "PydanticAI is already instrumented by another agl tracer: uninstrument it "
                "before instrumenting it again"
            )
        if previous:
            logger.warning(
                "PydanticAI's default instrumentation (Agent.instrument_all) is agl's while "
                "agl instruments it, and yours again afterwards"
            )
        provider = NormalizingTracerProvider(self.tracer.provider, genai_attributes)
        settings = InstrumentationSettings(tracer_provider=provider, include_content=True)
        setattr(settings, _AGL, self.tracer)
        Agent.instrument_all(settings)
        undo.callback(Agent.instrument_all, previous)
