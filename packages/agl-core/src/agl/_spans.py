"""The span: an OpenTelemetry span that knows which rollout and attempt it belongs to.

Field names and meanings follow the OpenTelemetry trace data model (OTLP): ids are lowercase hex
(32 digits for a trace, 16 for a span), times are integer nanoseconds since the Unix epoch, and
attribute values are JSON values (OTLP's ``AnyValue``). agl adds three fields: ``rollout_id``,
``attempt_id`` and ``sequence_id``. The store assigns ``sequence_id`` (1, 2, 3, ... per
rollout, in the order spans arrive), so ordering never depends on clocks.
"""

from __future__ import annotations

import os
import time
from enum import StrEnum
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from agl._ids import SegmentId
from agl._json_numbers import NOT_BOOL_OR_TEXT, Integer

__all__ = [
    "Span",
    "SpanEvent",
    "SpanKind",
    "SpanLink",
    "SpanStatus",
    "StatusCode",
    "new_span_id",
    "new_trace_id",
]

TraceId = Annotated[str, Field(pattern=r"^[0-9a-f]{32}$", description="32 lowercase hex digits")]
SpanId = Annotated[str, Field(pattern=r"^[0-9a-f]{16}$", description="16 lowercase hex digits")]
Attributes = dict[str, JsonValue]


class SpanKind(StrEnum):
    """The role of a span in a trace (OpenTelemetry ``SpanKind``)."""

    INTERNAL = "internal"
    SERVER = "server"
    CLIENT = "client"
    PRODUCER = "producer"
    CONSUMER = "consumer"


class StatusCode(StrEnum):
    """Whether the operation a span records succeeded (OpenTelemetry ``StatusCode``)."""

    UNSET = "unset"
    OK = "ok"
    ERROR = "error"


class SpanStatus(BaseModel):
    """The status of a span: a code and, for errors, a description."""

    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")

    code: StatusCode = StatusCode.UNSET
    description: str | None = None


class SpanEvent(BaseModel):
    """Something that happened at one instant during a span."""

    model_config = ConfigDict(defer_build=True, extra="forbid")

    name: str
    time_unix_nano: Integer = Field(ge=0)
    attributes: Attributes = Field(default_factory=dict)


class SpanLink(BaseModel):
    """A pointer from a span to another span, possibly in another trace."""

    model_config = ConfigDict(defer_build=True, extra="forbid")

    trace_id: TraceId
    span_id: SpanId
    attributes: Attributes = Field(default_factory=dict)


class Span(BaseModel):
    """One finished (or in-progress) unit of work in an agent's run.

    A span is identified within its attempt by ``(trace_id, span_id)``; adding the same span to
    a store twice stores it once, so a client may retry a batch freely.

    Spans are records of what happened: the model is frozen, and stores hand the same instances
    to every reader instead of copying them. Treat ``attributes`` and the other containers as
    read-only too; build a changed span with ``model_copy(update=...)``.
    """

    model_config = ConfigDict(defer_build=True, extra="forbid", frozen=True)

    rollout_id: SegmentId
    attempt_id: SegmentId
    sequence_id: Annotated[int, Field(ge=1), NOT_BOOL_OR_TEXT] | None = Field(
        default=None, description="Assigned by the store; ignored on input."
    )
    trace_id: TraceId
    span_id: SpanId
    parent_id: SpanId | None = None
    name: str
    kind: SpanKind = SpanKind.INTERNAL
    status: SpanStatus = Field(default_factory=SpanStatus)
    start_time_unix_nano: Integer = Field(ge=0)
    end_time_unix_nano: Annotated[int, Field(ge=0), NOT_BOOL_OR_TEXT] | None = None
    attributes: Attributes = Field(default_factory=dict)
    events: list[SpanEvent] = Field(default_factory=list)
    links: list[SpanLink] = Field(default_factory=list)
    resource: Attributes = Field(
        default_factory=dict, description="Attributes of the process that produced the span."
    )

    @property
    def duration_seconds(self) -> float | None:
        """Seconds from start to end, or None while the span is still open."""
        if self.end_time_unix_nano is None:
            return None
        return (self.end_time_unix_nano - self.start_time_unix_nano) / 1e9

    @classmethod
    def create(
        cls,
        *,
        rollout_id: str,
        attempt_id: str,
        name: str,
        attributes: Attributes | None = None,
        trace_id: str | None = None,
        parent_id: str | None = None,
        **fields: Any,
    ) -> Span:
        """Build a span with fresh ids and the current time as start and end.

        A convenience for code that records a fact directly (tests, emitters, importers);
        spans of instrumented code come from the OpenTelemetry SDK instead.
        """
        now = time.time_ns()
        fields.setdefault("start_time_unix_nano", now)
        fields.setdefault("end_time_unix_nano", now)
        return cls(
            rollout_id=rollout_id,
            attempt_id=attempt_id,
            trace_id=trace_id or new_trace_id(),
            span_id=new_span_id(),
            parent_id=parent_id,
            name=name,
            attributes=attributes or {},
            **fields,
        )


def new_trace_id() -> str:
    """Return a random, valid (non-zero) trace id."""
    while (value := os.urandom(16).hex()) == "0" * 32:  # pragma: no cover - vanishingly rare
        pass
    return value


def new_span_id() -> str:
    """Return a random, valid (non-zero) span id."""
    while (value := os.urandom(8).hex()) == "0" * 16:  # pragma: no cover - vanishingly rare
        pass
    return value
