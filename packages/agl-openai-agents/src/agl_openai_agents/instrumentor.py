"""Trace OpenAI Agents SDK runs as spans of the current agl rollout.

:class:`OpenAIAgentsInstrumentor` is what ``agl.Runner(..., instrument=["openai-agents"])``
builds. It does not trace the SDK itself: the SDK traces its own runs (a trace per
``Runner.run``, with a span per agent turn, model call, function tool, handoff and guardrail),
and openinference-instrumentation-openai-agents turns them into OpenTelemetry spans, through a
trace processor it registers with the SDK (``agents.add_trace_processor``). agl configures it:

- with agl's tracer provider (``tracer.provider``), so the spans go to the rollout's store and
  never to OpenTelemetry's global provider; a run's root span starts in the current
  OpenTelemetry context (the rollout's, or an :func:`agl.agent_span`), its other spans under
  their SDK parents, in the same trace;
- with OpenTelemetry GenAI attributes on (``enable_genai_semconv``): model, usage, input and
  output messages under the names :func:`agl.tracing.is_llm_span` reads, and the response id of
  Responses API calls;
- with the facts agl adds when a span ends (:mod:`agl_openai_agents._normalize`): agent names on
  agent spans, ``agl.tool.*`` on function tool spans;
- keeping the response id of Chat Completions calls, streamed or not, which the SDK's spans
  lack (:mod:`agl_openai_agents._response_ids`).

Why openinference rather than a trace processor of agl's own: the SDK can add a trace processor
or replace them all, but not remove one, and a run in flight must keep its processor until it
ends; openinference does both (it takes its processor out once its last run has ended, and
traces no new run meanwhile), and already converts every kind of SDK span.

agl's processor is added beside the SDK's own, which are left as they are. By default the SDK
also exports every trace to OpenAI's servers (when an ``OPENAI_API_KEY`` is set); agl neither
needs nor touches that. To keep traces on the machine, call ``agents.set_trace_processors([])``
before instrumenting. Do not switch the SDK's tracing off (``agents.set_tracing_disabled``,
``OPENAI_AGENTS_DISABLE_TRACING``, ``RunConfig(tracing_disabled=True)``): agl sees a run through
it. With ``RunConfig(trace_include_sensitive_data=False)`` the SDK keeps no messages, and
Responses API calls lose their response id (LightningRL then joins them with the gateway's
token ids by order); so does hiding outputs with openinference's ``OPENINFERENCE_*``
environment variables, which still apply.

openinference's instrumentor is one per process (an OpenTelemetry ``BaseInstrumentor``), so one
agl tracer at a time can trace the SDK: instrumenting while something else holds it raises
:class:`agl.AglError` rather than record nothing. Spans of runs that started before
``uninstrument()`` still end afterwards; no new run is traced.
"""

from __future__ import annotations

import contextlib

from agl import AglError
from agl.tracing import NormalizingTracerProvider, PatchingInstrumentor
from agl_openai_agents._normalize import agl_attributes
from agl_openai_agents._response_ids import keep_chat_response_ids

__all__ = ["OpenAIAgentsInstrumentor"]


class OpenAIAgentsInstrumentor(PatchingInstrumentor):
    """Record OpenAI Agents SDK runs in a tracer's rollouts; reversible and idempotent.

    ::

        instrumentor = OpenAIAgentsInstrumentor(tracer)
        instrumentor.instrument()
        async with tracer.rollout(rollout_id, attempt_id):
            await Runner.run(triage, "task")    # agents, model calls, tools: spans
        instrumentor.uninstrument()

    Args:
        tracer: The :class:`agl.Tracer` whose rollouts the spans belong to.
    """

    def apply(self, undo: contextlib.ExitStack) -> None:
        from openinference.instrumentation import TraceConfig
        from openinference.instrumentation.openai_agents import (
            OpenAIAgentsInstrumentor as OpenInferenceInstrumentor,
        )

        openinference = OpenInferenceInstrumentor()
        if openinference.is_instrumented_by_opentelemetry:
            raise AglError(
                "the OpenAI Agents SDK is already instrumented by openinference (another agl "
                "tracer, or the application's own tracing): uninstrument it before "
                "instrumenting it for agl"
            )
        openinference.instrument(
            tracer_provider=NormalizingTracerProvider(self.tracer.provider, agl_attributes),
            config=TraceConfig(enable_genai_semconv=True),
            exclusive_processor=False,
        )
        undo.callback(openinference.uninstrument)
        keep_chat_response_ids(undo)
