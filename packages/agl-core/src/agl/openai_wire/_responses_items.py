"""The Responses API's items, one by one: input items to chat messages, chat answers to output.

The rules (what maps to what, what is refused) are listed in :mod:`agl.openai_wire._responses`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agl.openai_wire._bodies import now
from agl.openai_wire._requests import WireError
from agl.openai_wire._translate import ChatAnswer, ToolCallPart

JSON = dict[str, Any]

# Items and tools that only OpenAI's hosted service runs: no open engine has them.
_HOSTED_ITEMS = {
    "web_search_call",
    "file_search_call",
    "computer_call",
    "computer_call_output",
    "code_interpreter_call",
    "image_generation_call",
    "local_shell_call",
    "local_shell_call_output",
    "shell_call",
    "shell_call_output",
    "apply_patch_call",
    "apply_patch_call_output",
    "mcp_call",
    "mcp_list_tools",
    "mcp_approval_request",
    "mcp_approval_response",
    "custom_tool_call",
    "custom_tool_call_output",
}
_ROLES = {"user": "user", "system": "system", "developer": "system", "assistant": "assistant"}


# --- requests --------------------------------------------------------------------------------


def chat_messages(instructions: Any, given: Any) -> list[JSON]:
    """``instructions`` and ``input`` as chat messages."""
    messages: list[JSON] = []
    if instructions is not None:
        if not isinstance(instructions, str):
            raise WireError("'instructions' must be a string", field="instructions")
        if instructions:
            messages.append({"role": "system", "content": instructions})
    if isinstance(given, str):
        return [*messages, {"role": "user", "content": given}]
    if not isinstance(given, list):
        raise WireError("'input' must be a string or a list of input items", field="input")
    calls: set[str] = set()
    for index, item in enumerate(given):
        where = f"input[{index}]"
        if not isinstance(item, Mapping):
            raise WireError(f"'{where}' must be an object (got {item!r})", field=where)
        kind = item.get("type", "message")
        if kind == "message":
            messages.append(_message(item, where))
        elif kind == "function_call":
            call = _function_call(item, where)
            calls.add(call["id"])
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant" and "tool_call_id" not in last:
                last.setdefault("tool_calls", []).append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            messages.append(_function_output(item, where, calls))
        elif kind == "reasoning":
            raise WireError(
                f"'{where}' is a reasoning item, which no open engine takes back: leave "
                "reasoning items out of 'input'",
                field=where,
            )
        elif kind == "item_reference":
            raise WireError(
                f"'{where}' is an item_reference: the gateway stores no items, send the item "
                "itself",
                field=where,
            )
        elif kind in _HOSTED_ITEMS:
            raise WireError(
                f"'{where}' is a {kind} item, from a built-in tool no open engine runs: use "
                "function tools",
                field=where,
            )
        else:
            raise WireError(f"'{where}' has an unknown type {kind!r}", field=f"{where}.type")
    if not messages:
        raise WireError("'input' is empty: give at least one message", field="input")
    return messages


def _message(item: Mapping[str, Any], where: str) -> JSON:
    role = item.get("role")
    if role not in _ROLES:
        raise WireError(
            f"'{where}.role' must be user, assistant, system or developer (got {role!r})",
            field=f"{where}.role",
        )
    content = item.get("content")
    if isinstance(content, str):
        return {"role": _ROLES[role], "content": content}
    if not isinstance(content, list):
        raise WireError(
            f"'{where}.content' must be a string or a list of content parts",
            field=f"{where}.content",
        )
    parts: list[JSON] = []
    for at, part in enumerate(content):
        field = f"{where}.content[{at}]"
        kind = part.get("type") if isinstance(part, Mapping) else None
        if kind in ("input_text", "output_text", "text"):
            text = part.get("text")
            if not isinstance(text, str):
                raise WireError(f"'{field}.text' must be a string", field=f"{field}.text")
            parts.append({"type": "text", "text": text})
        elif kind == "refusal":
            parts.append({"type": "text", "text": str(part.get("refusal", ""))})
        elif kind == "input_image":
            url = part.get("image_url")
            if not isinstance(url, str) or not url:
                raise WireError(
                    f"'{field}' must carry an 'image_url' (a URL or a data URL): images by "
                    "file_id are not supported",
                    field=field,
                )
            image = {"url": url, **({"detail": part["detail"]} if part.get("detail") else {})}
            parts.append({"type": "image_url", "image_url": image})
        else:
            raise WireError(
                f"'{field}' has type {kind!r}: a message part must be input_text, output_text, "
                "refusal or input_image (input_file and input_audio are not supported)",
                field=field,
            )
    if all(part["type"] == "text" for part in parts):
        return {"role": _ROLES[role], "content": "".join(part["text"] for part in parts)}
    return {"role": _ROLES[role], "content": parts}


def _function_call(item: Mapping[str, Any], where: str) -> JSON:
    call_id, name, arguments = item.get("call_id"), item.get("name"), item.get("arguments")
    for key, value in (("call_id", call_id), ("name", name), ("arguments", arguments)):
        if not isinstance(value, str) or (key != "arguments" and not value):
            raise WireError(f"'{where}.{key}' must be a string", field=f"{where}.{key}")
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def _function_output(item: Mapping[str, Any], where: str, calls: set[str]) -> JSON:
    call_id = item.get("call_id")
    if not isinstance(call_id, str) or call_id not in calls:
        raise WireError(
            f"'{where}' answers call_id {call_id!r}, which no function_call before it in "
            "'input' has",
            field=f"{where}.call_id",
        )
    output = item.get("output")
    if isinstance(output, list):
        texts = [p.get("text") for p in output if isinstance(p, Mapping)]
        if not all(isinstance(t, str) for t in texts) or len(texts) != len(output):
            raise WireError(
                f"'{where}.output' must be a string or a list of input_text parts",
                field=f"{where}.output",
            )
        output = "".join(str(t) for t in texts)
    if not isinstance(output, str):
        raise WireError(f"'{where}.output' must be a string", field=f"{where}.output")
    return {"role": "tool", "tool_call_id": call_id, "content": output}


def chat_tools(tools: Any) -> list[JSON]:
    """Function ``tools`` (and those of ``namespace`` groups, by their own names) as chat
    tools; any built-in tool is refused."""
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise WireError("'tools' must be a list of tools", field="tools")
    out: list[JSON] = []
    for index, tool in enumerate(tools):
        where = f"tools[{index}]"
        kind = tool.get("type") if isinstance(tool, Mapping) else None
        if kind == "namespace":
            group = tool.get("tools")
            if not isinstance(group, list):
                raise WireError(f"'{where}.tools' must be a list", field=f"{where}.tools")
            out += [_function(t, f"{where}.tools[{i}]") for i, t in enumerate(group)]
        else:
            out.append(_function(tool, where))
    names = [tool["function"]["name"] for tool in out]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise WireError(f"'tools' name {twice[0]!r} more than once", field="tools")
    return out


def _function(tool: Any, where: str) -> JSON:
    kind = tool.get("type") if isinstance(tool, Mapping) else None
    if kind != "function":
        raise WireError(
            f"'{where}' is a {kind!r} tool: only function tools are supported (built-in "
            "tools run on OpenAI's service, not on an open engine)",
            field=where,
        )
    name = tool.get("name")
    if not isinstance(name, str) or not name:
        raise WireError(f"'{where}.name' must be a non-empty string", field=f"{where}.name")
    function: JSON = {"name": name, "parameters": tool.get("parameters") or {}}
    if tool.get("description") is not None:
        function["description"] = tool["description"]
    if tool.get("strict") is not None:
        function["strict"] = tool["strict"]
    return {"type": "function", "function": function}


def namespaces(tools: Any) -> dict[str, str]:
    """The namespace of each function offered in a ``namespace`` group, by function name."""
    out: dict[str, str] = {}
    for tool in tools if isinstance(tools, list) else []:
        if isinstance(tool, Mapping) and tool.get("type") == "namespace":
            for inner in tool.get("tools") or []:
                if isinstance(inner, Mapping) and isinstance(inner.get("name"), str):
                    out[inner["name"]] = str(tool.get("name"))
    return out


def chat_tool_choice(choice: Any, tools: list[JSON]) -> Any:
    """``tool_choice`` as chat's; a choice chat cannot carry is refused, never downgraded."""
    if choice in ("auto", "none", "required"):
        return choice
    if isinstance(choice, Mapping) and choice.get("type") == "function":
        name = choice.get("name")
        if not isinstance(name, str) or name not in {tool["function"]["name"] for tool in tools}:
            raise WireError(
                f"'tool_choice' names function {name!r}, which is not in 'tools'",
                field="tool_choice",
            )
        return {"type": "function", "function": {"name": name}}
    raise WireError(
        f"'tool_choice' {choice!r} is not supported: use 'auto', 'none', 'required' or "
        "{'type': 'function', 'name': ...}",
        field="tool_choice",
    )


