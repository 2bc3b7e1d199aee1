"""The agents of ``benchmarks/runner.py``: four chat calls and a reward of 1, made with the real
openai client (traced by agl's OpenAI instrumentation) or as plain HTTP calls."""

from __future__ import annotations

import os

import aiohttp
import openai

import agl

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
    """The same four calls as plain HTTP (aiohttp), each recorded as an ``agl.operation`` span.

    A trivial agent: what it costs is agl's (runner, tracer, store), not an LLM client library's.
    """
    global _session  # noqa: PLW0603 - one connection pool per runner process
    if _session is None:
        _session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
    url = os.environ["AGL_BENCH_LLM"] + "/chat/completions"
    messages: list[dict[str, str]] = [{"role": "user", "content": f"task {task}"}]
    for _ in range(4):
        with agl.operation("chat") as call:
            call.set_input(messages)
            async with _session.post(url, json={"model": "bench", "messages": messages}) as reply:
                reply.raise_for_status()
                content = (await reply.json())["choices"][0]["message"]["content"] or ""
            call.set_output(content)
        messages.append({"role": "assistant", "content": content})
        messages.append({"role": "user", "content": "and then?"})
    return 1.0
