"""Tests of agl.store._otlp with real payloads made by the OpenTelemetry SDK and its exporter."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from google.protobuf import json_format
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span as OtlpSpan
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Link, Status

from agl import InvalidInputError, Span, SpanEvent, SpanKind, SpanLink, SpanStatus, StatusCode
from agl.semconv import AGL_ATTEMPT_ID, AGL_ROLLOUT_ID
from agl.store._otlp import OTLP_CONTENT_TYPES, decode_traces, encode_response, read_traces

PROTOBUF, JSON = OTLP_CONTENT_TYPES
T0 = 1_700_000_000_123_456_789  # beyond 2**53: a float would lose the last digits

ALL_TYPES: dict[str, Any] = {
    "str": "hello",
    "empty_str": "",
    "bool": True,
    "false": False,
    "int": 42,
    "negative": -(2**62),
    "float": 3.25,
    "str_list": ["a", "b"],
    "bool_list": [True, False],
    "int_list": [1, 2, 3],
    "float_list": [0.5, 1.5],
}


# --- Producing real OTLP payloads -------------------------------------------------------------


def record(
    resource: Mapping[str, Any], *, span_ids: Mapping[str, Any] | None = None
) -> list[ReadableSpan]:
    """Record a small trace with the SDK; ``span_ids`` are set as attributes of every span."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create(dict(resource)))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("agent", "1.0")
    own = dict(span_ids or {})

    other = tracer.start_span("elsewhere", attributes=own, start_time=T0 - 10)
    other.end(end_time=T0 - 5)
    with tracer.start_as_current_span(
        "root",
        kind=trace.SpanKind.SERVER,
        attributes={**ALL_TYPES, **own},
        start_time=T0,
        end_on_exit=False,
    ) as root:
        child = tracer.start_span(
            "llm call",
            kind=trace.SpanKind.CLIENT,
            attributes=own,
            links=[Link(other.get_span_context(), {"why": "retry", "n": 2})],
            start_time=T0 + 100,
        )
        child.add_event("first token", {"token": "hi", "index": 0}, timestamp=T0 + 150)
        child.add_event("done", timestamp=T0 + 190)
        child.set_status(Status(trace.StatusCode.ERROR, "upstream timed out"))
        child.end(end_time=T0 + 200)
        with trace.use_span(child):
            grandchild = tracer.start_span(
                "tool", kind=trace.SpanKind.PRODUCER, attributes=own, start_time=T0 + 300
            )
            grandchild.set_status(Status(trace.StatusCode.OK))
            grandchild.end(end_time=T0 + 400)
        consumer = tracer.start_span(
            "queue", kind=trace.SpanKind.CONSUMER, attributes=own, start_time=T0 + 500
        )
        consumer.end(end_time=T0 + 600)
        root.end(end_time=T0 + 1000)
    provider.shutdown()
    return list(exporter.get_finished_spans())


def expected(sdk_span: ReadableSpan, rollout_id: str, attempt_id: str) -> Span:
    """The agl span an SDK span should decode to, computed from the SDK's own objects."""

    def attrs(values: Mapping[str, Any] | None) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in (values or {}).items()}

    context = sdk_span.get_span_context()
    assert context is not None
    assert sdk_span.start_time is not None
    return Span(
        rollout_id=rollout_id,
        attempt_id=attempt_id,
        trace_id=f"{context.trace_id:032x}",
        span_id=f"{context.span_id:016x}",
        parent_id=f"{sdk_span.parent.span_id:016x}" if sdk_span.parent else None,
        name=sdk_span.name,
        kind=SpanKind(sdk_span.kind.name.lower()),
        status=SpanStatus(
            code=StatusCode(sdk_span.status.status_code.name.lower()),
            description=sdk_span.status.description,
        ),
        start_time_unix_nano=sdk_span.start_time,
        end_time_unix_nano=sdk_span.end_time,
        attributes=attrs(sdk_span.attributes),
        events=[
            SpanEvent(name=e.name, time_unix_nano=e.timestamp, attributes=attrs(e.attributes))
            for e in sdk_span.events
        ],
        links=[
            SpanLink(
                trace_id=f"{link.context.trace_id:032x}",
                span_id=f"{link.context.span_id:016x}",
                attributes=attrs(link.attributes),
            )
            for link in sdk_span.links
        ],
        resource=attrs(sdk_span.resource.attributes),
    )


