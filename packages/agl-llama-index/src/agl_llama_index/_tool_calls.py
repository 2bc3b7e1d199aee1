"""agl's attributes of a LlamaIndex tool call's span: the arguments it got and what it returned.

openinference records a tool's ``acall`` (``call``) as a ``TOOL`` span with ``tool.name``; as
its input, the method's bound arguments as JSON, ``{"kwargs": {...}}`` (agents call tools with
keyword arguments only); as its output, the ``ToolOutput`` as JSON (``{"blocks": [{"text":
...}], "tool_name": ..., "raw_output": ...}``). Its GenAI attributes put the tool's parameter
schema in ``gen_ai.tool.call.arguments``. Read here, the span gets:

- ``agl.tool.arguments``, and ``gen_ai.tool.call.arguments`` in place of the schema: the keyword
  arguments as a JSON object (the positional ones as a JSON array, for a tool called that way),
  less those the schema (``tool.parameters``) does not declare: the workflow ``Context`` a
  ``FunctionTool`` passes a function that takes one (the ``handoff`` tool does) is not the
  model's;
- ``agl.tool.result``: the output's text, as ``ToolOutput.content`` gives it (its text blocks,
  one per line).

An input or output that is not what LlamaIndex writes (hidden by ``OPENINFERENCE_HIDE_INPUTS``,
say) is kept as :func:`agl.tracing.tool_attributes` keeps it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from opentelemetry.util import types

from agl import semconv
from agl.tracing import tool_attributes

__all__ = ["tool_call_attributes"]

_INPUT_VALUE = "input.value"
_OUTPUT_VALUE = "output.value"
_PARAMETERS = "tool.parameters"
_GEN_AI_TOOL_ARGUMENTS = "gen_ai.tool.call.arguments"


def tool_call_attributes(
    tool: str, attributes: Mapping[str, Any]
) -> dict[str, types.AttributeValue]:
    """agl's attributes of the span of a call of ``tool``, from openinference's."""
    out = tool_attributes(tool, attributes)
    arguments = _arguments(attributes.get(_INPUT_VALUE), attributes.get(_PARAMETERS))
    if arguments is not None:
        out[semconv.AGL_TOOL_ARGUMENTS] = arguments
        out[_GEN_AI_TOOL_ARGUMENTS] = arguments
    result = _result(attributes.get(_OUTPUT_VALUE))
    if result is not None:
        out[semconv.AGL_TOOL_RESULT] = result
    return out


def _arguments(value: Any, parameters: Any) -> str | None:
    bound = _json_object(value)
    if bound is None or set(bound) - {"args", "kwargs"}:
        return None
    args, kwargs = bound.get("args") or [], bound.get("kwargs") or {}
    if not isinstance(args, list) or not isinstance(kwargs, dict):
        return None
    declared = (_json_object(parameters) or {}).get("properties")
    if isinstance(declared, dict):
        kwargs = {name: value for name, value in kwargs.items() if name in declared}
    return json.dumps(args if args and not kwargs else kwargs)


def _result(value: Any) -> str | None:
    output = _json_object(value)
    blocks = output.get("blocks") if output is not None else None
    if not isinstance(blocks, list):
        return None
    # A text block's block_type is its default, which openinference leaves out.
    return "\n".join(
        b["text"] for b in blocks if isinstance(b, dict) and isinstance(b.get("text"), str)
    )


def _json_object(value: Any) -> dict[str, Any] | None:
    if not isinstance(value, str):
        return None
    try:
        parsed = json.loads(value)
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None
