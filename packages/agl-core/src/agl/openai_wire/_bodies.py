"""Build OpenAI/vLLM answers: bodies, stream chunks, server-sent events and errors.

Shapes follow ``vllm serve`` (vLLM >= 0.10.2, ``vllm/entrypoints/openai/protocol.py``):

* With ``"return_token_ids": true``, chat bodies carry top-level ``prompt_token_ids`` and
  per-choice ``token_ids``; chat streams carry ``prompt_token_ids`` on each choice's first
  (role) chunk and ``token_ids`` (that chunk's tokens) on every later chunk; completions carry
  both per choice (streams: ``prompt_token_ids`` on each choice's first chunk). Without it those
  fields are ``null``.
* Chat logprobs: ``choices[i].logprobs.content`` = ``[{token, logprob, bytes, top_logprobs:
  [{token, logprob, bytes}]}]``; completions: ``{text_offset, token_logprobs, tokens,
  top_logprobs: [{token: logprob}]}`` (the sampled token among the top ones).
* Streams end with ``data: [DONE]``; ``stream_options.include_usage`` adds a last chunk with
  ``choices: []`` and ``usage``. A finished stream choice also carries ``stop_reason``.
* Errors: ``{"error": {"message", "type", "param", "code"}}``, ``code`` the HTTP status and
  ``type`` e.g. ``BadRequestError``.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = [
    "DONE",
    "WEIGHT_VERSION_HEADER",
    "Logprob",
    "TokenLogprobs",
    "chat_body",
    "chat_choice",
    "chat_chunk",
    "chat_logprobs",
    "completion_body",
    "completion_choice",
    "completion_chunk",
    "completion_logprobs",
    "error_body",
    "error_type",
    "head",
    "model_list",
    "new_id",
    "now",
    "role_chunk",
    "sse",
    "sse_data",
    "tool_call",
    "usage",
    "usage_chunk",
]

JSON = dict[str, Any]

DONE = "data: [DONE]\n\n"

WEIGHT_VERSION_HEADER = "x-agl-weight-version"
"""The response header naming the version of the weights that produced a response (an
integer: 0 for the weights a server started with, one more per update). agl-torch's policy
server sends it; the gateway records it on the call's span (``agl.llm.weight_version``)."""
"""The event that ends every stream."""


# --- ids, events, errors ----------------------------------------------------------------------


def new_id(prefix: str) -> str:
    """A fresh id in vLLM's style: ``chatcmpl-<hex>``, ``cmpl-<hex>``, ``resp_<hex>``..."""
    return f"{prefix}{uuid.uuid4().hex}"


def now() -> int:
    """The ``created`` timestamp: whole seconds since the epoch."""
    return int(time.time())


def sse(data: Mapping[str, Any] | str, event: str | None = None) -> str:
    """One server-sent event: ``data: <json>`` (after ``event: <name>`` when given)."""
    payload = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    return (f"event: {event}\n" if event else "") + f"data: {payload}\n\n"


def sse_data(line: str) -> str | None:
    """The payload of an event's ``data:`` line (``"[DONE]"`` included); None for other lines."""
    line = line.strip()
    return line[5:].strip() if line.startswith("data:") else None


_ERROR_TYPES = {
    400: "BadRequestError",
    401: "AuthenticationError",
    403: "PermissionDeniedError",
    404: "NotFoundError",
    409: "ConflictError",
    413: "RequestTooLargeError",
    422: "UnprocessableEntityError",
    429: "RateLimitError",
    500: "InternalServerError",
    502: "BadGatewayError",
    503: "ServiceUnavailableError",
    504: "GatewayTimeoutError",
}


def error_type(status: int) -> str:
    """The error ``type`` for a status: vLLM's ``BadRequestError`` for 400, else the SDK's name."""
    return _ERROR_TYPES.get(status, "APIError")


def error_body(
    status: int, message: str, *, param: str | None = None, kind: str | None = None
) -> JSON:
    """The error body: ``{"error": {"message", "type", "param", "code"}}``."""
    error = {"message": message, "type": kind or error_type(status), "param": param}
    return {"error": {**error, "code": status}}


# --- heads, usage, models ---------------------------------------------------------------------


def head(api: Literal["chat", "completions"], model: str, *, id: str | None = None) -> JSON:
    """The ``id``, ``object``, ``created`` and ``model`` every body and chunk starts with."""
    chat = api == "chat"
    return {
        "id": id or new_id("chatcmpl-" if chat else "cmpl-"),
        "object": "chat.completion" if chat else "text_completion",
        "created": now(),
        "model": model,
    }


def usage(prompt_tokens: int, completion_tokens: int) -> JSON:
    """A chat/completions ``usage`` object."""
    return {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
        "prompt_tokens_details": None,
    }


def model_list(model: str, max_model_len: int, *, owned_by: str = "vllm") -> JSON:
    """``GET /v1/models``: the one served model, with vLLM's ``max_model_len``."""
    card = {"id": model, "object": "model", "created": now(), "owned_by": owned_by, "root": model}
    return {"object": "list", "data": [{**card, "parent": None, "max_model_len": max_model_len}]}


def tool_call(call_id: str, name: str, arguments: str) -> JSON:
    """One function call of an assistant message."""
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


# --- logprobs ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Logprob:
    """One token with its log probability, as logprobs show it."""

    token: str
    """The token's text (special tokens by name)."""
    logprob: float
    bytes: list[int] = field(default_factory=list)
    """The token's raw bytes (by default its text, UTF-8 encoded)."""

    def entry(self) -> JSON:
        """The chat logprobs entry ``{token, logprob, bytes}``."""
        raw = self.bytes or list(self.token.encode())
        return {"token": self.token, "logprob": self.logprob, "bytes": raw}


