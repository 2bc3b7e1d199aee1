"""The Messages API's content blocks, one by one: messages and tools to chat's, and back.

The rules (what maps to what, what is refused) are listed in :mod:`agl.openai_wire._messages`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, NoReturn

from agl.openai_wire._requests import WireError

JSON = dict[str, Any]

# Blocks of tools that run on Anthropic's service, and of its reasoning.
_SERVER_BLOCKS = {
    "server_tool_use",
    "web_search_tool_result",
    "web_fetch_tool_result",
    "code_execution_tool_result",
    "bash_code_execution_tool_result",
    "text_editor_code_execution_tool_result",
    "mcp_tool_use",
    "mcp_tool_result",
    "container_upload",
    "tool_search_tool_result",
}
_THINKING = {"thinking", "redacted_thinking"}


def chat_messages(system: Any, messages: Any) -> list[JSON]:
    """``system`` and ``messages`` as chat messages."""
    out: list[JSON] = []
    if system is not None:
        text = _system_text(system)
        if text:
            out.append({"role": "system", "content": text})
    if not isinstance(messages, list) or not messages:
        raise WireError("messages: must be a non-empty list of messages", field="messages")
    calls: set[str] = set()
    for index, message in enumerate(messages):
        where = f"messages.{index}"
        if not isinstance(message, Mapping):
            raise WireError(f"{where}: must be an object", field=where)
        role = message.get("role")
        if role not in ("user", "assistant", "system"):
            raise WireError(
                f"{where}.role: must be 'user', 'assistant' or 'system' (got {role!r})",
                field=f"{where}.role",
            )
        content = message.get("content")
        if isinstance(content, str):
            out.append({"role": role, "content": content})
            continue
        if role == "system":  # as Claude Code sends its environment
            out.append({"role": "system", "content": _system_text(content, f"{where}.content")})
            continue
        if not isinstance(content, list):
            raise WireError(
                f"{where}.content: must be a string or a list of content blocks",
                field=f"{where}.content",
            )
        if role == "assistant":
            out.append(_assistant(content, where, calls))
        else:
            out += _user(content, where, calls)
    return out


def _system_text(system: Any, where: str = "system") -> str:
    if isinstance(system, str):
        return system
    if not isinstance(system, list):
        raise WireError(f"{where}: must be a string or a list of text blocks", field=where)
    texts = []
    for index, block in enumerate(system):
        if not isinstance(block, Mapping) or block.get("type") != "text":
            raise WireError(f"{where}.{index}: must be a text block", field=f"{where}.{index}")
        texts.append(_text(block, f"{where}.{index}"))
    return "\n".join(texts)


def _text(block: Mapping[str, Any], where: str) -> str:
    text = block.get("text")
    if not isinstance(text, str):
        raise WireError(f"{where}.text: must be a string", field=f"{where}.text")
    return text


def _refuse_special(kind: Any, where: str) -> NoReturn:
    if kind in _THINKING:
        raise WireError(
            f"{where}: {kind} blocks are not supported: an open engine does not take reasoning "
            "back; leave them out of the history",
            field=where,
        )
    if kind in _SERVER_BLOCKS:
        raise WireError(
            f"{where}: {kind} blocks come from server tools that run on Anthropic's service, "
            "not on an open engine",
            field=where,
        )
    raise WireError(f"{where}: unknown content block type {kind!r}", field=f"{where}.type")


def _part(block: Mapping[str, Any], where: str) -> JSON:
    """A ``text``, ``image`` or plain-text ``document`` block as a chat content part."""
    kind = block.get("type")
    if kind == "text":
        return {"type": "text", "text": _text(block, where)}
    if kind not in ("image", "document"):
        _refuse_special(kind, where)
    source = block.get("source")
    if not isinstance(source, Mapping):
        raise WireError(f"{where}.source: must be an object", field=f"{where}.source")
    if kind == "image":
        if source.get("type") == "base64":
            url = f"data:{source.get('media_type')};base64,{source.get('data')}"
        elif source.get("type") == "url" and isinstance(source.get("url"), str):
            url = source["url"]
        else:
            raise WireError(
                f"{where}.source: an image source must be base64 or a URL (file ids are not "
                "supported)",
                field=f"{where}.source",
            )
        return {"type": "image_url", "image_url": {"url": url}}
    if source.get("type") == "text" and isinstance(source.get("data"), str):  # a document
        return {"type": "text", "text": source["data"]}
    raise WireError(
        f"{where}: only plain-text documents are supported (got a {source.get('type')!r} "
        "source): send PDFs as their text",
        field=where,
    )


def _content(parts: list[JSON]) -> str | list[JSON]:
    if all(part["type"] == "text" for part in parts):
        return "".join(part["text"] for part in parts)
    return parts


def _assistant(content: list[Any], where: str, calls: set[str]) -> JSON:
    parts: list[JSON] = []
    tool_calls: list[JSON] = []
    for index, block in enumerate(content):
        at = f"{where}.content.{index}"
        if not isinstance(block, Mapping):
            raise WireError(f"{at}: must be an object", field=at)
        if block.get("type") == "tool_use":
            call_id, name = block.get("id"), block.get("name")
            if not isinstance(call_id, str) or not call_id:
                raise WireError(f"{at}.id: must be a non-empty string", field=f"{at}.id")
            if not isinstance(name, str) or not name:
                raise WireError(f"{at}.name: must be a non-empty string", field=f"{at}.name")
            arguments = json.dumps(block.get("input", {}), ensure_ascii=False)
            tool_calls.append(
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": name, "arguments": arguments},
                }
            )
            calls.add(call_id)
        elif block.get("type") == "tool_result":
            raise WireError(f"{at}: tool_result blocks belong in user messages", field=at)
        else:
            parts.append(_part(block, at))
    message: JSON = {"role": "assistant", "content": _content(parts) if parts else None}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return message


def _user(content: list[Any], where: str, calls: set[str]) -> list[JSON]:
    results: list[JSON] = []
    parts: list[JSON] = []
    for index, block in enumerate(content):
        at = f"{where}.content.{index}"
        if not isinstance(block, Mapping):
            raise WireError(f"{at}: must be an object", field=at)
        if block.get("type") == "tool_result":
            results.append(_tool_result(block, at, calls))
        elif block.get("type") == "tool_use":
            raise WireError(f"{at}: tool_use blocks belong in assistant messages", field=at)
        else:
            parts.append(_part(block, at))
    out = results
    if parts or not results:
        out.append({"role": "user", "content": _content(parts)})
    return out


def _tool_result(block: Mapping[str, Any], where: str, calls: set[str]) -> JSON:
    call_id = block.get("tool_use_id")
    if not isinstance(call_id, str) or call_id not in calls:
        raise WireError(
            f"{where}.tool_use_id: {call_id!r} answers no tool_use block earlier in the "
            "conversation",
            field=f"{where}.tool_use_id",
        )
    content = block.get("content", "")
    if isinstance(content, list):
        parts = [_part(part, f"{where}.content.{i}") for i, part in enumerate(content)]
        text = "".join(p["text"] for p in parts if p["type"] == "text")
        if any(p["type"] != "text" for p in parts):
            raise WireError(
                f"{where}.content: images in tool results are not supported by chat tool messages",
                field=f"{where}.content",
            )
        content = text
    if not isinstance(content, str):
        raise WireError(
            f"{where}.content: must be a string or a list of text blocks",
            field=f"{where}.content",
        )
    if block.get("is_error"):
        content = f"Error: {content}"
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def chat_tools(tools: Any) -> list[JSON]:
    """Client ``tools`` as chat function tools; server tools are refused."""
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise WireError("tools: must be a list of tools", field="tools")
    out = []
    for index, tool in enumerate(tools):
        where = f"tools.{index}"
        if not isinstance(tool, Mapping):
            raise WireError(f"{where}: must be an object", field=where)
        kind = tool.get("type")
        if kind not in (None, "custom"):
            raise WireError(
                f"{where}: {kind!r} is a server tool of Anthropic's service: only client "
                "tools (name, description, input_schema) are supported",
                field=where,
            )
        name, schema = tool.get("name"), tool.get("input_schema")
        if not isinstance(name, str) or not name:
            raise WireError(f"{where}.name: must be a non-empty string", field=f"{where}.name")
        if not isinstance(schema, Mapping):
            raise WireError(
                f"{where}.input_schema: Field required (a JSON schema object)",
                field=f"{where}.input_schema",
            )
        function: JSON = {"name": name, "parameters": dict(schema)}
        if isinstance(tool.get("description"), str):
            function["description"] = tool["description"]
        out.append({"type": "function", "function": function})
    return out


def chat_tool_choice(choice: Any, tools: list[JSON]) -> JSON:
    """``tool_choice`` as chat's ``tool_choice`` (and ``parallel_tool_calls``)."""
    if not isinstance(choice, Mapping):
        raise WireError("tool_choice: must be an object with a 'type'", field="tool_choice")
    kind = choice.get("type")
    out: JSON = {}
    if kind == "auto":
        out["tool_choice"] = "auto"
    elif kind == "any":
        out["tool_choice"] = "required"
    elif kind == "none":
        out["tool_choice"] = "none"
    elif kind == "tool":
        name = choice.get("name")
        if not isinstance(name, str) or name not in {tool["function"]["name"] for tool in tools}:
            raise WireError(
                f"tool_choice.name: {name!r} is not one of the tools", field="tool_choice.name"
            )
        out["tool_choice"] = {"type": "function", "function": {"name": name}}
    else:
        raise WireError(
            f"tool_choice.type: must be auto, any, tool or none (got {kind!r})",
            field="tool_choice.type",
        )
    if choice.get("disable_parallel_tool_use"):
        out["parallel_tool_calls"] = False
    return out


def tool_use_block(call_id: str, name: str, arguments: str) -> JSON | None:
    """A ``tool_use`` block; None when the arguments are not a JSON object."""
    try:
        value = json.loads(arguments) if arguments.strip() else {}
    except (ValueError, RecursionError):
        return None
    if not isinstance(value, dict):
        return None
    return {"type": "tool_use", "id": call_id, "name": name, "input": value}
