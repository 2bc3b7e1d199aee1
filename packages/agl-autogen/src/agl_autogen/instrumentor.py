"""Trace AutoGen (autogen-agentchat) runs as spans of the current agl rollout.

:class:`AutogenInstrumentor` is what ``agl.Runner(..., instrument=["autogen"])`` builds. It does
not trace AutoGen itself: openinference-instrumentation-autogen-agentchat does, by wrapping
each agent's turn (``on_messages_stream``, which ``run``, ``on_messages`` and teams go through),
a team's ``run_stream``, an ``AssistantAgent``'s tool calls and ``OpenAIChatCompletionClient``'s
``create`` and ``create_stream``; agl configures it as every adapter does
(:class:`agl.tracing.OpenInferenceInstrumentor`: agl's provider, GenAI attributes, one tracer at
a time). Each span starts in the current OpenTelemetry context (the rollout's, an
:func:`agl.agent_span`, or the agent's or team's span around it). What AutoGen needs beyond
that:

- agent names: the span of an agent's turn (``<name>.on_messages_stream``) is an agent span
  named after the agent; openinference notes an ``AssistantAgent``'s name as the span's graph
  node id, of other agents only the span's name tells it. A team's own span
  (``RoundRobinGroupChat.run_stream``) is left as openinference records it;
- keeping the response id of each OpenAI model call, streamed or not, which AutoGen's
  ``CreateResult`` lacks (:mod:`agl_autogen._response_ids`);
- ending an agent's span when ``run`` or ``on_messages`` returns, which would otherwise wait
  for Python to collect the agent's stream (:mod:`agl_autogen._agent_turns`).

Model clients other than autogen-ext's OpenAI ones (``OpenAIChatCompletionClient``,
``AzureOpenAIChatCompletionClient``) get no model call spans from openinference; agl's own
OpenAI instrumentation (``instrument=["openai"]``) still sees the calls they make through the
``openai`` package.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

from agl.tracing import NormalizingTracerProvider, OpenInferenceInstrumentor
from agl_autogen._agent_turns import close_agent_turns
from agl_autogen._response_ids import keep_response_ids

__all__ = ["AutogenInstrumentor"]

_AGENT_TURN = ".on_messages_stream"


class AutogenInstrumentor(OpenInferenceInstrumentor):
    """Record AutoGen agent, team, tool and model calls in a tracer's rollouts; reversible.

    Instrumenting twice is the same as once. ::

        instrumentor = AutogenInstrumentor(tracer)
        instrumentor.instrument()
        async with tracer.rollout(rollout_id, attempt_id):
            await team.run(task="task")    # agents, model calls, tools: spans
        instrumentor.uninstrument()

    Args:
        tracer: The :class:`agl.Tracer` whose rollouts the spans belong to.
    """

    framework = "AutoGen"
    instrumentation = "openinference.instrumentation.autogen_agentchat:AutogenAgentChatInstrumentor"

    def agent_name(self, name: str, attributes: Mapping[str, Any]) -> str | None:
        """openinference's graph node id, else the span's name less ``.on_messages_stream``."""
        return super().agent_name(name, attributes) or (
            name.removesuffix(_AGENT_TURN) if name.endswith(_AGENT_TURN) else None
        )

    def extend(self, undo: contextlib.ExitStack, provider: NormalizingTracerProvider) -> None:
        keep_response_ids(undo)
        close_agent_turns(undo)
