"""Read OpenAI/vLLM requests: one set of checks and one set of messages for every server.

A request body becomes a :class:`WireRequest`, or a :class:`WireError` naming the offending
field. The checks and their messages follow ``vllm serve`` (vLLM >= 0.10.2,
``vllm/entrypoints/openai/protocol.py`` and ``vllm/sampling_params.py``), because the servers
that use this module stand in for it: a request the real server refuses is refused here too.
Checks run in a fixed order, so a request with several mistakes always gets the same error.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from agl._errors import InvalidInputError

__all__ = [
    "MAX_TOP_LOGPROBS",
    "Api",
    "WireError",
    "WireRequest",
    "check_context",
    "content_text",
    "read_json",
    "read_request",
]

JSON = dict[str, Any]
Api = Literal["chat", "completions"]
"""The two generation routes an engine serves: ``/v1/chat/completions`` and ``/v1/completions``
(the other wires are served through chat: :mod:`agl.openai_wire._translate`)."""

MAX_TOP_LOGPROBS = 20
"""The most top logprobs a token may ask for (vLLM's default ``max_logprobs``)."""

_MAX_TOKEN_KEYS: dict[Api, tuple[str, ...]] = {
    "chat": ("max_completion_tokens", "max_tokens"),
    "completions": ("max_tokens",),
}


class WireError(InvalidInputError):
    """A request the server answers with ``status`` and an OpenAI error body.

    Args:
        message: What was wrong, for the error body's ``message``.
        status: The HTTP status (400 unless said otherwise).
        field: The request field at fault (the body's ``param``).
        kind: The error body's ``type``; by default the one vLLM uses for ``status``.
    """

    def __init__(
        self,
        message: str,
        *,
        status: int = 400,
        field: str | None = None,
        value: Any = None,
        kind: str | None = None,
    ) -> None:
        super().__init__(message, field=field, value=value)
        self.status = status
        self.kind = kind


@dataclass(frozen=True)
class WireRequest:
    """A generation request, read and checked.

    Attributes:
        api: Which route it came to.
        model: The model it names, if any.
        messages: A chat's messages; None for completions.
        tools: The tools offered, if any.
        use_tools: Whether tool calls are read out of the reply (``tools`` given and
            ``tool_choice`` not ``"none"``).
        prompts: A completions request's prompts, each text or token ids; None otherwise.
        n: Choices per prompt.
        max_tokens: The most tokens to generate, when the request says.
        temperature: Sampling temperature, when given.
        top_p: Nucleus sampling, when given.
        stop: Strings that end the generation.
        seed: The sampling seed, when given.
        logprobs: Top logprobs per token; None for no logprobs at all.
        stream: Answer with server-sent events.
        include_usage: End the stream with a usage chunk.
        return_token_ids: Put token ids in the answer (vLLM's ``return_token_ids``).
        echo: A completions request asking for its prompt back.
    """

    api: Api
    model: str | None
    messages: list[JSON] | None
    tools: list[JSON] | None
    use_tools: bool
    prompts: list[str | list[int]] | None
    n: int
    max_tokens: int | None
    temperature: float | None
    top_p: float | None
    stop: list[str]
    seed: int | None
    logprobs: int | None
    stream: bool
    include_usage: bool
    return_token_ids: bool
    echo: bool


def read_json(raw: bytes) -> JSON:
    """The JSON object a request body holds."""
    try:
        body = json.loads(raw)
    except ValueError as exc:
        raise WireError(f"the request body is not valid JSON: {exc}") from None
    except RecursionError:
        raise WireError(
            "the request body is nested too deeply to read (arrays or objects inside each "
            "other thousands of levels down)"
        ) from None
    if not isinstance(body, dict):
        raise WireError("the request body must be a JSON object")
    return body


def read_request(body: Mapping[str, Any], api: Api) -> WireRequest:
    """Read and check a request body that came to ``api``'s route."""
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise WireError(f"'model' must be a string (got {model!r})", field="model", value=model)
    messages = prompts = None
    if api == "chat":
        messages = _messages(body.get("messages"))
    else:
        prompts = _prompts(body.get("prompt"))
    tools = _tools(body.get("tools"))
    stream = _flag(body, "stream")
    return WireRequest(
        api=api,
        model=model or None,
        messages=messages,
        tools=tools,
        use_tools=bool(tools) and body.get("tool_choice") != "none",
        prompts=prompts,
        n=_int(body, "n", low=1) or 1,
        max_tokens=_max_tokens(body, _MAX_TOKEN_KEYS[api]),
        temperature=_number(body, "temperature"),
        top_p=_number(body, "top_p"),
        stop=_stop(body.get("stop")),
        seed=_int(body, "seed"),
        logprobs=_logprobs(body, api),
        stream=stream,
        include_usage=_include_usage(body, stream),
        return_token_ids=_flag(body, "return_token_ids"),
        echo=_flag(body, "echo"),
    )


def check_context(prompt_tokens: int, max_tokens: int | None, max_model_len: int) -> int:
    """How many tokens a prompt of ``prompt_tokens`` may be followed by, with vLLM's checks.

    Returns ``max_tokens``, or all the room left when it is None.

    Raises:
        WireError: 400 when the prompt fills the context or ``max_tokens`` does not fit.
    """
    room = max_model_len - prompt_tokens
    if room < 1:
        raise WireError(
            f"This model's maximum context length is {max_model_len} tokens. However, your "
            f"request has {prompt_tokens} input tokens. Please reduce the length of the input "
            "messages.",
            field="messages",
        )
    if max_tokens is None:
        return room
    if max_tokens > room:
        raise WireError(
            f"'max_tokens' or 'max_completion_tokens' is too large: {max_tokens}. This model's "
            f"maximum context length is {max_model_len} tokens and your request has "
            f"{prompt_tokens} input tokens ({max_tokens} > {max_model_len} - {prompt_tokens}).",
            field="max_tokens",
            value=max_tokens,
        )
    return max_tokens


def content_text(content: Any) -> str:
    """A message's ``content`` as text: strings as-is, text parts joined, other parts tagged."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, Mapping):
                text = part.get("text")
                parts.append(text if isinstance(text, str) else f"<{part.get('type', 'part')}>")
        return "".join(parts)
    return str(content)


# --- one field each ---------------------------------------------------------------------------


def _messages(messages: Any) -> list[JSON]:
    if not isinstance(messages, list) or not messages:
        raise WireError("'messages' must be a non-empty list of messages", field="messages")
    if not all(isinstance(m, dict) and isinstance(m.get("role"), str) for m in messages):
        raise WireError("every message must be an object with a 'role'", field="messages")
    for index, message in enumerate(messages):
        calls = message.get("tool_calls")
        if calls is None:
            continue
        if not isinstance(calls, list) or not all(
            isinstance(call, dict) and isinstance(call.get("function", {}), dict) for call in calls
        ):
            raise WireError(
                "'tool_calls' must be a list of tool call objects, each with a 'function' object",
                field=f"messages[{index}].tool_calls",
            )
    return messages


def _tools(tools: Any) -> list[JSON] | None:
    if tools is None:
        return None
    if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
        raise WireError("'tools' must be a list of tool objects", field="tools")
    return tools or None


def _prompts(prompt: Any) -> list[str | list[int]]:
    """A completions ``prompt`` (text, token ids, or a list of either) as a list of prompts."""
    if isinstance(prompt, str) or (isinstance(prompt, list) and prompt and _is_ids(prompt)):
        prompt = [prompt]
    if not isinstance(prompt, list) or not prompt:
        raise WireError(
            "'prompt' must be a string, a list of token ids, or a list of those", field="prompt"
        )
    for item in prompt:
        if not isinstance(item, str) and not (isinstance(item, list) and _is_ids(item)):
            raise WireError(
                f"'prompt' has an item that is neither text nor token ids: {item!r}",
                field="prompt",
            )
    return prompt


def _max_tokens(body: Mapping[str, Any], keys: tuple[str, ...]) -> int | None:
    key = next((k for k in keys if body.get(k) is not None), None)
    if key is None:
        return None
    value = body[key]
    if not _is_int(value) or value < 1:
        raise WireError(f"{key!r} must be at least 1 (got {value!r})", field=key, value=value)
    return int(value)


def _logprobs(body: Mapping[str, Any], api: Api) -> int | None:
    """Top logprobs per token; None for none. Chat asks with ``logprobs: true`` and
    ``top_logprobs: k``, completions with ``logprobs: k``."""
    if api == "completions":
        return _int(body, "logprobs", low=0, high=MAX_TOP_LOGPROBS)
    top = _int(body, "top_logprobs", low=0, high=MAX_TOP_LOGPROBS)
    if not body.get("logprobs"):
        if top is not None:
            raise WireError(
                "when using `top_logprobs`, `logprobs` must be set to true.",
                field="top_logprobs",
                value=top,
            )
        return None
    return top or 0


def _include_usage(body: Mapping[str, Any], stream: bool) -> bool:
    options = body.get("stream_options")
    if options is None:
        return False
    if not isinstance(options, dict):
        raise WireError("'stream_options' must be an object", field="stream_options")
    if not stream:
        raise WireError(
            "Stream options can only be defined when `stream=True`.", field="stream_options"
        )
    return bool(options.get("include_usage"))


def _stop(stop: Any) -> list[str]:
    stop = [stop] if isinstance(stop, str) else (stop or [])
    if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
        raise WireError(
            f"'stop' must be a string or a list of strings (got {stop!r})", field="stop"
        )
    return stop


def _number(body: Mapping[str, Any], key: str) -> float | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise WireError(f"'{key}' must be a number (got {value!r})", field=key, value=value)
    return float(value)


def _int(
    body: Mapping[str, Any], key: str, *, low: int | None = None, high: int | None = None
) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if (
        not _is_int(value)
        or (low is not None and value < low)
        or (high is not None and value > high)
    ):
        bounds = (
            f" from {low} to {high}"
            if low is not None and high is not None
            else f" >= {low}"
            if low is not None
            else ""
        )
        raise WireError(
            f"'{key}' must be an integer{bounds} (got {value!r})", field=key, value=value
        )
    return int(value)


def _flag(body: Mapping[str, Any], key: str) -> bool:
    value = body.get(key)
    if value is not None and not isinstance(value, bool):
        raise WireError(f"'{key}' must be true or false (got {value!r})", field=key, value=value)
    return bool(value)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_ids(items: list[Any]) -> bool:
    return all(_is_int(t) for t in items)
