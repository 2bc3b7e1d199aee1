"""The agent of ``benchmarks/runner.py``: four chat calls with the real openai client, reward 1."""

from __future__ import annotations

import os

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
