"""agl's side of ``versus.py``: a load-client process over ``agl.open_store(url)`` (one store
client per concurrent task, kept from job to job, so connecting is never timed).

Rows (see ``_versus_wire.py`` for the protocol): ``add_span`` (one span per call),
``batched`` (``batch`` spans per call), ``dequeue`` (``limit=1``), ``update`` (mark an
attempt succeeded). Span and update rows first claim a rollout of their own.
"""

from __future__ import annotations

import os
from typing import Any

import agl
from _versus_wire import Body, Check, Job, serve_jobs, until
from agl import AttemptStatus, RolloutRequest, Span

_stores: dict[tuple[str, int], agl.Store] = {}


async def _store(url: str, task: int) -> agl.Store:
    if (url, task) not in _stores:
        store = agl.open_store(url)
        await store.statistics()  # connect now, not on the clock
        _stores[url, task] = store
    return _stores[url, task]


async def _claims(store: agl.Store, count: int, tag: str) -> list[tuple[str, str]]:
    """Enqueue ``count`` rollouts and claim as many (not necessarily the same ones)."""
    await store.enqueue_rollouts([RolloutRequest(input=tag) for _ in range(count)])
    claims = await store.dequeue_rollouts(limit=count, worker_id=f"versus-{os.getpid()}")
    if len(claims) != count:
        raise RuntimeError(f"claimed {len(claims)} of {count} rollouts just enqueued")
    return [(c.attempt.rollout_id, c.attempt.attempt_id) for c in claims]


async def spans_row(job: Job, index: int) -> tuple[list[Body], Check]:
    """``add_span`` and ``batched``: each task sends ``count`` spans to a rollout of its own."""
    owned: list[tuple[agl.Store, str, str, list[list[Span]]]] = []
    attributes: dict[str, Any] = {"gen_ai.request.model": "m", "gen_ai.usage.input_tokens": 9}
    for task in range(job.tasks):
        store = await _store(job.url, task)
        [(rollout_id, attempt_id)] = await _claims(store, 1, f"{job.row}-{index}-{task}")
        spans = [
            Span.create(
                rollout_id=rollout_id, attempt_id=attempt_id, name="versus", attributes=attributes
            )
            for _ in range(job.count)
        ]
        batches = [spans[i : i + job.batch] for i in range(0, len(spans), job.batch)]
        owned.append((store, rollout_id, attempt_id, batches))

    def body(store: agl.Store, batches: list[list[Span]]) -> Body:
        async def run(deadline: float) -> int:
            sent = await until(deadline, batches, store.add_spans)
            return sum(map(len, batches[:sent]))

        return run

    async def check(done: list[int]) -> dict[str, Any]:
        for (store, rollout_id, attempt_id, _), want in zip(owned, done, strict=True):
            stored = await store.query_spans(rollout_id, attempt_id)
            if len(stored) != want:
                raise RuntimeError(f"rollout {rollout_id}: {len(stored)} spans stored, {want} sent")
        return {}

    return [body(store, batches) for store, _, _, batches in owned], check


async def dequeue_row(job: Job, index: int) -> tuple[list[Body], Check]:
    """Each task enqueues ``count`` rollouts, then (on the clock) claims ``count`` one at a time."""
    enqueued: list[str] = []
    stores = [await _store(job.url, task) for task in range(job.tasks)]
    for store in stores:
        requests = [RolloutRequest(input="dequeue") for _ in range(job.count)]
        enqueued += [r.rollout_id for r in await store.enqueue_rollouts(requests)]
    claimed: list[str] = []

    def body(store: agl.Store) -> Body:
        worker = f"versus-{os.getpid()}"

        async def claim(_: int) -> None:
            [got] = await store.dequeue_rollouts(limit=1, worker_id=worker)
            claimed.append(got.rollout.rollout_id)

        async def run(deadline: float) -> int:
            return await until(deadline, list(range(job.count)), claim)

        return run

    async def check(done: list[int]) -> dict[str, Any]:
        return {"enqueued": enqueued, "claimed": claimed}

    return [body(store) for store in stores], check


async def update_row(job: Job, index: int) -> tuple[list[Body], Check]:
    """Each task claims ``count`` attempts, then (on the clock) marks each one succeeded."""
    owned: list[tuple[agl.Store, list[tuple[str, str]]]] = []
    for task in range(job.tasks):
        store = await _store(job.url, task)
        owned.append((store, await _claims(store, job.count, f"update-{index}-{task}")))
    wrong: list[str] = []

    def body(store: agl.Store, attempts: list[tuple[str, str]]) -> Body:
        async def finish(ids: tuple[str, str]) -> None:
            attempt = await store.update_attempt(*ids, status=AttemptStatus.SUCCEEDED)
            if job.check and attempt.status != AttemptStatus.SUCCEEDED:
                wrong.append(f"{ids}: {attempt.status}")

        async def run(deadline: float) -> int:
            return await until(deadline, attempts, finish)

        return run

    async def check(done: list[int]) -> dict[str, Any]:
        if wrong:
            raise RuntimeError(f"{len(wrong)} attempts not succeeded after the update: {wrong[0]}")
        return {}

    return [body(store, attempts) for store, attempts in owned], check


if __name__ == "__main__":
    serve_jobs(
        {"add_span": spans_row, "batched": spans_row, "dequeue": dequeue_row, "update": update_row}
    )
