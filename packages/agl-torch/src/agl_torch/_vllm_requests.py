"""Read chat and completions requests in vLLM's wire format into prompt ids and sampling.

A request body becomes a :class:`GenerationRequest`, or an :class:`~agl.errors.InvalidInputError`
that names the offending field (the server answers it with a 400). Checks run in a fixed order,
so a request with several mistakes always gets the same error.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from fastapi import Request

from agl.errors import InvalidInputError
from agl_torch.engine import SamplingParams

MAX_TOP_LOGPROBS = 20
"""The most top logprobs a token may ask for (vLLM's default ``max_logprobs``)."""

JSON = dict[str, Any]


@dataclass(frozen=True)
class GenerationRequest:
    """A chat or completions request, read and checked.

    Attributes:
        chat: A chat request (else a completions one).
        prompt: The prompt's token ids (a chat's rendered with the chat template).
        params: How to sample.
        logprobs: How many top logprobs to report per token; ``None`` for no logprobs.
        tools: Read tool calls out of the reply (a chat with ``tools`` whose ``tool_choice``
            is not ``"none"``).
        stream: Answer with server-sent events.
        include_usage: End the stream with a usage chunk.
        token_ids: Return token ids (vLLM's ``return_token_ids``).
        model: The model name the request gave, if any.
    """

    chat: bool
    prompt: list[int]
    params: SamplingParams
    logprobs: int | None
    tools: bool
    stream: bool
    include_usage: bool
    token_ids: bool
    model: str | None


async def read_body(request: Request) -> JSON:
    """The JSON object an HTTP request carries."""
    try:
        body = json.loads(await request.body())
    except ValueError as exc:
        raise InvalidInputError(f"the request body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise InvalidInputError("the request body must be a JSON object")
    return body


def read_chat(body: JSON, tokenizer: Any) -> GenerationRequest:
    """A ``/v1/chat/completions`` request; ``tokenizer`` renders its messages."""
    prompt = _chat_prompt(body, tokenizer)
    top = _chat_top_logprobs(body)
    tools = bool(body.get("tools")) and body.get("tool_choice") != "none"
    params = _sampling(body, ("max_completion_tokens", "max_tokens"), None, top or 0)
    return _request(body, prompt, params, top, chat=True, tools=tools)


def read_completion(body: JSON, tokenizer: Any) -> GenerationRequest:
    """A ``/v1/completions`` request; ``tokenizer`` encodes a text prompt."""
    if body.get("echo"):
        raise InvalidInputError("'echo' is not supported", field="echo", value=True)
    prompt = _prompt_ids(body.get("prompt"), tokenizer)
    top = _optional_int(body, "logprobs", 0, MAX_TOP_LOGPROBS)
    params = _sampling(body, ("max_tokens",), 16, top or 0)
    return _request(body, prompt, params, top, chat=False, tools=False)


def _request(
    body: JSON,
    prompt: list[int],
    params: SamplingParams,
    top: int | None,
    *,
    chat: bool,
    tools: bool,
) -> GenerationRequest:
    model = body.get("model")
    return GenerationRequest(
        chat=chat,
        prompt=prompt,
        params=params,
        logprobs=top,
        tools=tools,
        stream=bool(body.get("stream")),
        token_ids=bool(body.get("return_token_ids")),
        include_usage=_include_usage(body),
        model=model if isinstance(model, str) and model else None,
    )


def _chat_prompt(body: JSON, tokenizer: Any) -> list[int]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise InvalidInputError("'messages' must be a non-empty list of messages", field="messages")
    if not all(isinstance(m, dict) and isinstance(m.get("role"), str) for m in messages):
        raise InvalidInputError("every message must be an object with a 'role'", field="messages")
    tools = body.get("tools")
    if tools is not None and not (
        isinstance(tools, list) and all(isinstance(t, dict) for t in tools)
    ):
        raise InvalidInputError("'tools' must be a list of tool objects", field="tools")
    try:
        text = tokenizer.apply_chat_template(
            [{**m, "content": _content_text(m.get("content"))} for m in messages],
            tools=tools or None,
            add_generation_prompt=True,
            tokenize=False,
        )
    except Exception as exc:  # a template error: the messages do not fit it
        raise InvalidInputError(
            f"the chat template cannot render these messages: {exc}", field="messages"
        ) from exc
    return list(tokenizer.encode(text, add_special_tokens=False))


def _prompt_ids(prompt: Any, tokenizer: Any) -> list[int]:
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
        prompt = prompt[0]
    if isinstance(prompt, str):
        return list(tokenizer.encode(prompt))
    if isinstance(prompt, list) and all(_is_int(t) for t in prompt):
        return prompt
    raise InvalidInputError(
        "'prompt' must be a string or a list of token ids (one prompt per request)",
        field="prompt",
    )


def _sampling(
    body: JSON, max_keys: tuple[str, ...], default_max: int | None, top: int
) -> SamplingParams:
    """The sampling parameters of a request, checked (``n`` too: only 1 is served)."""
    n = body.get("n")
    if n is not None and n != 1:
        raise InvalidInputError(
            f"'n' must be 1: this server generates one choice per request (got {n!r})",
            field="n",
            value=n,
        )
    max_tokens = next((body[k] for k in max_keys if body.get(k) is not None), default_max)
    if max_tokens is not None and (not _is_int(max_tokens) or max_tokens < 1):
        raise InvalidInputError(
            f"{max_keys[0]!r} must be a positive integer (got {max_tokens!r})", field=max_keys[0]
        )
    stop = body.get("stop") or []
    stop = [stop] if isinstance(stop, str) else stop
    if not isinstance(stop, list):
        raise InvalidInputError(f"'stop' must be a string or a list of strings (got {stop!r})")
    seed = body.get("seed")
    if seed is not None and not _is_int(seed):
        raise InvalidInputError(f"'seed' must be an integer (got {seed!r})", field="seed")
    return SamplingParams(
        max_tokens=max_tokens,
        temperature=_number(body, "temperature", 1.0),
        top_p=_number(body, "top_p", 1.0),
        stop=stop,
        seed=seed,
        top_logprobs=top,
    )


def _number(body: JSON, key: str, default: float) -> float:
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidInputError(f"'{key}' must be a number (got {value!r})", field=key)
    return float(value)


def _optional_int(body: JSON, key: str, low: int, high: int) -> int | None:
    value = body.get(key)
    if value is not None and (not _is_int(value) or not low <= value <= high):
        raise InvalidInputError(
            f"'{key}' must be an integer from {low} to {high} (got {value!r})", field=key
        )
    return value


def _chat_top_logprobs(body: JSON) -> int | None:
    """How many top logprobs a chat request wants per token; ``None`` for no logprobs."""
    top = _optional_int(body, "top_logprobs", 0, MAX_TOP_LOGPROBS)
    if not body.get("logprobs"):
        if top:
            raise InvalidInputError(
                "'top_logprobs' needs 'logprobs': true", field="top_logprobs", value=top
            )
        return None
    return top or 0


def _include_usage(body: JSON) -> bool:
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise InvalidInputError("'stream_options' must be an object", field="stream_options")
    return bool((options or {}).get("include_usage")) and bool(body.get("stream"))


def _content_text(content: Any) -> Any:
    """A message's content for a text-only template: text parts joined, anything else as is."""
    if isinstance(content, list) and all(isinstance(p, dict) for p in content):
        return "".join(str(p.get("text", "")) for p in content if p.get("type") == "text")
    return content


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
