"""Runs as the optimizer reads them: what the agent sent and received, its tools, its reward.

APO shows the optimizer model the worst runs of a prompt. An :class:`Example` is one rollout
read back from its trace: the task, the reward (or the error), and for each LLM call of the
optimized agents the messages the agent sent, the reply, and the tool calls the model asked
for, plus the tool spans the agent recorded. The messages come from the gateway's record of the
request when the call went through agl's gateway, else from the instrumented span's
``gen_ai.input.messages`` / ``gen_ai.output.messages``.

Only the calls of the agents APO optimizes are read (in a per-agent run, ``batch.calls`` holds
only those; for rollouts APO runs itself, the calls of the same agents are kept).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import JsonValue

from agl import RolloutResult, Span, semconv
from agl.lightning import LLMCall

__all__ = ["Example", "Turn", "examples_from", "render_examples", "worst"]

_MESSAGE_CHARS = 800
_TOOL_SPANS = 10
_CALL = "tool call "
_OUTPUT = semconv.GEN_AI_OUTPUT_MESSAGES


@dataclass
class Turn:
    """One LLM call: the messages sent (``role``, text), the reply, the tool calls asked for."""

    agent: str | None
    messages: list[tuple[str, str]]
    reply: str | None
    tool_calls: list[str] = field(default_factory=list)


@dataclass
class Example:
    """One rollout as the optimizer sees it."""

    rollout_id: str
    task: JsonValue
    reward: float | None
    error: str | None
    turns: list[Turn] = field(default_factory=list)
    tools: list[str] = field(default_factory=list)

    def render(self, index: int, max_chars: int) -> str:
        """The example as text, at most about ``max_chars`` characters."""
        reward = "none" if self.reward is None else f"{self.reward:.3g}"
        lines = [f"### Run {index}: reward {reward}" + (f" ({self.error})" if self.error else "")]
        lines.append(f"Task: {_json(self.task)}")
        for number, turn in enumerate(self.turns, 1):
            who = f" by agent {turn.agent}" if turn.agent else ""
            lines.append(f"LLM call {number}{who}:")
            lines.extend(f"  [{role}] {_cut(text, _MESSAGE_CHARS)}" for role, text in turn.messages)
            if turn.reply is not None:
                lines.append(f"  [reply] {_cut(turn.reply, _MESSAGE_CHARS)}")
            lines.extend(f"  [tool call] {_cut(call, _MESSAGE_CHARS)}" for call in turn.tool_calls)
        if self.tools:
            lines.append("Tools run:")
            lines.extend(f"  {_cut(tool, _MESSAGE_CHARS)}" for tool in self.tools)
        return _cut("\n".join(lines), max_chars)


def examples_from(
    results: Sequence[RolloutResult],
    calls: Iterable[LLMCall] | None = None,
    *,
    agents: Collection[str | None] | None = None,
) -> list[Example]:
    """Read one :class:`Example` per rollout.

    Args:
        results: The rollouts.
        calls: Their LLM calls already read and selected (a step's ``batch.calls``); None to
            read them from the spans, keeping those of ``agents``.
        agents: The optimized agents (None for a call outside any agent span); None: all.
    """
    by_rollout: dict[str, list[LLMCall]] = {}
    if calls is not None:
        for call in calls:
            by_rollout.setdefault(call.rollout_id, []).append(call)
    examples = []
    for result in results:
        rollout_id = result.rollout.rollout_id
        if calls is None:
            from agl.lightning import extract_calls

            found = extract_calls(result.spans).calls
            mine = [c for c in found if agents is None or c.agent in agents]
        else:
            mine = by_rollout.get(rollout_id, [])
        spans = {span.span_id: span for span in result.spans}
        examples.append(
            Example(
                rollout_id=rollout_id,
                task=result.rollout.input,
                reward=result.reward,
                error=result.error,
                turns=[_turn(call, spans.get(call.span_id or "")) for call in mine],
                tools=_tools(result.spans, spans, agents),
            )
        )
    return examples


def worst(examples: Sequence[Example], n: int) -> list[Example]:
    """The ``n`` examples with the lowest rewards (no reward counts lowest), worst first."""
    ranked = sorted(
        enumerate(examples),
        key=lambda pair: (pair[1].reward is not None, pair[1].reward or 0.0, pair[0]),
    )
    return [example for _, example in ranked[:n]]


def render_examples(examples: Sequence[Example], max_chars: int) -> str:
    """The examples as one text, each cut to ``max_chars``."""
    if not examples:
        return "(no runs were recorded)"
    return "\n\n".join(example.render(i, max_chars) for i, example in enumerate(examples, 1))


# --- reading one call -----------------------------------------------------------------------


def _turn(call: LLMCall, span: Span | None) -> Turn:
    attributes = span.attributes if span is not None else {}
    messages = _chat_messages(call.messages())
    if messages is None:
        messages = _genai_messages(attributes.get(semconv.GEN_AI_INPUT_MESSAGES)) or []
    reply, tool_calls = _chat_reply(call.response)
    if reply is None and not tool_calls:
        outputs = [text for _, text in _genai_messages(attributes.get(_OUTPUT)) or []]
        texts = [text for text in outputs if not text.startswith(_CALL)]
        reply = "\n".join(texts) if texts else None
        tool_calls = [text[len(_CALL) :] for text in outputs if text.startswith(_CALL)]
    if not tool_calls:
        tool_calls = _recorded_tool_calls(attributes.get(semconv.AGL_TOOL_CALLS))
    return Turn(call.agent, messages, reply, tool_calls)


def _chat_messages(messages: list[Any] | None) -> list[tuple[str, str]] | None:
    """OpenAI chat messages (the gateway's record of the request) as (role, text)."""
    if messages is None:
        return None
    out = []
    for message in messages:
        if not isinstance(message, dict):
            continue
        role = str(message.get("role", "?"))
        text = _content_text(message.get("content"))
        for call in message.get("tool_calls") or []:
            function = call.get("function", {}) if isinstance(call, dict) else {}
            text += f"\n{_CALL}{function.get('name')}({function.get('arguments')})"
        out.append((role, text.strip()))
    return out


def _chat_reply(response: str | None) -> tuple[str | None, list[str]]:
    """The text and tool calls of an OpenAI chat completion body."""
    if response is None:
        return None, []
    try:
        body = json.loads(response)
        message = body["choices"][0]["message"]
    except (ValueError, KeyError, IndexError, TypeError):
        return None, []
    calls = []
    for call in message.get("tool_calls") or []:
        function = call.get("function", {}) if isinstance(call, dict) else {}
        calls.append(f"{function.get('name')}({function.get('arguments')})")
    return _content_text(message.get("content")) or None, calls


def _genai_messages(raw: Any) -> list[tuple[str, str]] | None:
    """OpenTelemetry GenAI messages (``role`` and ``parts``) as (role, text)."""
    if not isinstance(raw, str):
        return None
    try:
        messages = json.loads(raw)
    except ValueError:
        return None
    out = []
    for message in messages if isinstance(messages, list) else []:
        if not isinstance(message, dict):
            continue
        role = str(message.get("role", "?"))
        texts = []
        for part in message.get("parts") or []:
            if not isinstance(part, dict):
                continue
            kind = part.get("type")
            if kind == "text":
                texts.append(str(part.get("content", "")))
            elif kind == "tool_call":
                arguments = part.get("arguments")
                if not isinstance(arguments, str):
                    arguments = json.dumps(arguments)
                out.append((role, f"{_CALL}{part.get('name')}({arguments})"))
            elif kind == "tool_call_response":
                texts.append(f"tool result: {_json(part.get('response'))}")
        if texts:
            out.append((role, "\n".join(texts)))
    return out


def _recorded_tool_calls(raw: Any) -> list[str]:
    if not isinstance(raw, str):
        return []
    try:
        calls = json.loads(raw)
    except ValueError:
        return []
    if not isinstance(calls, list):
        return []
    return [
        f"{call.get('name')}({call.get('arguments')})" for call in calls if isinstance(call, dict)
    ]


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return ""


# --- tool spans -----------------------------------------------------------------------------


def _tools(
    all_spans: Sequence[Span], by_id: dict[str, Span], agents: Collection[str | None] | None
) -> list[str]:
    """The tool spans of the optimized agents (the nearest enclosing agent span decides)."""
    tools = []
    for span in all_spans:
        if span.attributes.get(semconv.AGL_SPAN_TYPE) != semconv.SPAN_TYPE_TOOL:
            continue
        if agents is not None and _agent_of(span, by_id) not in agents:
            continue
        name = span.attributes.get(semconv.AGL_TOOL_NAME) or span.name
        arguments = span.attributes.get(semconv.AGL_TOOL_ARGUMENTS, "")
        result = span.attributes.get(semconv.AGL_TOOL_RESULT)
        text = f"{name}({arguments})" + (f" -> {result}" if result is not None else "")
        tools.append(text)
        if len(tools) == _TOOL_SPANS:
            break
    return tools


def _agent_of(span: Span, by_id: dict[str, Span]) -> str | None:
    current: Span | None = span
    for _ in range(len(by_id) + 1):
        if current is None:
            return None
        name = current.attributes.get(semconv.AGL_AGENT_NAME)
        if isinstance(name, str) and name:
            return name
        current = by_id.get(current.parent_id) if current.parent_id else None
    return None


def _json(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return repr(value)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: max(limit - 12, 0)] + " ...(cut)"
