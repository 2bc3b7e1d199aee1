"""The store at scale, as deployed: enqueueing a million rollouts, and counting while serving.

Starts ``agl store serve`` over a SQLite file in a process of its own and, over HTTP:

1. **Enqueue** ``--rollouts`` rollouts in requests of ``--batch``; prints the rate for each
   tenth, so a cost that grows with the table (a scan per rollout) shows as a falling rate.
2. **Spans**: adds ``--spans`` spans (1,000 per request) to one rollout.
3. **Counting while serving**: the median time of ``GET /v1/rollouts/{id}`` alone, then while
   another client asks ``GET /v1/statistics`` in a loop, and the median time of those
   statistics requests. Counted on the writer thread, each count held every other request up;
   it ran on a connection of its own next, and now reads kept counts (``store_counts.py``).

Run: ``uv run --no-sync python benchmarks/store_scale.py`` (about 10 minutes on 2 cores with
the defaults; ``--rollouts 20000 --spans 20000`` for a quick look).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from agl._spans import new_span_id, new_trace_id
from agl.testing.ports import free_port


def serve(db: Path, option: str = "--store") -> tuple[subprocess.Popen[bytes], str]:
    """``agl store serve OPTION sqlite:///DB`` on a free port (``--db``, the option's former
    name, for servers of older revisions)."""
    port = free_port()
    agl = Path(sys.executable).with_name("agl")
    process = subprocess.Popen(
        [str(agl), "store", "serve", option, f"sqlite:///{db}", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return process, url
        except httpx.HTTPError:
            time.sleep(0.1)
    process.kill()
    raise SystemExit("agl store serve did not start within 60 s")


async def enqueue(http: httpx.AsyncClient, total: int, batch: int) -> list[float]:
    """Enqueue ``total`` rollouts; return the rate (rollouts/s) of each tenth."""
    rates: list[float] = []
    done, tenth = 0, max(1, total // 10)
    started = time.perf_counter()
    mark = 0
    while done < total:
        count = min(batch, total - done)
        body = {"requests": [{"input": {"n": done + i}} for i in range(count)]}
        response = await http.post("/v1/rollouts/enqueue", json=body)
        response.raise_for_status()
        done += count
        if done - mark >= tenth or done == total:
            now = time.perf_counter()
            rates.append((done - mark) / (now - started))
            started, mark = now, done
    return rates


async def add_spans(http: httpx.AsyncClient, rollout_id: str, attempt_id: str, total: int) -> float:
    trace = new_trace_id()
    started = time.perf_counter()
    for first in range(0, total, 1000):
        spans = [
            {
                "rollout_id": rollout_id,
                "attempt_id": attempt_id,
                "trace_id": trace,
                "span_id": new_span_id(),
                "name": f"step {first + i}",
                "start_time_unix_nano": time.time_ns(),
                "attributes": {"i": first + i},
            }
            for i in range(min(1000, total - first))
        ]
        (await http.post("/v1/spans", json={"spans": spans})).raise_for_status()
    return total / (time.perf_counter() - started)


async def latency(http: httpx.AsyncClient, path: str, count: int) -> list[float]:
    times = []
    for _ in range(count):
        started = time.perf_counter()
        (await http.get(path)).raise_for_status()
        times.append((time.perf_counter() - started) * 1000)
    return times


async def counting_while_serving(url: str, rollout_id: str, count: int) -> dict[str, float]:
    async with (
        httpx.AsyncClient(base_url=url, timeout=60) as http,
        httpx.AsyncClient(base_url=url, timeout=60) as other,
    ):
        alone = await latency(http, f"/v1/rollouts/{rollout_id}", count)
        stop = asyncio.Event()
        counted: list[float] = []

        async def count_in_a_loop() -> None:
            while not stop.is_set():
                counted.extend(await latency(other, "/v1/statistics", 1))

        counter = asyncio.create_task(count_in_a_loop())
        await asyncio.sleep(0.2)
        beside = await latency(http, f"/v1/rollouts/{rollout_id}", count)
        stop.set()
        await counter
    return {
        "get_alone_ms": statistics.median(alone),
        "get_beside_statistics_ms": statistics.median(beside),
        "get_beside_statistics_p90_ms": statistics.quantiles(beside, n=10)[-1],
        "statistics_ms": statistics.median(counted),
    }


async def run(args: argparse.Namespace, db: Path) -> None:
    process, url = serve(db)
    try:
        async with httpx.AsyncClient(base_url=url, timeout=600) as http:
            rates = await enqueue(http, args.rollouts, args.batch)
            print(
                f"enqueue {args.rollouts:,} rollouts in requests of {args.batch:,}: rollouts/s "
                f"per tenth {', '.join(f'{r:,.0f}' for r in rates)} "
                f"(last / first tenth {rates[-1] / rates[0]:.2f})",
                flush=True,
            )
            claim = (
                await http.post("/v1/rollouts/dequeue", json={"limit": 1, "worker_id": "bench"})
            ).json()["claims"][0]
            rollout_id = claim["rollout"]["rollout_id"]
            rate = await add_spans(http, rollout_id, claim["attempt"]["attempt_id"], args.spans)
            stats = (await http.get("/v1/statistics")).json()
            assert stats["rollouts"] == args.rollouts, stats
            assert stats["spans"] == args.spans, stats
            print(f"{args.spans:,} spans added at {rate:,.0f}/s", flush=True)
        figures = await counting_while_serving(url, rollout_id, args.gets)
        print(
            f"GET /v1/rollouts/{{id}}, median of {args.gets}: {figures['get_alone_ms']:.2f} ms "
            f"alone, {figures['get_beside_statistics_ms']:.2f} ms (p90 "
            f"{figures['get_beside_statistics_p90_ms']:.2f}) while /v1/statistics counts "
            f"{args.spans:,} spans in a loop ({figures['statistics_ms']:.1f} ms each)"
        )
    finally:
        process.terminate()
        process.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=10_000, help="rollouts per request")
    parser.add_argument("--spans", type=int, default=600_000)
    parser.add_argument("--gets", type=int, default=200, help="GETs timed, each way")
    parser.add_argument("--dir", type=Path, help="where the SQLite file goes (default: a temp)")
    args = parser.parse_args()
    print(f"{os.cpu_count()} CPUs; agl store serve over SQLite, in its own process")
    if args.dir is not None:
        args.dir.mkdir(parents=True, exist_ok=True)
        asyncio.run(run(args, args.dir / "store.db"))
        return
    with tempfile.TemporaryDirectory() as folder:
        asyncio.run(run(args, Path(folder) / "store.db"))


if __name__ == "__main__":
    main()
