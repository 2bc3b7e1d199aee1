"""The tracer provider openinference records through: agl's, with spans completed at their end.

openinference builds each span's attributes from the finished LangChain run just before it ends
the span, and an OpenTelemetry span processor only sees a span once it can no longer change. So
openinference is handed :class:`NormalizingTracerProvider`, a view of agl's provider whose spans
add :func:`agl_langchain._normalize.agl_attributes` to themselves when ended. Only the spans
openinference starts pass through it; nothing else of agl's provider changes.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from opentelemetry import trace as trace_api
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.util import types

from agl_langchain._normalize import agl_attributes

if TYPE_CHECKING:
    # The type OpenTelemetry's Tracer.start_as_current_span is declared to return.
    from opentelemetry.util._decorator import _AgnosticContextManager

__all__ = ["NormalizingTracerProvider"]

logger = logging.getLogger("agl_langchain")


class NormalizingTracerProvider(trace_api.TracerProvider):
    """A view of ``provider`` whose spans carry agl's attributes when they end.

    Args:
        provider: agl's tracer provider (``tracer.provider``); spans are recorded there.
    """

    def __init__(self, provider: trace_api.TracerProvider) -> None:
        self._provider = provider

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
        return _NormalizingTracer(tracer)


class _NormalizingTracer(trace_api.Tracer):
    def __init__(self, tracer: trace_api.Tracer) -> None:
        self._tracer = tracer

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
        return _NormalizingSpan(span) if span.is_recording() else span

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


class _NormalizingSpan(trace_api.Span):
    """An SDK span that adds agl's attributes to itself just before it ends."""

    def __init__(self, span: trace_api.Span) -> None:
        self._span = span

    def end(self, end_time: int | None = None) -> None:
        span = self._span
        if isinstance(span, ReadableSpan) and span.is_recording():
            try:
                extra = agl_attributes(span.name, span.attributes or {})
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
