"""What making a ``ChatOpenAI`` per attempt costs, with and without ``agl_langchain.chat_model``.

Each attempt's gateway endpoint names the attempt, which defeats langchain-openai's client
cache (keyed by base URL): a plain ``ChatOpenAI(base_url=llm.endpoint)`` builds two HTTP
clients, each parsing the CA bundle, on the event loop the runner's agents share. Prints the
median milliseconds per model over ``--attempts`` attempts, made inside a running event loop as
an async agent makes them. Nothing is sent: no server is needed.

    uv run --no-sync python benchmarks/langchain_chat_model.py
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Callable
from typing import Any

from langchain_openai import ChatOpenAI

import agl
import agl_langchain

PUBLISHED = agl.LLM(
    endpoint="http://127.0.0.1:9/rollout/{rollout_id}/attempt/{attempt_id}/v1", model="m"
)


def median_ms(make: Callable[[agl.LLM], Any], attempts: int, offset: int) -> float:
    times = []
    for index in range(attempts):
        llm = PUBLISHED.for_attempt(f"ro-{offset + index}", "at-1", api_key="token")
        start = time.perf_counter()
        make(llm)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def plain(llm: agl.LLM) -> ChatOpenAI:
    return ChatOpenAI(base_url=llm.endpoint, api_key=llm.api_key, model=llm.model)


async def main(attempts: int) -> None:
    warm = PUBLISHED.for_attempt("ro-warm", "at-1", api_key="token")
    plain(warm)  # warm imports and langchain's own caches
    agl_langchain.chat_model(warm)
    before = median_ms(plain, attempts, 0)
    after = median_ms(agl_langchain.chat_model, attempts, attempts)
    print(f"ChatOpenAI(base_url=llm.endpoint)  {before:8.2f} ms per attempt (median of {attempts})")
    print(f"agl_langchain.chat_model(llm)      {after:8.2f} ms per attempt (median of {attempts})")
    await agl_langchain.close_chat_models()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--attempts", type=int, default=100)
    asyncio.run(main(parser.parse_args().attempts))
