"""What openinference-based adapters share: spans completed at their end with agl's facts.

openinference writes a span's attributes from the finished framework run (a LangChain run, an
Agents SDK span) just before it ends the OpenTelemetry span, and an OpenTelemetry span processor
only sees a span once it can no longer change. So openinference is handed
:class:`NormalizingTracerProvider`, a view of agl's provider whose spans add what a
``normalize`` function derives from their attributes to themselves when they end. Only the
spans openinference starts pass through it; nothing else of agl's provider changes.

Framework adapters built on openinference (:class:`agl.tracing.OpenInferenceInstrumentor`)
share it, and the helpers that build agl's attributes from openinference's:

- :func:`openinference_attributes`: an ``AGENT`` span is an agent span named after the agent
  (:func:`agent_attributes`), a ``TOOL`` span a tool span (:func:`tool_attributes`);
- :func:`genai_attributes`: the same for a framework's own spans in the OpenTelemetry GenAI
  conventions (``invoke_agent`` and ``execute_tool`` operations);
- :func:`note_response`: a model call's response id (and model), put on the current span when
  an adapter's patch sees the raw response while openinference's span of the call is current.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from opentelemetry import trace as trace_api
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.util import types

from agl.tracing._conventions import is_llm_span

if TYPE_CHECKING:
    # The type OpenTelemetry's Tracer.start_as_current_span is declared to return.
    from opentelemetry.util._decorator import _AgnosticContextManager

__all__ = [
    "AgentName",
    "Normalize",
    "NormalizingSpan",
    "NormalizingTracerProvider",
    "agent_attributes",
    "genai_attributes",
    "note_response",
    "openinference_attributes",
    "tool_attributes",
]

logger = logging.getLogger(__name__)

Normalize = Callable[[str, Mapping[str, Any]], Mapping[str, types.AttributeValue]]
"""``normalize(span name, attributes)``: the attributes an ending span should also carry."""


class NormalizingTracerProvider(trace_api.TracerProvider):
    """A view of ``provider`` whose spans carry ``normalize``'s attributes when they end.

    Args:
        provider: agl's tracer provider (``tracer.provider``); spans are recorded there.
        normalize: Derives the extra attributes from a span's name and attributes.
    """

    def __init__(self, provider: trace_api.TracerProvider, normalize: Normalize) -> None:
        self._provider = provider
        self._normalize = normalize

    def get_tracer(
        self,
        instrumenting_module_name: str,
        instrumenting_library_version: str | None = None,
        schema_url: str | None = None,
        attributes: types.Attributes = None,
    ) -> trace_api.Tracer:
        tracer = self._provider.get_tracer(
            instrumenting_module_name, instrumenting_library_version, schema_url, attributes
        )
        return _NormalizingTracer(tracer, self._normalize)


class _NormalizingTracer(trace_api.Tracer):
    def __init__(self, tracer: trace_api.Tracer, normalize: Normalize) -> None:
        self._tracer = tracer
        self._normalize = normalize

    # openinference's OITracer calls ``type(tracer).start_span(oitracer, ...)`` with itself,
    # a proxy of this tracer, as ``self``: attributes read here pass through that proxy.
    def start_span(
        self,
        name: str,
        context: Context | None = None,
        kind: trace_api.SpanKind = trace_api.SpanKind.INTERNAL,
        attributes: types.Attributes = None,
        links: Sequence[trace_api.Link] | None = None,
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
    ) -> trace_api.Span:
        span = self._tracer.start_span(
            name,
            context,
            kind,
            attributes,
            links,
            start_time,
            record_exception,
            set_status_on_exception,
        )
        return NormalizingSpan(span, self._normalize) if span.is_recording() else span

    def start_as_current_span(
        self,
        name: str,
        context: Context | None = None,
        kind: trace_api.SpanKind = trace_api.SpanKind.INTERNAL,
        attributes: types.Attributes = None,
        links: Sequence[trace_api.Link] | None = None,
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
        end_on_exit: bool = True,
    ) -> _AgnosticContextManager[trace_api.Span]:
        span = self.start_span(
            name,
            context,
            kind,
            attributes,
            links,
            start_time,
            record_exception,
            set_status_on_exception,
        )
        return trace_api.use_span(
            span,
            end_on_exit=end_on_exit,
            record_exception=record_exception,
            set_status_on_exception=set_status_on_exception,
        )


class NormalizingSpan(trace_api.Span):
    """An SDK span that adds ``normalize``'s attributes to itself just before it ends."""

    def __init__(self, span: trace_api.Span, normalize: Normalize) -> None:
        self._span = span
        self._normalize = normalize

    @property
    def attributes(self) -> Mapping[str, Any]:
        """The attributes recorded so far."""
        span = self._span
        return (span.attributes or {}) if isinstance(span, ReadableSpan) else {}

    def end(self, end_time: int | None = None) -> None:
        span = self._span
        if isinstance(span, ReadableSpan) and span.is_recording():
            try:
                extra = self._normalize(span.name, span.attributes or {})
            except Exception:  # a span must end whatever its attributes hold
                logger.exception("agl could not read the attributes of span %r", span.name)
            else:
                span.set_attributes(extra)
        span.end(end_time)

    # --- the rest is the wrapped span's ---------------------------------------------------------

    def __getattr__(self, name: str) -> Any:
        # openinference reads SDK internals (``_attributes``) of the span it wraps.
        return getattr(self._span, name)

    def get_span_context(self) -> trace_api.SpanContext:
        return self._span.get_span_context()

    def set_attributes(self, attributes: Mapping[str, types.AttributeValue]) -> None:
        self._span.set_attributes(attributes)

    def set_attribute(self, key: str, value: types.AttributeValue) -> None:
        self._span.set_attribute(key, value)

    def add_event(
        self, name: str, attributes: types.Attributes = None, timestamp: int | None = None
    ) -> None:
        self._span.add_event(name, attributes, timestamp)

    def add_link(self, context: trace_api.SpanContext, attributes: types.Attributes = None) -> None:
        self._span.add_link(context, attributes)

    def update_name(self, name: str) -> None:
        self._span.update_name(name)

    def is_recording(self) -> bool:
        return self._span.is_recording()

    def set_status(
        self, status: trace_api.Status | trace_api.StatusCode, description: str | None = None
    ) -> None:
        self._span.set_status(status, description)

    def record_exception(
        self,
        exception: BaseException,
        attributes: types.Attributes = None,
        timestamp: int | None = None,
        escaped: bool = False,
    ) -> None:
        self._span.record_exception(exception, attributes, timestamp, escaped)


