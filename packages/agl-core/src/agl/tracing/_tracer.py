"""The tracer: agl's own OpenTelemetry provider, and the context that binds spans to a rollout.

::

    tracer = agl.Tracer(store)
    async with tracer.rollout(rollout_id, attempt_id):
        await my_agent(task)            # instrumented calls and emitters record spans here
    # leaving the block ends the rollout's root span and flushes its spans to the store

agl owns its :class:`~opentelemetry.sdk.trace.TracerProvider`; it does not replace the
application's global provider unless ``set_global=True``. A rollout binding lives in the
OpenTelemetry context, so it follows the code into nested calls, asyncio tasks, and threads
(threads through ``opentelemetry-instrumentation-threading``, which the tracer turns on), and
many rollouts traced at once in one process never mix: each span is stamped, when it starts,
with the ids of the rollout it was started in. Spans started outside any rollout are not sent
(they are counted in :attr:`Tracer.unattributed`).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self

from opentelemetry import context as otel_context
from opentelemetry import trace as otel_trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace import Span as SdkSpan

from agl import semconv
from agl._errors import InvalidInputError
from agl.store._base import Store
from agl.tracing._convert import to_agl_span
from agl.tracing._exporter import SenderStats, SpanSender

__all__ = ["RolloutBinding", "Tracer", "current_binding"]

_BINDING = otel_context.create_key("agl.rollout_binding")


@dataclass(frozen=True)
class RolloutBinding:
    """Which rollout and attempt the code running in this context works for."""

    tracer: Tracer
    rollout_id: str
    attempt_id: str


def current_binding() -> RolloutBinding | None:
    """Return the rollout binding of the current context, if any."""
    value = otel_context.get_value(_BINDING)
    return value if isinstance(value, RolloutBinding) else None


class _StampingProcessor(SpanProcessor):
    """Stamp each span with its rollout's ids when it starts; hand it to the sender at its end."""

    def __init__(self, tracer: Tracer) -> None:
        self._tracer = tracer

    def on_start(self, span: SdkSpan, parent_context: otel_context.Context | None = None) -> None:
        binding = otel_context.get_value(_BINDING, parent_context)
        if isinstance(binding, RolloutBinding) and binding.tracer is self._tracer:
            ids = {semconv.AGL_ROLLOUT_ID: binding.rollout_id}
            ids[semconv.AGL_ATTEMPT_ID] = binding.attempt_id
            span.set_attributes(ids)

    def on_end(self, span: ReadableSpan) -> None:
        attributes = span.attributes or {}
        rollout_id = attributes.get(semconv.AGL_ROLLOUT_ID)
        attempt_id = attributes.get(semconv.AGL_ATTEMPT_ID)
        if not isinstance(rollout_id, str) or not isinstance(attempt_id, str):
            self._tracer._count_unattributed()
            return
        self._tracer.sender.submit(lambda: to_agl_span(span, rollout_id, attempt_id))

    def shutdown(self) -> None:
        # The provider shuts down at interpreter exit too: send what is left, briefly.
        self._tracer.sender.close(min(self._tracer.flush_timeout, 5.0))

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self._tracer.sender.flush(timeout_millis / 1000)


