"""Read hermes-style tool calls out of generated text.

Models trained on ChatML with tools (Qwen, Hermes, :mod:`agl_torch.tiny`) call a function by
writing ``<tool_call>{"name": "calculator", "arguments": {"expression": "12*7"}}</tool_call>``,
possibly several times in one reply. :func:`parse_tool_calls` finds those calls the way vLLM's
``hermes`` tool parser does, with one difference that matters for training: the arguments are
returned as the exact JSON text the model generated (a slice of the reply), not re-serialized,
so a chat template that renders the call back writes the same characters and the same tokens.

A reply is read all or nothing: if any call is malformed (not JSON, not an object with a string
``name`` and an object ``arguments``, or text after an unclosed call) the reply has no calls and
all of it is content, as the model wrote it.
"""

from __future__ import annotations

import json
from typing import NamedTuple

__all__ = ["TOOL_CALL_END", "TOOL_CALL_START", "ToolCall", "parse_tool_calls"]

TOOL_CALL_START = "<tool_call>"
"""Opens a tool call."""
TOOL_CALL_END = "</tool_call>"
"""Closes a tool call (the last call of a reply may leave it out, as vLLM allows)."""

_DECODER = json.JSONDecoder()
_SPACE = " \t\n\r"


class ToolCall(NamedTuple):
    """One function call: its name and its arguments as the JSON text the model wrote."""

    name: str
    arguments: str


def parse_tool_calls(text: str) -> tuple[str | None, list[ToolCall]]:
    """Split generated text into its content and its tool calls.

    Args:
        text: What the model generated (special tokens removed; the tool-call markers kept).

    Returns:
        ``(content, calls)``. With calls, ``content`` is the text before the first call
        (``None`` if that is empty; text between and after calls is dropped, as vLLM does).
        Without calls (none written, or one malformed) ``content`` is all of ``text``
        (``None`` if empty) and ``calls`` is empty.
    """
    start = text.find(TOOL_CALL_START)
    if start < 0:
        return text or None, []
    calls: list[ToolCall] = []
    at = start
    while at >= 0:
        body_start = at + len(TOOL_CALL_START)
        end = text.find(TOOL_CALL_END, body_start)
        call = _read_call(text[body_start : end if end >= 0 else len(text)])
        if call is None:
            return text or None, []
        calls.append(call)
        if end < 0:
            break
        at = text.find(TOOL_CALL_START, end + len(TOOL_CALL_END))
    return text[:start] or None, calls


def _read_call(body: str) -> ToolCall | None:
    """One call's JSON object, its ``arguments`` kept as text; ``None`` if malformed."""
    try:
        call = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if not (
        isinstance(call, dict)
        and isinstance(call.get("name"), str)
        and isinstance(call.get("arguments"), dict)
    ):
        return None
    return ToolCall(call["name"], _arguments_text(body))


def _arguments_text(body: str) -> str:
    """The text of the ``arguments`` value in ``body``, a valid JSON object that has one.

    Walks the object's members with the JSON decoder, which reports where each value ends; the
    last ``arguments`` member wins, as it does in :func:`json.loads`.
    """
    found = ""
    at = _skip_space(body, _skip_space(body, 0) + 1)  # past "{"
    while not body.startswith("}", at):
        key, at = _DECODER.raw_decode(body, at)
        start = _skip_space(body, _skip_space(body, at) + 1)  # past ":"
        _, at = _DECODER.raw_decode(body, start)
        if key == "arguments":
            found = body[start:at]
        at = _skip_space(body, at)
        at = _skip_space(body, at + 1) if body.startswith(",", at) else at
    return found


def _skip_space(text: str, at: int) -> int:
    while at < len(text) and text[at] in _SPACE:
        at += 1
    return at
