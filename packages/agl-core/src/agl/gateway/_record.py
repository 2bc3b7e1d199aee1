"""What the gateway records of one LLM call: the exact token ids, logprobs and both sides.

:class:`CallRecord` collects a call as it happens (a whole response, or a stream chunk by chunk)
and turns into one :class:`~agl.Span` at the end. A call on another wire (the Responses or
Messages API) is recorded as the chat call it became, with its wire (``agl.llm.wire``), its
request as sent (``agl.llm.wire_request``) and, as its response id, the id the agent saw.

Token ids come in vLLM's format: with
``return_token_ids``, a chat response carries ``prompt_token_ids`` at the top and ``token_ids``
per choice (a stream: ``prompt_token_ids`` on a choice's first chunk, ``token_ids`` for each
delta); a completions response carries both per choice. Only the first choice is recorded as
token ids (agents ask for one); the whole response is kept as JSON.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from agl import semconv
from agl._spans import Span, SpanKind, SpanStatus, StatusCode
from agl._text import valid_json, valid_text
from agl.gateway._genai import input_messages, output_messages
from agl.openai_wire import WEIGHT_VERSION_HEADER, Wire

__all__ = ["CallRecord"]


@dataclass
class _ToolCallDelta:
    id: str | None = None
    name: str = ""
    arguments: str = ""


@dataclass
class CallRecord:
    """One LLM call passing through the gateway."""

    rollout_id: str
    attempt_id: str
    kind: str  # "chat" or "completions"
    upstream: str
    request: dict[str, Any]
    start_ns: int = field(default_factory=time.time_ns)
    end_ns: int | None = None
    resources_id: str | None = None
    prompt_ids: list[int] | None = None
    response_ids: list[int] | None = None
    logprobs: list[float] | None = None
    response: dict[str, Any] | None = None
    error: str | None = None
    upstream_ms: float | None = None
    weight_version: int | None = None
    wire: Wire | None = None  # the wire the call came in on, when not chat or completions
    wire_request: dict[str, Any] | None = None  # the request as it came on that wire
    # stream assembly
    _text: list[str] = field(default_factory=list)
    _tools: dict[int, _ToolCallDelta] = field(default_factory=dict)
    _finish: str | None = None
    _head: dict[str, Any] = field(default_factory=dict)

    # --- whole responses --------------------------------------------------------------------

    def take_headers(self, headers: Mapping[str, str]) -> None:
        """Record what the upstream's response headers say: the weight version, if named."""
        value = headers.get(WEIGHT_VERSION_HEADER)
        if value is not None and value.strip().isdigit():
            self.weight_version = int(value)

    def take_response(self, body: dict[str, Any]) -> None:
        """Record a complete (non-streamed) response."""
        self.response = body
        choices = body.get("choices") or []
        first = choices[0] if choices and isinstance(choices[0], dict) else {}
        self.prompt_ids = _ints(body.get("prompt_token_ids") or first.get("prompt_token_ids"))
        self.response_ids = _ints(first.get("token_ids"))
        self.logprobs = _logprobs(first.get("logprobs"), self.kind)

    # --- streams ----------------------------------------------------------------------------

    def take_chunk(self, chunk: dict[str, Any]) -> None:
        """Record one streamed chunk (a parsed ``data:`` event)."""
        for key in ("id", "model", "created", "object"):
            if key in chunk and key not in self._head:
                self._head[key] = chunk[key]
        if chunk.get("usage"):
            self._head["usage"] = chunk["usage"]
        if self.prompt_ids is None and chunk.get("prompt_token_ids"):
            self.prompt_ids = _ints(chunk["prompt_token_ids"])
        for choice in chunk.get("choices") or []:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            if self.prompt_ids is None and choice.get("prompt_token_ids"):
                self.prompt_ids = _ints(choice["prompt_token_ids"])
            if choice.get("token_ids"):
                self.response_ids = (self.response_ids or []) + (_ints(choice["token_ids"]) or [])
            more = _logprobs(choice.get("logprobs"), self.kind)
            if more:
                self.logprobs = (self.logprobs or []) + more
            if choice.get("finish_reason"):
                self._finish = choice["finish_reason"]
            self._take_delta(choice)

    def _take_delta(self, choice: dict[str, Any]) -> None:
        if self.kind == "completions":
            self._text.append(choice.get("text") or "")
            return
        delta = choice.get("delta") or {}
        self._text.append(delta.get("content") or "")
        for call in delta.get("tool_calls") or []:
            slot = self._tools.setdefault(call.get("index", 0), _ToolCallDelta())
            slot.id = call.get("id") or slot.id
            function = call.get("function") or {}
            slot.name += function.get("name") or ""
            slot.arguments += function.get("arguments") or ""

    def finish_stream(self) -> None:
        """Assemble the streamed response, as the agent's client would have."""
        text = "".join(self._text)
        if self.kind == "completions":
            choice: dict[str, Any] = {"index": 0, "text": text, "finish_reason": self._finish}
        else:
            message: dict[str, Any] = {"role": "assistant", "content": text or None}
            if self._tools:
                message["tool_calls"] = [
                    {
                        "id": call.id,
                        "type": "function",
                        "function": {"name": call.name, "arguments": call.arguments},
                    }
                    for _, call in sorted(self._tools.items())
                ]
            choice = {"index": 0, "message": message, "finish_reason": self._finish}
        self.response = {**self._head, "choices": [choice]}

    # --- the span ---------------------------------------------------------------------------

    def to_span(self) -> Span:
        """The span of this call."""
        wire = self.kind if self.wire is None else self.wire.name
        attributes: dict[str, Any] = {
            semconv.AGL_SPAN_TYPE: semconv.SPAN_TYPE_GATEWAY,
            semconv.AGL_ROLLOUT_ID: self.rollout_id,
            semconv.AGL_ATTEMPT_ID: self.attempt_id,
            semconv.GEN_AI_OPERATION_NAME: "chat" if self.kind == "chat" else "text_completion",
            semconv.AGL_UPSTREAM_URL: self.upstream,
            semconv.AGL_REQUEST_JSON: json.dumps(self.request),
            semconv.AGL_WIRE: wire,
        }
        if self.wire_request is not None:
            attributes[semconv.AGL_WIRE_REQUEST_JSON] = json.dumps(self.wire_request)
        inputs = input_messages(self.request.get("messages"))
        if inputs is not None:
            attributes[semconv.GEN_AI_INPUT_MESSAGES] = json.dumps(inputs)
        if isinstance(self.request.get("model"), str):
            attributes[semconv.GEN_AI_REQUEST_MODEL] = self.request["model"]
        if self.resources_id is not None:
            attributes[semconv.AGL_RESOURCES_ID] = self.resources_id
        if self.upstream_ms is not None:
            attributes[semconv.AGL_UPSTREAM_LATENCY_MS] = round(self.upstream_ms, 3)
        if self.weight_version is not None:
            attributes[semconv.AGL_WEIGHT_VERSION] = self.weight_version
        if self.prompt_ids is not None:
            attributes[semconv.AGL_PROMPT_TOKEN_IDS] = self.prompt_ids
        if self.response_ids is not None:
            attributes[semconv.AGL_RESPONSE_TOKEN_IDS] = self.response_ids
        if self.logprobs is not None:
            attributes[semconv.AGL_RESPONSE_LOGPROBS] = self.logprobs
        if self.response is not None:
            attributes[semconv.AGL_RESPONSE_JSON] = json.dumps(self.response)
            outputs = output_messages(self.response)
            if outputs is not None:
                attributes[semconv.GEN_AI_OUTPUT_MESSAGES] = json.dumps(outputs)
            response_id = self.response.get("id")
            if isinstance(response_id, str):
                # the id the agent saw, which its own instrumentation records too
                seen = response_id if self.wire is None else self.wire.response_id(response_id)
                attributes[semconv.GEN_AI_RESPONSE_ID] = seen
            if isinstance(self.response.get("model"), str):
                attributes[semconv.GEN_AI_RESPONSE_MODEL] = self.response["model"]
            usage = self.response.get("usage") or {}
            for source, target in (
                ("prompt_tokens", semconv.GEN_AI_USAGE_INPUT_TOKENS),
                ("completion_tokens", semconv.GEN_AI_USAGE_OUTPUT_TOKENS),
            ):
                if isinstance(usage.get(source), int):
                    attributes[target] = usage[source]
        status = (
            SpanStatus(code=StatusCode.ERROR, description=valid_text(self.error))
            if self.error
            else SpanStatus(code=StatusCode.OK)
        )
        return Span.create(
            rollout_id=self.rollout_id,
            attempt_id=self.attempt_id,
            name=f"agl.gateway.{wire}",
            attributes=valid_json(attributes),  # a request may carry lone surrogates
            kind=SpanKind.SERVER,
            status=status,
            start_time_unix_nano=self.start_ns,
            end_time_unix_nano=self.end_ns or time.time_ns(),
        )


def _ints(value: Any) -> list[int] | None:
    if isinstance(value, list) and all(isinstance(item, int) for item in value):
        return list(value)
    return None


def _logprobs(value: Any, kind: str) -> list[float] | None:
    """Per-token logprobs from an OpenAI-format ``logprobs`` field (chat or legacy)."""
    if not isinstance(value, dict):
        return None
    if kind == "chat":
        content = value.get("content")
        if isinstance(content, list):
            return [float(item["logprob"]) for item in content if isinstance(item, dict)]
        return None
    tokens = value.get("token_logprobs")
    if isinstance(tokens, list):
        return [float(item) for item in tokens if isinstance(item, int | float)]
    return None
