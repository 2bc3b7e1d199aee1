"""Start a durable store server and drive it the way a training run does.

What it shows: `agl store serve` on a SQLite file, several runner processes' worth of clients
claiming rollouts over HTTP with long polls, sending spans in batches, heartbeats, a crashed
attempt retried by the store, and the result read back: statistics, attempts and a span list.

    uv run --no-sync python examples/store_demo.py --run-dir runs/demo
"""

from __future__ import annotations

import argparse
import asyncio
import random
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

import agl
from agl import AttemptStatus, RolloutConfig, RolloutRequest, Span, semconv

console = Console(soft_wrap=True)  # lines are never broken mid-path; tables fit the width


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_server(db_url: str, port: int) -> subprocess.Popen[bytes]:
    """Run `agl store serve` as its own process and wait until it answers /health."""
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "agl",
            "store",
            "serve",
            "--db",
            db_url,
            "--port",
            str(port),
            "--log-level",
            "warning",
        ],
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).is_success:
                return server
        except httpx.TransportError:
            time.sleep(0.1)
    server.kill()
    raise SystemExit("the store server did not start")


async def runner(url: str, name: str, progress: Progress, task_id: object) -> None:
    """Claim rollouts until none are left; 'solve' each one and record what happened."""
    async with agl.open_store(url) as store:
        while claims := await store.dequeue_rollouts(limit=2, worker_id=name, wait=1.0):
            for claim in claims:
                ids = (claim.rollout.rollout_id, claim.attempt.attempt_id)
                await store.update_attempt(*ids, status=AttemptStatus.RUNNING)
                question = claim.rollout.input
                assert isinstance(question, dict)
                # One crash on the first try of task 3: the store retries it on another attempt.
                if question["index"] == 3 and claim.attempt.sequence == 1:
                    await store.update_attempt(*ids, status=AttemptStatus.FAILED, reason="crash")
                    continue
                steps = []
                for step in range(4):
                    await asyncio.sleep(random.uniform(0.001, 0.01))  # the agent "thinking"
                    steps.append(
                        Span.create(
                            rollout_id=ids[0],
                            attempt_id=ids[1],
                            name="llm.call" if step < 3 else "reward",
                            attributes={"step": step, semconv.AGL_AGENT_NAME: "solver"}
                            | ({semconv.AGL_REWARD: 1.0} if step == 3 else {}),
                        )
                    )
                await store.add_spans(steps)  # one request for the whole batch
                await store.update_attempt(*ids, status=AttemptStatus.SUCCEEDED)
                progress.advance(task_id)  # type: ignore[arg-type]


async def drive(url: str, tasks: int, runners: int) -> None:
    async with agl.open_store(url) as store:
        config = RolloutConfig(timeout_seconds=60, unresponsive_seconds=30, max_attempts=2)
        rollouts = await store.enqueue_rollouts(
            [
                RolloutRequest(input={"index": i, "question": f"{i} + {i}"}, config=config)
                for i in range(tasks)
            ]
        )
        with Progress(console=console) as progress:
            task_id = progress.add_task("rollouts", total=tasks)
            await asyncio.gather(
                *(runner(url, f"runner-{i}", progress, task_id) for i in range(runners))
            )
        finished = await store.wait_for_rollouts([r.rollout_id for r in rollouts], timeout=30)
        stats = await store.statistics()

        table = Table(title="store statistics")
        table.add_column("what")
        table.add_column("count", justify="right")
        for status, count in stats.rollouts_by_status.items():
            if count:
                table.add_row(f"rollouts {status.value}", str(count))
        for what in ("attempts", "spans", "workers"):
            table.add_row(what, str(getattr(stats, what)))
        console.print(table)

        retried = rollouts[3].rollout_id
        attempts = await store.query_attempts(retried)
        console.print(f"rollout {retried}: {len(finished)} of {tasks} rollouts finished")
        for attempt in attempts:
            console.print(
                f"  attempt {attempt.sequence} {attempt.status.value:<9} "
                f"worker={attempt.worker_id} reason={attempt.reason}"
            )
        for span in await store.query_spans(retried):
            console.print(f"  span #{span.sequence_id} {span.name} {span.attributes}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run-dir", type=Path, default=Path("runs/store-demo"))
    parser.add_argument("--tasks", type=int, default=200)
    parser.add_argument("--runners", type=int, default=8)
    args = parser.parse_args()
    args.run_dir.mkdir(parents=True, exist_ok=True)
    db = args.run_dir.resolve() / "agl.db"
    port = free_port()
    server = start_server(f"sqlite:///{db}", port)
    try:
        started = time.perf_counter()
        asyncio.run(drive(f"http://127.0.0.1:{port}", args.tasks, args.runners))
        console.print(
            f"done in {time.perf_counter() - started:.1f} s; the store is in {db} "
            f"(inspect it with: agl store stats --store sqlite:///{db})"
        )
    finally:
        server.terminate()
        server.wait(timeout=10)


if __name__ == "__main__":
    main()
