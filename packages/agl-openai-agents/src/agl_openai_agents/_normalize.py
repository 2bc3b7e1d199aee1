"""Derive agl's attributes from what openinference records for an Agents SDK span.

openinference-instrumentation-openai-agents turns each span of the Agents SDK's own tracing
into an OpenTelemetry span and, with ``TraceConfig(enable_genai_semconv=True)``, writes
OpenTelemetry GenAI attributes beside its own: ``gen_ai.operation.name = "chat"``, the model,
usage and messages on the span of each model call (a chat completion's ``generation`` span or a
Responses API ``response`` span), which is what :func:`agl.tracing.is_llm_span` and
LightningRL read, and ``gen_ai.response.id`` of a Responses API call (the response it records
is the server's). Two facts agl relies on are not among them; :func:`agl_attributes` derives
them, from the span's attributes, when it ends:

- **Agents.** The span of an agent's turn at the conversation (the SDK's ``AgentSpanData``,
  which openinference names ``agent.name``) is an agent span (``agl.span.type = "agent"``)
  named ``agl.agent.name``, so every model call under it is that agent's. After a handoff the
  receiving agent runs in a span of its own, under its own name.
- **Tools.** A function tool's span gets ``agl.span.type = "tool"`` with ``agl.tool.name``,
  ``agl.tool.arguments`` (the JSON the model sent) and ``agl.tool.result`` (text). A handoff's
  span is left as openinference records it (from and to agent). openinference's GenAI
  conversion writes a function tool's parameter *schema* into ``gen_ai.tool.call.arguments``,
  so agl's names are the ones to read.

The response id of a Chat Completions call is in none of the attributes (the SDK does not keep
it); :mod:`agl_openai_agents._response_ids` adds it while the call runs.

Everything here reads attributes only, so it never touches Agents SDK objects.
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


def agl_attributes(name: str, attributes: Mapping[str, Any]) -> dict[str, AttributeValue]:
    """Return the agl attributes a finished Agents SDK span should also carry (maybe none).

    Args:
        name: The span's name; agents and tools are recognised by attributes, never by it.
        attributes: The attributes openinference recorded on the span.
    """
    kind = attributes.get(_KIND)
    if kind == _AGENT:
        agent = attributes.get(SpanAttributes.AGENT_NAME)
        if isinstance(agent, str) and agent:
            return {semconv.AGL_SPAN_TYPE: semconv.SPAN_TYPE_AGENT, semconv.AGL_AGENT_NAME: agent}
    elif kind == _TOOL:
        tool = attributes.get(SpanAttributes.TOOL_NAME)
        if isinstance(tool, str) and tool:
            return tool_attributes(tool, attributes)
    return {}
