"""Derive agl's attributes from what openinference records for an AutoGen span.

openinference-instrumentation-autogen-agentchat wraps AutoGen's agents, teams, tools and OpenAI
model client, and, with ``TraceConfig(enable_genai_semconv=True)``, writes OpenTelemetry GenAI
attributes beside its own on the span of each model call (``OpenAIChatCompletionClient.create``
or ``create_stream``): ``gen_ai.operation.name = "chat"``, the model, usage and messages, which
is what :func:`agl.tracing.is_llm_span` and LightningRL read. Two facts agl relies on
are not among them; :func:`agl_attributes` derives them, from the span's attributes, when it
ends:

- **Agents.** The span of an agent's turn (``<name>.on_messages_stream``, which ``run``,
  ``on_messages`` and a team's turns all go through) is an agent span
  (``agl.span.type = "agent"``) named ``agl.agent.name``, so every model call under it is that
  agent's. openinference notes an ``AssistantAgent``'s name as the span's graph node id; of
  other agents, only the span's name tells it.
- **Tools.** A tool call's span gets ``agl.span.type = "tool"`` with ``agl.tool.name``,
  ``agl.tool.arguments`` (the JSON the model sent) and ``agl.tool.result`` (text).

A team's own span (``RoundRobinGroupChat.run_stream``) is left as openinference records it. The
response id of a model call is in none of the attributes; :mod:`agl_autogen._response_ids` adds
it while the call runs.

Everything here reads attributes only, so it never touches AutoGen objects.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from openinference.semconv.trace import (
    OpenInferenceSpanKindValues,
    SpanAttributes,
)
from opentelemetry.util.types import AttributeValue

from agl import semconv
from agl.tracing import tool_attributes

__all__ = ["agl_attributes"]

_KIND = SpanAttributes.OPENINFERENCE_SPAN_KIND
_AGENT = OpenInferenceSpanKindValues.AGENT.value
_TOOL = OpenInferenceSpanKindValues.TOOL.value
_AGENT_TURN = ".on_messages_stream"


def agl_attributes(name: str, attributes: Mapping[str, Any]) -> dict[str, AttributeValue]:
    """Return the agl attributes a finished AutoGen span should also carry (maybe none).

    Args:
        name: The span's name: ``<agent name>.on_messages_stream`` for an agent's turn.
        attributes: The attributes openinference recorded on the span.
    """
    kind = attributes.get(_KIND)
    if kind == _AGENT:
        agent = attributes.get(SpanAttributes.GRAPH_NODE_ID)
        if not isinstance(agent, str) or not agent:
            agent = name.removesuffix(_AGENT_TURN) if name.endswith(_AGENT_TURN) else None
        if agent:
            return {semconv.AGL_SPAN_TYPE: semconv.SPAN_TYPE_AGENT, semconv.AGL_AGENT_NAME: agent}
    elif kind == _TOOL:
        tool = attributes.get(SpanAttributes.TOOL_NAME)
        if isinstance(tool, str) and tool:
            return tool_attributes(tool, attributes)
    return {}