class Tracer:
    """agl's tracer: an OpenTelemetry provider whose spans go to a store, per rollout.

    Args:
        store: Where spans go (any backend).
        service_name: The ``service.name`` resource attribute of the spans.
        set_global: Also install the provider as OpenTelemetry's global one, so code that
            traces through ``opentelemetry.trace.get_tracer`` is captured too.
        flush_timeout: Seconds a rollout's end waits for its spans to reach the store.
        sender_options: Passed to :class:`~agl.tracing._exporter.SpanSender` (batch and
            buffer sizes).
    """

    def __init__(
        self,
        store: Store,
        *,
        service_name: str = "agl-agent",
        set_global: bool = False,
        flush_timeout: float = 30.0,
        **sender_options: Any,
    ) -> None:
        self.store = store
        self.flush_timeout = flush_timeout
        self.sender = SpanSender(store, **sender_options)
        self.provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
        self.provider.add_span_processor(_StampingProcessor(self))
        self.otel_tracer = self.provider.get_tracer("agl")
        self._unattributed = 0
        self._closed = False
        self._count_lock = threading.Lock()
        self._threads = _ThreadPropagation()
        self._threads.enable()
        if set_global:
            otel_trace.set_tracer_provider(self.provider)

    @property
    def stats(self) -> SenderStats:
        """What the sender did: spans queued, exported, dropped, rejected."""
        return self.sender.stats

    @property
    def unattributed(self) -> int:
        """Spans that ended outside any rollout and so were not sent."""
        return self._unattributed

    def _count_unattributed(self) -> None:
        with self._count_lock:
            self._unattributed += 1

    @contextlib.contextmanager
    def _bind(self, rollout_id: str, attempt_id: str, name: str) -> Iterator[RolloutBinding]:
        for field, value in (("rollout_id", rollout_id), ("attempt_id", attempt_id)):
            if not isinstance(value, str) or not value:
                raise InvalidInputError(
                    f"{field} must be a non-empty string, got {value!r}", field=field, value=value
                )
        binding = RolloutBinding(self, rollout_id, attempt_id)
        token = otel_context.attach(otel_context.set_value(_BINDING, binding))
        try:
            with self.otel_tracer.start_as_current_span(
                name, attributes={semconv.AGL_SPAN_TYPE: "rollout"}
            ):
                yield binding
        finally:
            otel_context.detach(token)

    @contextlib.asynccontextmanager
    async def rollout(
        self, rollout_id: str, attempt_id: str, *, name: str = "agl.rollout"
    ) -> AsyncIterator[RolloutBinding]:
        """Trace the code in the block as one attempt of a rollout; flush its spans at the end.

        Spans are flushed even when the block raises; the exception then propagates.
        """
        try:
            with self._bind(rollout_id, attempt_id, name) as binding:
                yield binding
        finally:
            await self.sender.flush_async(self.flush_timeout)

    @contextlib.contextmanager
    def rollout_sync(
        self, rollout_id: str, attempt_id: str, *, name: str = "agl.rollout"
    ) -> Iterator[RolloutBinding]:
        """The same as :meth:`rollout`, for synchronous code."""
        try:
            with self._bind(rollout_id, attempt_id, name) as binding:
                yield binding
        finally:
            self.sender.flush(self.flush_timeout)

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every finished span reached the store; False on timeout."""
        return self.sender.flush(self.flush_timeout if timeout is None else timeout)

    def close(self) -> None:
        """Flush, stop sending, and shut the provider down. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self.sender.close(self.flush_timeout)
        self.provider.shutdown()
        self._threads.disable()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class _ThreadPropagation:
    """Carry the OpenTelemetry context (and so the rollout binding) into new threads.

    The threading instrumentation patches the process, so it is shared: turned on by the first
    tracer, off when the last one closes, and left alone if the application turned it on itself.
    """

    _users = 0
    _ours = False
    _lock = threading.Lock()

    def __init__(self) -> None:
        self._enabled = False

    def enable(self) -> None:
        from opentelemetry.instrumentation.threading import ThreadingInstrumentor

        with _ThreadPropagation._lock:
            if self._enabled:
                return
            instrumentor = ThreadingInstrumentor()
            if _ThreadPropagation._users == 0 and not instrumentor.is_instrumented_by_opentelemetry:
                instrumentor.instrument()
                _ThreadPropagation._ours = True
            _ThreadPropagation._users += 1
            self._enabled = True

    def disable(self) -> None:
        from opentelemetry.instrumentation.threading import ThreadingInstrumentor

        with _ThreadPropagation._lock:
            if not self._enabled:
                return
            self._enabled = False
            _ThreadPropagation._users -= 1
            if _ThreadPropagation._users == 0 and _ThreadPropagation._ours:
                ThreadingInstrumentor().uninstrument()
                _ThreadPropagation._ours = False
