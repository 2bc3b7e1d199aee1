"""Tracing: agl's OpenTelemetry provider, rollout contexts, the span sender, and what framework
adapters build on.

- :class:`Tracer`, :func:`current_binding`, :class:`RolloutBinding`: spans of the current
  rollout, sent to the store by a :class:`SpanSender`.
- :class:`Instrumentor` (the protocol an adapter's plugin returns), :class:`PatchingInstrumentor`
  and :class:`ScriptInstrumentation` (their usual shapes), :class:`OpenAIInstrumentation` (the
  ``openai`` client's).
- :class:`NormalizingTracerProvider`, :class:`NormalizingSpan`, :func:`tool_attributes`: an
  openinference instrumentor's spans with the facts agl reads added when they end;
  :func:`is_llm_span` says which spans are LLM calls.
"""

from agl.tracing._conventions import is_llm_span
from agl.tracing._exporter import SenderStats, SpanSender
from agl.tracing._instrumentor import (
    Instrumentor,
    InstrumentorFactory,
    PatchingInstrumentor,
    ScriptInstrumentation,
)
from agl.tracing._openai import OpenAIInstrumentation
from agl.tracing._openinference import (
    Normalize,
    NormalizingSpan,
    NormalizingTracerProvider,
    tool_attributes,
)
from agl.tracing._tracer import RolloutBinding, Tracer, current_binding

__all__ = [
    "Instrumentor",
    "InstrumentorFactory",
    "Normalize",
    "NormalizingSpan",
    "NormalizingTracerProvider",
    "OpenAIInstrumentation",
    "PatchingInstrumentor",
    "RolloutBinding",
    "ScriptInstrumentation",
    "SenderStats",
    "SpanSender",
    "Tracer",
    "current_binding",
    "is_llm_span",
    "tool_attributes",
]