def chat_response_format(text: Any) -> JSON | None:
    """``text.format`` as chat's ``response_format`` (None for plain text)."""
    if text is None:
        return None
    if not isinstance(text, Mapping):
        raise WireError("'text' must be an object", field="text")
    fmt = text.get("format")
    if fmt is None or (isinstance(fmt, Mapping) and fmt.get("type") == "text"):
        return None
    if isinstance(fmt, Mapping) and fmt.get("type") == "json_object":
        return {"type": "json_object"}
    if isinstance(fmt, Mapping) and fmt.get("type") == "json_schema":
        schema = {k: fmt[k] for k in ("name", "schema", "strict", "description") if k in fmt}
        return {"type": "json_schema", "json_schema": schema}
    raise WireError(f"'text.format' {fmt!r} is not supported", field="text.format")


# --- answers ---------------------------------------------------------------------------------


def _suffix(chat_id: str) -> str:
    return chat_id.removeprefix("chatcmpl-").replace("-", "")


def message_item(chat_id: str, index: int, text: str, *, status: str = "completed") -> JSON:
    """An assistant message output item with one ``output_text`` part."""
    part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
    return {
        "id": f"msg_{_suffix(chat_id)}{index}",
        "type": "message",
        "role": "assistant",
        "status": status,
        "content": [part],
    }


