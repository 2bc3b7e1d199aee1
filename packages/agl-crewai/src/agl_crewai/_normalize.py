"""Derive agl's attributes from what openinference records for a CrewAI span.

openinference-instrumentation-crewai opens a span for a crew's kickoff (``<crew>.kickoff``), for
each task an agent executes (``<role>._execute_core``), for an agent kicked off on its own
(``<role>.kickoff``) and for each tool run (``<tool>.run``), with OpenInference attributes.
:mod:`agl_crewai._native_async` opens the same spans, alike, for CrewAI's native async paths.
:func:`agl_attributes` adds, when one of them ends:

- **Agents.** A task's or a lone agent's span (``openinference.span.kind = "AGENT"``) is an agent
  span (``agl.span.type = "agent"``) named after the agent's role (``agl.agent.name``, from
  openinference's ``graph.node.id``), so every model call in it is that agent's; a task's span
  also names its task (``agl.task.name``).
- **Tools.** A tool run's span gets ``agl.span.type = "tool"`` with ``agl.tool.name``,
  ``agl.tool.arguments`` (the arguments as JSON) and ``agl.tool.result`` (text).

Everything here reads attributes only, so it never touches CrewAI objects.
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

__all__ = ["TASK_NAME", "agl_attributes"]

TASK_NAME = "agl.task.name"
"""The CrewAI task an agent span executes (its ``name``, else its description)."""

_KIND = SpanAttributes.OPENINFERENCE_SPAN_KIND
_AGENT = OpenInferenceSpanKindValues.AGENT.value
_TOOL = OpenInferenceSpanKindValues.TOOL.value
# openinference's own name for the attribute (it has no constant for it).
_OPENINFERENCE_TASK_NAME = "task_name"


def agl_attributes(name: str, attributes: Mapping[str, Any]) -> dict[str, AttributeValue]:
    """Return the agl attributes a finished CrewAI span should also carry (maybe none).

    Args:
        name: The span's name (unused: CrewAI's spans say everything in their attributes).
        attributes: The attributes openinference recorded on the span.
    """
    del name
    kind = attributes.get(_KIND)
    if kind == _AGENT:
        role = attributes.get(SpanAttributes.GRAPH_NODE_ID)
        if isinstance(role, str) and role:
            out: dict[str, AttributeValue] = {
                semconv.AGL_SPAN_TYPE: semconv.SPAN_TYPE_AGENT,
                semconv.AGL_AGENT_NAME: role,
            }
            task = attributes.get(_OPENINFERENCE_TASK_NAME)
            if isinstance(task, str) and task:
                out[TASK_NAME] = task
            return out
    elif kind == _TOOL:
        tool = attributes.get(SpanAttributes.TOOL_NAME)
        if isinstance(tool, str) and tool:
            return tool_attributes(tool, attributes)
    return {}
