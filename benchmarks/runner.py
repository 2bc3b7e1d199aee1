"""Runner benchmark: rollouts/s of many concurrent trivial agents through an HTTP store.

Everything runs on this machine, each part in its own process:

- ``agl store serve`` (memory store by default, ``--db sqlite`` for a SQLite file);
- the scripted OpenAI-compatible server, answering every chat call after 20 ms;
- ``--runners`` ``agl runner`` processes with ``--concurrency`` rollouts each (256 in all by
  default), tracing the ``openai`` client (``--instrument openai``);
- this process, which enqueues the rollouts over HTTP and counts them finishing.

Each agent makes 4 chat calls and returns a reward of 1: with the real ``openai`` client
(``--agent openai``, the default), or as plain aiohttp calls each recorded as an LLM-call span
with the GenAI attributes agl's instrumentation writes (``--agent http``: a trivial agent, so
the figure is agl's runner, tracer and store, not the openai client's own ~1.5 ms of CPU per
call). A warm-up batch runs first; then ``--rollouts`` are enqueued at once and timed until the
last one finishes. The run is checked: every rollout succeeded, and in the latest 50 LightningRL
reads 4 LLM calls (each with its response id) and the final reward. Target: at least 300
rollouts/s on 2 cores. Reference: agentlightning's published store benchmark peaks at ~57
rollouts/s on a 32-core host.

Run: ``uv run --no-sync python benchmarks/runner.py [--rollouts 3000] [--agent http]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

import agl
from agl import RolloutRequest, RolloutStatus
from agl.lightning import extract_calls
from agl.testing.ports import free_port

HERE = Path(__file__).resolve().parent
LLM_SERVER = (
    "import sys, time\n"
    "from agl.testing.openai_server import OpenAIServer, text_reply\n"
    "s = OpenAIServer(lambda request: text_reply('4', delay=0.02), port=int(sys.argv[1]))\n"
    "s.start(); print('ready', flush=True)\n"
    "while True: time.sleep(3600)\n"
)
FINAL = [RolloutStatus.SUCCEEDED, RolloutStatus.FAILED, RolloutStatus.CANCELLED]


@contextlib.contextmanager
def processes(commands: list[list[str]], env: dict[str, str]) -> Iterator[None]:
    procs = [
        subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        for command in commands
    ]
    try:
        yield
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()


def wait_healthy(url: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=1).status_code < 500:
                return
        time.sleep(0.1)
    raise RuntimeError(f"{url} did not answer")


async def run_batch(store: agl.Store, count: int, base: int) -> float:
    """Enqueue ``count`` rollouts at once; return seconds until the last one finished."""
    finished_before = (await store.query_rollouts(status=FINAL, limit=1)).total
    started = time.perf_counter()
    for start in range(0, count, 1000):
        size = min(1000, count - start)
        await store.enqueue_rollouts([RolloutRequest(input=base + start + i) for i in range(size)])
    while True:
        finished = (await store.query_rollouts(status=FINAL, limit=1)).total
        if finished >= finished_before + count:
            return time.perf_counter() - started
        await asyncio.sleep(0.05)


async def check(store: agl.Store, total: int, calls: int) -> dict[str, int]:
    """Every rollout succeeded; the latest 50 each hold ``calls`` LLM calls (as LightningRL
    reads them, each with its response id) and a final reward of 1."""
    succeeded = (await store.query_rollouts(status=RolloutStatus.SUCCEEDED, limit=1)).total
    if succeeded != total:
        raise RuntimeError(f"only {succeeded} of {total} rollouts succeeded")
    sample = min(50, total)
    page = await store.query_rollouts(limit=sample, offset=total - sample)  # the latest ones
    for rollout in page.rollouts:
        read = extract_calls(await store.query_spans(rollout.rollout_id))
        complete = [c for c in read.calls if c.response_id]
        if len(complete) != calls or len(read.calls) != calls or read.final_reward != 1.0:
            raise RuntimeError(
                f"rollout {rollout.rollout_id}: {len(read.calls)} LLM calls "
                f"({len(complete)} with a response id), final reward "
                f"{read.final_reward}; expected {calls} and 1.0"
            )
    return {"succeeded": succeeded, "sampled": len(page.rollouts)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=3000)
    parser.add_argument("--runners", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=256, help="in all, over the runners")
    parser.add_argument("--db", choices=["memory", "sqlite"], default="memory")
    parser.add_argument("--no-instrument", action="store_true", help="do not trace openai")
    parser.add_argument(
        "--agent",
        choices=["openai", "http"],
        default="openai",
        help="openai: calls with the openai client, traced by the OpenAI instrumentation; "
        "http: plain aiohttp calls, each recorded as an LLM-call span",
    )
    args = parser.parse_args()
    traced = args.agent == "http" or not args.no_instrument

    store_port, llm_port = free_port(), free_port()
    tmp = Path(tempfile.mkdtemp(prefix="agl-bench-"))
    db = "memory://" if args.db == "memory" else f"sqlite:///{tmp}/bench.db"
    env = {**os.environ, "AGL_BENCH_LLM": f"http://127.0.0.1:{llm_port}/v1"}
    store_url = f"http://127.0.0.1:{store_port}"
    runner = [sys.executable, "-m", "agl", "runner", "--store", store_url, "--path", str(HERE)]
    agent = "four_calls" if args.agent == "openai" else "four_http_calls"
    runner += ["--agent", f"_bench_agents:{agent}"]
    runner += ["--concurrency", str(args.concurrency // args.runners)]
    if args.agent == "openai" and not args.no_instrument:
        runner += ["--instrument", "openai"]
    servers = [
        [sys.executable, "-m", "agl", "store", "serve", "--store", db, "--port", str(store_port)],
        [sys.executable, "-c", LLM_SERVER, str(llm_port)],
    ]
    with processes(servers, env):
        wait_healthy(f"{store_url}/health")
        wait_healthy(f"http://127.0.0.1:{llm_port}/health")
        with processes([runner] * args.runners, env):

            async def measure() -> tuple[float, float, dict[str, int]]:
                async with agl.open_store(store_url) as store:
                    warm = await run_batch(store, args.concurrency, 0)
                    timed = await run_batch(store, args.rollouts, 10**6)
                    calls = 4 if traced else 0
                    total = args.concurrency + args.rollouts
                    return warm, timed, await check(store, total, calls)

            warm, seconds, checked = asyncio.run(measure())
    rate = args.rollouts / seconds
    print(
        f"runner benchmark: {args.runners} runner process(es) x "
        f"{args.concurrency // args.runners} concurrent, store {args.db} over HTTP, "
        f"agent: {args.agent} client, calls traced: {traced}"
    )
    print(f"  warm-up {args.concurrency} rollouts: {warm:.2f} s")
    print(
        f"  {args.rollouts} rollouts in {seconds:.2f} s: {rate:,.0f} rollouts/s "
        f"({4 * rate:,.0f} LLM calls/s); target >= 300 rollouts/s"
    )
    print(f"  ideal (20 ms x 4 calls, {args.concurrency} at once): {args.concurrency / 0.08:,.0f}")
    print(f"  checked: {checked}")


if __name__ == "__main__":
    main()