# OpenInference's attribute names (core does not import openinference-semantic-conventions).
KIND = "openinference.span.kind"
"""OpenInference's span kind attribute (``AGENT``, ``TOOL``, ``LLM``, ``CHAIN``, ...)."""
AGENT_NAME = "agent.name"
"""OpenInference's agent name attribute."""
GRAPH_NODE_ID = "graph.node.id"
"""OpenInference's graph node attribute (some instrumentations name agents there)."""
TOOL_NAME = "tool.name"
"""OpenInference's tool name attribute."""
_INPUT_VALUE = "input.value"
_INPUT_MIME_TYPE = "input.mime_type"
_OUTPUT_VALUE = "output.value"
_JSON = "application/json"
_FROM_OUTPUT: Any = object()

AgentName = Callable[[str, Mapping[str, Any]], "str | None"]
"""``agent_name(span name, attributes)``: the agent an openinference ``AGENT`` span stands for."""


def openinference_name(name: str, attributes: Mapping[str, Any]) -> str | None:
    """An ``AGENT`` span's agent: openinference's ``agent.name``, else its ``graph.node.id``."""
    del name
    for key in (AGENT_NAME, GRAPH_NODE_ID):
        value = attributes.get(key)
        if isinstance(value, str) and value:
            return value
    return None


def openinference_attributes(
    name: str, attributes: Mapping[str, Any], agent_name: AgentName = openinference_name
) -> dict[str, types.AttributeValue]:
    """agl's attributes of an ending openinference span, read from its kind (maybe none).

    An ``AGENT`` span whose agent ``agent_name`` finds becomes an agent span
    (:func:`agent_attributes`); a ``TOOL`` span with a ``tool.name``, a tool span
    (:func:`tool_attributes`). Other spans get nothing.

    Args:
        name: The span's name.
        attributes: The attributes openinference recorded on the span.
        agent_name: Where this framework's instrumentation keeps an agent's name.
    """
    kind = attributes.get(KIND)
    if kind == "AGENT":
        agent = agent_name(name, attributes)
        if agent:
            return agent_attributes(agent)
    elif kind == "TOOL":
        tool = attributes.get(TOOL_NAME)
        if isinstance(tool, str) and tool:
            return tool_attributes(tool, attributes)
    return {}


# The OpenTelemetry GenAI conventions' names for agents and tools (agl.semconv has the LLM ones).
_GEN_AI_AGENT_NAME = "gen_ai.agent.name"
_GEN_AI_TOOL_NAME = "gen_ai.tool.name"
_GEN_AI_TOOL_ARGUMENTS = "gen_ai.tool.call.arguments"
_GEN_AI_TOOL_RESULT = "gen_ai.tool.call.result"


