"""The store protocol: one async API over every backend.

Every backend (``memory://``, ``sqlite:///…``, ``http://…``) implements :class:`Store` and
passes the same conformance suite (:mod:`agl.testing.store`). Open one with
:func:`agl.open_store` and use it as an async context manager::

    async with agl.open_store("sqlite:///runs/agl.db") as store:
        [rollout] = await store.enqueue_rollouts([agl.RolloutRequest(input={"q": "2+2"})])
        [claim] = await store.dequeue_rollouts(worker_id="runner-1", wait=5)
        ...

Calls are batched where volume lives (``add_spans``, ``enqueue_rollouts``,
``dequeue_rollouts(limit=…)``), and waiting is a long poll inside the store
(``dequeue_rollouts(wait=…)``, ``wait_for_rollouts``), never a client-side polling loop.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Protocol, Self, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from agl._metric_rows import MetricsPage, MetricsRow
from agl._resources import Resource, ResourcesPage, ResourcesUpdate
from agl._rollouts import (
    Attempt,
    AttemptStatus,
    Claim,
    Rollout,
    RolloutMode,
    RolloutPage,
    RolloutRequest,
    RolloutStatus,
    Worker,
)
from agl._spans import Span
from agl.store._engine_queries import rollout_filter
from agl.store._tx import RolloutFilter

__all__ = ["ClosingStore", "Store", "StoreStatistics"]


class StoreStatistics(BaseModel):
    """Counts of what a store holds."""

    model_config = ConfigDict(defer_build=True, extra="forbid")

    rollouts: int = Field(description="Rollouts in all.")
    rollouts_by_status: dict[RolloutStatus, int]
    attempts: int
    spans: int
    resources: int = Field(description="Published resource sets.")
    workers: int


@runtime_checkable
class Store(Protocol):
    """What every store backend does. All methods are coroutines unless noted.

    One store serves every event loop of its process, each from its own thread: a runner claims
    and beats from a thread of its own while its agents hold its loop, and a tracer sends spans
    from another (:meth:`ClosingStore.release_loop` lets go of what a loop that ends held).

    Errors: :class:`~agl.NotFoundError` for unknown ids,
    :class:`~agl.InvalidInputError` for bad arguments,
    :class:`~agl.ConflictError` for writes the current state forbids, and
    :class:`~agl.StoreUnavailableError` when a remote store cannot be reached.
    """

    @property
    def url(self) -> str:
        """The URL this store was opened with (secrets removed)."""
        ...

    async def enqueue_rollouts(self, requests: Sequence[RolloutRequest]) -> list[Rollout]:
        """Queue one rollout per request and return them, in order.

        A request with a ``rollout_id`` the store already holds returns the stored rollout
        unchanged, so a retried enqueue never queues a task twice.
        """
        ...

    async def dequeue_rollouts(
        self,
        limit: int = 1,
        worker_id: str | None = None,
        wait: float = 0.0,
        *,
        request_id: str | None = None,
    ) -> list[Claim]:
        """Claim up to ``limit`` waiting rollouts, each with a new attempt.

        With ``wait > 0``, waits up to that many seconds for at least one rollout to become
        claimable (long poll) and returns as soon as one does; returns ``[]`` if none did.

        A ``request_id`` (1 to 128 characters, one URL path segment) makes the call safe to
        repeat when its answer was lost: the store remembers the claims it answered with for
        an hour, and the same call with the same id returns those claims as they stand now
        (those whose attempt has not ended) instead of claiming again, from any server over
        the same database. Reusing an id for another call is a ConflictError.
        """
        ...

    async def get_rollout(self, rollout_id: str) -> Rollout:
        """Return one rollout."""
        ...

    async def query_rollouts(
        self,
        status: RolloutStatus | Sequence[RolloutStatus] | None = None,
        mode: RolloutMode | None = None,
        limit: int = 100,
        offset: int = 0,
        *,
        search: str | None = None,
        worker_id: str | None = None,
        since: float | None = None,
        until: float | None = None,
        newest_first: bool = False,
    ) -> RolloutPage:
        """Return one page of rollouts, in enqueue order, filtered by what is given.

        Args:
            status: One status or several: the rollout is in one of them.
            mode: The rollout's mode (``train``, ``val``, ``test``).
            limit: Rollouts per page, 1 to 10,000.
            offset: How many matching rollouts to skip (the page's ``next_offset`` goes on).
            search: Text the ``rollout_id`` contains (case-sensitive, taken literally), checked
                as an id is (:mod:`agl._ids`): 1 to 256 characters, no control characters.
            worker_id: A worker that ran any of the rollout's attempts.
            since: Enqueued at or after this time (Unix seconds).
            until: Enqueued before this time (Unix seconds).
            newest_first: The latest enqueued first (the default is oldest first).

        Raises:
            InvalidInputError: naming the field: a ``search`` or ``worker_id`` that is no id
                (empty, over-long, control characters), a ``since``/``until`` that is not a
                finite number, a bad page.
        """
        ...

    async def query_attempts(self, rollout_id: str) -> list[Attempt]:
        """Return a rollout's attempts, first to latest."""
        ...

    async def update_attempt(
        self,
        rollout_id: str,
        attempt_id: str,
        status: AttemptStatus | None = None,
        heartbeat: bool = True,
        reason: str | None = None,
    ) -> Attempt:
        """Report on an attempt: a heartbeat, a new status, or both, plus an optional reason.

        Raises ConflictError when the attempt already ended (the store timed it out, retried
        or cancelled it): a late result never overwrites a newer one.
        """
        ...

    async def cancel_rollout(self, rollout_id: str) -> Rollout:
        """Cancel a rollout that has not finished (a finished one is returned unchanged)."""
        ...

    async def wait_for_rollouts(self, rollout_ids: Sequence[str], timeout: float) -> list[Rollout]:
        """Wait up to ``timeout`` seconds for the rollouts to finish; return the finished ones.

        Returns as soon as all have finished. The order follows ``rollout_ids``.
        """
        ...

    async def add_spans(self, spans: Sequence[Span]) -> list[int]:
        """Store a batch of spans; return the ``sequence_id`` the store gave each, in order.

        Sequence ids increase per rollout in arrival order (a span's own ``sequence_id`` is
        ignored). A span already stored (same rollout, attempt, trace and span id) is not stored
        again and keeps its sequence id. One invalid span rejects the whole batch, naming its
        index. Read spans back, with their ids, through :meth:`query_spans`.
        """
        ...

    async def query_spans(
        self,
        rollout_id: str,
        attempt_id: str | None = None,
        *,
        after: int = 0,
        limit: int | None = None,
    ) -> list[Span]:
        """Return a rollout's spans (all attempts, or one) in sequence order: those whose
        ``sequence_id`` is above ``after``, at most ``limit`` of them (all by default).

        A long trace reads in pages: pass the last span's ``sequence_id`` as the next
        ``after``. Raises :class:`~agl.InvalidInputError` for a negative ``after`` or a
        ``limit`` below 1.
        """
        ...

    async def add_resources(
        self, resources: Mapping[str, Resource], resources_id: str | None = None
    ) -> ResourcesUpdate:
        """Publish a set of resources as the store's next version.

        With a ``resources_id`` the store already holds, returns the stored set unchanged.
        """
        ...

    async def get_resources(self, resources_id: str | None = None) -> ResourcesUpdate | None:
        """Return a set of resources by id, or the latest (None if none was published)."""
        ...

    async def query_resources(self, limit: int = 100, offset: int = 0) -> ResourcesPage:
        """Return one page of the published resource sets, newest version first."""
        ...

    async def add_metrics(
        self, rows: Sequence[MetricsRow], *, request_id: str | None = None
    ) -> None:
        """Store a batch of training metrics rows (one per logged step of a run), in order.

        The whole batch is stored or nothing is. Rows are not deduplicated: a run that logs a
        step again (resumed from a checkpoint) adds a row for it again. A ``request_id`` the
        store has seen within the hour adds nothing: the same batch sent again after a lost
        answer is stored once.
        """
        ...

    async def query_metrics(
        self, run: str | None = None, limit: int = 10_000, offset: int = 0
    ) -> MetricsPage:
        """Return one page of metrics rows (of one run, or of all), in the order added."""
        ...

    async def metric_runs(self) -> list[str]:
        """Return the runs that added metrics rows, in the order each first did."""
        ...

    async def query_workers(self) -> list[Worker]:
        """Return the runners the store has heard from."""
        ...

    async def statistics(self) -> StoreStatistics:
        """Return counts of what the store holds."""
        ...

    async def close(self) -> None:
        """Release connections and threads. Idempotent."""
        ...

    async def __aenter__(self) -> Self: ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...


class ClosingStore(abc.ABC):
    """What store implementations share: leaving an ``async with`` block closes the store, and
    :meth:`query_rollouts` checks its arguments once for every backend, which then answers
    :meth:`_query_rollouts` with the checked filter."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Release connections and threads. Idempotent."""

    async def release_loop(self) -> None:  # noqa: B027 - a hook most stores need not fill
        """Release what the store holds for the running event loop (nothing, by default)."""

    async def query_rollouts(
        self,
        status: RolloutStatus | Sequence[RolloutStatus] | None = None,
        mode: RolloutMode | None = None,
        limit: int = 100,
        offset: int = 0,
        *,
        search: str | None = None,
        worker_id: str | None = None,
        since: float | None = None,
        until: float | None = None,
        newest_first: bool = False,
    ) -> RolloutPage:
        """See :meth:`Store.query_rollouts`: the filters are checked here, once for every
        backend, and the page asked of :meth:`_query_rollouts`."""
        where = rollout_filter(
            status,
            mode,
            search=search,
            worker_id=worker_id,
            since=since,
            until=until,
            newest_first=newest_first,
        )
        return await self._query_rollouts(where, limit, offset)

    async def _query_rollouts(self, where: RolloutFilter, limit: int, offset: int) -> RolloutPage:
        """Return one page of the rollouts ``where`` matches (its fields already checked).

        A backend overrides this, or :meth:`query_rollouts` whole. ``limit`` and ``offset``
        are the caller's, unchecked: the backend refuses a bad page naming the field.
        """
        raise NotImplementedError(f"{type(self).__name__} does not implement query_rollouts")

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()
