"""Record every call the OpenAI Python client makes, as spans of the current rollout.

``opentelemetry-instrumentation-openai`` does the recording (sync and async clients, streaming,
chat completions, completions and the Responses API, tool calls); agl points it at its own
tracer provider, and :func:`agl.tracing.is_llm_span` brings its attributes to agl's conventions
when the spans are converted.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable
from typing import Any

from agl._errors import AglError
from agl.tracing._tracer import Tracer

__all__ = ["OpenAIInstrumentation"]

logger = logging.getLogger(__name__)


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
        # (module, name, original) for each of agl's own patches to the instrumentation
        self._originals: list[tuple[Any, str, Any]] = []

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
        from opentelemetry.metrics import get_meter_provider

        meter_provider = get_meter_provider()
        self._skip_metrics_that_go_nowhere(meter_provider)
        instrumentor = OpenAIInstrumentor()
        instrumentor.instrument(tracer_provider=tracer.provider, meter_provider=meter_provider)
        self._instrumentor = instrumentor
        self._tracer = tracer
        self._speed_up_sync_calls()
        self._check_the_openai_version_once()
        self._set_attributes_in_one_step()
        self._tolerate_null_usage_details()

    def _stop(self) -> None:
        self._instrumentor.uninstrument()
        _remove_leftover_wrappers()
        self._instrumentor = None
        self._tracer = None
        for module, name, original in reversed(self._originals):
            setattr(module, name, original)
        self._originals = []

    def _replace(self, module_name: str, name: str, make: Callable[[Any], Any]) -> None:
        """Replace ``name`` in one of the instrumentation's modules by ``make(original)``;
        :meth:`_stop` puts the original back. Modules or names this version lacks are skipped."""
        import importlib

        full_name = ".".join(filter(None, (_INSTRUMENTATION_PACKAGE, module_name)))
        try:
            module = importlib.import_module(full_name)
        except ImportError:
            return
        original = getattr(module, name, None)
        if original is None:
            return
        setattr(module, name, make(original))
        self._originals.append((module, name, original))

    def _set_attributes_in_one_step(self) -> None:
        """Set each request and response attribute through one small function.

        Each module of the instrumentation holds a copy of ``_set_span_attribute``, which skips
        ``None``, ``""`` and ``NOT_GIVEN`` but not openai 2's ``omit``, which clients such as the
        Agents SDK pass for settings they leave unset (``top_p=omit``): OpenTelemetry would then
        drop the value with a warning per call. A call sets some twenty attributes, so the copies
        are replaced by one function that skips all four kinds of missing value with one check
        each and writes straight to the span.
        """
        import openai

        missing = tuple(
            kind
            for kind in (getattr(openai, "Omit", None), getattr(openai, "NotGiven", None))
            if isinstance(kind, type)
        )

        def setter(span: Any, key: str, value: Any) -> None:
            if value is None or isinstance(value, missing) or value == "":
                return
            span.set_attribute(key, value)

        for module_name in _SETTER_MODULES:
            self._replace(module_name, "_set_span_attribute", lambda original: setter)

    def _skip_metrics_that_go_nowhere(self, meter_provider: Any) -> None:
        """Leave the instrumentation's metrics off unless an SDK meter provider is installed.

        Without one, OpenTelemetry's global meter provider discards every measurement, yet
        the instrumentation builds each call's metric attributes (the base URL as text, the
        vendor, one dict per token type) before handing them over: some 15 µs a call.
        Instrumenting with an SDK :class:`~opentelemetry.sdk.metrics.MeterProvider` installed
        (``opentelemetry.metrics.set_meter_provider``) records the metrics as before.
        """
        from opentelemetry.sdk.metrics import MeterProvider

        if isinstance(meter_provider, MeterProvider):
            return
        for module_name in ("v1", "v0"):
            self._replace(module_name, "is_metrics_enabled", lambda original: _false)

        def make(original: Any) -> Any:
            def metrics(instance: Any, *instruments_and_values: Any, **options: Any) -> Any:
                if not any(instruments_and_values[:3]):  # token, choice and duration meters
                    return None
                return original(instance, *instruments_and_values, **options)

            return metrics

        self._replace("shared.chat_wrappers", "_set_chat_metrics", make)

    def _tolerate_null_usage_details(self) -> None:
        """Record usage whose ``prompt_tokens_details`` is ``null``, as vLLM sends it.

        The instrumentation's response recorder reads that field with ``dict(...)``, which
        raises on ``None``: the call then loses its cached-token count and the recorder formats
        a traceback for a debug log on every call (a good part of a millisecond). The field is
        dropped from the response it looks at when it is ``None``.
        """

        def make(original: Any) -> Any:
            def recorder(span: Any, response: Any) -> Any:
                usage = response.get("usage") if isinstance(response, dict) else None
                if usage is not None and not isinstance(usage, dict):
                    usage = getattr(usage, "__dict__", None)
                if isinstance(usage, dict) and usage.get("prompt_tokens_details", 0) is None:
                    kept = {k: v for k, v in usage.items() if k != "prompt_tokens_details"}
                    response = {**response, "usage": kept}
                return original(span, response)

            return recorder

        for module_name in _RESPONSE_MODULES:
            self._replace(module_name, "_set_response_attributes", make)

    def _check_the_openai_version_once(self) -> None:
        """Answer the instrumentation's version checks from one parse of the version.

        ``is_openai_v1()`` and ``is_reasoning_supported()`` parse the installed openai version
        with ``packaging`` each time, about a dozen times a call (~0.1 ms). The answer cannot
        change while the process runs, so each module's copy is replaced by a cached one.
        """
        import sys

        for module_name, module in list(sys.modules.items()):
            if module is None or not (
                module_name == _INSTRUMENTATION_PACKAGE
                or module_name.startswith(_INSTRUMENTATION_PACKAGE + ".")
            ):
                continue
            relative = module_name[len(_INSTRUMENTATION_PACKAGE) + 1 :]
            for name in ("is_openai_v1", "is_reasoning_supported"):
                if callable(getattr(module, name, None)):
                    self._replace(relative, name, functools.cache)

    def _speed_up_sync_calls(self) -> None:
        """Record sync chat calls without starting an event loop for each.

        The instrumentation's sync chat wrapper hands a coroutine (which records the request's
        attributes) to ``run_async``, and that starts a new event loop per call, in a new thread
        when one is already running: 1 to 2 ms a call. The coroutine awaits nothing real unless an
        image uploader is configured, which agl never does, so it runs to completion at once.
        """

        def run_inline(coroutine: Any) -> Any:
            try:
                coroutine.send(None)
            except StopIteration as done:
                return done.value
            coroutine.close()
            logger.warning("an OpenAI request's attributes wanted real I/O and were skipped")
            return None

        self._replace("shared.chat_wrappers", "run_async", lambda original: run_inline)


_patches = _SharedPatches()


def _false() -> bool:
    return False


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
# The modules of the instrumentation that call its `_set_response_attributes`.
_RESPONSE_MODULES = (
    "shared.chat_wrappers",
    "shared.completion_wrappers",
    "shared.embeddings_wrappers",
)
