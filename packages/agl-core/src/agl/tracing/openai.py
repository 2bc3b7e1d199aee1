"""Record every call the OpenAI Python client makes, as spans of the current rollout.

``opentelemetry-instrumentation-openai`` does the recording (sync and async clients, streaming,
chat completions, completions and the Responses API, tool calls); agl points it at its own
tracer provider, and :mod:`agl.tracing.normalize` brings its attributes to agl's conventions
when the spans are converted.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from agl.errors import AglError
from agl.tracing.tracer import Tracer

__all__ = ["OpenAIInstrumentation"]

logger = logging.getLogger("agl.tracing")


class OpenAIInstrumentation:
    """Instrument the ``openai`` package for one tracer; reversible and idempotent.

    ``instrument()`` twice is the same as once; ``uninstrument()`` removes every patch, after
    which OpenAI calls record nothing.

    The patches are process-wide, so instances share them: several instances on the same tracer
    (the runner's ``"openai"`` and an adapter that records its framework's model calls through
    this one, say) each hold the patches, and they come off when the last lets go. Instrumenting
    for a second tracer while another holds them raises :class:`agl.AglError`: its calls would
    otherwise be recorded into the first tracer's store.
    """

    def __init__(self, tracer: Tracer) -> None:
        self._tracer = tracer
        self._held = False

    @property
    def instrumented(self) -> bool:
        return self._held

    def instrument(self) -> None:
        if self._held:
            return
        _patches.acquire(self._tracer)
        self._held = True

    def uninstrument(self) -> None:
        if not self._held:
            return
        self._held = False
        _patches.release()


class _SharedPatches:
    """The process's one set of OpenAI patches, held by a count of instrumentations."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tracer: Tracer | None = None
        self._holders = 0
        self._instrumentor: Any = None
        self._original_run_async: Any = None
        self._original_setters: list[tuple[Any, Any]] = []

    def acquire(self, tracer: Tracer) -> None:
        with self._lock:
            if self._holders and self._tracer is not tracer:
                raise AglError(
                    "the openai package is already traced into another agl tracer: "
                    "uninstrument that one before instrumenting it for this tracer"
                )
            if not self._holders:
                self._start(tracer)
            self._holders += 1

    def release(self) -> None:
        with self._lock:
            self._holders -= 1
            if not self._holders:
                self._stop()

    def _start(self, tracer: Tracer) -> None:
        from opentelemetry.instrumentation.openai import OpenAIInstrumentor

        instrumentor = OpenAIInstrumentor()
        instrumentor.instrument(tracer_provider=tracer.provider)
        self._instrumentor = instrumentor
        self._tracer = tracer
        self._speed_up_sync_calls()
        self._skip_omitted_values()

    def _stop(self) -> None:
        self._instrumentor.uninstrument()
        _remove_leftover_wrappers()
        self._instrumentor = None
        self._tracer = None
        for module, original in self._original_setters:
            setattr(module, "_set_span_attribute", original)  # noqa: B010
        self._original_setters = []

    def _skip_omitted_values(self) -> None:
        """Leave out request parameters the caller omitted with openai 2's ``omit``.

        The instrumentation skips ``NOT_GIVEN`` but not ``openai.Omit``, which clients such as
        the Agents SDK pass for settings they leave unset (``top_p=omit``): OpenTelemetry then
        drops the value with a warning per call. Each module's copy of the instrumentation's
        ``_set_span_attribute`` is wrapped to skip those values too.
        """
        import importlib

        import openai

        omit = getattr(openai, "Omit", None)
        if omit is None:
            return
        for name in _SETTER_MODULES:
            try:
                module = importlib.import_module(f"{_INSTRUMENTATION_PACKAGE}.{name}")
            except ImportError:
                continue
            original = getattr(module, "_set_span_attribute", None)
            if original is None:
                continue

            def setter(span: Any, key: str, value: Any, _original: Any = original) -> None:
                if not isinstance(value, omit):
                    _original(span, key, value)

            setattr(module, "_set_span_attribute", setter)  # noqa: B010
            self._original_setters.append((module, original))
        if self._original_run_async is not None:
            from opentelemetry.instrumentation.openai.shared import chat_wrappers

            setattr(chat_wrappers, "run_async", self._original_run_async)  # noqa: B010
            self._original_run_async = None

    def _speed_up_sync_calls(self) -> None:
        """Record sync chat calls without starting an event loop for each.

        The instrumentation's sync chat wrapper hands a coroutine (which records the request's
        attributes) to ``run_async``, and that starts a new event loop per call, in a new thread
        when one is already running: 1 to 2 ms a call. The coroutine awaits nothing real unless an
        image uploader is configured, which agl never does, so it runs to completion at once.
        """
        from opentelemetry.instrumentation.openai.shared import chat_wrappers

        def run_inline(coroutine: Any) -> Any:
            try:
                coroutine.send(None)
            except StopIteration as done:
                return done.value
            coroutine.close()
            logger.warning("an OpenAI request's attributes wanted real I/O and were skipped")
            return None

        self._original_run_async = getattr(chat_wrappers, "run_async")  # noqa: B009
        setattr(chat_wrappers, "run_async", run_inline)  # noqa: B010


_patches = _SharedPatches()


def _remove_leftover_wrappers() -> None:
    """Undo the patches the instrumentation's own ``uninstrument`` leaves in place.

    opentelemetry-instrumentation-openai 0.62 unwraps with dotted names such as
    ``("openai.resources.chat.completions", "Completions.create")``, which
    ``opentelemetry.instrumentation.utils.unwrap`` resolves to nothing, so the chat and
    completions methods stay wrapped. Restore every method of the ``openai.resources`` classes
    whose wrapper comes from that package.
    """
    import sys

    import wrapt

    # wrapt 2 moved FunctionWrapper under BaseObjectProxy; wrapt 1 has only ObjectProxy.
    proxy = getattr(wrapt, "BaseObjectProxy", wrapt.ObjectProxy)
    for name, module in list(sys.modules.items()):
        if not name.startswith("openai.resources") or module is None:
            continue
        for cls in list(vars(module).values()):
            if not isinstance(cls, type) or cls.__module__ != name:
                continue
            for attribute, value in list(vars(cls).items()):
                wrapper = getattr(value, "_self_wrapper", None)
                if isinstance(value, proxy) and getattr(wrapper, "__module__", "").startswith(
                    _INSTRUMENTATION_PACKAGE
                ):
                    setattr(cls, attribute, value.__wrapped__)


_INSTRUMENTATION_PACKAGE = "opentelemetry.instrumentation.openai"
# The modules of the instrumentation that hold a copy of its `_set_span_attribute`.
_SETTER_MODULES = (
    "shared",
    "shared.chat_wrappers",
    "shared.completion_wrappers",
    "shared.embeddings_wrappers",
    "v1.responses_wrappers",
    "v1.assistant_wrappers",
    "v1.event_handler_wrapper",
)
