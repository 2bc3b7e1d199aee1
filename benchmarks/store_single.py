"""The requests a runner makes one at a time, against ``agl store serve`` over durable SQLite.

Three rows, each at 1 and at K concurrent clients (asyncio tasks spread over client processes,
each process with its own HTTP client): ``dequeue(limit=1)`` until the queue is empty,
``add_spans`` with one span per call, and ``update_attempt(status=succeeded)`` on every claimed
attempt. Each (server, clients) pair gets a fresh server and database with ``--rollouts``
queued rollouts; the rows run in that order, every client process starting each row together.
The read-back is checked: every rollout succeeded, holding exactly the spans written.

``--baseline DIR`` runs the same measurement against the server of another agl checkout
(``uv run --no-sync agl store serve`` in DIR; the clients stay this checkout's), alternating
the two servers round by round, so both see the same machine load. ``--bare`` adds a server
whose store does nothing (:class:`NullStore`): the HTTP layer's own limit.

Prints figures (median over ``--rounds``) only; it never asserts on wall time.
Run: ``uv run --no-sync python benchmarks/store_single.py [--baseline ../other-checkout]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import multiprocessing as mp
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import agl
from agl import AttemptStatus, RolloutRequest, RolloutStatus, Span
from agl.testing.ports import free_port

ROWS = ("dequeue", "add_span", "succeed")
ROOT = Path(__file__).resolve().parent.parent
# What a store that does nothing is served by: the same app, uvicorn settings and client.
BARE_SERVER = "import sys; sys.path.insert(0, sys.argv[1]); from _null_store import serve_null; "
BARE_SERVER += "serve_null(int(sys.argv[2]))"


def _client(url: str, tasks: int, each: int, barrier: Any, out: Any) -> None:
    """One client process: ``tasks`` coroutines sharing one HTTP client, row by row, each
    claiming ``each`` rollouts, adding a span to each and marking each attempt succeeded."""

    async def main() -> dict[str, tuple[float, float, int]]:
        times: dict[str, tuple[float, float, int]] = {}
        async with agl.open_store(url) as store:
            await store.statistics()  # connect before the clock starts
            claims: list[list[tuple[str, str]]] = [[] for _ in range(tasks)]

            async def dequeue(mine: list[tuple[str, str]]) -> None:
                worker = f"bench-{os.getpid()}-{id(mine)}"
                for _ in range(each):
                    got = await store.dequeue_rollouts(limit=1, worker_id=worker)
                    if len(got) != 1:
                        raise RuntimeError(f"dequeue(limit=1) returned {len(got)} claims")
                    mine.extend((c.rollout.rollout_id, c.attempt.attempt_id) for c in got)

            async def add_span(mine: list[tuple[str, str]]) -> None:
                for rollout_id, attempt_id in mine:
                    span = Span.create(name="step", rollout_id=rollout_id, attempt_id=attempt_id)
                    await store.add_spans([span])

            async def succeed(mine: list[tuple[str, str]]) -> None:
                for rollout_id, attempt_id in mine:
                    await store.update_attempt(rollout_id, attempt_id, AttemptStatus.SUCCEEDED)

            for row, work in zip(ROWS, (dequeue, add_span, succeed), strict=True):
                gc.collect()
                barrier.wait(timeout=300)
                start = time.monotonic()
                await asyncio.gather(*(work(mine) for mine in claims))
                times[row] = (start, time.monotonic(), sum(map(len, claims)))
        return times

    try:
        out.put(asyncio.run(main()))
    except BaseException as exc:
        out.put(f"{type(exc).__name__}: {exc}")
        raise


def _wait_healthy(url: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited with {proc.returncode}")
        with contextlib.suppress(OSError), urllib.request.urlopen(url + "/health", timeout=5):
            return
        time.sleep(0.1)
    raise RuntimeError(f"the server at {url} did not answer /health in 120 s")


@contextlib.contextmanager
def server(side: str, root: Path, db: str) -> Iterator[tuple[str, int | None]]:
    """Serve ``db`` from the checkout at ``root`` (or a store that does nothing: ``bare``)."""
    port = free_port()
    if side.startswith("url="):  # a server started by hand (to profile it, say)
        yield side[4:], None
        return
    if side == "bare":
        here = str(Path(__file__).resolve().parent)
        command = [sys.executable, "-c", BARE_SERVER, here, str(port)]
    else:
        python = str(root / ".venv" / "bin" / "python")  # the checkout's own environment
        command = [python, "-m", "agl", "store", "serve", "--store", db]
        command += ["--port", str(port), "--log-level", "warning", "--no-dashboard"]
    proc = subprocess.Popen(command, cwd=root, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(url, proc)
        yield url, proc.pid
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)


async def _prepare(url: str, rollouts: int) -> None:
    async with agl.open_store(url) as store:
        for i in range(0, rollouts, 500):
            requests = [RolloutRequest(input={"task": n}) for n in range(i, min(i + 500, rollouts))]
            await store.enqueue_rollouts(requests)


async def _check(url: str, rollouts: int) -> None:
    async with agl.open_store(url) as store:
        stats = await store.statistics()
        done = stats.rollouts_by_status[RolloutStatus.SUCCEEDED]
        if done != rollouts or stats.spans != rollouts or stats.attempts != rollouts:
            raise RuntimeError(
                f"the store holds {done} succeeded rollouts, {stats.attempts} attempts and "
                f"{stats.spans} spans; expected {rollouts} of each"
            )


def _cpu_seconds(pid: int | None) -> float:
    """CPU time (user + system) the process ``pid`` has used so far (0 if unknown)."""
    if pid is None:
        return 0.0
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(
    url: str, pid: int | None, clients: int, procs: int, rollouts: int, bare: bool
) -> dict[str, float]:
    """Rates of each row at ``clients`` concurrent clients over ``procs`` processes, and the
    server's CPU time per request (``cpu_us``)."""
    if not bare:
        asyncio.run(_prepare(url, rollouts))  # a few may stay queued: rollouts // clients each
    cpu = _cpu_seconds(pid)
    procs, each = min(procs, clients), rollouts // clients
    ctx = mp.get_context("spawn")
    barrier, out = ctx.Barrier(procs), ctx.Queue()
    split = [clients // procs + (i < clients % procs) for i in range(procs)]
    workers = [ctx.Process(target=_client, args=(url, n, each, barrier, out)) for n in split]
    for worker in workers:
        worker.start()
    results = [out.get(timeout=600) for _ in workers]
    for worker in workers:
        worker.join()
    cpu = _cpu_seconds(pid) - cpu
    failed = [r for r in results if isinstance(r, str)]
    if failed:
        raise RuntimeError(f"a client failed: {failed[0]}")
    if not bare:
        asyncio.run(_check(url, each * clients))
    rates = {}
    for row in ROWS:
        start = min(r[row][0] for r in results)
        end = max(r[row][1] for r in results)
        count = sum(r[row][2] for r in results)
        rates[row] = count / (end - start)
    rates["cpu_us"] = cpu / (len(ROWS) * each * clients) * 1e6
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clients", default="1,16", help="comma-separated client counts")
    parser.add_argument("--procs", type=int, default=2, help="client processes (at most)")
    parser.add_argument("--rollouts", type=int, default=400, help="rollouts per measurement")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--baseline", type=Path, help="another agl checkout to compare with")
    parser.add_argument("--bare", action="store_true", help="add a server over a null store")
    parser.add_argument("--url", help="measure only this running server (one round, fresh)")
    args = parser.parse_args()
    sides = {"agl": ROOT}
    if args.baseline is not None:
        sides["baseline"] = args.baseline.resolve()
    if args.bare:
        sides["bare"] = ROOT
    if args.url:
        sides = {f"url={args.url}": ROOT}
    counts = [int(c) for c in args.clients.split(",")]
    rates: dict[tuple[str, int, str], list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(args.rounds):
            for clients in counts:
                for side, root in sides.items():
                    db = f"sqlite:///{tmp}/{side}-{clients}-{round_}.db"
                    with server(side, root, db) as (url, pid):
                        got = measure(url, pid, clients, args.procs, args.rollouts, side == "bare")
                    for row, rate in got.items():
                        rates.setdefault((side, clients, row), []).append(rate)
                    shown = "  ".join(f"{row} {rate:,.0f}" for row, rate in got.items())
                    print(f"round {round_ + 1} {side:8} {clients:3} clients: {shown}", flush=True)
    print(f"\nmedian of {args.rounds} rounds ({args.rollouts} rollouts each): requests/s, and")
    print("cpu_us: the server's CPU time per request, all three rows together (lower is better)")
    header = f"{'row':10} {'clients':>7}" + "".join(f" {side:>10}" for side in sides)
    if "baseline" in sides:
        header += f" {'agl/base':>9}"
    if "bare" in sides:
        header += f" {'agl/bare':>9}"
    print(header)
    for row in (*ROWS, "cpu_us"):
        for clients in counts:
            med = {side: statistics.median(rates[(side, clients, row)]) for side in sides}
            line = f"{row:10} {clients:>7}" + "".join(f" {med[s]:>10,.0f}" for s in sides)
            if "baseline" in sides:
                line += f" {med['agl'] / med['baseline']:>8.2f}x"
            if "bare" in sides:
                line += f" {med['agl'] / med['bare']:>8.0%}"
            print(line)


if __name__ == "__main__":
    main()
