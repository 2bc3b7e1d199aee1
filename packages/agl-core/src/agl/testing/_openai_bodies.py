"""Response bodies and server-sent events for :mod:`agl.testing.openai_server`.

Builders for the JSON the scripted server sends, in vLLM's shapes (see the server module's
docstring for the sources); :mod:`agl.testing._openai_wire` makes the tokens they carry.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from agl.testing._openai_wire import (
    JSON,
    Generation,
    Step,
    chat_logprobs,
    completion_logprobs,
    text_offset,
)

# --- ids, usage, errors, events --------------------------------------------------------------


def new_id(prefix: str) -> str:
    """A fresh id in vLLM's style: ``chatcmpl-<hex>``, ``cmpl-<hex>``, ``resp_<hex>``..."""
    return f"{prefix}{uuid.uuid4().hex}"


def head(body: Mapping[str, Any], prefix: str, model: str) -> JSON:
    """The ``id``, ``created`` and ``model`` every body starts with (``model`` echoed)."""
    return {"id": new_id(prefix), "created": now(), "model": body.get("model") or model}


def _top(head: JSON, kind: str) -> JSON:
    return {"id": head["id"], "object": kind, "created": head["created"], "model": head["model"]}


def model_list(model: str, max_model_len: int) -> JSON:
    """``GET /v1/models``: the one served model, with vLLM's ``max_model_len``."""
    card = {"id": model, "object": "model", "created": now(), "owned_by": "vllm", "root": model}
    return {"object": "list", "data": [{**card, "parent": None, "max_model_len": max_model_len}]}


def now() -> int:
    """The ``created`` timestamp: whole seconds since the epoch."""
    return int(time.time())


def usage(prompt_tokens: int, completion_tokens: int) -> JSON:
    """A chat/completions ``usage`` object."""
    return {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
        "prompt_tokens_details": None,
    }


def error_body(status: int, message: str, kind: str | None = None) -> JSON:
    """vLLM's error body: ``{"error": {"message", "type", "param", "code"}}``."""
    return {
        "error": {
            "message": message,
            "type": kind or error_type(status),
            "param": None,
            "code": status,
        }
    }


def error_type(status: int) -> str:
    """The error ``type`` for a status: vLLM's ``BadRequestError`` for 400, else the SDK's name."""
    names = {
        400: "BadRequestError",
        401: "AuthenticationError",
        403: "PermissionDeniedError",
        404: "NotFoundError",
        409: "ConflictError",
        422: "UnprocessableEntityError",
        429: "RateLimitError",
        500: "InternalServerError",
        503: "ServiceUnavailableError",
    }
    return names.get(status, "APIError")


def sse(data: Mapping[str, Any] | str, event: str | None = None) -> str:
    """One server-sent event: ``data: <json>`` (after ``event: <name>`` when given)."""
    payload = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    return (f"event: {event}\n" if event else "") + f"data: {payload}\n\n"


def _interleave(gens: Sequence[Generation]) -> Iterator[tuple[int, Generation, Step]]:
    """Steps of all choices, round-robin, the way an engine steps a batch of sequences."""
    for depth in range(max(len(g.steps) for g in gens)):
        for i, gen in enumerate(gens):
            if depth < len(gen.steps):
                yield i, gen, gen.steps[depth]


def _delta(gen: Generation, step: Step) -> JSON:
    if step.kind == "head" and step.tool is not None:
        call = gen.tool_calls[step.tool]
        function = {"name": call["function"]["name"], "arguments": ""}
        return {
            "tool_calls": [
                {"index": step.tool, "id": call["id"], "type": "function", "function": function}
            ]
        }
    if step.kind == "args":
        return {"tool_calls": [{"index": step.tool, "function": {"arguments": step.text}}]}
    if step.kind == "tail" or (step.kind == "eos" and gen.content is None):
        return {}
    return {"content": step.text}


