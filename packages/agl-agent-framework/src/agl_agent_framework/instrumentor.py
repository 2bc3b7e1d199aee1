"""Trace Microsoft Agent Framework runs as spans of the current agl rollout.

:class:`AgentFrameworkInstrumentor` is what ``agl.Runner(..., instrument=["agent-framework"])``
builds. It does not trace the Agent Framework itself: the framework traces itself, in the
OpenTelemetry GenAI conventions (``agent_framework.observability``): a span per agent run
(``invoke_agent <name>``, with ``gen_ai.agent.name``), per model call (``chat <model>``, with
model, usage, messages and the server's response id, streamed or not), per tool call
(``execute_tool <tool>``), and, in a workflow, per executor run (``executor.process <id>``)
under the workflow's ``workflow.run``. agl takes those spans as they are and:

- has the framework record them through agl's tracer provider (``tracer.provider``), never
  OpenTelemetry's global one. The framework asks its module function
  ``agent_framework.observability.get_tracer`` for a tracer at every span and has no other way
  to name a provider, so that one function is replaced while instrumented;
- adds agl's facts when each span ends (:func:`agl.tracing.genai_attributes`): an agent run is
  an agent span named after the agent; an executor of a workflow is an agent span named after
  its id (an agent's executor id is the agent's name; the framework's own internal executors,
  whose classes are private, are left alone); a tool call gets ``agl.tool.*``;
- turns the framework's instrumentation on while instrumented, with sensitive data (messages,
  tool arguments and results: what LightningRL and ``agl rollouts show`` read) and the GenAI
  conventions above v1.36 (``OTEL_SEMCONV_STABILITY_OPT_IN``), and puts the settings back
  afterwards. A process that called ``disable_instrumentation()`` gets a warning and no spans.

Why not openinference's ``openinference-instrumentation-agent-framework``: it is a span
processor that rewrites the framework's own spans into OpenInference attributes, which agl does
not read (the GenAI ones are already there), and it rewrites every span of the provider it is
added to, not only the framework's. The framework's instrumentation is one per process, so one
agl tracer at a time can trace it: instrumenting while another holds it raises
:class:`agl.AglError`.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping
from typing import Any

from opentelemetry import trace as trace_api
from opentelemetry.util import types

from agl import AglError
from agl.tracing import (
    NormalizingTracerProvider,
    PatchingInstrumentor,
    agent_attributes,
    genai_attributes,
    patch,
)

__all__ = ["AgentFrameworkInstrumentor"]

logger = logging.getLogger(__name__)

_EXECUTOR_SPAN = "executor.process"
_EXECUTOR_ID = "executor.id"
_EXECUTOR_TYPE = "executor.type"
_LATEST_SEMCONV = "gen_ai_latest_experimental"
_AGL = "_agl_tracer"
"""Set on agl's ``get_tracer``: the tracer it records for."""


class AgentFrameworkInstrumentor(PatchingInstrumentor):
    """Record Agent Framework agents, workflows, tools and model calls in a tracer's rollouts.

    Reversible and idempotent. ::

        instrumentor = AgentFrameworkInstrumentor(tracer)
        instrumentor.instrument()
        async with tracer.rollout(rollout_id, attempt_id):
            await workflow.run("task")    # executors, agents, model calls, tools: spans
        instrumentor.uninstrument()

    Args:
        tracer: The :class:`agl.Tracer` whose rollouts the spans belong to.
    """

    def agl_attributes(
        self, name: str, attributes: Mapping[str, Any]
    ) -> Mapping[str, types.AttributeValue]:
        """Agent spans for agent runs and workflow executors; tool spans for tool calls."""
        executor = attributes.get(_EXECUTOR_ID)
        if name.startswith(_EXECUTOR_SPAN) and isinstance(executor, str) and executor:
            kind = attributes.get(_EXECUTOR_TYPE)
            if not (isinstance(kind, str) and kind.startswith("_")):
                return agent_attributes(executor)
            return {}
        return genai_attributes(name, attributes)

    def apply(self, undo: contextlib.ExitStack) -> None:
        import agent_framework
        from agent_framework import observability

        holder = getattr(vars(observability).get("get_tracer"), _AGL, None)
        if holder is not None:
            raise AglError(
                "the Agent Framework is already instrumented by another agl tracer: "
                "uninstrument it before instrumenting it again"
            )
        provider = NormalizingTracerProvider(self.tracer.provider, self.agl_attributes)

        def recording_here(original: Any) -> Any:
            def get_tracer(
                instrumenting_module_name: str = "agent_framework",
                instrumenting_library_version: str | None = None,
                schema_url: str | None = None,
                attributes: types.Attributes = None,
            ) -> trace_api.Tracer:
                return provider.get_tracer(
                    instrumenting_module_name,
                    instrumenting_library_version or agent_framework.__version__,
                    schema_url,
                    attributes,
                )

            get_tracer.__doc__ = original.__doc__
            setattr(get_tracer, _AGL, self.tracer)
            return get_tracer

        if not patch(undo, observability, "get_tracer", recording_here):
            raise AglError(
                "agent_framework.observability has no get_tracer: this Agent Framework release "
                "is not supported by agl-agent-framework (see its README for the versions)"
            )
        _turn_telemetry_on(observability.OBSERVABILITY_SETTINGS, undo)


def _turn_telemetry_on(settings: Any, undo: contextlib.ExitStack) -> None:
    """Instrumentation and sensitive data on, the latest GenAI conventions; push the undoing."""
    if settings.is_user_disabled:
        logger.warning(
            "the Agent Framework's instrumentation was switched off (disable_instrumentation()): "
            "agl records none of its agents, tools or model calls"
        )
    saved = (
        settings.enable_instrumentation,
        settings.enable_sensitive_data,
        settings.otel_semconv_stability_opt_in,
    )

    def restore() -> None:
        (
            settings.enable_instrumentation,
            settings.enable_sensitive_data,
            settings.otel_semconv_stability_opt_in,
        ) = saved

    undo.callback(restore)
    settings.enable_instrumentation = True
    settings.enable_sensitive_data = True
    if not settings.use_latest_experimental_gen_ai_semconv:
        opted = settings.otel_semconv_stability_opt_in
        settings.otel_semconv_stability_opt_in = f"{opted},{_LATEST_SEMCONV}"
