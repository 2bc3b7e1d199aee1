"""Trace LangChain and LangGraph runs as spans of the current agl rollout.

:class:`LangChainInstrumentor` is what ``agl.Runner(..., instrument=["langchain"])`` builds. It
does not trace LangChain itself: openinference-instrumentation-langchain does, through
LangChain's callback system, for every chain, LangGraph node, chat model, tool and retriever run,
sync or async, streamed or not. agl configures it:

- with agl's tracer provider (``tracer.provider``), so the spans go to the rollout's store and
  never to OpenTelemetry's global provider; openinference parents each run's span on its parent
  run's, and a run without one on the current OpenTelemetry span (the rollout's, or an
  :func:`agl.agent_span`);
- with OpenTelemetry GenAI attributes on (``enable_genai_semconv``): model, usage, input and
  output messages under the names :func:`agl.tracing.is_llm_span` reads;
- with the facts agl adds when a span ends (:mod:`agl_langchain._normalize`): the response id of
  LLM spans (LightningRL's key to the gateway's token ids), agent names on LangGraph node spans,
  ``agl.tool.*`` on tool spans;
- keeping the response id of streamed ``ChatOpenAI`` calls, which langchain-openai drops
  (:mod:`agl_langchain._stream_ids`).

openinference's ``OPENINFERENCE_*`` environment variables still apply: hiding outputs hides the
response ids too.

openinference's instrumentor is one per process (an OpenTelemetry ``BaseInstrumentor``), so one
agl tracer at a time can trace LangChain: instrumenting while something else holds it raises
:class:`agl.AglError` rather than record nothing. Spans of runs that started before
``uninstrument()`` may still end afterwards; no new run is traced.
"""

from __future__ import annotations

import contextlib

from agl import AglError
from agl.tracing import NormalizingTracerProvider, PatchingInstrumentor
from agl_langchain._normalize import agl_attributes
from agl_langchain._stream_ids import keep_stream_response_ids

__all__ = ["LangChainInstrumentor"]


class LangChainInstrumentor(PatchingInstrumentor):
    """Record LangChain and LangGraph runs in a tracer's rollouts; reversible and idempotent.

    ::

        instrumentor = LangChainInstrumentor(tracer)
        instrumentor.instrument()
        async with tracer.rollout(rollout_id, attempt_id):
            await graph.ainvoke({"topic": "otters"})    # nodes, LLM calls, tools: spans
        instrumentor.uninstrument()

    Args:
        tracer: The :class:`agl.Tracer` whose rollouts the spans belong to.
    """

    def apply(self, undo: contextlib.ExitStack) -> None:
        from openinference.instrumentation import TraceConfig
        from openinference.instrumentation.langchain import (
            LangChainInstrumentor as OpenInferenceInstrumentor,
        )

        openinference = OpenInferenceInstrumentor()
        if openinference.is_instrumented_by_opentelemetry:
            raise AglError(
                "LangChain is already instrumented by openinference (another agl tracer, or the "
                "application's own tracing): uninstrument it before instrumenting it for agl"
            )
        openinference.instrument(
            tracer_provider=NormalizingTracerProvider(self.tracer.provider, agl_attributes),
            config=TraceConfig(enable_genai_semconv=True),
        )
        undo.callback(openinference.uninstrument)
        keep_stream_response_ids(undo)