def genai_attributes(name: str, attributes: Mapping[str, Any]) -> dict[str, types.AttributeValue]:
    """agl's attributes of a span in the OpenTelemetry GenAI conventions (maybe none).

    For frameworks that trace themselves in those conventions (``gen_ai.operation.name``):
    an ``invoke_agent`` span is an agent span named after ``gen_ai.agent.name``; an
    ``execute_tool`` span a tool span with ``gen_ai.tool.name``, its
    ``gen_ai.tool.call.arguments`` as JSON text and ``gen_ai.tool.call.result`` as text. Model
    call spans (``chat``, ...) need nothing: :func:`is_llm_span` reads them as they are.

    Args:
        name: The span's name (unused: the conventions say everything in attributes).
        attributes: The attributes the framework recorded on the span.
    """
    from agl import semconv

    del name
    operation = attributes.get(semconv.GEN_AI_OPERATION_NAME)
    if operation == "invoke_agent":
        agent = attributes.get(_GEN_AI_AGENT_NAME)
        if isinstance(agent, str) and agent:
            return agent_attributes(agent)
    elif operation == "execute_tool":
        tool = attributes.get(_GEN_AI_TOOL_NAME)
        if isinstance(tool, str) and tool:
            out: dict[str, types.AttributeValue] = {
                semconv.AGL_SPAN_TYPE: semconv.SPAN_TYPE_TOOL,
                semconv.AGL_TOOL_NAME: tool,
            }
            for source, target in (
                (_GEN_AI_TOOL_ARGUMENTS, semconv.AGL_TOOL_ARGUMENTS),
                (_GEN_AI_TOOL_RESULT, semconv.AGL_TOOL_RESULT),
            ):
                value = attributes.get(source)
                if value is not None:
                    out[target] = value if isinstance(value, str) else json.dumps(value)
            return out
    return {}


def agent_attributes(agent: str) -> dict[str, types.AttributeValue]:
    """The attributes of an agent span: every LLM call under it is ``agent``'s."""
    from agl import semconv

    return {semconv.AGL_SPAN_TYPE: semconv.SPAN_TYPE_AGENT, semconv.AGL_AGENT_NAME: agent}


def note_response(response_id: object, model: object = None) -> bool:
    """Put a model call's response id (and model) on the current span, if it is a call's.

    For an adapter's patch that sees the raw response (a ``ChatCompletion``, a stream chunk)
    while the instrumentation's span of the call is current: the id is what LightningRL joins
    the call with the gateway's token ids on. Only a model call's span (openinference's kind
    ``LLM``, or a GenAI ``chat``/``generate_content``/... operation) started through a
    :class:`NormalizingTracerProvider` is changed; empty or non-text values are skipped.

    Returns:
        Whether the current span was a model call's (and got the id, if one was given).
    """
    from agl import semconv

    span = trace_api.get_current_span()
    # openinference's span is a proxy of the one the provider view made: isinstance sees it.
    if not isinstance(span, NormalizingSpan):
        return False
    attributes = span.attributes
    if attributes.get(KIND) != "LLM" and not is_llm_span(dict(attributes)):
        return False
    if isinstance(response_id, str) and response_id:
        span.set_attribute(semconv.GEN_AI_RESPONSE_ID, response_id)
    if isinstance(model, str) and model:
        span.set_attribute(semconv.GEN_AI_RESPONSE_MODEL, model)
    return True


def tool_attributes(
    tool: str, attributes: Mapping[str, Any], *, result: str | None = _FROM_OUTPUT
) -> dict[str, types.AttributeValue]:
    """agl's attributes of a tool call's span, from the OpenInference ones recorded on it.

    ``agl.span.type = "tool"`` and ``agl.tool.name``; ``agl.tool.arguments``, the span's input
    as JSON text (a non-JSON input is JSON-encoded); ``agl.tool.result``, its output as text (a
    number or a boolean openinference kept as it is becomes JSON).

    Args:
        tool: The tool's name.
        attributes: The attributes openinference recorded on the span.
        result: The result, when the adapter reads it its own way (None: there is none).
    """
    from agl import semconv

    out: dict[str, types.AttributeValue] = {
        semconv.AGL_SPAN_TYPE: semconv.SPAN_TYPE_TOOL,
        semconv.AGL_TOOL_NAME: tool,
    }
    arguments = attributes.get(_INPUT_VALUE)
    if isinstance(arguments, str):
        is_json = attributes.get(_INPUT_MIME_TYPE) == _JSON
        out[semconv.AGL_TOOL_ARGUMENTS] = arguments if is_json else json.dumps(arguments)
    if result is _FROM_OUTPUT:
        output = attributes.get(_OUTPUT_VALUE)
        result = (
            None if output is None else output if isinstance(output, str) else json.dumps(output)
        )
    if result is not None:
        out[semconv.AGL_TOOL_RESULT] = result
    return out
