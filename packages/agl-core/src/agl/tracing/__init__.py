"""Tracing: agl's OpenTelemetry provider, rollout contexts, the span sender, and what framework
adapters build on.

- :class:`Tracer`, :func:`current_binding`, :class:`RolloutBinding`: spans of the current
  rollout, sent to the store by a :class:`SpanSender`.
- :class:`Instrumentor` (the protocol an adapter's plugin returns), :class:`PatchingInstrumentor`
  and :class:`ScriptInstrumentation` (their usual shapes), :class:`OpenAIInstrumentation` (the
  ``openai`` client's).
- An adapter on openinference: :class:`OpenInferenceInstrumentor` (the instrumentation,
  configured), :func:`patch` (what it misses, wrapped reversibly), :func:`script_api` (the
  package's ``instrument``/``uninstrument``), and agl's facts added to openinference's spans
  when they end: :class:`NormalizingTracerProvider`, :func:`openinference_attributes`,
  :func:`genai_attributes` (a framework's own GenAI spans), :func:`agent_attributes`,
  :func:`tool_attributes`, :func:`note_response`.
  :func:`is_llm_span` says which spans are LLM calls.
"""

from agl.tracing._adapter import OpenInferenceInstrumentor
from agl.tracing._conventions import is_llm_span
from agl.tracing._exporter import SenderStats, SpanSender
from agl.tracing._instrumentor import (
    Instrumentor,
    InstrumentorFactory,
    PatchingInstrumentor,
    ScriptAPI,
    ScriptInstrumentation,
    script_api,
)
from agl.tracing._normalizing import (
    Normalize,
    NormalizingSpan,
    NormalizingTracerProvider,
    agent_attributes,
    genai_attributes,
    note_response,
    openinference_attributes,
    tool_attributes,
)
from agl.tracing._openai import OpenAIInstrumentation
from agl.tracing._patch import patch
from agl.tracing._tracer import RolloutBinding, Tracer, current_binding

__all__ = [
    "Instrumentor",
    "InstrumentorFactory",
    "Normalize",
    "NormalizingSpan",
    "NormalizingTracerProvider",
    "OpenAIInstrumentation",
    "OpenInferenceInstrumentor",
    "PatchingInstrumentor",
    "RolloutBinding",
    "ScriptAPI",
    "ScriptInstrumentation",
    "SenderStats",
    "SpanSender",
    "Tracer",
    "agent_attributes",
    "current_binding",
    "genai_attributes",
    "is_llm_span",
    "note_response",
    "openinference_attributes",
    "patch",
    "script_api",
    "tool_attributes",
]
