"""The async store facade shared by the backends that keep state themselves.

A subclass provides :meth:`StatefulStore._run`: run a function over a
:class:`~agl.store._tx.Transaction`, atomically. This class turns the engine's operations into
the async :class:`~agl.store._base.Store` API and implements long polling: waiters sleep on a
:class:`_Notifier` that every state change wakes, and re-check at least every
``poll_interval`` seconds so deadlines (timeouts, lost heartbeats) and writes made by other
processes are noticed too.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

from agl._errors import InvalidInputError
from agl._ids import check_id, check_ids
from agl._metric_rows import MetricsPage, MetricsRow
from agl._resources import Resource, ResourcesPage, ResourcesUpdate
from agl._rollouts import (
    Attempt,
    AttemptStatus,
    Claim,
    Rollout,
    RolloutPage,
    RolloutRequest,
    RolloutStatus,
    Worker,
)
from agl._spans import Span
from agl.store import _engine as engine
from agl.store._base import ClosingStore, StoreStatistics
from agl.store._checks import (
    MAX_WAIT_SECONDS,
    as_list,
    as_resources,
    check_request_ids,
    check_span_ids,
)
from agl.store._engine import MAX_PAGE_SIZE
from agl.store._repeats import check_request_id
from agl.store._storable import refuse_unstorable
from agl.store._tx import RolloutFilter, Transaction

T = TypeVar("T")


class _Notifier:
    """Wakes coroutines waiting for a state change, from any thread and any event loop."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiters: set[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = set()

    async def wait(self, timeout: float) -> None:
        """Return on the next :meth:`notify_all` or after ``timeout`` seconds."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        entry = (loop, future)
        with self._lock:
            self._waiters.add(entry)
        try:
            await asyncio.wait_for(asyncio.shield(future), timeout)
        except TimeoutError:
            pass
        finally:
            with self._lock:
                self._waiters.discard(entry)

    def notify_all(self) -> None:
        with self._lock:
            waiters = list(self._waiters)
        for loop, future in waiters:
            with contextlib.suppress(RuntimeError):  # that loop closed; its waiter is gone
                loop.call_soon_threadsafe(_resolve, future)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class StatefulStore(ClosingStore):
    """The :class:`~agl.store._base.Store` API over the engine, for memory and SQLite."""

    def __init__(self, url: str, *, poll_interval: float = 0.25) -> None:
        self._url = url
        self._poll_interval = poll_interval
        self._notifier = _Notifier()
        self._closed = False

    @property
    def url(self) -> str:
        return self._url

    @abc.abstractmethod
    async def _run(self, operation: Callable[[Transaction], T]) -> T:
        """Run ``operation`` in one transaction and return its result once it is durable."""

    # --- rollouts ---------------------------------------------------------------------------

    async def enqueue_rollouts(self, requests: Sequence[RolloutRequest]) -> list[Rollout]:
        requests = as_list(requests, "requests", RolloutRequest)
        check_request_ids(requests)
        refuse_unstorable([r.model_dump(exclude_defaults=True) for r in requests], "requests")
        now = time.time()
        result = await self._run(lambda tx: engine.enqueue(tx, requests, now))
        self._notifier.notify_all()
        return result

    async def dequeue_rollouts(
        self,
        limit: int = 1,
        worker_id: str | None = None,
        wait: float = 0.0,
        *,
        request_id: str | None = None,
    ) -> list[Claim]:
        _check_wait(wait, "wait")
        if worker_id is not None:
            check_id(worker_id, "worker_id")
        if request_id is not None:
            check_request_id(request_id)

        def attempt(tx: Transaction) -> list[Claim]:
            now = time.time()
            engine.sweep(tx, now)
            return engine.dequeue(tx, limit, worker_id, now, request_id)

        deadline = time.monotonic() + wait
        while True:
            claims = await self._run(attempt)
            if claims:
                self._notifier.notify_all()
                return claims
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return []
            await self._notifier.wait(min(remaining, self._poll_interval))

    async def get_rollout(self, rollout_id: str) -> Rollout:
        check_id(rollout_id, "rollout_id", segment=True)
        return await self._read(lambda tx: engine.get_rollout(tx, rollout_id))

    async def _query_rollouts(self, where: RolloutFilter, limit: int, offset: int) -> RolloutPage:
        return await self._read(lambda tx: engine.query_rollouts(tx, where, limit, offset))

    async def query_attempts(self, rollout_id: str) -> list[Attempt]:
        check_id(rollout_id, "rollout_id", segment=True)
        return await self._read(lambda tx: engine.query_attempts(tx, rollout_id))

    async def update_attempt(
        self,
        rollout_id: str,
        attempt_id: str,
        status: AttemptStatus | None = None,
        heartbeat: bool = True,
        reason: str | None = None,
    ) -> Attempt:
        check_id(rollout_id, "rollout_id", segment=True)
        check_id(attempt_id, "attempt_id", segment=True)
        if status is not None:
            status = AttemptStatus(status)

        def update(tx: Transaction) -> Attempt:
            now = time.time()
            engine.sweep(tx, now)
            return engine.update_attempt(
                tx, rollout_id, attempt_id, status=status, reason=reason, now=now
            )

        result = await self._run(update)
        self._notifier.notify_all()
        return result

    async def cancel_rollout(self, rollout_id: str) -> Rollout:
        check_id(rollout_id, "rollout_id", segment=True)
        result = await self._run(lambda tx: engine.cancel(tx, rollout_id, time.time()))
        self._notifier.notify_all()
        return result

    async def wait_for_rollouts(self, rollout_ids: Sequence[str], timeout: float) -> list[Rollout]:
        _check_wait(timeout, "timeout")
        ids = check_ids(as_list(rollout_ids, "rollout_ids", str), "rollout_ids", segment=True)
        deadline = time.monotonic() + timeout
        while True:
            rollouts = await self._read(lambda tx: engine.get_rollouts(tx, ids))
            finished = [rollout for rollout in rollouts if rollout.status.is_final]
            remaining = deadline - time.monotonic()
            if len(finished) == len(rollouts) or remaining <= 0:
                return finished
            await self._notifier.wait(min(remaining, self._poll_interval))

    # --- spans ------------------------------------------------------------------------------

    async def add_spans(self, spans: Sequence[Span]) -> list[int]:
        spans = as_list(spans, "spans", Span)
        if not spans:
            return []
        check_span_ids(spans)
        return await self._run(lambda tx: engine.add_spans(tx, spans, time.time()))

    async def query_spans(
        self,
        rollout_id: str,
        attempt_id: str | None = None,
        *,
        after: int = 0,
        limit: int | None = None,
    ) -> list[Span]:
        check_id(rollout_id, "rollout_id", segment=True)
        if attempt_id is not None:
            check_id(attempt_id, "attempt_id", segment=True)
        return await self._run(
            lambda tx: engine.query_spans(tx, rollout_id, attempt_id, after=after, limit=limit)
        )

    # --- resources and workers --------------------------------------------------------------

    async def add_resources(
        self, resources: Mapping[str, Resource], resources_id: str | None = None
    ) -> ResourcesUpdate:
        members = as_resources(resources)
        refuse_unstorable({n: m.model_dump() for n, m in members.items()}, "resources")
        return await self._run(
            lambda tx: engine.add_resources(tx, members, resources_id, time.time())
        )

    async def get_resources(self, resources_id: str | None = None) -> ResourcesUpdate | None:
        if resources_id is not None:
            check_id(resources_id, "resources_id", segment=True)
        return await self._run(lambda tx: engine.get_resources(tx, resources_id))

    async def query_resources(self, limit: int = 100, offset: int = 0) -> ResourcesPage:
        return await self._run(lambda tx: engine.query_resources(tx, limit, offset))

    async def query_workers(self) -> list[Worker]:
        return await self._run(lambda tx: tx.workers_all())

    async def statistics(self) -> StoreStatistics:
        return statistics_from_counts(await self._read(lambda tx: tx.counts()))

    # --- metrics ----------------------------------------------------------------------------

    async def add_metrics(
        self, rows: Sequence[MetricsRow], *, request_id: str | None = None
    ) -> None:
        rows = as_list(rows, "rows", MetricsRow)
        check_ids([row.run for row in rows], "rows", item_field="run")
        if request_id is not None:
            check_request_id(request_id)
        if rows:
            await self._run(lambda tx: engine.add_metrics(tx, rows, time.time(), request_id))

    async def query_metrics(
        self, run: str | None = None, limit: int = MAX_PAGE_SIZE, offset: int = 0
    ) -> MetricsPage:
        return await self._run(lambda tx: engine.query_metrics(tx, run, limit, offset))

    async def metric_runs(self) -> list[str]:
        return await self._run(lambda tx: tx.metrics_runs())

    # --- lifecycle --------------------------------------------------------------------------

    async def close(self) -> None:
        self._closed = True

    async def _read(self, operation: Callable[[Transaction], T]) -> T:
        """Run a read after ending any attempts past their deadline, so reads see them."""
        swept = 0

        def read(tx: Transaction) -> T:
            nonlocal swept
            swept = engine.sweep(tx, time.time())
            return operation(tx)

        result = await self._run(read)
        if swept:
            self._notifier.notify_all()
        return result


def _check_wait(value: float, field: str) -> None:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not 0 <= value <= MAX_WAIT_SECONDS
    ):
        raise InvalidInputError(
            f"{field} must be a number of seconds between 0 and {MAX_WAIT_SECONDS:g}, "
            f"got {value!r}",
            field=field,
            value=value,
        )


def statistics_from_counts(counts: dict[str, int]) -> StoreStatistics:
    """:class:`StoreStatistics` from a transaction's :meth:`counts`."""
    by_status = {status: counts.get(f"rollouts.{status.value}", 0) for status in RolloutStatus}
    return StoreStatistics(
        rollouts=sum(by_status.values()),
        rollouts_by_status=by_status,
        attempts=counts.get("attempts", 0),
        spans=counts.get("spans", 0),
        resources=counts.get("resources", 0),
        workers=counts.get("workers", 0),
    )
