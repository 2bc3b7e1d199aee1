"""Whether an LLM call continues its agent's previous call: in token ids, and in messages.

Trajectory merging rests on one assumption: a later call of a conversation sees the earlier
prompt and answer again, token for token, so its prompt ids *extend* the previous call's prompt
+ response ids (:func:`first_difference` is None). A harness or a chat template that re-renders
the history breaks it while the conversation goes on:

- *dropped reasoning*: the template (or the harness) leaves an earlier answer's reasoning out,
  so the answer comes back as its text alone, in other tokens than the model sampled;
- *compaction*: earlier turns are replaced by a summary, the opening and recent turns kept;
- *edited tool results*: an earlier tool result is truncated or rewritten.

Token ids alone cannot tell such a call from a new conversation started by the same agent (a
sub-task, the next question): in both, the prompt does not extend. The messages can.
:func:`same_conversation` says the call continues the previous call's conversation when its
messages

1. open as the previous request's did: the same system (or developer) messages and the same
   first message after them, compared by role and text;
2. are not the previous request again, nor a part of it (a retry, a resample, a step back to
   an earlier turn); and
3. hold the previous call's answer after that opening: an assistant message with the answer's
   text (reasoning left out: a ``<think>`` block, ``reasoning_content``) and its tool calls
   (arguments compared as JSON).

A call that continues the conversation by its messages but not by its ids has a re-rendered
history (LightningRL counts it as ``prefix_mismatch``). Compaction that rewrites the opening
(a summary as the new first user message) or summarizes the previous answer away reads as a
new conversation: either way the call is trained on its own, only the count differs.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from agl.lightning._calls import LLMCall

__all__ = ["first_difference", "same_conversation"]

_OPENING_ROLES = frozenset({"system", "developer"})
_END_OF_REASONING = "</think>"

Key = tuple[str, str, tuple[tuple[str, str], ...]]
"""A message as compared: role, text (reasoning left out), tool calls (name, JSON arguments)."""


def first_difference(previous: LLMCall, call: LLMCall) -> int | None:
    """Where ``call``'s prompt ids stop following ``previous``'s prompt + response ids: the
    first differing position (or the prompt's end, when it is shorter); None when they extend
    them. Both calls must have token ids."""
    prompt = call.prompt_ids or []
    head = previous.prompt_ids or []
    tail = previous.response_ids or []
    seen = len(head) + len(tail)
    if len(prompt) >= seen and prompt[: len(head)] == head and prompt[len(head) : seen] == tail:
        return None
    for position, (got, expected) in enumerate(zip(prompt, [*head, *tail], strict=False)):
        if got != expected:
            return position
    return min(len(prompt), seen)


def same_conversation(previous: LLMCall, call: LLMCall) -> bool | None:
    """Whether ``call`` continues the conversation of ``previous`` (its agent's previous call)
    by the rule in this module's docstring; None when it cannot tell: a request without
    messages (the completions wire, a call no gateway recorded) or an unrecorded answer."""
    before, now = previous.messages(), call.messages()
    answer = _meaningful(_answer(previous.response))
    if before is None or now is None or answer is None:
        return None
    old = [_key(message) for message in before]
    new = [_key(message) for message in now]
    opening = _opening(old)
    if not opening or new[: len(opening)] != opening:
        return False
    if new == old[: len(new)]:
        return False
    return answer in new[len(opening) :]


def _opening(keys: Sequence[Key]) -> list[Key]:
    """The system (or developer) messages a conversation opens with, and the message after."""
    for index, key in enumerate(keys):
        if key[0] not in _OPENING_ROLES:
            return list(keys[: index + 1])
    return list(keys)


def _key(message: Any) -> Key:
    if not isinstance(message, dict):
        return ("", _text(message), ())
    role = str(message.get("role", ""))
    calls = []
    for call in message.get("tool_calls") or []:
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict):
            calls.append((str(function.get("name", "")), _arguments(function.get("arguments"))))
    return (role, _text(message.get("content")), tuple(calls))


def _answer(response: str | None) -> Key | None:
    """The answer of a recorded response, as an assistant message of the next request would
    carry it; None when not recorded. Chat completions responses are what the gateway records;
    Responses API and Anthropic Messages bodies are read too."""
    if response is None:
        return None
    try:
        body = json.loads(response)
    except ValueError:
        return None
    if not isinstance(body, dict):
        return None
    choices = body.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        message = choices[0].get("message")
        return _key({**message, "role": "assistant"}) if isinstance(message, dict) else None
    texts: list[str] = []
    calls: list[tuple[str, str]] = []
    if isinstance(body.get("output"), list):  # the Responses API
        for item in body["output"]:
            if not isinstance(item, dict):
                continue
            if item.get("type") == "message":
                texts.append(_text(item.get("content")))
            elif item.get("type") == "function_call":
                calls.append((str(item.get("name", "")), _arguments(item.get("arguments"))))
    elif isinstance(body.get("content"), list):  # Anthropic Messages
        for block in body["content"]:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "text":
                texts.append(str(block.get("text", "")))
            elif block.get("type") == "tool_use":
                calls.append((str(block.get("name", "")), _arguments(block.get("input"))))
    else:
        return None
    return ("assistant", _text("".join(texts)), tuple(calls))


def _meaningful(answer: Key | None) -> Key | None:
    """An answer with text or tool calls; an empty one would match any empty message."""
    return answer if answer is not None and (answer[1] or answer[2]) else None


def _text(content: Any) -> str:
    """A message's text as compared: reasoning before a closing ``</think>`` left out,
    surrounding whitespace too (templates differ in both)."""
    if isinstance(content, list):  # content parts: their text, joined
        content = "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    text = content if isinstance(content, str) else "" if content is None else str(content)
    if _END_OF_REASONING in text:
        text = text.rsplit(_END_OF_REASONING, 1)[1]
    return text.strip()


def _arguments(arguments: Any) -> str:
    """Tool-call arguments as canonical JSON (a harness may re-serialize them)."""
    if isinstance(arguments, str):
        text = arguments
        try:
            arguments = json.loads(text)
        except ValueError:
            return text.strip()
    return json.dumps(arguments, sort_keys=True, separators=(",", ":"))