def to_otlp_json(
    request: ExportTraceServiceRequest, *, snake_case: bool = False, numbers: bool = False
) -> bytes:
    """Encode a request as OTLP/JSON: proto3 JSON, but with trace and span ids in hex.

    With ``snake_case`` the keys are the proto field names; with ``numbers`` enums are integers
    and int64 values JSON numbers instead of strings.
    """
    data = json_format.MessageToDict(
        request, preserving_proto_field_name=snake_case, use_integers_for_enums=numbers
    )

    def key(name: str) -> str:
        return name if snake_case else _camel(name)

    def hexify(message: dict[str, Any], names: Sequence[str]) -> None:
        for name in map(key, names):
            if name in message:
                message[name] = base64.b64decode(message[name]).hex()

    for resource_spans in data.get(key("resource_spans"), []):
        for scope_spans in resource_spans.get(key("scope_spans"), []):
            for span in scope_spans.get("spans", []):
                hexify(span, ["trace_id", "span_id", "parent_span_id"])
                for link in span.get("links", []):
                    hexify(link, ["trace_id", "span_id"])
    text = json.dumps(data)
    if numbers:
        text = json.dumps(json.loads(text, object_hook=_int64_as_numbers))
    return text.encode()


def _camel(name: str) -> str:
    first, *rest = name.split("_")
    return first + "".join(word.capitalize() for word in rest)


def _int64_as_numbers(obj: dict[str, Any]) -> dict[str, Any]:
    return {
        k: int(v)
        if (k.endswith(("UnixNano", "unix_nano")) or k in ("intValue", "int_value"))
        else v
        for k, v in obj.items()
    }


def both_encodings(request: ExportTraceServiceRequest) -> Iterator[tuple[bytes, str]]:
    yield request.SerializeToString(), PROTOBUF
    yield to_otlp_json(request), JSON
    yield to_otlp_json(request, snake_case=True, numbers=True), JSON


ENCODINGS = ["protobuf", "json", "json-snake-case-numbers"]


def encoded(request: ExportTraceServiceRequest, encoding: str) -> tuple[bytes, str]:
    return dict(zip(ENCODINGS, both_encodings(request), strict=True))[encoding]


