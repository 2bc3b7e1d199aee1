"""The agents of ``benchmarks/runner.py``: four chat calls and a reward of 1, made with the real
openai client (traced by agl's OpenAI instrumentation) or as plain HTTP calls recorded as
LLM-call spans."""

from __future__ import annotations

import json
import os
from typing import Any

import aiohttp
import openai

import agl
from agl import semconv

_client: openai.AsyncOpenAI | None = None


def _openai() -> openai.AsyncOpenAI:
    global _client  # noqa: PLW0603 - one client (one connection pool) per runner process
    if _client is None:
        # openai's aiohttp-backed client: the default httpx pool slows to ~200 calls/s with
        # many concurrent calls in one process.
        _client = openai.AsyncOpenAI(
            base_url=os.environ["AGL_BENCH_LLM"],
            api_key="unused",
            max_retries=0,
            http_client=openai.DefaultAioHttpClient(),
        )
    return _client


@agl.rollout
async def four_calls(task: int) -> float:
    client = _openai()
    messages: list[dict[str, str]] = [{"role": "user", "content": f"task {task}"}]
    for _ in range(4):
        response = await client.chat.completions.create(
            model="bench",
            messages=messages,  # type: ignore[arg-type]
        )
        messages.append({"role": "assistant", "content": response.choices[0].message.content or ""})
        messages.append({"role": "user", "content": "and then?"})
    return 1.0


_session: aiohttp.ClientSession | None = None


@agl.rollout
async def four_http_calls(task: int) -> float:
    """The same four calls as plain HTTP (aiohttp), each recorded as an LLM-call span.

    A trivial agent: what it costs is agl's (runner, tracer, store), not an LLM client
    library's. Each call's span carries the OpenTelemetry GenAI attributes (operation, model,
    response id, messages, token usage) that agl's own instrumentation records, so LightningRL
    reads these calls like any traced client's.
    """
    global _session  # noqa: PLW0603 - one connection pool per runner process
    if _session is None:
        _session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
    url = os.environ["AGL_BENCH_LLM"] + "/chat/completions"
    messages: list[dict[str, str]] = [{"role": "user", "content": f"task {task}"}]
    for _ in range(4):
        with agl.operation("chat bench") as call:
            async with _session.post(url, json={"model": "bench", "messages": messages}) as reply:
                reply.raise_for_status()
                body = await reply.json()
            content = body["choices"][0]["message"]["content"] or ""
            _record_llm_call(call.span, messages, body, content)
        messages.append({"role": "assistant", "content": content})
        messages.append({"role": "user", "content": "and then?"})
    return 1.0


def _record_llm_call(
    span: Any, messages: list[dict[str, str]], body: dict[str, Any], content: str
) -> None:
    def parts(text: str) -> list[dict[str, str]]:
        return [{"type": "text", "content": text}]

    if span is None:  # not inside a rollout: nothing records
        return
    sent = [{"role": m["role"], "parts": parts(m["content"])} for m in messages]
    answer = [{"role": "assistant", "parts": parts(content), "finish_reason": "stop"}]
    usage = body.get("usage") or {}
    span.set_attributes(
        {
            semconv.GEN_AI_OPERATION_NAME: "chat",
            semconv.GEN_AI_PROVIDER_NAME: "openai",
            semconv.GEN_AI_REQUEST_MODEL: "bench",
            semconv.GEN_AI_RESPONSE_ID: body["id"],
            semconv.GEN_AI_INPUT_MESSAGES: json.dumps(sent),
            semconv.GEN_AI_OUTPUT_MESSAGES: json.dumps(answer),
            semconv.GEN_AI_USAGE_INPUT_TOKENS: usage.get("prompt_tokens", 0),
            semconv.GEN_AI_USAGE_OUTPUT_TOKENS: usage.get("completion_tokens", 0),
        }
    )
