"""Where a PostgreSQL store spends its time: wall time and CPU per dequeue, split between agl
(this Python process) and PostgreSQL (its server processes), with 1 and K concurrent dequeuers
on an in-process ``postgresql://`` store over a real server; and the same per span for spans
added in batches of 512 (what OpenTelemetry's batch exporter sends at most).

On a machine of few cores the sum of the two CPU figures bounds throughput: N cores cannot do
more than N / (CPU per dequeue) dequeues a second, whatever the number of store servers.
Prints figures only. Run: ``uv run --no-sync python benchmarks/postgres_cpu.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import time
from pathlib import Path

from pydantic import JsonValue

import agl
from agl import RolloutRequest, Span
from agl.testing.postgres import PostgresServer

BATCH = 512


def _stat(pid: int | str) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:  # gone meanwhile
        return None
    return text[text.rindex(")") + 2 :].split()  # the fields after the command name


def server_cpu(pid: int) -> float:
    """CPU seconds used so far by the server process ``pid`` and its backends (Linux /proc:
    the backends alive now, and those that ended, which the server has reaped)."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        fields = _stat(entry.name)
        if fields is None:
            continue
        # fields[1] is the parent; 11-14 are utime, stime, cutime, cstime
        if entry.name == str(pid):
            total += sum(int(value) for value in fields[11:15])
        elif fields[1] == str(pid):
            total += sum(int(value) for value in fields[11:13])
    return total / ticks


def own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def measure(url: str, dequeuers: int, rollouts: int, server_pid: int) -> str:
    async with agl.open_store(url) as store:
        await store.enqueue_rollouts([RolloutRequest(input=i) for i in range(rollouts)])

        async def dequeuer(index: int) -> int:
            claimed = 0
            while await store.dequeue_rollouts(limit=1, worker_id=f"bench-{index}"):
                claimed += 1
            return claimed

        cpu, pg, start = own_cpu(), server_cpu(server_pid), time.perf_counter()
        claimed = await asyncio.gather(*(dequeuer(i) for i in range(dequeuers)))
        wall = time.perf_counter() - start
        cpu, pg = own_cpu() - cpu, server_cpu(server_pid) - pg
    if sum(claimed) != rollouts:
        raise RuntimeError(f"{sum(claimed)} claims for {rollouts} rollouts")
    per = 1e3 / rollouts
    return (
        f"{dequeuers:>3} dequeuers | {rollouts / wall:>7,.0f} dequeues/s | wall {wall * per:.2f} ms"
        f" | agl CPU {cpu * per:.2f} ms | PostgreSQL CPU {pg * per:.2f} ms"
    )


async def measure_spans(url: str, rollouts: int, per_rollout: int, server_pid: int) -> str:
    async with agl.open_store(url) as store:
        await store.enqueue_rollouts([RolloutRequest(input=i) for i in range(rollouts)])
        claims = await store.dequeue_rollouts(limit=rollouts, worker_id="bench")
        attributes: dict[str, JsonValue] = {
            "gen_ai.request.model": "m",
            "gen_ai.usage.input_tokens": 9,
        }
        spans = [
            Span.create(
                name="bench",
                attributes=attributes,
                rollout_id=claim.rollout.rollout_id,
                attempt_id=claim.attempt.attempt_id,
            )
            for claim in claims
            for _ in range(per_rollout)
        ]
        batches = [spans[i : i + BATCH] for i in range(0, len(spans), BATCH)]
        cpu, pg, start = own_cpu(), server_cpu(server_pid), time.perf_counter()
        for batch in batches:
            await store.add_spans(batch)
        wall = time.perf_counter() - start
        cpu, pg = own_cpu() - cpu, server_cpu(server_pid) - pg
        stored = (await store.statistics()).spans
    if stored != len(spans):
        raise RuntimeError(f"{stored} spans stored of {len(spans)} added")
    per = 1e6 / len(spans)
    return (
        f"add_spans, {BATCH}/call | {len(spans) / wall:>7,.0f} spans/s | wall {wall * per:.1f} us"
        f" | agl CPU {cpu * per:.1f} us | PostgreSQL CPU {pg * per:.1f} us"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=1_000)
    parser.add_argument("--dequeuers", default="1,4,16")
    args = parser.parse_args()
    print(f"{os.cpu_count()} CPUs, {args.rollouts} rollouts per row, one durable commit each")
    with PostgresServer() as server:
        assert server.pid is not None
        for index, count in enumerate(int(n) for n in args.dequeuers.split(",")):
            url = server.create_database(f"cpu_{index}")
            print(asyncio.run(measure(url, count, args.rollouts, server.pid)))
        url = server.create_database("cpu_spans")
        print(asyncio.run(measure_spans(url, args.rollouts, 10, server.pid)))


if __name__ == "__main__":
    main()