# --- Round trips -------------------------------------------------------------------------------


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_ids_on_the_resource_round_trip_every_field(encoding: str) -> None:
    sdk_spans = record({AGL_ROLLOUT_ID: "ro-1", AGL_ATTEMPT_ID: "at-1", "service.name": "agent"})
    body, content_type = encoded(encode_spans(sdk_spans), encoding)

    spans = decode_traces(body, content_type)

    assert spans == [expected(s, "ro-1", "at-1") for s in sdk_spans]
    by_name = {s.name: s for s in spans}
    root, child, tool = by_name["root"], by_name["llm call"], by_name["tool"]
    # Spot checks independent of the oracle above.
    assert root.attributes == ALL_TYPES
    assert root.kind is SpanKind.SERVER
    assert root.parent_id is None
    assert (root.start_time_unix_nano, root.end_time_unix_nano) == (T0, T0 + 1000)
    assert child.parent_id == root.span_id
    assert tool.parent_id == child.span_id
    assert len({s.trace_id for s in spans}) == 2  # "elsewhere" is a trace of its own
    assert child.trace_id == root.trace_id == tool.trace_id
    assert child.kind is SpanKind.CLIENT
    assert child.status == SpanStatus(code=StatusCode.ERROR, description="upstream timed out")
    assert child.events == [
        SpanEvent(
            name="first token", time_unix_nano=T0 + 150, attributes={"token": "hi", "index": 0}
        ),
        SpanEvent(name="done", time_unix_nano=T0 + 190),
    ]
    assert child.links == [
        SpanLink(
            trace_id=by_name["elsewhere"].trace_id,
            span_id=by_name["elsewhere"].span_id,
            attributes={"why": "retry", "n": 2},
        )
    ]
    assert tool.kind is SpanKind.PRODUCER
    assert tool.status.code is StatusCode.OK
    assert by_name["queue"].kind is SpanKind.CONSUMER
    assert by_name["elsewhere"].kind is SpanKind.INTERNAL
    assert root.resource[AGL_ROLLOUT_ID] == "ro-1"
    assert root.resource["service.name"] == "agent"
    assert AGL_ROLLOUT_ID not in root.attributes


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_ids_on_the_span_win_over_the_resource_and_stay_in_attributes(encoding: str) -> None:
    ids = {AGL_ROLLOUT_ID: "ro-span", AGL_ATTEMPT_ID: "at-span"}
    sdk_spans = record({AGL_ROLLOUT_ID: "ro-resource"}, span_ids=ids)
    body, content_type = encoded(encode_spans(sdk_spans), encoding)

    spans = decode_traces(body, content_type)

    assert spans == [expected(s, "ro-span", "at-span") for s in sdk_spans]
    for span in spans:
        assert span.attributes[AGL_ROLLOUT_ID] == "ro-span"
        assert span.attributes[AGL_ATTEMPT_ID] == "at-span"
        assert span.resource[AGL_ROLLOUT_ID] == "ro-resource"


def test_several_resources_and_scopes() -> None:
    first = record({AGL_ROLLOUT_ID: "r1", AGL_ATTEMPT_ID: "a1"})
    second = record({AGL_ROLLOUT_ID: "r2", AGL_ATTEMPT_ID: "a2"})
    request = encode_spans(first + second)
    assert len(request.resource_spans) == 2

    for body, content_type in both_encodings(request):
        spans = decode_traces(body, content_type)
        assert spans == [expected(s, "r1", "a1") for s in first] + [
            expected(s, "r2", "a2") for s in second
        ]


def test_any_values_the_sdk_cannot_produce() -> None:
    """kvlist, bytes, nested arrays and empty values, added to a real request by hand."""
    request = encode_spans(record({AGL_ROLLOUT_ID: "r", AGL_ATTEMPT_ID: "a"}))
    nested = AnyValue()
    nested.kvlist_value.values.add(key="inner", value=AnyValue(int_value=-7))
    nested.kvlist_value.values.add(key="raw", value=AnyValue(bytes_value=b"\x00\xffagl"))
    nested.kvlist_value.values.add(key="unset", value=AnyValue())
    lists = AnyValue()
    lists.array_value.values.add(string_value="x")
    lists.array_value.values.add().array_value.values.add(double_value=1.5)
    lists.array_value.values.add(bool_value=False)
    request.resource_spans[0].scope_spans[0].spans[0].attributes.extend(
        [KeyValue(key="map", value=nested), KeyValue(key="mixed", value=lists)]
    )
    want = {
        "map": {"inner": -7, "raw": base64.b64encode(b"\x00\xffagl").decode(), "unset": None},
        "mixed": ["x", [1.5], False],
    }

    for body, content_type in both_encodings(request):
        attributes = decode_traces(body, content_type)[0].attributes
        assert {k: attributes[k] for k in want} == want


