"""What goes up to the engine and what comes back to the agent, for one forwarded call.

The gateway asks the engine for more than the agent did (:func:`ask_for_tokens`: the prompt
and response token ids, the sampled tokens' logprobs) and gives the agent back what it asked
for (:func:`as_asked`). A streamed answer is relayed chunk by chunk as it comes
(:func:`relay`), recorded on the way.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp

from agl.gateway._record import CallRecord
from agl.openai_wire import DONE, sse, sse_data

__all__ = ["as_asked", "ask_for_tokens", "relay"]


async def relay(
    reply: aiohttp.ClientResponse,
    record: CallRecord,
    asked: dict[str, Any],
    started: float,
    submit: Callable[[CallRecord], None],
) -> AsyncIterator[bytes]:
    """Relay the engine's stream to the agent, recording each chunk; ``submit`` the record
    once: at ``[DONE]`` (before the agent sees it, so a flush after the agent's call returns
    always finds the span), or when the stream breaks or the client leaves."""
    done = submitted = False

    def finish() -> None:
        nonlocal submitted
        if not submitted:
            submitted = True
            record.finish_stream()
            submit(record)

    try:
        async for raw in reply.content:
            payload = sse_data(raw.decode(errors="replace"))
            if payload is None:
                continue
            if payload == "[DONE]":
                done = True
                finish()
                yield DONE.encode()
                continue
            try:
                chunk = json.loads(payload)
            except (ValueError, RecursionError):
                continue
            if record.upstream_ms is None:
                record.upstream_ms = (time.perf_counter() - started) * 1000
            record.take_chunk(chunk)
            yield sse(as_asked(chunk, asked, record.kind)).encode()
        done = True
    except (aiohttp.ClientError, TimeoutError) as exc:
        record.error = f"upstream stream broke: {exc}"
    finally:
        reply.close()
        if not done and record.error is None:
            record.error = "client disconnected before the stream ended"
        finish()


def ask_for_tokens(body: dict[str, Any], kind: str) -> dict[str, Any]:
    """The request as sent upstream: with token ids and the sampled tokens' logprobs."""
    forwarded = {**body, "return_token_ids": True}
    if kind == "chat" and not body.get("logprobs"):
        forwarded["logprobs"] = True
    if kind == "completions" and body.get("logprobs") is None:
        forwarded["logprobs"] = 0
    return forwarded


def as_asked(data: dict[str, Any], asked: dict[str, Any], kind: str) -> dict[str, Any]:
    """Remove from a response (or chunk) what the gateway added and the agent did not ask for."""
    keep_ids = bool(asked.get("return_token_ids"))
    keep_logprobs = (
        bool(asked.get("logprobs")) if kind == "chat" else asked.get("logprobs") is not None
    )
    if keep_ids and keep_logprobs:
        return data
    out = dict(data)
    if not keep_ids:
        out.pop("prompt_token_ids", None)
    choices = []
    for original in out.get("choices") or []:
        choice = dict(original) if isinstance(original, dict) else original
        if isinstance(choice, dict):
            if not keep_ids:
                choice.pop("token_ids", None)
                choice.pop("prompt_token_ids", None)
            if not keep_logprobs and "logprobs" in choice:
                choice["logprobs"] = None
        choices.append(choice)
    if "choices" in out:
        out["choices"] = choices
    return out
