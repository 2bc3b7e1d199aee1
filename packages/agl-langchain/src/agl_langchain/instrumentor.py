"""Trace LangChain and LangGraph runs as spans of the current agl rollout.

:class:`LangChainInstrumentor` is what ``agl.Runner(..., instrument=["langchain"])`` builds. It
does not trace LangChain itself: openinference-instrumentation-langchain does, through
LangChain's callback system, for every chain, LangGraph node, chat model, tool and retriever run,
sync or async, streamed or not; agl configures it as every adapter does
(:class:`agl.tracing.OpenInferenceInstrumentor`: agl's provider, GenAI attributes, one tracer at
a time). openinference parents each run's span on its parent run's, and a run without one on the
current OpenTelemetry span (the rollout's, or an :func:`agl.agent_span`). What LangChain needs
beyond that:

- the facts agl adds when a span ends (:mod:`agl_langchain._normalize`): the response id of LLM
  spans (LightningRL's key to the gateway's token ids), agent names on LangGraph node spans,
  ``agl.tool.*`` on tool spans;
- keeping the response id of streamed ``ChatOpenAI`` calls, which langchain-openai drops
  (:mod:`agl_langchain._stream_ids`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

from opentelemetry.util import types

from agl.tracing import NormalizingTracerProvider, OpenInferenceInstrumentor
from agl_langchain._normalize import agl_attributes
from agl_langchain._stream_ids import keep_stream_response_ids

__all__ = ["LangChainInstrumentor"]


class LangChainInstrumentor(OpenInferenceInstrumentor):
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

    framework = "LangChain"
    instrumentation = "openinference.instrumentation.langchain:LangChainInstrumentor"

    def agl_attributes(
        self, name: str, attributes: Mapping[str, Any]
    ) -> Mapping[str, types.AttributeValue]:
        return agl_attributes(name, attributes)

    def extend(self, undo: contextlib.ExitStack, provider: NormalizingTracerProvider) -> None:
        keep_stream_response_ids(undo)
