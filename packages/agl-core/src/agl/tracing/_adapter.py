"""A framework adapter built on openinference: its instrumentation, agl's provider and facts.

Most agent frameworks have a maintained OpenTelemetry instrumentation in openinference, which
records each agent run, model call and tool call as a span. An agl adapter configures it the
same way for every framework, and :class:`OpenInferenceInstrumentor` is that configuration:

- openinference records through agl's tracer provider (``tracer.provider``), seen through a
  :class:`~agl.tracing.NormalizingTracerProvider`, so the spans go to the rollout's store and
  never to OpenTelemetry's global provider, each completed by :meth:`agl_attributes` when it
  ends;
- with OpenTelemetry GenAI attributes on (``TraceConfig(enable_genai_semconv=True)``): model,
  usage, input and output messages under the names :func:`agl.tracing.is_llm_span` reads;
- openinference's instrumentor is one per process (an OpenTelemetry ``BaseInstrumentor``), so
  one agl tracer at a time can trace the framework: instrumenting while something else holds it
  raises :class:`agl.AglError` rather than record nothing.

An adapter names the instrumentation and the framework, says where its agents' names are, and
patches in :meth:`extend` only what the instrumentation misses::

    class ShoutInstrumentor(OpenInferenceInstrumentor):
        framework = "Shout"
        instrumentation = "openinference.instrumentation.shout:ShoutInstrumentor"

        def extend(self, undo, provider):
            from shout import Client

            patch(undo, Client, "_send", keep_response_ids, missing="...")

openinference's ``OPENINFERENCE_*`` environment variables still apply (hiding outputs hides
response ids too). Spans of runs that started before ``uninstrument()`` may still end
afterwards; no new run is traced.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Mapping
from typing import Any, ClassVar

from opentelemetry.util import types

from agl._errors import AglError
from agl.tracing._instrumentor import PatchingInstrumentor
from agl.tracing._normalizing import (
    NormalizingTracerProvider,
    openinference_attributes,
    openinference_name,
)

__all__ = ["OpenInferenceInstrumentor"]


class OpenInferenceInstrumentor(PatchingInstrumentor):
    """An adapter that records a framework through its openinference instrumentation.

    Subclasses set :attr:`framework` and :attr:`instrumentation`, and may override
    :attr:`instrument_options`, :meth:`agent_name`, :meth:`agl_attributes` and :meth:`extend`.
    Reversible and idempotent (:class:`~agl.tracing.PatchingInstrumentor`).

    Args:
        tracer: The :class:`agl.Tracer` whose rollouts the spans belong to.
    """

    framework: ClassVar[str]
    """The framework's name, as users know it (for error messages)."""
    instrumentation: ClassVar[str]
    """openinference's instrumentor, as ``"module:Class"`` (imported when instrumenting)."""
    instrument_options: ClassVar[Mapping[str, Any]] = {}
    """Further keyword arguments for the instrumentation's ``instrument()``."""

    def agent_name(self, name: str, attributes: Mapping[str, Any]) -> str | None:
        """The agent an ``AGENT`` span stands for; by default openinference's ``agent.name``,
        else its ``graph.node.id``.

        Args:
            name: The span's name.
            attributes: The attributes openinference recorded on it.
        """
        return openinference_name(name, attributes)

    def agl_attributes(
        self, name: str, attributes: Mapping[str, Any]
    ) -> Mapping[str, types.AttributeValue]:
        """The agl attributes a finished span should also carry (maybe none).

        By default: agent spans named by :meth:`agent_name`, and tool spans
        (:func:`~agl.tracing.openinference_attributes`).
        """
        return openinference_attributes(name, attributes, self.agent_name)

    def extend(self, undo: contextlib.ExitStack, provider: NormalizingTracerProvider) -> None:
        """Install what the instrumentation misses (by default nothing); push the undoing.

        Runs after the instrumentation is on. ``provider`` is the view it records through:
        spans an adapter opens itself should start there, so they are completed alike.
        """

    def apply(self, undo: contextlib.ExitStack) -> None:
        from openinference.instrumentation import TraceConfig

        module, _, attribute = self.instrumentation.partition(":")
        instrumentation = getattr(importlib.import_module(module), attribute)()
        if instrumentation.is_instrumented_by_opentelemetry:
            raise AglError(
                f"{self.framework} is already instrumented by openinference (another agl tracer, "
                "or the application's own tracing): uninstrument it before instrumenting it for "
                "agl"
            )
        provider = NormalizingTracerProvider(self.tracer.provider, self.agl_attributes)
        instrumentation.instrument(
            tracer_provider=provider,
            config=TraceConfig(enable_genai_semconv=True),
            **self.instrument_options,
        )
        undo.callback(instrumentation.uninstrument)
        self.extend(undo, provider)
