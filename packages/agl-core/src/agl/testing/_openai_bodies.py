"""Response bodies and server-sent events for :mod:`agl.testing.openai_server`.

The scripted generations (:mod:`agl.testing._openai_wire`) put into the bodies and chunks
:mod:`agl.openai_wire` builds, as every agl server builds them; and the Responses API's
answers, which only the scripted server gives.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from agl import openai_wire as wire
from agl.testing._openai_wire import JSON, Generation, Step, logprobs, text_offset


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
    choices = [
        wire.chat_choice(
            i,
            content=gen.content,
            tool_calls=gen.tool_calls,
            logprobs=None if top is None else wire.chat_logprobs(logprobs(gen.token_ids, 0, top)),
            finish_reason=gen.finish_reason,
            token_ids=gen.token_ids if ids else None,
        )
        for i, gen in enumerate(gens)
    ]
    total = wire.usage(len(prompt), sum(len(g.token_ids) for g in gens))
    return wire.chat_body(head, choices, total, prompt_token_ids=prompt if ids else None)


def chat_stream(
    head: JSON,
    gens: Sequence[Generation],
    prompt: Sequence[int],
    ids: bool,
    top: int | None,
    include_usage: bool,
) -> Iterator[str]:
    """The SSE events of a streamed chat completion, ``data: [DONE]`` last."""
    for i in range(len(gens)):
        yield wire.sse(wire.role_chunk(head, i, prompt_token_ids=prompt if ids else None))
    for i, gen, step in _interleave(gens):
        if step.kind == "tail" and not ids:
            continue  # vLLM sends tokens that add nothing only when asked for token ids
        chosen = None if top is None else logprobs(step.token_ids, step.start, top)
        chunk = wire.chat_chunk(
            head,
            i,
            delta=_delta(gen, step),
            logprobs=None if chosen is None else wire.chat_logprobs(chosen),
            finish_reason=step.finish_reason,
            token_ids=step.token_ids if ids else None,
        )
        yield wire.sse(chunk)
    if include_usage:
        total = wire.usage(len(prompt), sum(len(g.token_ids) for g in gens))
        yield wire.sse(wire.usage_chunk(head, total))
    yield wire.DONE


def completion(
    head: JSON,
    items: Sequence[tuple[Sequence[int], Generation]],
    prompt_tokens: int,
    ids: bool,
    top: int | None,
) -> JSON:
    """A non-streaming ``text_completion`` body; ``items`` pairs each choice with its prompt."""
    choices = [
        wire.completion_choice(
            i,
            text=gen.content or "",
            logprobs=None
            if top is None
            else wire.completion_logprobs(logprobs(gen.token_ids, 0, top)),
            finish_reason=gen.finish_reason,
            prompt_token_ids=prompt if ids else None,
            token_ids=gen.token_ids if ids else None,
        )
        for i, (prompt, gen) in enumerate(items)
    ]
    total = wire.usage(prompt_tokens, sum(len(g.token_ids) for _, g in items))
    return wire.completion_body(head, choices, total)


def completion_stream(
    head: JSON,
    items: Sequence[tuple[Sequence[int], Generation]],
    prompt_tokens: int,
    ids: bool,
    top: int | None,
    include_usage: bool,
) -> Iterator[str]:
    """The SSE events of a streamed text completion, ``data: [DONE]`` last."""
    gens = [gen for _, gen in items]
    seen: set[int] = set()
    for i, gen, step in _interleave(gens):
        lps = None
        if top is not None:
            offset = text_offset(gen.token_ids[: step.start])
            lps = wire.completion_logprobs(logprobs(step.token_ids, step.start, top), offset)
        first = i not in seen
        seen.add(i)
        choice = wire.completion_choice(
            i,
            text=step.text,
            logprobs=lps,
            finish_reason=step.finish_reason,
            prompt_token_ids=items[i][0] if ids and first else None,
            token_ids=step.token_ids if ids else None,
        )
        del choice["prompt_logprobs"]  # vLLM's stream choices have no prompt logprobs
        yield wire.sse(wire.completion_chunk(head, choice))
    if include_usage:
        total = wire.usage(prompt_tokens, sum(len(g.token_ids) for g in gens))
        yield wire.sse(wire.usage_chunk(head, total))
    yield wire.DONE


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
        return wire.sse({"type": kind, "sequence_number": next(seq), **fields}, event=kind)

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
