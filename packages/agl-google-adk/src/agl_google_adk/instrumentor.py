"""Trace Google ADK runs as spans of the current agl rollout.

:class:`GoogleADKInstrumentor` is what ``agl.Runner(..., instrument=["google-adk"])`` builds.
It does not trace ADK itself: ADK traces itself, in the OpenTelemetry GenAI conventions
(``google.adk.telemetry``): a span per agent run (``invoke_agent <name>``, with
``gen_ai.agent.name``; a sub-agent an agent transfers to runs in a span of its own), per model
call (``generate_content <model>``, with model and usage) and per tool call
(``execute_tool <tool>``, a transfer too), under the run's ``invoke_workflow``. agl takes those
spans as they are and:

- has ADK record them through agl's tracer provider (``tracer.provider``), never
  OpenTelemetry's global one. Every ADK module traces through one tracer object,
  ``google.adk.telemetry.tracing.tracer``, made at import from the global provider; while
  instrumented, its ``start_span`` and ``start_as_current_span`` are agl's;
- adds agl's facts when each span ends (:func:`agl.tracing.genai_attributes`): an agent run is
  an agent span named after the agent, a tool call a tool span;
- patches two things ADK's spans lack, each where the value is at hand and the span current:
  a tool call's arguments and result (``agl.tool.arguments``, ``agl.tool.result``), which ADK
  records only under opt-in environment variables (``tracing.trace_tool_call``), and the
  response id of each model call made through LiteLLM (``LiteLlm``'s client,
  ``LiteLLMClient.acompletion``, streamed or not), which ADK's ``LlmResponse`` drops. The id is
  what LightningRL joins a call with the gateway's token ids on.

Models: agl's gateway and trainers speak the OpenAI protocol, which ADK reaches through
``LiteLlm(model="openai/<name>", api_base=..., api_key=...)``. Gemini models (``google-genai``)
are traced without a response id.

Why not openinference's ``openinference-instrumentation-google-adk``: on ADK 2.x (1.0.5, the
current release) it writes each model call's attributes onto ADK's own ``invoke_agent`` span,
so an agent's later calls overwrite its earlier ones, and it needs ADK's spans to reach a
global provider; ADK's own spans are one per call. ADK's tracer is one per process, so one agl
tracer at a time can trace it: instrumenting while another holds it raises
:class:`agl.AglError`.
"""

from __future__ import annotations

import contextlib
import functools
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

from opentelemetry import trace as trace_api

from agl import AglError, semconv
from agl.tracing import (
    NormalizingTracerProvider,
    PatchingInstrumentor,
    genai_attributes,
    note_response,
    patch,
)

__all__ = ["GoogleADKInstrumentor"]

_ROUTED = ("start_span", "start_as_current_span")


class GoogleADKInstrumentor(PatchingInstrumentor):
    """Record ADK agent, sub-agent, tool and model calls in a tracer's rollouts; reversible.

    Instrumenting twice is the same as once. ::

        instrumentor = GoogleADKInstrumentor(tracer)
        instrumentor.instrument()
        async with tracer.rollout(rollout_id, attempt_id):
            async for event in runner.run_async(...):    # agents, model calls, tools: spans
                ...
        instrumentor.uninstrument()

    Args:
        tracer: The :class:`agl.Tracer` whose rollouts the spans belong to.
    """

    def apply(self, undo: contextlib.ExitStack) -> None:
        from google.adk.telemetry import tracing

        adk_tracer = tracing.tracer
        if any(name in vars(adk_tracer) for name in _ROUTED):
            raise AglError(
                "Google ADK is already instrumented by another agl tracer: uninstrument it "
                "before instrumenting it again"
            )
        provider = NormalizingTracerProvider(self.tracer.provider, genai_attributes)
        mine = provider.get_tracer("gcp.vertex.agent")
        for name in _ROUTED:
            setattr(adk_tracer, name, getattr(mine, name))
            undo.callback(delattr, adk_tracer, name)
        patch(
            undo,
            tracing,
            "trace_tool_call",
            _noting_tool_calls,
            missing="google.adk.telemetry.tracing has no trace_tool_call: tool spans are "
            "recorded without their arguments and result",
        )
        _keep_response_ids(undo)


def _keep_response_ids(undo: contextlib.ExitStack) -> None:
    try:
        from google.adk.models.lite_llm import LiteLLMClient
    except ImportError:  # ADK without LiteLLM: no OpenAI-compatible model to note ids of
        return
    patch(
        undo,
        LiteLLMClient,
        "acompletion",
        _noting_response_ids,
        missing="google-adk's LiteLLMClient has no acompletion: model calls are recorded "
        "without their response id",
    )


def _noting_response_ids(acompletion: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(acompletion)
    async def noting(self: Any, *args: Any, **kwargs: Any) -> Any:
        response = await acompletion(self, *args, **kwargs)
        if kwargs.get("stream"):
            return _noting_stream(response)
        note_response(getattr(response, "id", None), getattr(response, "model", None))
        return response

    return noting


async def _noting_stream(chunks: Any) -> AsyncIterator[Any]:
    noted = False
    async for chunk in chunks:
        if not noted and getattr(chunk, "id", None):
            noted = note_response(chunk.id, getattr(chunk, "model", None))
        yield chunk


def _noting_tool_calls(trace_tool_call: Callable[..., None]) -> Callable[..., None]:
    @functools.wraps(trace_tool_call)
    def noting(tool: Any, args: dict[str, object], function_response_event: Any, *rest: Any,
               **kwargs: Any) -> None:  # fmt: skip
        trace_tool_call(tool, args, function_response_event, *rest, **kwargs)
        span = kwargs.get("span") or trace_api.get_current_span()
        if not span.is_recording():
            return
        span.set_attribute(semconv.AGL_TOOL_ARGUMENTS, json.dumps(args, default=str))
        result = _tool_result(function_response_event)
        if result is not None:
            span.set_attribute(semconv.AGL_TOOL_RESULT, result)

    return noting


def _tool_result(event: Any) -> str | None:
    """The text of what the tool returned, from ADK's function response event."""
    parts = getattr(getattr(event, "content", None), "parts", None) or []
    response = getattr(parts[0].function_response, "response", None) if parts else None
    if response is None:
        return None
    if isinstance(response, dict) and set(response) == {"result"}:
        response = response["result"]  # ADK wraps what is not a dict as {"result": ...}
    return response if isinstance(response, str) else json.dumps(response, default=str)
