"""Decode OTLP/HTTP trace export requests into agl spans.

Agents instrumented with any OpenTelemetry SDK can send their spans straight to the store: the
store server accepts the standard OTLP/HTTP trace export request (``POST /v1/traces``) in
either of its encodings, protobuf or JSON, and this module turns its body into
:class:`~agl.Span` objects. Each span must say which rollout and attempt it belongs to,
through the ``agl.rollout.id`` and ``agl.attempt.id`` attributes set on the span itself or on
its resource. :func:`decode_traces` takes a request as a whole (any bad span rejects every
span); the store server reads it with :func:`read_traces` instead, in chunks, so that a large
export is never all in memory at once (neither as agl spans nor as a parsed request: the body
is walked a span at a time, :mod:`agl.store._otlp_walk`), and so that a bad span is reported
(in OTLP's ``partial_success``) rather than losing the good spans sent with it.

The protobuf classes come from the ``opentelemetry-proto`` package (the ``server`` extra) and
are imported only when a request is decoded, so ``import agl`` stays light.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pydantic import JsonValue

from agl._errors import InvalidInputError
from agl._ids import id_problem, shown
from agl._spans import Span, SpanEvent, SpanKind, SpanLink, SpanStatus, StatusCode
from agl.semconv import AGL_ATTEMPT_ID, AGL_ROLLOUT_ID

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
    from opentelemetry.proto.trace.v1.trace_pb2 import Span as OtlpSpan

__all__ = ["OTLP_CONTENT_TYPES", "TraceChunk", "decode_traces", "encode_response", "read_traces"]

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
OTLP_CONTENT_TYPES = (PROTOBUF, JSON)
"""The media types of the two OTLP/HTTP encodings, protobuf first."""

# OTLP enum numbers (SPAN_KIND_*, STATUS_CODE_*); unknown numbers fall back to the default.
_KINDS = {2: SpanKind.SERVER, 3: SpanKind.CLIENT, 4: SpanKind.PRODUCER, 5: SpanKind.CONSUMER}
_STATUS_CODES = {1: StatusCode.OK, 2: StatusCode.ERROR}


def decode_traces(body: bytes | bytearray, content_type: str) -> list[Span]:
    """Decode the body of an OTLP/HTTP trace export request.

    Args:
        body: The request body.
        content_type: The request's ``Content-Type``; parameters such as ``charset`` are ignored.

    Returns:
        Every span of the request, in request order (an empty request gives an empty list).

    Raises:
        InvalidInputError: If the content type is not an OTLP one, the body does not parse, or
            any span has a malformed id or lacks a rollout or attempt id. ``field`` names where.
    """
    spans = []
    for read in _read(body, content_type):
        if read.error is not None:
            raise read.error
        if read.span is None:
            raise InvalidInputError(
                f"the body is not a valid OTLP {read.encoding} trace export request: "
                f"{read.path}: {read.unparsable}",
                field="body",
            )
        spans.append(read.span)
    return spans


@dataclass
class TraceChunk:
    """Some spans of a request, in request order: those that were read (with their paths in
    the request), and the others as (field, why) pairs."""

    spans: list[Span] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    bad: list[tuple[str, str]] = field(default_factory=list)


def read_traces(
    body: bytes | bytearray, content_type: str, chunk: int = 1000, chunk_bytes: int = 4_000_000
) -> Iterator[TraceChunk]:
    """Decode an OTLP/HTTP trace export request in chunks of at most ``chunk`` spans, each
    chunk ending once its spans take ``chunk_bytes`` of the body (so large spans make smaller
    chunks).

    The body's framing is read whole before this returns (a body that is not an export request
    raises here); each span is parsed and converted as the chunks are taken, so memory holds
    the body and one chunk (:mod:`agl.store._otlp_walk`). A span that cannot be read is one of
    its chunk's ``bad``.

    Raises:
        InvalidInputError: If the content type is not an OTLP one or the body does not parse.
    """
    reads = _read(body, content_type)

    def chunks() -> Iterator[TraceChunk]:
        current, size = TraceChunk(), 0
        for read in reads:
            size += read.size
            if read.span is not None:
                current.spans.append(read.span)
                current.paths.append(read.path)
            elif read.error is not None:
                error = read.error
                current.bad.append((error.field or read.path, f"{read.path}: {error.message}"))
            else:
                why = f"not a valid OTLP {read.encoding} span: {read.unparsable}"
                current.bad.append((read.path, f"{read.path}: {why}"))
            if len(current.spans) + len(current.bad) >= chunk or size >= chunk_bytes:
                yield current
                current, size = TraceChunk(), 0
        if current.spans or current.bad:
            yield current

    return chunks()


@dataclass(frozen=True)
class _Read:
    """One span of a request as read: converted, refused (``error``), or not parsable."""

    path: str
    encoding: str
    size: int
    span: Span | None = None
    error: InvalidInputError | None = None
    unparsable: Exception | None = None


def _read(body: bytes | bytearray, content_type: str) -> Iterator[_Read]:
    """Check the framing of the whole body (raising here), then read its spans lazily."""
    from agl.store._otlp_walk import BadBody, walk

    media_type = _media_type(content_type)
    encoding = "protobuf" if media_type == PROTOBUF else "JSON"
    try:
        walked = walk(body, media_type == JSON)
    except BadBody as exc:
        raise InvalidInputError(
            f"the body is not a valid OTLP {encoding} trace export request: {exc}", field="body"
        ) from None

    def reads() -> Iterator[_Read]:
        resources: dict[int, dict[str, JsonValue] | InvalidInputError] = {}
        for item in walked:
            if isinstance(item.error, InvalidInputError):
                yield _Read(item.path, encoding, item.size, error=item.error)
                continue
            if item.span is None:
                yield _Read(item.path, encoding, item.size, unparsable=item.error)
                continue
            resource = resources.get(item.resource_index)
            if resource is None:  # a resource's attributes are read when its first span is
                try:
                    where = f"resource_spans[{item.resource_index}].resource"
                    resource = _attributes(item.resource, where)
                except InvalidInputError as exc:
                    resource = exc
                resources[item.resource_index] = resource
            try:
                if isinstance(resource, InvalidInputError):
                    raise resource
                span = _convert_span(item.span, resource, item.path)
            except InvalidInputError as exc:
                yield _Read(item.path, encoding, item.size, error=exc)
            else:
                yield _Read(item.path, encoding, item.size, span=span)

    return reads()


def encode_response(
    content_type: str, rejected_spans: int = 0, error_message: str = ""
) -> tuple[bytes, str]:
    """Encode an export response in the encoding of the request: empty when every span was
    stored, else with OTLP's ``partial_success`` (how many spans were refused, and why).

    Args:
        content_type: The request's ``Content-Type``.
        rejected_spans: Spans of the request the store refused.
        error_message: Why, for the sender's log.

    Returns:
        The response body and the media type to send it with.

    Raises:
        InvalidInputError: If the content type is not an OTLP one.
    """
    from google.protobuf import json_format
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceResponse,
    )

    response = ExportTraceServiceResponse()
    if rejected_spans:
        response.partial_success.rejected_spans = rejected_spans
        response.partial_success.error_message = error_message
    if _media_type(content_type) == JSON:
        return json_format.MessageToJson(response, indent=None).encode(), JSON
    return response.SerializeToString(), PROTOBUF


def _media_type(content_type: str) -> str:
    media_type = content_type.split(";", 1)[0].strip().lower()
    if media_type not in OTLP_CONTENT_TYPES:
        raise InvalidInputError(
            f"unsupported content type {content_type!r}; OTLP/HTTP uses {PROTOBUF!r} or {JSON!r}",
            field="content_type",
            value=content_type,
        )
    return media_type


def _convert_span(otlp_span: OtlpSpan, resource: dict[str, JsonValue], path: str) -> Span:
    attributes = _attributes(otlp_span.attributes, f"{path}.attributes")
    parent = otlp_span.parent_span_id
    # An absent parent may also arrive as all zeros, the "invalid span id" of the SDKs.
    parent_id = _hex_id(parent, 8, f"{path}.parent_span_id") if parent.strip(b"\0") else None
    return Span(
        rollout_id=_owner(AGL_ROLLOUT_ID, attributes, resource, otlp_span.name, path),
        attempt_id=_owner(AGL_ATTEMPT_ID, attributes, resource, otlp_span.name, path),
        trace_id=_hex_id(otlp_span.trace_id, 16, f"{path}.trace_id"),
        span_id=_hex_id(otlp_span.span_id, 8, f"{path}.span_id"),
        parent_id=parent_id,
        name=otlp_span.name,
        kind=_KINDS.get(otlp_span.kind, SpanKind.INTERNAL),
        status=SpanStatus(
            code=_STATUS_CODES.get(otlp_span.status.code, StatusCode.UNSET),
            description=otlp_span.status.message or None,
        ),
        start_time_unix_nano=otlp_span.start_time_unix_nano,
        end_time_unix_nano=otlp_span.end_time_unix_nano or None,
        attributes=attributes,
        events=[
            SpanEvent(
                name=event.name,
                time_unix_nano=event.time_unix_nano,
                attributes=_attributes(event.attributes, f"{path}.events[{n}].attributes"),
            )
            for n, event in enumerate(otlp_span.events)
        ],
        links=[
            SpanLink(
                trace_id=_hex_id(link.trace_id, 16, f"{path}.links[{n}].trace_id"),
                span_id=_hex_id(link.span_id, 8, f"{path}.links[{n}].span_id"),
                attributes=_attributes(link.attributes, f"{path}.links[{n}].attributes"),
            )
            for n, link in enumerate(otlp_span.links)
        ],
        resource=resource,
    )


def _owner(
    key: str, attributes: dict[str, JsonValue], resource: dict[str, JsonValue], name: str, path: str
) -> str:
    """Return the rollout or attempt id ``key`` names: the span's own, else its resource's."""
    value = attributes.get(key, resource.get(key))
    wrong = id_problem(value, segment=True)  # an id as every store takes it (agl._ids)
    if wrong is None:
        return value  # type: ignore[return-value]
    if value is None:
        problem = f"has no {key!r} attribute"
    else:
        problem = f"has a {key!r} attribute that {wrong} ({shown(value)})"
    raise InvalidInputError(
        f"span {name!r} {problem}; every span needs both {AGL_ROLLOUT_ID!r} and "
        f"{AGL_ATTEMPT_ID!r}, set as attributes of the span or of its resource",
        field=f"{path}.attributes",
        value=value,
    )


def _hex_id(raw: bytes, size: int, field: str) -> str:
    """Return an id as lowercase hex, after checking its length and that it is not all zeros."""
    if len(raw) != size or not raw.strip(b"\0"):
        raise InvalidInputError(
            f"{field.rsplit('.', 1)[-1]} must be {size} bytes and not all zeros, "
            f"got {len(raw)} bytes ({raw.hex() or 'empty'})",
            field=field,
            value=raw.hex(),
        )
    return raw.hex()


def _attributes(key_values: Iterable[KeyValue], field: str) -> dict[str, JsonValue]:
    return {kv.key: _any_value(kv.value, f"{field}[{kv.key!r}]") for kv in key_values}


def _any_value(value: AnyValue, field: str) -> JsonValue:
    """Convert an OTLP ``AnyValue`` to a JSON value (bytes become a base64 string)."""
    kind = value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [
            _any_value(item, f"{field}[{n}]") for n, item in enumerate(value.array_value.values)
        ]
    if kind == "kvlist_value":
        return _attributes(value.kvlist_value.values, field)
    if kind == "bytes_value":
        return base64.b64encode(value.bytes_value).decode("ascii")
    if kind in ("string_value", "bool_value", "int_value", "double_value"):
        scalar: JsonValue = getattr(value, kind)
        return scalar
    raise InvalidInputError(
        f"attribute values of type {kind} are not supported in trace data", field=field
    )


def decode_body(data: bytes | bytearray, encoding: str, limit: int) -> bytes | bytearray:
    """The body of an export as sent with ``Content-Encoding: encoding``: as is, or inflated
    from gzip (as OTLP exporters send it with compression on), at most ``limit`` bytes.

    Raises:
        InvalidInputError: another encoding; a body that is not gzip, or inflates past
            ``limit``.
    """
    import zlib

    encoding = encoding.strip().lower()
    if encoding in ("", "identity"):
        return data
    if encoding != "gzip":
        raise InvalidInputError(
            f"Content-Encoding {encoding!r} is not supported: send gzip or none",
            field="content-encoding",
            value=encoding,
        )

    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        inflated = inflater.decompress(data, limit + 1)
    except zlib.error as exc:
        raise InvalidInputError(
            f"the body says Content-Encoding: gzip but is not gzip ({exc})", field="body"
        ) from None
    if len(inflated) > limit or inflater.unconsumed_tail:
        raise InvalidInputError(
            f"the gzip body inflates past the server's limit of {limit} bytes", field="body"
        )
    return inflated