def test_hand_written_otlp_json() -> None:
    """The shape of the OTLP/JSON example in the opentelemetry-proto repository."""
    body = {
        "resourceSpans": [
            {
                "resource": {
                    "attributes": [
                        {"key": "service.name", "value": {"stringValue": "my.service"}},
                        {"key": AGL_ROLLOUT_ID, "value": {"stringValue": "ro-9"}},
                    ]
                },
                "scopeSpans": [
                    {
                        "scope": {"name": "my.library", "version": "1.0.0"},
                        "spans": [
                            {
                                "traceId": "5B8EFFF798038103D269B633813FC60C",
                                "spanId": "EEE19B7EC3C1B174",
                                "parentSpanId": "EEE19B7EC3C1B173",
                                "name": "I'm a server span",
                                "startTimeUnixNano": "1544712660000000000",
                                "endTimeUnixNano": 1544712661000000000,
                                "kind": 2,
                                "status": {"code": "STATUS_CODE_ERROR", "message": "boom"},
                                "attributes": [
                                    {"key": AGL_ATTEMPT_ID, "value": {"stringValue": "at-9"}},
                                    {"key": "n", "value": {"intValue": "9007199254740993"}},
                                    {"key": "b", "value": {"bytesValue": "AAE="}},
                                    {
                                        "key": "kv",
                                        "value": {
                                            "kvlistValue": {
                                                "values": [
                                                    {"key": "d", "value": {"doubleValue": 2}}
                                                ]
                                            }
                                        },
                                    },
                                ],
                                "links": [
                                    {
                                        "traceId": "00000000000000000000000000000001",
                                        "spanId": "0000000000000002",
                                    }
                                ],
                                "futureField": {"ignored": True},
                            }
                        ],
                    }
                ],
            }
        ]
    }

    [span] = decode_traces(json.dumps(body).encode(), "Application/JSON; charset=utf-8")

    assert span.trace_id == "5b8efff798038103d269b633813fc60c"
    assert (span.span_id, span.parent_id) == ("eee19b7ec3c1b174", "eee19b7ec3c1b173")
    assert (span.rollout_id, span.attempt_id) == ("ro-9", "at-9")
    assert span.kind is SpanKind.SERVER
    assert span.status == SpanStatus(code=StatusCode.ERROR, description="boom")
    assert span.start_time_unix_nano == 1544712660000000000
    assert span.end_time_unix_nano == 1544712661000000000
    assert span.attributes == {
        AGL_ATTEMPT_ID: "at-9",
        "n": 9007199254740993,
        "b": "AAE=",
        "kv": {"d": 2.0},
    }
    assert span.links == [SpanLink(trace_id="0" * 31 + "1", span_id="0" * 15 + "2")]
    assert span.resource == {"service.name": "my.service", AGL_ROLLOUT_ID: "ro-9"}


def test_unended_span_unspecified_kind_and_zero_parent() -> None:
    request = encode_spans(record({AGL_ROLLOUT_ID: "r", AGL_ATTEMPT_ID: "a"}))
    otlp_span = request.resource_spans[0].scope_spans[0].spans[0]
    otlp_span.end_time_unix_nano = 0
    otlp_span.kind = OtlpSpan.SpanKind.SPAN_KIND_UNSPECIFIED
    otlp_span.parent_span_id = bytes(8)

    for body, content_type in both_encodings(request):
        span = decode_traces(body, content_type)[0]
        assert span.end_time_unix_nano is None
        assert span.kind is SpanKind.INTERNAL
        assert span.parent_id is None


@pytest.mark.parametrize(
    ("body", "content_type"),
    [(b"", PROTOBUF), (b"{}", JSON), (b'{"resourceSpans": []}', JSON)],
)
def test_empty_request(body: bytes, content_type: str) -> None:
    assert decode_traces(body, content_type) == []


