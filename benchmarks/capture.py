"""Capture benchmark: what tracing adds to an agent's LLM call, and what the gateway adds.

1. Tracing overhead. An agent makes N chat calls with the real ``openai`` client to the scripted
   OpenAI-compatible server (its own process), with and without agl's tracer and OpenAI
   instrumentation, interleaved in rounds so drift hits both alike. Reports the time per call
   each way and the difference (target: at most 200 µs added per call), the same taken call by
   call (medians, fastest calls), and checks that every traced call reached the store.
2. Gateway latency. The same request sent straight to the upstream and through the gateway
   (``agl gateway serve`` in its own process, spans to ``agl store serve``), one at a time:
   p50/p99 of each and the added latency (target: p50 at most 1 ms added).
3. Gateway throughput. 64 concurrent connections of chat requests through the gateway, from
   ``wrk`` when installed (a C load generator, so the clients do not eat the 2 cores the
   servers need), else from 64 asyncio httpx clients: requests/s (target: 1,500), with the
   upstream alone measured the same way for reference.

Prints figures only. Run: ``uv run --no-sync python benchmarks/capture.py [--calls 2000]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai

import agl
from agl import RolloutRequest, semconv
from agl.store import MemoryStore
from agl.testing.ports import free_port
from agl.tracing import OpenAIInstrumentation

MESSAGES = [{"role": "user", "content": "What is 2+2?"}]
UPSTREAM = "from agl.testing.openai_server import OpenAIServer; import time, sys\n" + (
    "s = OpenAIServer(port=int(sys.argv[1])); s.start(); print('ready', flush=True)\n"
    "while True: time.sleep(3600)"
)


@contextlib.contextmanager
def process(command: list[str], health: str) -> Iterator[None]:
    """Run a server process until its health URL answers; stop it on the way out."""
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(health, timeout=1).status_code < 500:
                    break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{command[:4]} did not start")
            time.sleep(0.1)
        yield
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()


def tracing_overhead(upstream: str, calls: int, rounds: int = 4) -> dict[str, float]:
    """Time N calls plain and N calls traced, interleaved; verify the traced ones were stored.

    Besides the totals, each call is timed alone: the difference of the medians and of the
    fastest calls holds up on a loaded machine, where a few preempted calls swing the totals.
    """
    client = openai.OpenAI(base_url=upstream, api_key="k")
    for _ in range(50):  # warm up connections and code paths
        client.chat.completions.create(model="m", messages=MESSAGES)  # type: ignore[arg-type]
    store = MemoryStore()
    plain = traced = 0.0
    plain_calls: list[float] = []
    traced_calls: list[float] = []
    per_round = calls // rounds

    def timed_calls(into: list[float]) -> float:
        start = time.perf_counter()
        for _ in range(per_round):
            began = time.perf_counter()
            client.chat.completions.create(model="m", messages=MESSAGES)  # type: ignore[arg-type]
            into.append(time.perf_counter() - began)
        return time.perf_counter() - start

    async def run_traced(tracer: agl.Tracer, rollout_id: str, attempt_id: str) -> float:
        async with tracer.rollout(rollout_id, attempt_id):
            return timed_calls(traced_calls)

    async def main() -> tuple[float, float, int]:
        nonlocal plain, traced
        await store.enqueue_rollouts([RolloutRequest(input=i) for i in range(rounds)])
        claims = await store.dequeue_rollouts(limit=rounds)
        with agl.Tracer(store) as tracer:
            instrumentation = OpenAIInstrumentation(tracer)
            for claim in claims:
                plain += timed_calls(plain_calls)
                instrumentation.instrument()
                ids = claim.rollout.rollout_id, claim.attempt.attempt_id
                traced += await run_traced(tracer, *ids)
                instrumentation.uninstrument()
        stored = 0
        for claim in claims:
            spans = await store.query_spans(claim.rollout.rollout_id)
            stored += sum(s.attributes.get(semconv.AGL_SPAN_TYPE) == "llm" for s in spans)
        return plain, traced, stored

    plain, traced, stored = asyncio.run(main())
    if stored != per_round * rounds:
        raise RuntimeError(f"{stored} LLM spans stored for {per_round * rounds} traced calls")
    return {
        "plain_us": plain / (per_round * rounds) * 1e6,
        "traced_us": traced / (per_round * rounds) * 1e6,
        "added_us": (traced - plain) / (per_round * rounds) * 1e6,
        "added_median_us": (statistics.median(traced_calls) - statistics.median(plain_calls)) * 1e6,
        "added_best_us": (min(traced_calls) - min(plain_calls)) * 1e6,
    }


def latencies(url: str, count: int) -> list[float]:
    body = {"model": "m", "messages": MESSAGES}
    out = []
    with httpx.Client() as http:
        for _ in range(50):
            http.post(url, json=body).raise_for_status()
        for _ in range(count):
            start = time.perf_counter()
            http.post(url, json=body).raise_for_status()
            out.append((time.perf_counter() - start) * 1000)
    return out


def throughput(url: str, seconds: int, connections: int, tmp: Path) -> tuple[float, str]:
    """Requests/s at ``connections`` concurrent connections; wrk when installed."""
    body = json.dumps({"model": "m", "messages": MESSAGES})
    if shutil.which("wrk"):
        script = tmp / "chat.lua"
        script.write_text(
            'wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\n'
            f"wrk.body = {json.dumps(body)}\n"
        )
        out = subprocess.run(
            ["wrk", "-t2", f"-c{connections}", f"-d{seconds}s", "-s", str(script), url],
            capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
        if "Non-2xx" in out:
            raise RuntimeError(f"wrk saw failed requests:\n{out}")
        return float(out.split("Requests/sec:")[1].split()[0]), "wrk"

    async def load() -> float:
        done = 0
        deadline = time.perf_counter() + seconds
        async with httpx.AsyncClient(limits=httpx.Limits(max_connections=connections)) as http:

            async def worker() -> None:
                nonlocal done
                while time.perf_counter() < deadline:
                    headers = {"content-type": "application/json"}
                    (await http.post(url, content=body, headers=headers)).raise_for_status()
                    done += 1

            started = time.perf_counter()
            await asyncio.gather(*(worker() for _ in range(connections)))
            return done / (time.perf_counter() - started)

    return asyncio.run(load()), "httpx clients"


def percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[int(q) - 1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--connections", type=int, default=64)
    args = parser.parse_args()
    up_port, store_port, gw_port = free_port(), free_port(), free_port()
    upstream = f"http://127.0.0.1:{up_port}/v1"
    store_url = f"http://127.0.0.1:{store_port}"
    gateway = f"http://127.0.0.1:{gw_port}"
    python = sys.executable
    with (
        tempfile.TemporaryDirectory() as tmp,
        process([python, "-c", UPSTREAM, str(up_port)], f"{upstream}/models"),
        process([python, "-m", "agl", "store", "serve", "--store", "memory://", "--port",
                 str(store_port), "--log-level", "warning"], f"{store_url}/health"),
        process([python, "-m", "agl", "gateway", "serve", "--upstream", upstream, "--store",
                 store_url, "--port", str(gw_port), "--log-level", "warning"],
                f"{gateway}/health"),
    ):  # fmt: skip
        print(f"tracing overhead: {args.calls} calls each way…", file=sys.stderr)
        overhead = tracing_overhead(upstream, args.calls)

        async def rollout() -> tuple[str, str]:
            async with agl.open_store(store_url) as store:
                await store.enqueue_rollouts([RolloutRequest(input="bench")])
                [claim] = await store.dequeue_rollouts()
                return claim.rollout.rollout_id, claim.attempt.attempt_id

        rollout_id, attempt_id = asyncio.run(rollout())
        through = f"{gateway}/rollout/{rollout_id}/attempt/{attempt_id}/v1/chat/completions"
        print("gateway latency…", file=sys.stderr)
        direct = latencies(f"{upstream}/chat/completions", 1000)
        proxied = latencies(through, 1000)
        print("throughput…", file=sys.stderr)
        load = (args.seconds, args.connections, Path(tmp))
        up_rps, tool = throughput(f"{upstream}/chat/completions", *load)
        gw_rps, _ = throughput(through, *load)

    p50_added = statistics.median(proxied) - statistics.median(direct)
    p99_added = percentile(proxied, 99) - percentile(direct, 99)
    rows = [
        ("openai call, untraced", f"{overhead['plain_us']:.0f} µs/call", ""),
        ("openai call, traced + instrumented", f"{overhead['traced_us']:.0f} µs/call", ""),
        ("tracing: added per call", f"{overhead['added_us']:.0f} µs", "≤ 200 µs"),
        ("tracing: added, median / fastest single call",
         f"{overhead['added_median_us']:.0f} / {overhead['added_best_us']:.0f} µs", ""),
        ("direct call latency p50 / p99",
         f"{statistics.median(direct):.2f} / {percentile(direct, 99):.2f} ms", ""),
        ("through gateway p50 / p99",
         f"{statistics.median(proxied):.2f} / {percentile(proxied, 99):.2f} ms", ""),
        ("gateway: added latency p50 / p99",
         f"{p50_added:.2f} / {p99_added:.2f} ms", "p50 ≤ 1 ms"),
        (f"upstream alone, {args.connections} connections ({tool})", f"{up_rps:,.0f} req/s", ""),
        (f"through gateway, {args.connections} connections ({tool})", f"{gw_rps:,.0f} req/s",
         "≥ 1,500 req/s"),
    ]  # fmt: skip
    width = max(len(row[0]) for row in rows)
    for name, value, target in rows:
        print(f"{name:<{width}}  {value:>22}  {target}")


if __name__ == "__main__":
    main()