def function_call_item(
    call: ToolCallPart, *, status: str = "completed", namespace: str | None = None
) -> JSON:
    """A ``function_call`` output item; its ``call_id`` is the engine's tool call id."""
    item = {
        "id": f"fc_{_suffix(call.id)}",
        "type": "function_call",
        "call_id": call.id,
        "name": call.name,
        "arguments": call.arguments,
        "status": status,
    }
    if namespace is not None:
        item["namespace"] = namespace
    return item


def text_logprobs(entries: list[JSON]) -> list[JSON]:
    """Chat logprobs entries as an ``output_text`` part's (the same shape)."""
    return [
        {
            "token": e.get("token"),
            "logprob": e.get("logprob"),
            "bytes": e.get("bytes") or [],
            "top_logprobs": e.get("top_logprobs") or [],
        }
        for e in entries
    ]


def output_items(
    answer: ChatAnswer, logprobs: bool, groups: Mapping[str, str] | None = None
) -> list[JSON]:
    """The ``output`` of a whole answer: the text as a message, then each function call
    (``groups``: the namespace of functions offered in one, by name)."""
    output: list[JSON] = []
    if answer.text or not answer.tool_calls:
        status = "incomplete" if answer.finish_reason == "length" else "completed"
        item = message_item(answer.id, 0, answer.text, status=status)
        if logprobs:
            item["content"][0]["logprobs"] = text_logprobs(answer.logprobs)
        output.append(item)
    groups = groups or {}
    output += [
        function_call_item(call, namespace=groups.get(call.name)) for call in answer.tool_calls
    ]
    return output


def response_object(
    response_id: str,
    request: Mapping[str, Any],
    answer: ChatAnswer,
    output: list[JSON],
    status: str | None = None,
    created: int | None = None,
) -> JSON:
    """A ``response`` object; ``status`` defaults to what the answer's finish reason says."""
    if status is None:
        status = "incomplete" if answer.finish_reason == "length" else "completed"
    done = status in ("completed", "incomplete")
    usage = None
    if done:
        prompt, made = answer.prompt_tokens or 0, answer.completion_tokens or 0
        usage = {
            "input_tokens": prompt,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": made,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": prompt + made,
        }
    return {
        "id": response_id,
        "object": "response",
        "created_at": created if created is not None else now(),
        "model": answer.model or request.get("model") or "",
        "status": status,
        "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
        "instructions": request.get("instructions"),
        "metadata": request.get("metadata") or {},
        "output": output,
        "parallel_tool_calls": request.get("parallel_tool_calls", True),
        "temperature": request.get("temperature"),
        "tool_choice": request.get("tool_choice", "auto"),
        "tools": request.get("tools") or [],
        "top_p": request.get("top_p"),
        "background": False,
        "max_output_tokens": request.get("max_output_tokens"),
        "previous_response_id": None,
        "reasoning": None,
        "service_tier": "default",
        "store": False,  # nothing is kept to be fetched by id later
        "text": request.get("text") or {"format": {"type": "text"}},
        "top_logprobs": request.get("top_logprobs"),
        "truncation": "disabled",
        "user": request.get("user"),
        "usage": usage,
    }
