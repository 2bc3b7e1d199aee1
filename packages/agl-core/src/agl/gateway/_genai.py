"""A chat call's messages in OpenTelemetry's GenAI conventions, for the gateway's spans.

``gen_ai.input.messages`` and ``gen_ai.output.messages`` hold JSON lists of ``{role, parts}``
messages; a part is ``{type: "text", content}``, ``{type: "tool_call", id, name, arguments}``
or ``{type: "tool_call_response", id, response}``; an output message also has its
``finish_reason``. Whatever wire a call came in on, these describe the chat the engine was
sent, so any GenAI-aware reader of the trace sees every call the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agl.openai_wire import content_text

__all__ = ["input_messages", "output_messages"]

JSON = dict[str, Any]


def _calls(message: Mapping[str, Any]) -> list[JSON]:
    parts = []
    for call in message.get("tool_calls") or []:
        if not isinstance(call, Mapping):
            continue
        function = call.get("function") or {}
        parts.append(
            {
                "type": "tool_call",
                "id": call.get("id"),
                "name": function.get("name"),
                "arguments": function.get("arguments"),
            }
        )
    return parts


def input_messages(messages: Any) -> list[JSON] | None:
    """A chat request's ``messages`` as GenAI input messages (None when there are none)."""
    if not isinstance(messages, list):
        return None
    out: list[JSON] = []
    for message in messages:
        if not isinstance(message, Mapping):
            continue
        role = message.get("role")
        text = content_text(message.get("content"))
        if role == "tool":
            part: JSON = {"type": "tool_call_response", "id": message.get("tool_call_id")}
            out.append({"role": "tool", "parts": [{**part, "response": text}]})
            continue
        parts: list[JSON] = [{"type": "text", "content": text}] if text else []
        out.append({"role": role, "parts": parts + _calls(message)})
    return out


def output_messages(response: Mapping[str, Any]) -> list[JSON] | None:
    """A chat response's choices as GenAI output messages (None when it has none)."""
    choices = response.get("choices")
    if not isinstance(choices, list) or not choices:
        return None
    out: list[JSON] = []
    for choice in choices:
        if not isinstance(choice, Mapping) or not isinstance(choice.get("message"), Mapping):
            continue
        message = choice["message"]
        text = content_text(message.get("content"))
        parts: list[JSON] = [{"type": "text", "content": text}] if text else []
        out.append(
            {
                "role": "assistant",
                "parts": parts + _calls(message),
                "finish_reason": choice.get("finish_reason"),
            }
        )
    return out or None
