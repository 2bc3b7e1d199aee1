"""How ``versus.py`` drives a load-client process, on either side (standard library only).

Each side's client script (``_versus_agl.py`` in agl's environment, ``_versus_ref.py`` in
agentlightning's) calls :func:`serve_jobs` with its rows. The driver writes one job per line
(JSON) on the process's stdin; the process prepares it (rollouts to claim, spans to send: never
timed), answers ``{"ready": true}``, waits for a ``go`` line, runs the job's concurrent tasks,
answers with the units done, the first start and the last finish (``time.monotonic``, one
clock for every process of the machine), then checks what the store holds and reports it. A
failure is answered as ``{"error": ...}``: the driver stops the benchmark on it.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

Body = Callable[[float], Awaitable[int]]
"""One concurrent task of a job: runs until its count is done or the deadline (monotonic)
passes; returns the units it did."""
Check = Callable[[list[int]], Awaitable[dict[str, Any]]]
"""Run after the clock stops, with each task's units done: raises if the store does not hold
what was written; returns what the driver checks across processes (claimed ids, say)."""


@dataclass
class Job:
    """One row's work for one process: ``tasks`` concurrent clients, ``count`` units each."""

    row: str
    url: str
    tasks: int
    count: int
    seconds: float
    batch: int = 1
    check: bool = True
    extra: dict[str, Any] = field(default_factory=dict)


Row = Callable[[Job, int], Awaitable[tuple[list[Body], Check]]]
"""Prepare a job (the int is this process's index, to keep ids apart): one body per task."""


def _say(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


async def _line() -> str:
    line = await asyncio.to_thread(sys.stdin.readline)
    if not line:
        raise EOFError("the driver went away")
    return line


async def _run(job: Job, rows: dict[str, Row], index: int) -> None:
    bodies, check = await rows[job.row](job, index)
    _say({"ready": True})
    if (await _line()).strip() != "go":
        raise RuntimeError("expected 'go'")
    start = time.monotonic()
    deadline = start + job.seconds
    done = await asyncio.gather(*(body(deadline) for body in bodies))
    end = time.monotonic()
    checked = await check(list(done)) if job.check else {}
    _say({"done": sum(done), "start": start, "end": end, "cut": end >= deadline, **checked})


async def _serve(rows: dict[str, Row], index: int) -> None:
    _say({"ready": True})  # imports done: the driver starts timing nothing before this
    while True:
        try:
            line = await _line()
        except EOFError:
            return
        try:
            await _run(Job(**json.loads(line)), rows, index)
        except Exception as exc:  # reported to the driver, which stops the benchmark
            _say({"error": f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"})


def serve_jobs(rows: dict[str, Row]) -> None:
    """Answer the driver's jobs on stdin until it closes it (``argv[1]``: this process's index)."""
    asyncio.run(_serve(rows, int(sys.argv[1])))


async def until(deadline: float, items: list[Any], send: Callable[[Any], Awaitable[Any]]) -> int:
    """Send ``items`` one call each, in order, until the deadline; return how many were sent."""
    sent = 0
    for item in items:
        if time.monotonic() >= deadline:
            break
        await send(item)
        sent += 1
    return sent
