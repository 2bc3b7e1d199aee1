"""Trace AutoGen (autogen-agentchat) runs as spans of the current agl rollout.

:class:`AutogenInstrumentor` is what ``agl.Runner(..., instrument=["autogen"])`` builds. It does
not trace AutoGen itself: openinference-instrumentation-autogen-agentchat does, by wrapping
each agent's turn (``on_messages_stream``, which ``run``, ``on_messages`` and teams go through),
a team's ``run_stream``, an ``AssistantAgent``'s tool calls and ``OpenAIChatCompletionClient``'s
``create`` and ``create_stream``. agl configures it:

- with agl's tracer provider (``tracer.provider``), so the spans go to the rollout's store and
  never to OpenTelemetry's global provider; each span starts in the current OpenTelemetry
  context (the rollout's, an :func:`agl.agent_span`, or the agent's or team's span around it);
- with OpenTelemetry GenAI attributes on (``enable_genai_semconv``): model, usage, input and
  output messages under the names :func:`agl.tracing.is_llm_span` reads;
- with the facts agl adds when a span ends (:mod:`agl_autogen._normalize`): agent names on
  agent spans, ``agl.tool.*`` on tool spans;
- keeping the response id of each OpenAI model call, streamed or not, which AutoGen's
  ``CreateResult`` lacks (:mod:`agl_autogen._response_ids`);
- ending an agent's span when ``run`` or ``on_messages`` returns, which would otherwise wait
  for Python to collect the agent's stream (:mod:`agl_autogen._agent_turns`).

Model clients other than autogen-ext's OpenAI ones (``OpenAIChatCompletionClient``,
``AzureOpenAIChatCompletionClient``) get no model call spans from openinference; agl's own
OpenAI instrumentation (``instrument=["openai"]``) still sees the calls they make through the
``openai`` package. openinference's ``OPENINFERENCE_*`` environment variables still apply.

openinference's instrumentor is one per process (an OpenTelemetry ``BaseInstrumentor``), so one
agl tracer at a time can trace AutoGen: instrumenting while something else holds it raises
:class:`agl.AglError` rather than record nothing. Spans of runs that started before
``uninstrument()`` still end afterwards; no new run is traced.
"""

from __future__ import annotations

import contextlib

from agl import AglError
from agl.tracing import NormalizingTracerProvider, PatchingInstrumentor
from agl_autogen._agent_turns import close_agent_turns
from agl_autogen._normalize import agl_attributes
from agl_autogen._response_ids import keep_response_ids

__all__ = ["AutogenInstrumentor"]


class AutogenInstrumentor(PatchingInstrumentor):
    """Record AutoGen agent, team, tool and model calls in a tracer's rollouts; reversible.

    Instrumenting twice is the same as once. ::

        instrumentor = AutogenInstrumentor(tracer)
        instrumentor.instrument()
        async with tracer.rollout(rollout_id, attempt_id):
            await team.run(task="task")    # agents, model calls, tools: spans
        instrumentor.uninstrument()

    Args:
        tracer: The :class:`agl.Tracer` whose rollouts the spans belong to.
    """

    def apply(self, undo: contextlib.ExitStack) -> None:
        from openinference.instrumentation import TraceConfig
        from openinference.instrumentation.autogen_agentchat import (
            AutogenAgentChatInstrumentor as OpenInferenceInstrumentor,
        )

        openinference = OpenInferenceInstrumentor()
        if openinference.is_instrumented_by_opentelemetry:
            raise AglError(
                "AutoGen is already instrumented by openinference (another agl tracer, or the "
                "application's own tracing): uninstrument it before instrumenting it for agl"
            )
        openinference.instrument(
            tracer_provider=NormalizingTracerProvider(self.tracer.provider, agl_attributes),
            config=TraceConfig(enable_genai_semconv=True),
        )
        undo.callback(openinference.uninstrument)
        keep_response_ids(undo)
        close_agent_turns(undo)
