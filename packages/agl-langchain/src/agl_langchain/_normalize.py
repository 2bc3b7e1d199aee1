"""Derive agl's attributes from what openinference records for a LangChain run.

openinference-instrumentation-langchain turns each LangChain run into a span and, with
``TraceConfig(enable_genai_semconv=True)``, writes OpenTelemetry GenAI attributes beside its own
(``gen_ai.operation.name``, the request model, usage, input and output messages), which is what
:func:`agl.tracing.is_llm_span` and LightningRL read. Three facts agl relies on are not
among them; :func:`agl_attributes` derives them, from the span's attributes, when it ends:

- **Response id.** ``gen_ai.response.id`` (and ``gen_ai.response.model``) of an LLM span, so
  LightningRL joins the call with the gateway's token ids. The run's output (openinference's
  ``output.value``, the ``LLMResult`` as JSON) holds it in ``llm_output.id`` or in a generated
  message's ``response_metadata.id``.
- **Agents.** The span of a LangGraph node is an agent span (``agl.span.type = "agent"``) named
  ``agl.agent.name``, so every LLM call under it is that agent's. Its name is the agent name
  ``langchain.agents.create_agent(..., name=...)`` puts in the run metadata (``lc_agent_name``)
  if there is one, else the *outermost* node on the run's LangGraph namespace path. In a graph
  whose nodes are agents that is the node itself; a subgraph added as a node (a prebuilt ReAct
  agent, say), or a graph run inside a node, is one agent under that node's name rather than
  the names of its inner ``agent``/``tools`` nodes. A run carrying ``lc_agent_name`` outside
  any graph is an agent span too. (A prebuilt agent run on its own, without such a name, is
  attributed to its inner nodes.)
- **Tools.** A tool span gets ``agl.span.type = "tool"`` with ``agl.tool.name``,
  ``agl.tool.arguments`` (JSON) and ``agl.tool.result`` (text).

Everything here reads attributes only, so it never touches LangChain objects.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from openinference.semconv.trace import OpenInferenceMimeTypeValues, SpanAttributes
from opentelemetry.util.types import AttributeValue

from agl import semconv
from agl.tracing import is_llm_span, tool_attributes

__all__ = ["agl_attributes"]

_JSON = OpenInferenceMimeTypeValues.JSON.value
_NODE = "langgraph_node"
"""Run metadata LangGraph sets: the node a run belongs to."""
_NAMESPACE = "langgraph_checkpoint_ns"
"""Run metadata LangGraph sets: ``node:task|inner-node:task|...``, outermost first."""
_AGENT_NAME = "lc_agent_name"
"""Run metadata ``langchain.agents.create_agent`` sets on everything its agent runs."""


def agl_attributes(name: str, attributes: Mapping[str, Any]) -> dict[str, AttributeValue]:
    """Return the agl attributes a finished LangChain span should also carry (maybe none).

    Args:
        name: The span's name (the run's name: a LangGraph node's span is named after it).
        attributes: The attributes openinference recorded on the span.
    """
    out: dict[str, AttributeValue] = {}
    llm = is_llm_span(dict(attributes))
    if llm and semconv.GEN_AI_RESPONSE_ID not in attributes:
        out.update(_response(attributes))
    tool = attributes.get(SpanAttributes.TOOL_NAME)
    if isinstance(tool, str):
        out.update(tool_attributes(tool, attributes, result=_tool_result(attributes)))
    agent = _agent(name, attributes)
    if agent is not None:
        out[semconv.AGL_AGENT_NAME] = agent
        if not llm and semconv.AGL_SPAN_TYPE not in out:  # an LLM or tool span keeps its type
            out[semconv.AGL_SPAN_TYPE] = semconv.SPAN_TYPE_AGENT
    return out


def _response(attributes: Mapping[str, Any]) -> dict[str, AttributeValue]:
    """``gen_ai.response.id`` / ``.model`` from an LLM run's output (an ``LLMResult``)."""
    output = _json_value(attributes, SpanAttributes.OUTPUT_VALUE, SpanAttributes.OUTPUT_MIME_TYPE)
    if not isinstance(output, dict) or "generations" not in output:
        return {}
    out: dict[str, AttributeValue] = {}
    for metadata in _response_metadata(output):
        response_id = metadata.get("id")
        if isinstance(response_id, str) and response_id:
            out.setdefault(semconv.GEN_AI_RESPONSE_ID, response_id)
        model = metadata.get("model_name")
        if isinstance(model, str) and model:
            out.setdefault(semconv.GEN_AI_RESPONSE_MODEL, model)
    return out


def _response_metadata(output: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The provider's metadata of the response: the result's, then each message's."""
    if isinstance(llm_output := output.get("llm_output"), dict):
        yield llm_output
    generations = output.get("generations")
    first = generations[0] if isinstance(generations, list) and generations else []
    for generation in first if isinstance(first, list) else []:
        message = generation.get("message") if isinstance(generation, dict) else None
        if not isinstance(message, dict):
            continue
        fields = message.get("kwargs")  # LangChain's serialization: {"lc": 1, "kwargs": ...}
        if isinstance(fields, dict) and isinstance(fields.get("response_metadata"), dict):
            yield fields["response_metadata"]


def _tool_result(attributes: Mapping[str, Any]) -> str | None:
    """What the tool returned: the content of its ``ToolMessage``, or its output as text."""
    output = attributes.get(SpanAttributes.OUTPUT_VALUE)
    if not isinstance(output, str):
        return None
    parsed = _json_value(attributes, SpanAttributes.OUTPUT_VALUE, SpanAttributes.OUTPUT_MIME_TYPE)
    # A tool called with a tool call answers with a ToolMessage, serialized as
    # {"type": "tool", "data": {"content": ...}}.
    if isinstance(parsed, dict) and parsed.get("type") == "tool":
        data = parsed.get("data")
        content = data.get("content") if isinstance(data, dict) else None
        if isinstance(content, str):
            return content
        if content is not None:
            return json.dumps(content)
    return output


def _agent(name: str, attributes: Mapping[str, Any]) -> str | None:
    """The agent a span stands for, if it is an agent's span (see the module docstring)."""
    metadata = _json_value(attributes, SpanAttributes.METADATA)
    if not isinstance(metadata, dict):
        return None
    node = metadata.get(_NODE)
    explicit = metadata.get(_AGENT_NAME)
    if isinstance(explicit, str) and explicit and (node is None or node == name):
        return explicit
    if not isinstance(node, str) or node != name:
        return None
    namespace = metadata.get(_NAMESPACE)
    if isinstance(namespace, str) and namespace:
        # LangGraph reserves "|" and ":" in node names, so the split is exact.
        outermost = namespace.split("|", 1)[0].split(":", 1)[0]
        if outermost:
            return outermost
    return node


def _json_value(
    attributes: Mapping[str, Any], key: str, mime_key: str | None = None
) -> object | None:
    """Parse a JSON string attribute (only if ``mime_key`` says it is JSON, when given)."""
    value = attributes.get(key)
    if not isinstance(value, str) or (mime_key is not None and attributes.get(mime_key) != _JSON):
        return None
    try:
        parsed: object = json.loads(value)
    except ValueError:
        return None
    return parsed
