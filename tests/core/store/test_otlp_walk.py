"""The OTLP export request walked a span at a time: framing in any field order, unknown fields,
spans that do not parse among good ones, and chunks bounded by the size of their spans."""

from __future__ import annotations

import json
import re

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans
from opentelemetry.proto.trace.v1.trace_pb2 import Span as OtlpSpan

from agl import InvalidInputError
from agl.semconv import AGL_ATTEMPT_ID, AGL_ROLLOUT_ID
from agl.store._otlp import OTLP_CONTENT_TYPES, decode_traces, read_traces

PROTOBUF, JSON = OTLP_CONTENT_TYPES


def _ids(rollout_id: str = "r", attempt_id: str = "a") -> list[KeyValue]:
    return [
        KeyValue(key=AGL_ROLLOUT_ID, value=AnyValue(string_value=rollout_id)),
        KeyValue(key=AGL_ATTEMPT_ID, value=AnyValue(string_value=attempt_id)),
    ]


def _span(index: int, text: str = "") -> OtlpSpan:
    attributes = [KeyValue(key="text", value=AnyValue(string_value=text))] if text else []
    return OtlpSpan(
        trace_id=bytes([1]) * 16,
        span_id=(index + 1).to_bytes(8, "big"),
        name=f"s{index}",
        start_time_unix_nano=1_000,
        attributes=attributes,
    )


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field (lengths under 2**14 here)."""
    length = len(payload)
    varint = bytes([length]) if length < 128 else bytes([length & 0x7F | 0x80, length >> 7])
    return bytes([number << 3 | 2]) + varint + payload


def _json_span(index: int) -> dict[str, object]:
    return {
        "traceId": "01" * 16,
        "spanId": f"{index + 1:016x}",
        "name": f"s{index}",
        "startTimeUnixNano": "1000",
    }


def test_a_resource_after_its_spans_and_unknown_fields_are_read_as_protobuf_would() -> None:
    spans = b"".join(_field(2, _span(i).SerializeToString()) for i in range(3))
    resource = _field(1, Resource(attributes=_ids()).SerializeToString())
    unknown_varint = bytes([15 << 3 | 0, 0x96, 0x01])  # field 15 (unknown) = 150
    resource_spans = _field(2, spans + unknown_varint) + unknown_varint + resource
    body = unknown_varint + _field(1, resource_spans)
    read = decode_traces(body, PROTOBUF)
    assert [(s.name, s.rollout_id, s.attempt_id) for s in read] == [
        ("s0", "r", "a"),
        ("s1", "r", "a"),
        ("s2", "r", "a"),
    ]
    as_whole = ExportTraceServiceRequest.FromString(body)  # protobuf's own reading agrees
    assert [s.name for s in as_whole.resource_spans[0].scope_spans[0].spans] == ["s0", "s1", "s2"]

    text = json.dumps(
        {
            "unknown": {"deep": [1, {"x": None}]},
            "resourceSpans": [
                {
                    "scopeSpans": [{"scope": {"name": "n"}, "spans": [_json_span(0)]}],
                    "schemaUrl": "u",
                    "resource": {
                        "attributes": [
                            {"key": AGL_ROLLOUT_ID, "value": {"stringValue": "r2"}},
                            {"key": AGL_ATTEMPT_ID, "value": {"stringValue": "a2"}},
                        ]
                    },
                }
            ],
        }
    )
    [span] = decode_traces(text.encode(), JSON)
    assert (span.name, span.rollout_id, span.attempt_id) == ("s0", "r2", "a2")


def test_a_span_that_does_not_parse_is_refused_alone() -> None:
    bad_utf8 = _span(1).SerializeToString().replace(b"s1", b"\xff\xfe")
    scope = b"".join(
        _field(2, raw)
        for raw in (_span(0).SerializeToString(), bad_utf8, _span(2).SerializeToString())
    )
    body = _field(1, _field(1, Resource(attributes=_ids()).SerializeToString()) + _field(2, scope))
    json_body = json.dumps(
        {
            "resourceSpans": [
                {
                    "resource": {
                        "attributes": [
                            {"key": AGL_ROLLOUT_ID, "value": {"stringValue": "r"}},
                            {"key": AGL_ATTEMPT_ID, "value": {"stringValue": "a"}},
                        ]
                    },
                    "scopeSpans": [{"spans": [_json_span(0), {"kind": []}, _json_span(2)]}],
                }
            ]
        }
    ).encode()
    path = "resource_spans[0].scope_spans[0].spans[1]"
    for data, content_type in ((body, PROTOBUF), (json_body, JSON)):
        [chunk] = read_traces(data, content_type)
        assert [span.name for span in chunk.spans] == ["s0", "s2"]
        [(field, why)] = chunk.bad
        assert field == path
        assert why.startswith(f"{path}: not a valid OTLP ")
        whole = re.escape(f"trace export request: {path}:")
        with pytest.raises(InvalidInputError, match=whole) as caught:
            decode_traces(data, content_type)  # taken whole: the request is refused
        assert caught.value.field == "body"


@pytest.mark.parametrize("content_type", [PROTOBUF, JSON])
def test_a_body_cut_short_is_refused_before_any_span_is_read(content_type: str) -> None:
    request = ExportTraceServiceRequest(
        resource_spans=[
            ResourceSpans(
                resource=Resource(attributes=_ids()),
                scope_spans=[ScopeSpans(spans=[_span(i) for i in range(5)])],
            )
        ]
    )
    if content_type == PROTOBUF:
        body = request.SerializeToString()
    else:
        body = json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [_json_span(0)] * 5}]}]})
        body = body.encode()
    for cut in (body[:-3], body + b"x"):
        with pytest.raises(InvalidInputError, match="not a valid OTLP") as caught:
            read_traces(cut, content_type)  # raises on the call, before a chunk is taken
        assert caught.value.field == "body"


def test_chunks_end_at_a_byte_budget_as_well_as_a_span_count() -> None:
    big = [_span(i, "x" * 100_000) for i in range(10)]
    request = ExportTraceServiceRequest(
        resource_spans=[
            ResourceSpans(resource=Resource(attributes=_ids()), scope_spans=[ScopeSpans(spans=big)])
        ]
    )
    body = request.SerializeToString()
    chunks = list(read_traces(body, PROTOBUF, chunk=1000, chunk_bytes=250_000))
    assert [len(chunk.spans) for chunk in chunks] == [3, 3, 3, 1]
    small = list(read_traces(body, PROTOBUF, chunk=4))
    assert [len(chunk.spans) for chunk in small] == [4, 4, 2]
    assert [s.name for c in chunks for s in c.spans] == [f"s{i}" for i in range(10)]
