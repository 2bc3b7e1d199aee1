"""Response bodies and server-sent events for :mod:`agl.testing.openai_server`.

The scripted generations (:mod:`agl.testing._openai_wire`) put into the bodies and chunks
:mod:`agl.openai_wire` builds, as every agl server builds them.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

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
