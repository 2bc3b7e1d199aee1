"""A stand-in for a real model: plays the model behind Claude Code and the Codex CLI.

A model small enough to build here cannot drive these programs, so agl's scripted
OpenAI-compatible server (:class:`~agl.testing.openai_server.OpenAIServer`, vLLM's wire with
token ids) answers instead. The gateway turns each program's request (Anthropic Messages from
Claude Code, the OpenAI Responses API from Codex) into the chat request the script sees, and
the script's reply back into the program's wire. For a task "Create a file named NAME
containing the single line: LINE" it answers:

1. with a call of the program's shell tool (Claude Code's ``Bash``, Codex's ``exec_command``)
   that writes the file: the right line, or, on every second task it sees, a wrong one, so
   the samples of a task differ in reward (what a group baseline learns from);
2. once the tool's result is in the conversation, with a short final text.
"""

from __future__ import annotations

import re
import shlex
import threading
from collections.abc import Callable
from typing import Any

from agl.testing.openai_server import Reply, ToolCall, text_reply

__all__ = ["TASK", "script", "task"]

TASK = "Create a file named {name} containing the single line: {line}"
"""The tasks' wording, which the script reads back."""

_TASK = re.compile(r"Create a file named (\S+) containing the single line: ([^\n<]+)")


def task(harness: str, name: str, line: str) -> dict[str, str]:
    """A task for ``harness`` (``"claude-code"`` or ``"codex"``): write ``line`` into ``name``."""
    return {
        "harness": harness,
        "prompt": TASK.format(name=name, line=line),
        "file": name,
        "line": line,
    }


def _texts(request: dict[str, Any]) -> str:
    parts = []
    for message in request.get("messages") or []:
        content = message.get("content")
        if isinstance(content, list):
            parts += [str(part.get("text", "")) for part in content if isinstance(part, dict)]
        else:
            parts.append(str(content or ""))
    return "\n".join(parts)


def script() -> Callable[[dict[str, Any]], Reply]:
    """The server's script (a fresh one counts the tasks it sees from zero)."""
    seen = 0
    lock = threading.Lock()

    def answer(request: dict[str, Any]) -> Reply:
        nonlocal seen
        messages = request.get("messages") or []
        if any(message.get("role") == "tool" for message in messages):
            return text_reply("Done: the file is written.")
        found = _TASK.search(_texts(request))
        if found is None:
            return text_reply("I see no file to write.")
        name, line = found.group(1), found.group(2).strip()
        with lock:
            seen += 1
            if seen % 2 == 0:
                line = "a wrong line"
        command = f"printf '%s\\n' {shlex.quote(line)} > {shlex.quote(name)}"
        tools = {tool.get("function", {}).get("name") for tool in request.get("tools") or []}
        if "Bash" in tools:  # Claude Code
            call = ToolCall("Bash", {"command": command, "description": f"Write {name}"})
        elif "exec_command" in tools:  # the Codex CLI
            call = ToolCall("exec_command", {"cmd": command})
        else:
            return text_reply(f"No shell tool among {sorted(t for t in tools if t)}.")
        return Reply(tool_calls=(call,))

    return answer