def chat_completion(
    head: JSON, gens: Sequence[Generation], prompt: Sequence[int], ids: bool, top: int | None
) -> JSON:
    """A non-streaming ``chat.completion`` body; ``head`` holds ``id``, ``created``, ``model``."""
    choices = []
    for i, gen in enumerate(gens):
        message: JSON = {
            "role": "assistant",
            "content": gen.content,
            "refusal": None,
            "annotations": None,
            "audio": None,
            "function_call": None,
        }
        if gen.tool_calls:
            message["tool_calls"] = gen.tool_calls
        message["reasoning"] = None
        logprobs = None if top is None else {"content": chat_logprobs(gen.token_ids, 0, top)}
        choices.append(
            {
                "index": i,
                "message": message,
                "logprobs": logprobs,
                "finish_reason": gen.finish_reason,
                "stop_reason": None,
                "token_ids": gen.token_ids if ids else None,
            }
        )
    completion_tokens = sum(len(g.token_ids) for g in gens)
    return {
        **_top(head, "chat.completion"),
        "choices": choices,
        "service_tier": None,
        "system_fingerprint": None,
        "usage": usage(len(prompt), completion_tokens),
        "prompt_logprobs": None,
        "prompt_token_ids": list(prompt) if ids else None,
        "kv_transfer_params": None,
    }


def chat_stream(
    head: JSON,
    gens: Sequence[Generation],
    prompt: Sequence[int],
    ids: bool,
    top: int | None,
    include_usage: bool,
) -> Iterator[str]:
    """The SSE events of a streamed chat completion, ``data: [DONE]`` last."""
    base = _top(head, "chat.completion.chunk")
    for i in range(len(gens)):
        delta = {"role": "assistant", "content": ""}
        choice = {"index": i, "delta": delta, "logprobs": None, "finish_reason": None}
        yield sse({**base, "choices": [choice], "prompt_token_ids": list(prompt) if ids else None})
    for i, gen, step in _interleave(gens):
        if step.kind == "tail" and not ids:
            continue  # vLLM sends tokens that add nothing only when asked for token ids
        logprobs = None
        if top is not None:
            logprobs = {"content": chat_logprobs(step.token_ids, step.start, top)}
        choice = {
            "index": i,
            "delta": _delta(gen, step),
            "logprobs": logprobs,
            "finish_reason": step.finish_reason,
        }
        if step.finish_reason:
            choice["stop_reason"] = None
        choice["token_ids"] = step.token_ids if ids else None
        yield sse({**base, "choices": [choice]})
    if include_usage:
        total = usage(len(prompt), sum(len(g.token_ids) for g in gens))
        del total["prompt_tokens_details"]
        yield sse({**base, "choices": [], "usage": total})
    yield sse("[DONE]")


def completion(
    head: JSON,
    items: Sequence[tuple[Sequence[int], Generation]],
    prompt_tokens: int,
    ids: bool,
    top: int | None,
) -> JSON:
    """A non-streaming ``text_completion`` body; ``items`` pairs each choice with its prompt."""
    choices = []
    for i, (prompt, gen) in enumerate(items):
        logprobs = None if top is None else completion_logprobs(gen.token_ids, 0, top, 0)
        choices.append(
            {
                "index": i,
                "text": gen.content or "",
                "logprobs": logprobs,
                "finish_reason": gen.finish_reason,
                "stop_reason": None,
                "prompt_logprobs": None,
                "prompt_token_ids": list(prompt) if ids else None,
                "token_ids": gen.token_ids if ids else None,
            }
        )
    completion_tokens = sum(len(g.token_ids) for _, g in items)
    return {
        **_top(head, "text_completion"),
        "choices": choices,
        "service_tier": None,
        "system_fingerprint": None,
        "usage": usage(prompt_tokens, completion_tokens),
        "kv_transfer_params": None,
    }


def completion_stream(
    head: JSON,
    items: Sequence[tuple[Sequence[int], Generation]],
    prompt_tokens: int,
    ids: bool,
    top: int | None,
    include_usage: bool,
) -> Iterator[str]:
    """The SSE events of a streamed text completion, ``data: [DONE]`` last."""
    base = _top(head, "text_completion")
    gens = [gen for _, gen in items]
    seen: set[int] = set()
    for i, gen, step in _interleave(gens):
        logprobs = None
        if top is not None:
            offset = text_offset(gen.token_ids[: step.start])
            logprobs = completion_logprobs(step.token_ids, step.start, top, offset)
        first = i not in seen
        seen.add(i)
        prompt = list(items[i][0]) if ids and first else None
        choice = {
            "index": i,
            "text": step.text,
            "logprobs": logprobs,
            "finish_reason": step.finish_reason,
            "stop_reason": None,
            "prompt_token_ids": prompt,
            "token_ids": step.token_ids if ids else None,
        }
        yield sse({**base, "choices": [choice], "usage": None})
    if include_usage:
        final = usage(prompt_tokens, sum(len(g.token_ids) for g in gens))
        del final["prompt_tokens_details"]
        yield sse({**base, "choices": [], "usage": final})
    yield sse("[DONE]")


