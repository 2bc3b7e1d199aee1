"""Wires benchmark: what the gateway adds to a call on each wire an agent may speak.

The scripted vLLM-format engine (its own process) serves chat completions, the OpenAI Responses
API and the Anthropic Messages API, the last two through the same translation the gateway uses;
``agl gateway serve`` (its own process, spans to ``agl store serve``) serves each wire by
translating it to one chat call and recording the engine's token ids. For each wire, plain and
streamed, the same request is sent straight to the engine and through the gateway, one at a
time, in interleaved rounds so drift hits both alike: p50/p99 of each and the latency the gateway
adds (target: p50 at most 1 ms on a quiet machine, as for chat). Every call through the gateway
is then checked to be in the store, with its wire and its token ids.

Prints figures only. Run: ``uv run --no-sync python benchmarks/wires.py [--calls 1000]``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from typing import Any

import httpx

import agl
from agl import RolloutRequest, semconv
from agl.testing.ports import free_port
from capture import UPSTREAM, percentile, process

QUESTION = "What is 2+2?"
WIRES: dict[str, tuple[str, dict[str, Any]]] = {
    "chat": ("chat/completions", {"messages": [{"role": "user", "content": QUESTION}]}),
    "responses": ("responses", {"input": QUESTION}),
    "messages": (
        "messages",
        {"max_tokens": 64, "messages": [{"role": "user", "content": QUESTION}]},
    ),
}


def timed(http: httpx.Client, url: str, body: dict[str, Any], stream: bool) -> float:
    """Milliseconds until the whole answer has arrived."""
    start = time.perf_counter()
    if stream:
        with http.stream("POST", url, json={**body, "stream": True}) as reply:
            reply.raise_for_status()
            for _ in reply.iter_bytes():
                pass
    else:
        http.post(url, json=body).raise_for_status()
    return (time.perf_counter() - start) * 1000


def measure(
    direct: str, through: str, calls: int, rounds: int = 5
) -> dict[tuple[str, bool], tuple[list[float], list[float]]]:
    """Per (wire, streamed): latencies straight to the engine and through the gateway."""
    out: dict[tuple[str, bool], tuple[list[float], list[float]]] = {}
    per_round = max(1, calls // rounds)
    with httpx.Client(headers={"x-api-key": "-", "authorization": "Bearer -"}) as http:
        for wire, (path, body) in WIRES.items():
            for stream in (False, True):
                ask = {"model": "m", **body}
                for base in (direct, through):  # warm up connections and code paths
                    for _ in range(30):
                        timed(http, f"{base}/{path}", ask, stream)
                mine: tuple[list[float], list[float]] = ([], [])
                for _ in range(rounds):
                    for side, base in enumerate((direct, through)):
                        for _ in range(per_round):
                            mine[side].append(timed(http, f"{base}/{path}", ask, stream))
                out[(wire, stream)] = mine
                print(f"  {wire}{' streamed' if stream else ''} done", file=sys.stderr)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1000, help="per wire and side")
    args = parser.parse_args()
    up_port, store_port, gw_port = free_port(), free_port(), free_port()
    upstream = f"http://127.0.0.1:{up_port}/v1"
    store_url = f"http://127.0.0.1:{store_port}"
    gateway = f"http://127.0.0.1:{gw_port}"
    python = sys.executable
    with (
        process([python, "-c", UPSTREAM, str(up_port)], f"{upstream}/models"),
        process([python, "-m", "agl", "store", "serve", "--store", "memory://", "--port",
                 str(store_port), "--log-level", "warning"], f"{store_url}/health"),
        process([python, "-m", "agl", "gateway", "serve", "--upstream", upstream, "--store",
                 store_url, "--port", str(gw_port), "--log-level", "warning"],
                f"{gateway}/health"),
    ):  # fmt: skip

        async def rollout() -> tuple[str, str]:
            async with agl.open_store(store_url) as store:
                await store.enqueue_rollouts([RolloutRequest(input="bench")])
                [claim] = await store.dequeue_rollouts()
                return claim.rollout.rollout_id, claim.attempt.attempt_id

        rollout_id, attempt_id = asyncio.run(rollout())
        through = f"{gateway}/rollout/{rollout_id}/attempt/{attempt_id}/v1"
        print(f"latency, {args.calls} calls per wire and side…", file=sys.stderr)
        results = measure(upstream, through, args.calls)
        flush = f"{gateway}/rollout/{rollout_id}/attempt/{attempt_id}/flush"
        httpx.post(flush, timeout=60).raise_for_status()

        async def recorded() -> dict[str, int]:
            async with agl.open_store(store_url) as store:
                spans = await store.query_spans(rollout_id)
            counts: dict[str, int] = {}
            for span in spans:
                if span.attributes.get(semconv.AGL_PROMPT_TOKEN_IDS) is None:
                    raise RuntimeError(f"a call has no token ids: {span.name}")
                wire = str(span.attributes.get(semconv.AGL_WIRE))
                counts[wire] = counts.get(wire, 0) + 1
            return counts

        counts = asyncio.run(recorded())

    width = 22
    print(f"{'wire':<{width}}  {'direct p50 / p99':>18}  {'gateway p50 / p99':>18}  "
          f"{'added p50 / p99':>16}  target")  # fmt: skip
    for (wire, stream), (direct, proxied) in results.items():
        name = f"{wire}{', streamed' if stream else ''}"
        added50 = statistics.median(proxied) - statistics.median(direct)
        added99 = percentile(proxied, 99) - percentile(direct, 99)
        print(
            f"{name:<{width}}  "
            f"{statistics.median(direct):>7.2f} / {percentile(direct, 99):>5.2f} ms  "
            f"{statistics.median(proxied):>7.2f} / {percentile(proxied, 99):>5.2f} ms  "
            f"{added50:>6.2f} / {added99:>5.2f} ms  p50 ≤ 1 ms"
        )
    expected = {wire: 2 * (30 + len(results[(wire, False)][1])) for wire in WIRES}
    print(f"recorded calls by wire: {counts} (sent: {expected})")
    if counts != expected:
        raise RuntimeError("the store does not hold every call through the gateway")


if __name__ == "__main__":
    main()