def test_a_real_exporter_over_http() -> None:
    """The SDK's OTLP/HTTP exporter posts to a server that answers with encode_response."""
    received: list[Span] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            content_type = self.headers["Content-Type"]
            body = self.rfile.read(int(self.headers["Content-Length"]))
            received.extend(decode_traces(body, content_type))
            answer, media_type = encode_response(content_type)
            self.send_response(200)
            self.send_header("Content-Type", media_type)
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args: object) -> None:
            pass

    sdk_spans = record({AGL_ROLLOUT_ID: "r", AGL_ATTEMPT_ID: "a"})
    with ThreadingHTTPServer(("127.0.0.1", 0), Handler) as server:
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            host, port = server.server_address[:2]
            exporter = OTLPSpanExporter(endpoint=f"http://{host!s}:{port}/v1/traces", timeout=10)
            assert exporter.export(sdk_spans) is SpanExportResult.SUCCESS
            exporter.shutdown()
        finally:
            server.shutdown()
            thread.join()

    assert received == [expected(s, "r", "a") for s in sdk_spans]


def test_a_real_exporter_with_gzip_reaches_a_store_server() -> None:
    """OTLP exporters compress with gzip when asked (Content-Encoding: gzip): the store server
    inflates the body; a body that only says so, or another encoding, is a 400 naming why."""
    import asyncio

    import httpx
    from opentelemetry.exporter.otlp.proto.http import Compression

    import agl
    from agl.store import StoreServer

    async def claim(url: str) -> tuple[str, str]:
        async with agl.open_store(url) as store:
            await store.enqueue_rollouts([agl.RolloutRequest(input=0)])
            [claimed] = await store.dequeue_rollouts()
        return claimed.rollout.rollout_id, claimed.attempt.attempt_id

    async def stored(url: str, rollout_id: str) -> list[Span]:
        async with agl.open_store(url) as store:
            return await store.query_spans(rollout_id)

    with StoreServer("memory://") as server:
        rollout_id, attempt_id = asyncio.run(claim(server.url))
        sdk_spans = record({AGL_ROLLOUT_ID: rollout_id, AGL_ATTEMPT_ID: attempt_id})
        exporter = OTLPSpanExporter(
            endpoint=f"{server.url}/v1/traces", timeout=10, compression=Compression.Gzip
        )
        assert exporter.export(sdk_spans) is SpanExportResult.SUCCESS
        exporter.shutdown()
        assert [s.name for s in asyncio.run(stored(server.url, rollout_id))] == [
            s.name for s in sdk_spans
        ]
        body = encode_spans(sdk_spans).SerializeToString()
        headers = {"Content-Type": PROTOBUF}
        fake = httpx.post(
            f"{server.url}/v1/traces", content=body, headers={**headers, "Content-Encoding": "gzip"}
        )
        assert fake.status_code == 400
        assert "not gzip" in fake.json()["error"]["message"]
        other = httpx.post(
            f"{server.url}/v1/traces", content=body, headers={**headers, "Content-Encoding": "br"}
        )
        assert other.status_code == 400
        assert other.json()["error"]["field"] == "content-encoding"


# --- Errors ------------------------------------------------------------------------------------


def test_missing_attempt_id() -> None:
    request = encode_spans(record({AGL_ROLLOUT_ID: "r"}))
    for body, content_type in both_encodings(request):
        with pytest.raises(InvalidInputError) as caught:
            decode_traces(body, content_type)
        error = caught.value
        assert error.field == "resource_spans[0].scope_spans[0].spans[0].attributes"
        assert f"no '{AGL_ATTEMPT_ID}' attribute" in error.message
        assert AGL_ROLLOUT_ID in error.message
        assert "span or of its resource" in error.message
        assert "'elsewhere'" in error.message


def test_missing_rollout_id() -> None:
    request = encode_spans(record({"service.name": "no ids"}))
    with pytest.raises(InvalidInputError, match=f"no '{AGL_ROLLOUT_ID}' attribute") as caught:
        decode_traces(request.SerializeToString(), PROTOBUF)
    assert caught.value.field == "resource_spans[0].scope_spans[0].spans[0].attributes"
    assert AGL_ATTEMPT_ID in caught.value.message