def response_output(gen: Generation, message_id: str, call_ids: Sequence[str]) -> list[JSON]:
    """The ``output`` items of a Responses API answer: one message, or the function calls."""
    if gen.tool_calls:
        return [
            {
                "id": call_ids[i],
                "type": "function_call",
                "call_id": call["id"],
                "name": call["function"]["name"],
                "arguments": call["function"]["arguments"],
                "status": "completed",
            }
            for i, call in enumerate(gen.tool_calls)
        ]
    text = {"type": "output_text", "text": gen.content or "", "annotations": [], "logprobs": []}
    status = "incomplete" if gen.finish_reason == "length" else "completed"
    return [
        {
            "id": message_id,
            "type": "message",
            "role": "assistant",
            "status": status,
            "content": [text],
        }
    ]


def response(
    head: JSON, body: Mapping[str, Any], output: list[JSON], gen: Generation | None, prompt: int
) -> JSON:
    """A ``response`` object; ``gen=None`` gives the in-progress one the stream starts with."""
    status = "in_progress" if gen is None else "completed"
    if gen is not None and gen.finish_reason == "length":
        status = "incomplete"
    made = len(gen.token_ids) if gen else 0
    return {
        "id": head["id"],
        "object": "response",
        "created_at": head["created"],
        "model": head["model"],
        "status": status,
        "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
        "instructions": body.get("instructions"),
        "metadata": body.get("metadata"),
        "output": output,
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "temperature": body.get("temperature", 1.0),
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": body.get("tools", []),
        "top_p": body.get("top_p", 1.0),
        "background": False,
        "max_output_tokens": body.get("max_output_tokens"),
        "previous_response_id": None,
        "reasoning": None,
        "service_tier": "auto",
        "text": None,
        "top_logprobs": None,
        "truncation": "disabled",
        "user": None,
        "usage": None
        if gen is None
        else {
            "input_tokens": prompt,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": made,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": prompt + made,
        },
    }


def response_stream(
    head: JSON, body: Mapping[str, Any], gen: Generation, output: list[JSON], prompt: int
) -> Iterator[str]:
    """The typed SSE events of a streamed Responses API answer, ``response.created`` first."""
    seq = iter(range(1 << 30))

    def event(kind: str, **fields: Any) -> str:
        return sse({"type": kind, "sequence_number": next(seq), **fields}, event=kind)

    yield event("response.created", response=response(head, body, [], None, prompt))
    yield event("response.in_progress", response=response(head, body, [], None, prompt))
    for at, item in enumerate(output):
        where = {"item_id": item["id"], "output_index": at}
        if item["type"] == "message":
            start = {**item, "status": "in_progress", "content": []}
            yield event("response.output_item.added", output_index=at, item=start)
            part = {**item["content"][0], "text": ""}
            yield event("response.content_part.added", **where, content_index=0, part=part)
            for step in gen.steps:
                if step.kind == "content" and step.text:
                    yield event(
                        "response.output_text.delta",
                        **where,
                        content_index=0,
                        delta=step.text,
                        logprobs=[],
                    )
            text = item["content"][0]["text"]
            yield event(
                "response.output_text.done", **where, content_index=0, text=text, logprobs=[]
            )
            part = item["content"][0]
            yield event("response.content_part.done", **where, content_index=0, part=part)
        else:
            start = {**item, "arguments": "", "status": "in_progress"}
            yield event("response.output_item.added", output_index=at, item=start)
            for step in gen.steps:
                if step.kind == "args" and step.tool == at and step.text:
                    yield event("response.function_call_arguments.delta", **where, delta=step.text)
            yield event(
                "response.function_call_arguments.done",
                **where,
                arguments=item["arguments"],
                name=item["name"],
            )
        yield event("response.output_item.done", output_index=at, item=item)
    final = response(head, body, output, gen, prompt)
    yield event(f"response.{final['status']}", response=final)
