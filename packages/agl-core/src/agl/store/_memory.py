"""``memory://``: a store in this process's memory, for tests and single-process runs.

Every operation runs under one lock, so the store is safe to share between threads and event
loops. Objects handed out are copies: changing them does not change the store.
"""

from __future__ import annotations

import bisect
import collections
import itertools
from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

from agl._metric_rows import MetricsRow
from agl._resources import ResourcesUpdate
from agl._rollouts import Attempt, Rollout, Worker
from agl._spans import Span
from agl.store._stateful import StatefulStore
from agl.store._tx import RolloutFilter, SpanKey, Transaction, worker_seen

__all__ = ["MemoryStore"]

T = TypeVar("T")


class _MemoryTransaction:
    """The memory backend's state; one instance lives as long as the store."""

    def __init__(self) -> None:
        self.rollouts: dict[str, Rollout] = {}
        self.queue: dict[str, None] = {}  # claimable rollout ids, oldest first
        self.attempts: dict[str, dict[str, Attempt]] = {}
        self.deadlines: dict[tuple[str, str], float] = {}
        self.spans: dict[str, list[Span]] = {}
        self.span_index: dict[SpanKey, int] = {}
        self.next_sequence: dict[str, int] = {}
        self.resources: dict[str, ResourcesUpdate] = {}
        self.latest_resources: ResourcesUpdate | None = None
        self.workers: dict[str, Worker] = {}
        self.metrics: list[MetricsRow] = []
        self.requests: dict[str, tuple[float, str]] = {}  # kept in the order they came
        self.counted: collections.Counter[str] = collections.Counter()
        """What :meth:`counts` reports, kept by every write (never counted on a read)."""

    # rollouts
    def rollout_get(self, rollout_id: str) -> Rollout | None:
        rollout = self.rollouts.get(rollout_id)
        return None if rollout is None else rollout.model_copy(deep=True)

    def rollouts_get_many(self, rollout_ids: Iterable[str]) -> dict[str, Rollout]:
        found = (self.rollouts.get(rollout_id) for rollout_id in rollout_ids)
        return {rollout.rollout_id: rollout.model_copy(deep=True) for rollout in found if rollout}

    def rollout_insert(self, rollout: Rollout) -> None:
        self.rollouts[rollout.rollout_id] = rollout.model_copy(deep=True)
        self.attempts[rollout.rollout_id] = {}
        self.spans[rollout.rollout_id] = []
        self.next_sequence[rollout.rollout_id] = 1
        self.counted[f"rollouts.{rollout.status.value}"] += 1
        if rollout.status.is_claimable:
            self.queue[rollout.rollout_id] = None

    def rollout_update(self, rollout: Rollout) -> None:
        before = self.rollouts[rollout.rollout_id].status
        self.rollouts[rollout.rollout_id] = rollout.model_copy(deep=True)
        self.counted[f"rollouts.{before.value}"] -= 1
        self.counted[f"rollouts.{rollout.status.value}"] += 1
        if rollout.status.is_claimable:
            self.queue.setdefault(rollout.rollout_id, None)
        else:
            self.queue.pop(rollout.rollout_id, None)

    def rollouts_claimable(self, limit: int) -> list[Rollout]:
        result: list[Rollout] = []
        for rollout_id in self.queue:
            if len(result) >= limit:
                break
            result.append(self.rollouts[rollout_id].model_copy(deep=True))
        return result

    def rollouts_query(
        self, where: RolloutFilter, limit: int, offset: int
    ) -> tuple[list[Rollout], int]:
        wanted = None if where.statuses is None else set(where.statuses)
        ran = None if where.worker_id is None else self._run_by(where.worker_id)
        rollouts = self.rollouts.values()  # in enqueue order: dicts keep insertion order
        matching = [
            rollout
            for rollout in (reversed(rollouts) if where.newest_first else rollouts)
            if (wanted is None or rollout.status in wanted)
            and (where.mode is None or rollout.mode == where.mode)
            and (where.search is None or where.search in rollout.rollout_id)
            and (where.since is None or rollout.enqueue_time >= where.since)
            and (where.until is None or rollout.enqueue_time < where.until)
            and (ran is None or rollout.rollout_id in ran)
        ]
        page = [rollout.model_copy(deep=True) for rollout in matching[offset : offset + limit]]
        return page, len(matching)

    def _run_by(self, worker_id: str) -> set[str]:
        """The ids of the rollouts with an attempt on ``worker_id``."""
        return {
            rollout_id
            for rollout_id, attempts in self.attempts.items()
            if any(attempt.worker_id == worker_id for attempt in attempts.values())
        }

    # attempts
    def attempt_get(self, rollout_id: str, attempt_id: str) -> Attempt | None:
        attempt = self.attempts.get(rollout_id, {}).get(attempt_id)
        return None if attempt is None else attempt.model_copy()

    def attempts_get_many(self, keys: Iterable[tuple[str, str]]) -> dict[tuple[str, str], Attempt]:
        found = {}
        for rollout_id, attempt_id in keys:
            attempt = self.attempts.get(rollout_id, {}).get(attempt_id)
            if attempt is not None:
                found[(rollout_id, attempt_id)] = attempt.model_copy()
        return found

    def attempts_upsert_many(self, items: Sequence[tuple[Attempt, float | None]]) -> None:
        for attempt, deadline in items:
            self.attempt_upsert(attempt, deadline)

    def attempt_upsert(self, attempt: Attempt, deadline: float | None) -> None:
        attempts = self.attempts[attempt.rollout_id]
        self.counted["attempts"] += attempt.attempt_id not in attempts
        attempts[attempt.attempt_id] = attempt.model_copy()
        key = (attempt.rollout_id, attempt.attempt_id)
        if deadline is None:
            self.deadlines.pop(key, None)
        else:
            self.deadlines[key] = deadline

    def attempts_of(self, rollout_id: str) -> list[Attempt]:
        return [attempt.model_copy() for attempt in self.attempts.get(rollout_id, {}).values()]

    def attempts_due(self, now: float) -> list[Attempt]:
        due = [key for key, deadline in self.deadlines.items() if deadline <= now]
        return [self.attempts[rid][aid].model_copy() for rid, aid in due]

    # spans
    def spans_existing(self, keys: Iterable[SpanKey]) -> dict[SpanKey, int]:
        index = self.span_index
        return {key: index[key] for key in keys if key in index}

    def spans_reserve(self, counts: dict[str, int]) -> dict[str, int]:
        first = {rollout_id: self.next_sequence[rollout_id] for rollout_id in counts}
        for rollout_id, count in counts.items():
            self.next_sequence[rollout_id] += count
        return first

    def spans_insert(self, spans: Sequence[tuple[Span, int]]) -> None:
        for span, sequence_id in spans:
            self.spans[span.rollout_id].append(span.model_copy(update={"sequence_id": sequence_id}))
            key = (span.rollout_id, span.attempt_id, span.trace_id, span.span_id)
            self.span_index[key] = sequence_id
        self.counted["spans"] += len(spans)

    def spans_query(
        self, rollout_id: str, attempt_id: str | None, after: int = 0, limit: int | None = None
    ) -> list[Span]:
        # Stored in sequence order already (ids are assigned on append); spans are frozen, so
        # readers share the stored instances.
        spans = self.spans.get(rollout_id, [])
        start = bisect.bisect_right(spans, after, key=lambda span: span.sequence_id or 0)
        chosen = (
            spans[start:]
            if attempt_id is None
            else (span for span in spans[start:] if span.attempt_id == attempt_id)
        )
        return list(itertools.islice(chosen, limit))

    # resources
    def resources_get(self, resources_id: str) -> ResourcesUpdate | None:
        update = self.resources.get(resources_id)
        return None if update is None else update.model_copy(deep=True)

    def resources_latest(self) -> ResourcesUpdate | None:
        latest = self.latest_resources
        return None if latest is None else latest.model_copy(deep=True)

    def resources_insert(self, update: ResourcesUpdate) -> None:
        stored = update.model_copy(deep=True)
        self.counted["resources"] += update.resources_id not in self.resources
        self.resources[update.resources_id] = stored
        self.latest_resources = stored

    def resources_page(self, limit: int, offset: int) -> tuple[list[ResourcesUpdate], int]:
        newest_first = list(reversed(self.resources.values()))  # inserted in version order
        page = newest_first[offset : offset + limit]
        return [update.model_copy(deep=True) for update in page], len(newest_first)

    # metrics
    def metrics_insert(self, rows: Sequence[MetricsRow]) -> None:
        for row in rows:
            self.metrics.append(row.model_copy(deep=True))

    def metrics_query(
        self, run: str | None, limit: int, offset: int
    ) -> tuple[list[MetricsRow], int]:
        matching = self.metrics if run is None else [r for r in self.metrics if r.run == run]
        page = matching[offset : offset + limit]
        return [row.model_copy(deep=True) for row in page], len(matching)

    def metrics_runs(self) -> list[str]:
        return list(dict.fromkeys(row.run for row in self.metrics))

    # answers to requests a client may repeat
    def request_get(self, request_id: str) -> str | None:
        kept = self.requests.get(request_id)
        return None if kept is None else kept[1]

    def request_put(self, request_id: str, answer: str, now: float, forget_before: float) -> None:
        while self.requests:
            oldest = next(iter(self.requests))
            if self.requests[oldest][0] >= forget_before:
                break
            del self.requests[oldest]
        self.requests[request_id] = (now, answer)

    # workers
    def worker_seen(self, worker_id: str, now: float, claimed: int | None) -> None:
        self.counted["workers"] += worker_id not in self.workers
        self.workers[worker_id] = worker_seen(self.workers.get(worker_id), worker_id, now, claimed)

    def workers_all(self) -> list[Worker]:
        return [worker.model_copy() for worker in self.workers.values()]

    def counts(self) -> dict[str, int]:
        return dict(self.counted)


class MemoryStore(StatefulStore):
    """A store held in this process's memory. Nothing survives the process."""

    def __init__(self, url: str = "memory://", *, poll_interval: float = 0.25) -> None:
        super().__init__(url, poll_interval=poll_interval)
        import threading

        self._lock = threading.Lock()
        self._state = _MemoryTransaction()

    async def _run(self, operation: Callable[[Transaction], T]) -> T:
        # Engine operations validate before they write, so an exception leaves no partial change.
        with self._lock:
            return operation(self._state)