def test_rollout_id_that_is_not_a_string() -> None:
    request = encode_spans(record({AGL_ROLLOUT_ID: 7, AGL_ATTEMPT_ID: "a"}))
    with pytest.raises(InvalidInputError, match="must be text, got int") as caught:
        decode_traces(request.SerializeToString(), PROTOBUF)
    assert caught.value.field == "resource_spans[0].scope_spans[0].spans[0].attributes"
    assert caught.value.value == 7


@pytest.mark.parametrize(
    ("rollout_id", "said"),
    [
        ("r\x00", "holds control characters ('\\x00')"),
        ("r" * 100_003, "is 100,003 characters long"),
        ("a/b", "one URL path segment"),
    ],
)
def test_a_rollout_id_no_store_takes_is_refused_naming_it(rollout_id: str, said: str) -> None:
    """The ids of OTLP spans follow the one rule of every store (agl._ids)."""
    request = encode_spans(record({AGL_ROLLOUT_ID: rollout_id, AGL_ATTEMPT_ID: "a"}))
    with pytest.raises(InvalidInputError) as caught:
        decode_traces(request.SerializeToString(), PROTOBUF)
    assert caught.value.field == "resource_spans[0].scope_spans[0].spans[0].attributes"
    assert said in caught.value.message
    assert len(caught.value.message) < 400


