"""Walk an OTLP/HTTP trace export request one span at a time, never parsing it whole.

A request parsed whole holds every span at once: as a protobuf message tree, or (OTLP/JSON) as
Python dicts and then a message tree beside them, several times the size of the body (a 25.8 MB
export peaked a store server at over 500 MB). Here the body is walked instead: its framing is
read (protobuf tags and lengths; JSON tokens, each span's text decoded alone), and each span is
parsed into its own small message when it is reached, so memory holds the body and one span.

:func:`walk` reads the whole body's framing first (a body that is not an export request fails
before any span is taken), then yields the spans. A span whose own content does not parse is
yielded as the error that says why, so the rest of the request can still be stored.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from json.decoder import JSONDecoder
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from opentelemetry.proto.common.v1.common_pb2 import KeyValue
    from opentelemetry.proto.trace.v1.trace_pb2 import Span as OtlpSpan

__all__ = ["BadBody", "WalkedSpan", "walk"]

_SPAN_IDS = (("trace_id", "traceId"), ("span_id", "spanId"), ("parent_span_id", "parentSpanId"))
_LINK_IDS = _SPAN_IDS[:2]


class BadBody(ValueError):
    """The body is not an OTLP trace export request (its framing, or a resource, is broken)."""


@dataclass(frozen=True)
class WalkedSpan:
    """One span of a request, by its path; ``span`` is None where ``error`` says why it could
    not be parsed. ``resource`` is its resource's attributes (shared by the resource's spans);
    ``size`` is how long the span is in the body (bytes, or characters of JSON)."""

    path: str
    resource_index: int
    resource: list[KeyValue]
    size: int
    span: OtlpSpan | None
    error: Exception | None = None


def walk(body: bytes | bytearray, json_body: bool) -> Iterator[WalkedSpan]:
    """Check the framing of a whole export request, then return its spans one at a time.

    Raises:
        BadBody: The body is not an OTLP trace export request in its encoding.
    """
    if json_body:
        try:
            text = body.decode(json.detect_encoding(body))
        except (UnicodeDecodeError, LookupError) as exc:
            raise BadBody(str(exc)) from None
        walker: _JsonWalk | _ProtobufWalk = _JsonWalk(text)
    else:
        walker = _ProtobufWalk(memoryview(body))
    resources = walker.resources()  # a full pass over the framing: errors raise here
    return walker.spans(resources)


# --- protobuf ---------------------------------------------------------------------------------


class _ProtobufWalk:
    """ExportTraceServiceRequest: resource_spans = 1; ResourceSpans: resource = 1,
    scope_spans = 2; ScopeSpans: spans = 2 (trace_service.proto, trace.proto)."""

    def __init__(self, body: memoryview) -> None:
        self.body = body

    def resources(self) -> dict[int, list[KeyValue]]:
        from google.protobuf.message import DecodeError
        from opentelemetry.proto.resource.v1.resource_pb2 import Resource

        found: dict[int, list[KeyValue]] = {}
        for start, end in self._each(0, len(self.body), 1):
            resource = Resource()
            for r_start, r_end in self._each(start, end, 1):
                try:
                    resource.MergeFromString(bytes(self.body[r_start:r_end]))
                except DecodeError as exc:
                    raise BadBody(f"resource_spans[{len(found)}].resource: {exc}") from None
            for scope_start, scope_end in self._each(start, end, 2):
                for _ in self._each(scope_start, scope_end, 2):
                    pass  # the spans' framing is checked; each span is parsed when reached
            found[len(found)] = list(resource.attributes)
        return found

    def spans(self, resources: dict[int, list[KeyValue]]) -> Iterator[WalkedSpan]:
        from google.protobuf.message import DecodeError
        from opentelemetry.proto.trace.v1.trace_pb2 import Span as OtlpSpan

        for i, (start, end) in enumerate(self._each(0, len(self.body), 1)):
            for j, (scope_start, scope_end) in enumerate(self._each(start, end, 2)):
                for k, (s_start, s_end) in enumerate(self._each(scope_start, scope_end, 2)):
                    path = f"resource_spans[{i}].scope_spans[{j}].spans[{k}]"
                    size, resource = s_end - s_start, resources.get(i, [])
                    try:
                        span = OtlpSpan.FromString(bytes(self.body[s_start:s_end]))
                    except DecodeError as exc:
                        yield WalkedSpan(path, i, resource, size, None, exc)
                    else:
                        yield WalkedSpan(path, i, resource, size, span)

    def _each(self, start: int, end: int, wanted: int) -> Iterator[tuple[int, int]]:
        """The (start, end) of each length-delimited field ``wanted`` between start and end."""
        body, pos = self.body, start
        while pos < end:
            key, pos = self._varint(pos, end)
            number, wire = key >> 3, key & 7
            if wire == 0:
                _, pos = self._varint(pos, end)
            elif wire in (1, 5):
                pos += 8 if wire == 1 else 4
            elif wire == 2:
                length, pos = self._varint(pos, end)
                if number == wanted and pos + length <= end:
                    yield pos, pos + length
                pos += length
            else:
                raise BadBody(f"unsupported protobuf wire type {wire} at byte {pos}")
            if pos > end or number == 0:
                raise BadBody(f"truncated or malformed protobuf at byte {min(pos, len(body))}")

    def _varint(self, pos: int, end: int) -> tuple[int, int]:
        body, value, shift = self.body, 0, 0
        while pos < end and shift < 64:
            byte = body[pos]
            pos += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value, pos
            shift += 7
        raise BadBody(f"truncated or malformed protobuf varint before byte {pos}")


# --- JSON ---------------------------------------------------------------------------------------

_SPACE = re.compile(r"[ \t\n\r]*")
_DECODER = JSONDecoder()


class _JsonWalk:
    """OTLP/JSON: ``resourceSpans`` (or ``resource_spans``) -> ``resource``, ``scopeSpans`` ->
    ``spans``; fields it does not know are skipped, as OTLP/JSON receivers must."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def resources(self) -> dict[int, list[KeyValue]]:
        from google.protobuf import json_format
        from opentelemetry.proto.resource.v1.resource_pb2 import Resource

        found: dict[int, list[KeyValue]] = {}

        def keep(i: int, value: Any) -> None:
            resource = Resource()
            try:
                json_format.ParseDict(value, resource, ignore_unknown_fields=True)
            except (json_format.ParseError, TypeError, ValueError, RecursionError) as exc:
                raise BadBody(f"resource_spans[{i}].resource: {exc}") from None
            found[i] = list(resource.attributes)

        for _ in self._walk(keep, lambda i, j, k, value: None):
            pass
        if self._peek():
            raise BadBody(f"extra data after the request at character {self.pos}")
        return found

    def spans(self, resources: dict[int, list[KeyValue]]) -> Iterator[WalkedSpan]:
        from google.protobuf import json_format
        from opentelemetry.proto.trace.v1.trace_pb2 import Span as OtlpSpan

        self.pos = 0
        for i, j, k, value, size in self._walk(lambda i, value: None, None):
            path = f"resource_spans[{i}].scope_spans[{j}].spans[{k}]"
            resource, span = resources.get(i, []), OtlpSpan()
            try:
                if not isinstance(value, dict):
                    raise TypeError(f"a span is a JSON object, got {type(value).__name__}")
                _rewrite_ids(value, _SPAN_IDS, path)
                for n, link in enumerate(value.get("links") or ()):
                    if isinstance(link, dict):
                        _rewrite_ids(link, _LINK_IDS, f"{path}.links[{n}]")
                json_format.ParseDict(value, span, ignore_unknown_fields=True)
            except (json_format.ParseError, TypeError, ValueError, RecursionError) as exc:
                yield WalkedSpan(path, i, resource, size, None, exc)
            else:
                yield WalkedSpan(path, i, resource, size, span)

    def _walk(
        self,
        resource: Callable[[int, Any], None],
        span: Callable[[int, int, int, Any], None] | None,
    ) -> Iterator[tuple[int, int, int, Any, int]]:
        """Yield (i, j, k, decoded span, its length) for each span; hand each resource to
        ``resource``.
        With ``span`` given, a span is handed to it and not yielded (a pass that only checks)."""
        if self._peek() != "{":
            raise BadBody("the top-level JSON value is not an object")
        for key in self._members():
            if key not in ("resourceSpans", "resource_spans"):
                self._value()
                continue
            for i in self._elements("resourceSpans"):
                for r_key in self._members():
                    if r_key == "resource":
                        resource(i, self._value())
                    elif r_key in ("scopeSpans", "scope_spans"):
                        for j in self._elements("scopeSpans"):
                            for s_key in self._members():
                                if s_key != "spans":
                                    self._value()
                                    continue
                                for k in self._elements("spans"):
                                    self._peek()
                                    start = self.pos
                                    value = self._value()
                                    if span is None:
                                        yield i, j, k, value, self.pos - start
                                    else:
                                        span(i, j, k, value)
                    else:
                        self._value()

    def _peek(self) -> str:
        """Skip white space; return the character at the cursor ("" at the end)."""
        space = _SPACE.match(self.text, self.pos)
        assert space is not None  # the pattern matches the empty string
        self.pos = space.end()
        return self.text[self.pos : self.pos + 1]

    def _expect(self, char: str) -> None:
        if self._peek() != char:
            raise BadBody(f"expected {char!r} at character {self.pos}")
        self.pos += 1

    def _value(self) -> Any:
        self._peek()
        try:
            value, self.pos = _DECODER.raw_decode(self.text, self.pos)
        except (ValueError, RecursionError) as exc:
            raise BadBody(str(exc)) from None
        return value

    def _members(self) -> Iterator[str]:
        """The keys of the object at the cursor; the caller reads each key's value."""
        self._expect("{")
        if self._peek() == "}":
            self.pos += 1
            return
        while True:
            if self._peek() != '"':
                raise BadBody(f"expected a key at character {self.pos}")
            key = self._value()  # a JSON string: the decoder reads it as one
            self._expect(":")
            yield key
            following = self._peek()
            self.pos += 1
            if following == "}":
                return
            if following != ",":
                raise BadBody(f"expected ',' or '}}' at character {self.pos - 1}")

    def _elements(self, name: str) -> Iterator[int]:
        """The indexes of the array at the cursor; the caller reads each element."""
        if self._peek() != "[":
            raise BadBody(f"{name} must be a JSON array (character {self.pos})")
        self.pos += 1
        if self._peek() == "]":
            self.pos += 1
            return
        index = 0
        while True:
            yield index
            index += 1
            following = self._peek()
            self.pos += 1
            if following == "]":
                return
            if following != ",":
                raise BadBody(f"expected ',' or ']' at character {self.pos - 1}")


def _rewrite_ids(message: dict[str, Any], names: tuple[tuple[str, str], ...], path: str) -> None:
    """Rewrite OTLP/JSON's hex trace and span ids as the base64 protobuf's JSON parser wants."""
    import base64
    import binascii

    from agl._errors import InvalidInputError

    for name, camel_name in names:
        for key in (camel_name, name):
            if (value := message.get(key)) is None:
                continue
            try:
                message[key] = base64.b64encode(binascii.unhexlify(value)).decode("ascii")
            except (TypeError, ValueError):  # not a string, odd length or not hex digits
                raise InvalidInputError(
                    f"{name} must be a hex string in OTLP/JSON, got {value!r}",
                    field=f"{path}.{name}",
                    value=value,
                ) from None