@dataclass(frozen=True)
class TokenLogprobs:
    """A generated token and the most likely tokens at its position."""

    chosen: Logprob
    top: Sequence[Logprob] = ()


def chat_logprobs(tokens: Sequence[TokenLogprobs]) -> JSON:
    """A chat choice's (or chunk's) ``logprobs``: ``{"content": [...]}``."""
    return {
        "content": [
            {**t.chosen.entry(), "top_logprobs": [alt.entry() for alt in t.top]} for t in tokens
        ]
    }


def completion_logprobs(tokens: Sequence[TokenLogprobs], offset: int = 0) -> JSON:
    """A completion choice's ``logprobs``; ``offset``: the text offset of the first token."""
    offsets = []
    for token in tokens:
        offsets.append(offset)
        offset += len(token.chosen.token)
    return {
        "text_offset": offsets,
        "token_logprobs": [t.chosen.logprob for t in tokens],
        "tokens": [t.chosen.token for t in tokens],
        "top_logprobs": [{alt.token: alt.logprob for alt in [*t.top, t.chosen]} for t in tokens],
    }


# --- chat -------------------------------------------------------------------------------------


def chat_choice(
    index: int,
    *,
    content: str | None,
    tool_calls: Sequence[JSON] = (),
    logprobs: JSON | None,
    finish_reason: str,
    stop_reason: int | str | None = None,
    token_ids: Sequence[int] | None,
) -> JSON:
    """One choice of a whole chat body."""
    message: JSON = {
        "role": "assistant",
        "content": content,
        "refusal": None,
        "annotations": None,
        "audio": None,
        "function_call": None,
        "tool_calls": list(tool_calls),
        "reasoning": None,
    }
    return {
        "index": index,
        "message": message,
        "logprobs": logprobs,
        "finish_reason": finish_reason,
        "stop_reason": stop_reason,
        "token_ids": None if token_ids is None else list(token_ids),
    }


def chat_body(
    head: JSON,
    choices: Sequence[JSON],
    usage: JSON,
    *,
    prompt_token_ids: Sequence[int] | None,
    system_fingerprint: str | None = None,
) -> JSON:
    """A whole ``chat.completion`` body."""
    return {
        **head,
        "object": "chat.completion",
        "choices": list(choices),
        "service_tier": None,
        "system_fingerprint": system_fingerprint,
        "usage": usage,
        "prompt_logprobs": None,
        "prompt_token_ids": None if prompt_token_ids is None else list(prompt_token_ids),
        "kv_transfer_params": None,
    }


def role_chunk(head: JSON, index: int, *, prompt_token_ids: Sequence[int] | None) -> JSON:
    """A chat stream's first chunk of a choice: the assistant role, and the prompt's ids."""
    choice = {
        "index": index,
        "delta": {"role": "assistant", "content": ""},
        "logprobs": None,
        "finish_reason": None,
    }
    ids = None if prompt_token_ids is None else list(prompt_token_ids)
    return {**head, "object": "chat.completion.chunk", "choices": [choice], "prompt_token_ids": ids}


def chat_chunk(
    head: JSON,
    index: int,
    *,
    delta: JSON,
    logprobs: JSON | None,
    finish_reason: str | None = None,
    stop_reason: int | str | None = None,
    token_ids: Sequence[int] | None,
) -> JSON:
    """A chat stream chunk of one choice (``stop_reason`` shown once the choice finishes)."""
    choice: JSON = {
        "index": index,
        "delta": delta,
        "logprobs": logprobs,
        "finish_reason": finish_reason,
    }
    if finish_reason is not None:
        choice["stop_reason"] = stop_reason
    choice["token_ids"] = None if token_ids is None else list(token_ids)
    return {**head, "object": "chat.completion.chunk", "choices": [choice]}


def usage_chunk(head: JSON, usage: JSON) -> JSON:
    """A stream's last chunk with ``stream_options.include_usage``: no choices, the usage."""
    object_ = "chat.completion.chunk" if head["object"].startswith("chat") else "text_completion"
    totals = {k: v for k, v in usage.items() if k != "prompt_tokens_details"}
    return {**head, "object": object_, "choices": [], "usage": totals}


# --- completions ------------------------------------------------------------------------------


def completion_choice(
    index: int,
    *,
    text: str,
    logprobs: JSON | None,
    finish_reason: str | None,
    stop_reason: int | str | None = None,
    prompt_token_ids: Sequence[int] | None,
    token_ids: Sequence[int] | None,
) -> JSON:
    """One choice of a completions body or stream chunk."""
    return {
        "index": index,
        "text": text,
        "logprobs": logprobs,
        "finish_reason": finish_reason,
        "stop_reason": stop_reason,
        "prompt_logprobs": None,
        "prompt_token_ids": None if prompt_token_ids is None else list(prompt_token_ids),
        "token_ids": None if token_ids is None else list(token_ids),
    }


def completion_body(
    head: JSON, choices: Sequence[JSON], usage: JSON, *, system_fingerprint: str | None = None
) -> JSON:
    """A whole ``text_completion`` body."""
    return {
        **head,
        "object": "text_completion",
        "choices": list(choices),
        "service_tier": None,
        "system_fingerprint": system_fingerprint,
        "usage": usage,
        "kv_transfer_params": None,
    }


def completion_chunk(head: JSON, choice: JSON) -> JSON:
    """A completions stream chunk of one choice."""
    return {**head, "object": "text_completion", "choices": [choice], "usage": None}
