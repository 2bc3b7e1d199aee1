"""Trace OpenAI Agents SDK runs as spans of the current agl rollout.

:class:`OpenAIAgentsInstrumentor` is what ``agl.Runner(..., instrument=["openai-agents"])``
builds. It does not trace the SDK itself: the SDK traces its own runs (a trace per
``Runner.run``, with a span per agent turn, model call, function tool, handoff and guardrail),
and openinference-instrumentation-openai-agents turns them into OpenTelemetry spans, through a
trace processor it registers with the SDK (``agents.add_trace_processor``); agl configures it as
every adapter does (:class:`agl.tracing.OpenInferenceInstrumentor`: agl's provider, GenAI
attributes with the response id of Responses API calls, one tracer at a time). A run's root
span starts in the current OpenTelemetry context (the rollout's, or an :func:`agl.agent_span`),
its other spans under their SDK parents, in the same trace. What the SDK needs beyond that:

- the facts agl adds when a span ends (:mod:`agl_openai_agents._normalize`): agent names on
  agent spans, ``agl.tool.*`` on function tool spans;
- keeping the response id of Chat Completions calls, streamed or not, which the SDK's spans
  lack (:mod:`agl_openai_agents._response_ids`).

Why openinference rather than a trace processor of agl's own: the SDK can add a trace processor
or replace them all, but not remove one, and a run in flight must keep its processor until it
ends; openinference does both (it takes its processor out once its last run has ended, and
traces no new run meanwhile), and already converts every kind of SDK span.

agl's processor is added beside the SDK's own, which are left as they are. By default the SDK
also exports every trace to OpenAI's servers (when an ``OPENAI_API_KEY`` is set); agl neither
needs nor touches that. To keep traces on the machine, call ``agents.set_trace_processors([])``
before instrumenting. Do not switch the SDK's tracing off (``agents.set_tracing_disabled``,
``OPENAI_AGENTS_DISABLE_TRACING``, ``RunConfig(tracing_disabled=True)``): agl sees a run through
it. With ``RunConfig(trace_include_sensitive_data=False)`` the SDK keeps no messages, and
Responses API calls lose their response id (LightningRL then joins them with the gateway's
token ids by order).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any, ClassVar

from agl.tracing import NormalizingTracerProvider, OpenInferenceInstrumentor
from agl_openai_agents._response_ids import keep_chat_response_ids

__all__ = ["OpenAIAgentsInstrumentor"]


class OpenAIAgentsInstrumentor(OpenInferenceInstrumentor):
    """Record OpenAI Agents SDK runs in a tracer's rollouts; reversible and idempotent.

    ::

        instrumentor = OpenAIAgentsInstrumentor(tracer)
        instrumentor.instrument()
        async with tracer.rollout(rollout_id, attempt_id):
            await Runner.run(triage, "task")    # agents, model calls, tools: spans
        instrumentor.uninstrument()

    Agent spans (the SDK's ``AgentSpanData``) are named by openinference's ``agent.name``; after
    a handoff the receiving agent runs in a span of its own. A function tool's span gets
    ``agl.tool.*`` (openinference's GenAI conversion writes its parameter *schema* into
    ``gen_ai.tool.call.arguments``, so agl's names are the ones to read); a handoff's span is
    left as openinference records it.

    Args:
        tracer: The :class:`agl.Tracer` whose rollouts the spans belong to.
    """

    framework = "the OpenAI Agents SDK"
    instrumentation = "openinference.instrumentation.openai_agents:OpenAIAgentsInstrumentor"
    instrument_options: ClassVar[Mapping[str, Any]] = {"exclusive_processor": False}

    def extend(self, undo: contextlib.ExitStack, provider: NormalizingTracerProvider) -> None:
        keep_chat_response_ids(undo)