def test_one_bad_span_among_good_ones_rejects_the_request() -> None:
    """Spans of two scopes carry their ids themselves; one span of the second scope does not."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    ids = {AGL_ROLLOUT_ID: "r", AGL_ATTEMPT_ID: "a"}
    for scope, names in (("first", ["a", "b"]), ("second", ["c", "d", "e"])):
        for name in names:
            attributes = {AGL_ROLLOUT_ID: "r"} if name == "d" else ids
            provider.get_tracer(scope).start_span(name, attributes=attributes).end()
    provider.shutdown()
    request = encode_spans(exporter.get_finished_spans())
    assert [s.name for s in request.resource_spans[0].scope_spans[1].spans] == ["c", "d", "e"]

    for body, content_type in both_encodings(request):
        with pytest.raises(InvalidInputError) as caught:
            decode_traces(body, content_type)
        assert caught.value.field == "resource_spans[0].scope_spans[1].spans[1].attributes"
        assert "span 'd'" in caught.value.message

        # read in chunks, the bad span is one of a chunk's refusals and the others are read
        chunks = list(read_traces(body, content_type, chunk=2))
        assert [[s.name for s in chunk.spans] for chunk in chunks] == [["a", "b"], ["c"], ["e"]]
        assert [len(chunk.bad) for chunk in chunks] == [0, 1, 0]
        assert chunks[1].paths == ["resource_spans[0].scope_spans[1].spans[0]"]
        [(field, why)] = chunks[1].bad
        assert field == "resource_spans[0].scope_spans[1].spans[1].attributes"
        assert why.startswith("resource_spans[0].scope_spans[1].spans[1]: span 'd' has no ")


def test_read_traces_parses_before_it_returns() -> None:
    with pytest.raises(InvalidInputError):
        read_traces(b"not protobuf", PROTOBUF)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("trace_id", bytes(range(1, 16)), "trace_id must be 16 bytes"),
        ("trace_id", bytes(16), "not all zeros"),
        ("trace_id", b"", "got 0 bytes"),
        ("span_id", b"\x01" * 9, "span_id must be 8 bytes"),
        ("parent_span_id", b"\x01" * 4, "parent_span_id must be 8 bytes"),
        ("links[0].trace_id", b"\x01" * 8, "trace_id must be 16 bytes"),
        ("links[0].span_id", bytes(8), "span_id must be 8 bytes"),
    ],
)
def test_invalid_ids(field: str, value: bytes, message: str) -> None:
    request = encode_spans(record({AGL_ROLLOUT_ID: "r", AGL_ATTEMPT_ID: "a"}))
    spans = request.resource_spans[0].scope_spans[0].spans
    index = next(i for i, s in enumerate(spans) if s.links)
    target = spans[index].links[0] if field.startswith("links") else spans[index]
    setattr(target, field.rsplit(".", 1)[-1], value)

    for body, content_type in both_encodings(request):
        with pytest.raises(InvalidInputError, match=message) as caught:
            decode_traces(body, content_type)
        assert caught.value.field == f"resource_spans[0].scope_spans[0].spans[{index}].{field}"


@pytest.mark.parametrize("bad", ["not hex!", "abc", 12, ["00"]])
def test_json_id_that_is_not_hex(bad: object) -> None:
    request = encode_spans(record({AGL_ROLLOUT_ID: "r", AGL_ATTEMPT_ID: "a"}))
    data = json.loads(to_otlp_json(request))
    data["resourceSpans"][0]["scopeSpans"][0]["spans"][2]["links"] = [
        {"traceId": "0" * 31 + "1", "spanId": bad}
    ]
    with pytest.raises(InvalidInputError, match="must be a hex string") as caught:
        decode_traces(json.dumps(data).encode(), JSON)
    assert caught.value.field == "resource_spans[0].scope_spans[0].spans[2].links[0].span_id"


@pytest.mark.parametrize(
    ("body", "content_type", "message"),
    [
        (b"\x0a\x05ab", PROTOBUF, "not a valid OTLP protobuf"),
        (b"\xff\xff\xff\xff", PROTOBUF, "not a valid OTLP protobuf"),
        (b"", JSON, "not a valid OTLP JSON"),
        (b"{resourceSpans", JSON, "not a valid OTLP JSON"),
        (b"[]", JSON, "not an object"),
        (b'{"resourceSpans": "many"}', JSON, "not a valid OTLP JSON"),
        (b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"kind": []}]}]}]}', JSON, "JSON"),
        (b"\xff\xfe\x00", JSON, "not a valid OTLP JSON"),
    ],
)
def test_unparsable_body(body: bytes, content_type: str, message: str) -> None:
    with pytest.raises(InvalidInputError, match=message) as caught:
        decode_traces(body, content_type)
    assert caught.value.field == "body"


@pytest.mark.parametrize("content_type", ["text/plain", "application/protobuf", ""])
def test_unsupported_content_type(content_type: str) -> None:
    for call in (lambda: decode_traces(b"", content_type), lambda: encode_response(content_type)):
        with pytest.raises(InvalidInputError, match="unsupported content type") as caught:
            call()
        assert caught.value.field == "content_type"
        assert caught.value.value == content_type


# --- Responses and imports ----------------------------------------------------------------------


def test_encode_response() -> None:
    body, media_type = encode_response(PROTOBUF)
    assert media_type == "application/x-protobuf"
    assert ExportTraceServiceResponse.FromString(body) == ExportTraceServiceResponse()

    body, media_type = encode_response("application/json; charset=utf-8")
    assert (body, media_type) == (b"{}", "application/json")
    assert json_format.Parse(body, ExportTraceServiceResponse()) == ExportTraceServiceResponse()


def test_importing_the_module_does_not_import_protobuf() -> None:
    code = (
        "import sys, agl, agl.store._otlp; "
        "heavy = sorted(m for m in sys.modules if m.startswith(('opentelemetry', 'google')));"
        "assert not heavy, heavy"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_string_table_references_are_rejected() -> None:
    """``string_value_strindex`` points into a profiles dictionary, which traces do not have."""
    request = encode_spans(record({AGL_ROLLOUT_ID: "r", AGL_ATTEMPT_ID: "a"}))
    request.resource_spans[0].scope_spans[0].spans[1].attributes.add(
        key="ref", value=AnyValue(string_value_strindex=3)
    )
    with pytest.raises(InvalidInputError, match="string_value_strindex") as caught:
        decode_traces(request.SerializeToString(), PROTOBUF)
    assert caught.value.field == "resource_spans[0].scope_spans[0].spans[1].attributes['ref']"
