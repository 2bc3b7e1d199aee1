"""Bring the attributes of LLM-call spans from any instrumentation to agl's conventions.

Instrumentations disagree on names: current ones follow OpenTelemetry's GenAI conventions
(``gen_ai.input.messages``, ``gen_ai.usage.input_tokens``, ``gen_ai.provider.name``), older
ones write ``gen_ai.prompt.0.content``, ``gen_ai.usage.prompt_tokens``, ``gen_ai.system`` or
``llm.request.type``. Credit assignment should not care, so every span that records a model
call leaves here marked ``agl.span.type = "llm"`` and carrying the current names, plus the tool
calls the response asked for in ``agl.llm.tool_calls``. Recognition goes by these semantic
attributes, never by span names.
"""

from __future__ import annotations

import json
import re
from typing import Any

from agl import semconv

__all__ = ["is_llm_span", "normalize_attributes"]

_LLM_OPERATIONS = {"chat", "text_completion", "generate_content", "completion", "responses"}
_LEGACY_MESSAGE = re.compile(r"^gen_ai\.(prompt|completion)\.(\d+)\.(.+)$")


def is_llm_span(attributes: dict[str, Any]) -> bool:
    """Whether the attributes describe a call to a language model."""
    if attributes.get(semconv.AGL_SPAN_TYPE) == semconv.SPAN_TYPE_LLM:
        return True
    operation = attributes.get(semconv.GEN_AI_OPERATION_NAME)
    if operation in _LLM_OPERATIONS:
        return True
    return "llm.request.type" in attributes and (
        semconv.GEN_AI_SYSTEM in attributes or semconv.GEN_AI_PROVIDER_NAME in attributes
    )


def normalize_attributes(attributes: dict[str, Any]) -> dict[str, Any]:
    """Return the attributes with LLM-call facts under agl's names (others unchanged)."""
    if not is_llm_span(attributes):
        return attributes
    out = dict(attributes)
    out[semconv.AGL_SPAN_TYPE] = semconv.SPAN_TYPE_LLM
    if semconv.GEN_AI_PROVIDER_NAME not in out and semconv.GEN_AI_SYSTEM in out:
        out[semconv.GEN_AI_PROVIDER_NAME] = out[semconv.GEN_AI_SYSTEM]
    for old, new in (
        ("gen_ai.usage.prompt_tokens", semconv.GEN_AI_USAGE_INPUT_TOKENS),
        ("gen_ai.usage.completion_tokens", semconv.GEN_AI_USAGE_OUTPUT_TOKENS),
    ):
        if new not in out and old in out:
            out[new] = out[old]
    if semconv.GEN_AI_INPUT_MESSAGES not in out or semconv.GEN_AI_OUTPUT_MESSAGES not in out:
        legacy = _legacy_messages(out)
        for key, messages in legacy.items():
            out.setdefault(key, json.dumps(messages))
    tool_calls = _tool_calls(out.get(semconv.GEN_AI_OUTPUT_MESSAGES))
    if tool_calls:
        out[semconv.AGL_TOOL_CALLS] = json.dumps(tool_calls)
    return out


def _legacy_messages(attributes: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Rebuild GenAI message lists from ``gen_ai.prompt.N.*`` / ``gen_ai.completion.N.*``."""
    found: dict[str, dict[int, dict[str, Any]]] = {"prompt": {}, "completion": {}}
    for key, value in attributes.items():
        match = _LEGACY_MESSAGE.match(key)
        if match:
            kind, index, field = match.groups()
            found[kind].setdefault(int(index), {})[field] = value
    result = {}
    for kind, target in (
        ("prompt", semconv.GEN_AI_INPUT_MESSAGES),
        ("completion", semconv.GEN_AI_OUTPUT_MESSAGES),
    ):
        if found[kind]:
            result[target] = [_legacy_message(found[kind][i]) for i in sorted(found[kind])]
    return result


def _legacy_message(fields: dict[str, Any]) -> dict[str, Any]:
    parts: list[dict[str, Any]] = []
    if fields.get("content") is not None:
        parts.append({"type": "text", "content": fields["content"]})
    calls: dict[int, dict[str, Any]] = {}
    for key, value in fields.items():
        match = re.match(r"^tool_calls\.(\d+)\.(.+)$", key)
        if match:
            calls.setdefault(int(match.group(1)), {})[match.group(2)] = value
    for index in sorted(calls):
        call = calls[index]
        parts.append(
            {
                "type": "tool_call",
                "id": call.get("id"),
                "name": call.get("name"),
                "arguments": call.get("arguments"),
            }
        )
    message: dict[str, Any] = {"role": fields.get("role", "assistant"), "parts": parts}
    if "finish_reason" in fields:
        message["finish_reason"] = fields["finish_reason"]
    return message


def _tool_calls(output_messages: Any) -> list[dict[str, Any]]:
    # Most calls ask for no tool: their messages are not parsed. (JSON writers escape no ASCII
    # letter, so a tool-call part always spells its type out.)
    if not isinstance(output_messages, str) or "tool_call" not in output_messages:
        return []
    try:
        messages = json.loads(output_messages)
    except ValueError:
        return []
    calls = []
    for message in messages if isinstance(messages, list) else []:
        for part in message.get("parts", []) if isinstance(message, dict) else []:
            if isinstance(part, dict) and part.get("type") == "tool_call":
                arguments = part.get("arguments")
                if not isinstance(arguments, str):
                    arguments = json.dumps(arguments)
                calls.append(
                    {"id": part.get("id"), "name": part.get("name"), "arguments": arguments}
                )
    return calls
