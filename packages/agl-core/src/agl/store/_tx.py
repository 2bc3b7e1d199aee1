"""The storage primitives a stateful backend provides to the shared store engine.

The rules of the store (the rollout state machine, retries, sequence numbers, idempotency,
validation) live once, in :mod:`agl.store._engine`. A backend that keeps state itself (memory,
SQLite) only implements this small protocol of reads and writes, called inside one transaction
per store operation.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from pydantic import TypeAdapter

from agl._metric_rows import MetricsRow
from agl._resources import ResourcesUpdate
from agl._rollouts import Attempt, Rollout, RolloutMode, RolloutStatus, Worker
from agl._spans import Span

SpanKey = tuple[str, str, str, str]
"""(rollout_id, attempt_id, trace_id, span_id): what makes a span unique in a store."""


@dataclass(frozen=True, kw_only=True)
class RolloutFilter:
    """Which rollouts a query wants and in which order; the engine checked every field.

    Each field that is not None narrows the match (all must hold).

    Attributes:
        statuses: The rollout is in one of these statuses (empty: matches nothing).
        mode: The rollout's mode.
        search: Text the ``rollout_id`` contains (case-sensitive, taken literally).
        worker_id: A worker that ran one of the rollout's attempts.
        since: ``enqueue_time >= since``.
        until: ``enqueue_time < until``.
        newest_first: Latest enqueued first, instead of oldest first.
    """

    statuses: tuple[RolloutStatus, ...] | None = None
    mode: RolloutMode | None = None
    search: str | None = None
    worker_id: str | None = None
    since: float | None = None
    until: float | None = None
    newest_first: bool = False


class Transaction(Protocol):
    """Reads and writes of one store operation; all or nothing."""

    # rollouts
    def rollout_get(self, rollout_id: str) -> Rollout | None: ...
    def rollouts_get_many(self, rollout_ids: Iterable[str]) -> dict[str, Rollout]:
        """Return those of the rollouts that exist, by id."""
        ...

    def rollout_insert(self, rollout: Rollout) -> None: ...
    def rollout_update(self, rollout: Rollout) -> None: ...
    def rollouts_claimable(self, limit: int) -> list[Rollout]:
        """Return up to ``limit`` claimable rollouts, longest-waiting first."""
        ...

    def rollouts_query(
        self, where: RolloutFilter, limit: int, offset: int
    ) -> tuple[list[Rollout], int]:
        """Return one page of the rollouts ``where`` matches, in enqueue order (or its reverse,
        ``where.newest_first``), and how many match in all."""
        ...

    # attempts
    def attempt_get(self, rollout_id: str, attempt_id: str) -> Attempt | None: ...
    def attempts_get_many(self, keys: Iterable[tuple[str, str]]) -> dict[tuple[str, str], Attempt]:
        """Return those of the (rollout_id, attempt_id) attempts that exist, by key."""
        ...

    def attempt_upsert(self, attempt: Attempt, deadline: float | None) -> None:
        """Write an attempt; ``deadline`` is when the store must look at it again, if ever."""
        ...

    def attempts_upsert_many(self, items: Sequence[tuple[Attempt, float | None]]) -> None:
        """Write several attempts, each with its deadline."""
        ...

    def attempts_of(self, rollout_id: str) -> list[Attempt]: ...
    def attempts_due(self, now: float) -> list[Attempt]:
        """Return active attempts whose deadline is at or before ``now``."""
        ...

    # spans
    def spans_existing(self, keys: Iterable[SpanKey]) -> dict[SpanKey, int]:
        """Return the sequence ids of those of ``keys`` already stored."""
        ...

    def spans_reserve(self, counts: dict[str, int]) -> dict[str, int]:
        """Reserve ``counts[rollout_id]`` sequence ids for each rollout; return each first id."""
        ...

    def spans_insert(self, spans: Sequence[tuple[Span, int]]) -> None:
        """Store new spans, each with the sequence id it was given."""
        ...

    def spans_query(
        self, rollout_id: str, attempt_id: str | None, after: int = 0, limit: int | None = None
    ) -> list[Span]:
        """A rollout's spans (of one attempt, or all) with ``sequence_id > after``, in order,
        at most ``limit`` (all when None)."""
        ...

    # resources
    def resources_get(self, resources_id: str) -> ResourcesUpdate | None: ...
    def resources_latest(self) -> ResourcesUpdate | None: ...
    def resources_insert(self, update: ResourcesUpdate) -> None: ...
    def resources_page(self, limit: int, offset: int) -> tuple[list[ResourcesUpdate], int]:
        """Return one page of the resource sets, newest version first, and how many there are."""
        ...

    # metrics
    def metrics_insert(self, rows: Sequence[MetricsRow]) -> None:
        """Append rows, in order."""
        ...

    def metrics_query(
        self, run: str | None, limit: int, offset: int
    ) -> tuple[list[MetricsRow], int]:
        """Return one page of the rows (of one run, or all) in the order they were added, and
        how many match in all."""
        ...

    def metrics_runs(self) -> list[str]:
        """Return the runs that added rows, in the order each first did."""
        ...

    # answers to requests a client may repeat (agl.store._repeats)
    def request_get(self, request_id: str) -> str | None:
        """Return the answer kept for ``request_id`` (JSON), or None.

        A backend that other processes write at the same time (PostgreSQL) holds the id until
        the transaction ends, so the same request sent to two servers is answered once.
        """
        ...

    def request_put(self, request_id: str, answer: str, now: float, forget_before: float) -> None:
        """Keep ``answer`` for ``request_id``; drop the answers kept before ``forget_before``."""
        ...

    # workers
    def worker_seen(self, worker_id: str, now: float, claimed: int | None) -> None:
        """Record that a worker was heard from at ``now``; ``claimed`` (the rollouts a
        dequeue gave it) is not None when it dequeued. The first time creates the worker."""
        ...

    def workers_all(self) -> list[Worker]: ...

    # statistics
    def counts(self) -> dict[str, int]:
        """Return ``rollouts.<status>`` counts and ``attempts``, ``spans``, ``resources``,
        ``workers`` totals."""
        ...


# --- helpers for backends that keep spans as JSON rows (SQLite, PostgreSQL) ---------------------

_spans_json = TypeAdapter(list[Span])
_NO_SEQUENCE = {"sequence_id"}


def like_contains(text: str) -> str:
    """A ``LIKE … ESCAPE '\\'`` pattern matching values that contain ``text`` literally."""
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def span_row(span: Span, sequence_id: int) -> tuple[str, int, str, str, str, str]:
    """A span as (rollout_id, sequence_id, attempt_id, trace_id, span_id, data) columns.

    The stored JSON leaves out default values and starts with the sequence id, so reads get
    whole spans from the data column alone.
    """
    data = span.model_dump_json(exclude_defaults=True, exclude=_NO_SEQUENCE)
    return (
        span.rollout_id,
        sequence_id,
        span.attempt_id,
        span.trace_id,
        span.span_id,
        f'{{"sequence_id":{sequence_id},' + data[1:],
    )


def spans_of_rows(data: Iterable[str]) -> list[Span]:
    """Spans from their stored JSON, validated in one pass."""
    rows = list(data)
    return _spans_json.validate_json("[" + ",".join(rows) + "]") if rows else []


def span_ids_by_attempt(keys: Iterable[SpanKey]) -> dict[tuple[str, str], set[str]]:
    """The span ids of ``keys``, grouped by (rollout_id, attempt_id): one lookup per attempt."""
    wanted: dict[tuple[str, str], set[str]] = {}
    for rollout_id, attempt_id, _, span_id in keys:
        wanted.setdefault((rollout_id, attempt_id), set()).add(span_id)
    return wanted


def worker_seen(worker: Worker | None, worker_id: str, now: float, claimed: int | None) -> Worker:
    """``worker`` (None: not seen before) after being heard from: see
    :meth:`Transaction.worker_seen`. For backends that keep a worker as one value."""
    if worker is None:
        worker = Worker(worker_id=worker_id, first_seen_time=now, last_seen_time=now)
    worker.last_seen_time = max(worker.last_seen_time, now)
    if claimed is not None:
        worker.last_dequeue_time = max(worker.last_dequeue_time or now, now)
        worker.num_claimed += claimed
    return worker
