"""Turn an OpenTelemetry SDK span into an agl :class:`~agl.Span`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind as OtelSpanKind
from opentelemetry.trace import StatusCode as OtelStatusCode

from agl._spans import Span, SpanEvent, SpanKind, SpanLink, SpanStatus, StatusCode
from agl._text import valid_json, valid_text
from agl.tracing._conventions import normalize_attributes

__all__ = ["to_agl_span"]

_KINDS = {
    OtelSpanKind.INTERNAL: SpanKind.INTERNAL,
    OtelSpanKind.SERVER: SpanKind.SERVER,
    OtelSpanKind.CLIENT: SpanKind.CLIENT,
    OtelSpanKind.PRODUCER: SpanKind.PRODUCER,
    OtelSpanKind.CONSUMER: SpanKind.CONSUMER,
}
_CODES = {
    OtelStatusCode.UNSET: StatusCode.UNSET,
    OtelStatusCode.OK: StatusCode.OK,
    OtelStatusCode.ERROR: StatusCode.ERROR,
}


def to_agl_span(span: ReadableSpan, rollout_id: str, attempt_id: str) -> Span:
    """Convert a finished SDK span, attributing it to a rollout and attempt."""
    context = span.get_span_context()
    assert context is not None
    parent = span.parent
    return Span.model_construct(
        rollout_id=rollout_id,
        attempt_id=attempt_id,
        sequence_id=None,
        trace_id=f"{context.trace_id:032x}",
        span_id=f"{context.span_id:016x}",
        parent_id=None if parent is None else f"{parent.span_id:016x}",
        name=valid_text(span.name),
        kind=_KINDS.get(span.kind, SpanKind.INTERNAL),
        status=SpanStatus.model_construct(
            code=_CODES.get(span.status.status_code, StatusCode.UNSET),
            description=None
            if span.status.description is None
            else valid_text(span.status.description),
        ),
        start_time_unix_nano=span.start_time or 0,
        end_time_unix_nano=span.end_time,
        attributes=normalize_attributes(_attributes(span.attributes)),
        events=[
            SpanEvent(
                name=valid_text(event.name),
                time_unix_nano=event.timestamp or 0,
                attributes=_attributes(event.attributes),
            )
            for event in span.events
        ],
        links=[
            SpanLink(
                trace_id=f"{link.context.trace_id:032x}",
                span_id=f"{link.context.span_id:016x}",
                attributes=_attributes(link.attributes),
            )
            for link in span.links
        ],
        resource=_resource_attributes(span.resource),
    )


# The last resource converted, and its attributes converted (one slot, shared by threads).
_last_resource: list[tuple[Resource, dict[str, Any]]] = []


def _resource_attributes(resource: Resource) -> dict[str, Any]:
    """The resource's attributes as JSON values; converted once while spans share a resource
    (a tracer's spans all do), each span getting its own copy."""
    last = _last_resource[0] if _last_resource else None
    if last is None or last[0] is not resource:
        last = (resource, _attributes(resource.attributes))
        _last_resource[:] = [last]
    return dict(last[1])


def _attributes(attributes: Mapping[str, Any] | None) -> dict[str, Any]:
    """Copy OTel attributes into valid JSON values (OTel sequences are tuples; lone surrogates
    become U+FFFD: :mod:`agl._text`)."""
    if not attributes:
        return {}
    return {
        valid_text(key): valid_json(list(value) if isinstance(value, tuple | list) else value)
        for key, value in attributes.items()
    }
