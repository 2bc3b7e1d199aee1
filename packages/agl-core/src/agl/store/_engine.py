"""The store's rules, written once for every stateful backend.

Each function here is one store operation over a :class:`~agl.store._tx.Transaction`. They
validate everything before writing anything, so an operation that raises leaves the store as it
was (the memory backend relies on this; SQLite also rolls back its savepoint).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from agl._errors import ConflictError, InvalidInputError, NotFoundError
from agl._ids import MAX_ID_LENGTH, check_id
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
    new_id,
)
from agl._spans import Span
from agl.store import _repeats as repeats
from agl.store._tx import RolloutFilter, SpanKey, Transaction

MAX_PAGE_SIZE = 10_000
MAX_OFFSET = 2**63 - 1
"""The largest offset or sequence id a query takes (a signed 64-bit integer, as databases keep)."""
HEARTBEAT_REFRESH_SECONDS = 0.1


def enqueue(tx: Transaction, requests: Sequence[RolloutRequest], now: float) -> list[Rollout]:
    """Create a queued rollout per request; a known ``rollout_id`` returns the stored one."""
    for index, request in enumerate(requests):
        if request.resources_id is not None and tx.resources_get(request.resources_id) is None:
            raise NotFoundError(
                f"requests[{index}] names resources {request.resources_id!r}, "
                "which the store does not hold; publish them with add_resources first",
                field=f"requests[{index}].resources_id",
                value=request.resources_id,
            )
    created: dict[str, Rollout] = {}
    result = []
    for request in requests:
        if request.rollout_id is not None:
            existing = created.get(request.rollout_id) or tx.rollout_get(request.rollout_id)
            if existing is not None:
                result.append(existing)
                continue
        rollout = Rollout(
            rollout_id=request.rollout_id or new_id("ro"),
            input=request.input,
            mode=request.mode,
            config=request.config,
            metadata=request.metadata,
            resources_id=request.resources_id,
            status=RolloutStatus.QUEUING,
            enqueue_time=now,
        )
        tx.rollout_insert(rollout)
        created[rollout.rollout_id] = rollout
        result.append(rollout)
    return result


def dequeue(
    tx: Transaction,
    limit: int,
    worker_id: str | None,
    now: float,
    request_id: str | None = None,
) -> list[Claim]:
    """Claim up to ``limit`` waiting rollouts, creating a new attempt for each.

    With a ``request_id`` the store has answered before, returns that answer's claims as they
    stand now and claims nothing (:mod:`agl.store._repeats`).
    """
    if limit < 1:
        raise InvalidInputError(
            f"limit must be at least 1, got {limit}", field="limit", value=limit
        )
    if request_id is not None:
        answer = repeats.remembered(tx, request_id, "dequeue", worker_id)
        if answer is not None:
            return repeats.claims_again(tx, answer["claims"])
    claims = []
    for rollout in tx.rollouts_claimable(limit):
        attempt = Attempt(
            rollout_id=rollout.rollout_id,
            attempt_id=new_id("at"),
            sequence=rollout.num_attempts + 1,
            status=AttemptStatus.PREPARING,
            worker_id=worker_id,
            start_time=now,
        )
        rollout.status = RolloutStatus.PREPARING
        rollout.num_attempts += 1
        rollout.latest_attempt_id = attempt.attempt_id
        if rollout.start_time is None:
            rollout.start_time = now
        tx.attempt_upsert(attempt, _deadline(rollout, attempt))
        tx.rollout_update(rollout)
        claims.append(Claim(rollout=rollout, attempt=attempt))
    if worker_id is not None:
        tx.worker_seen(worker_id, now, claimed=len(claims))
    if request_id is not None and claims:  # nothing claimed: repeating it is harmless
        keys = [[claim.rollout.rollout_id, claim.attempt.attempt_id] for claim in claims]
        repeats.remember(tx, request_id, "dequeue", worker_id, now, claims=keys)
    return claims


def add_metrics(
    tx: Transaction, rows: Sequence[MetricsRow], now: float, request_id: str | None = None
) -> None:
    """Append metrics rows; a ``request_id`` the store has answered before adds nothing."""
    if request_id is not None:
        if repeats.remembered(tx, request_id, "add_metrics", None) is not None:
            return
        repeats.remember(tx, request_id, "add_metrics", None, now, rows=len(rows))
    tx.metrics_insert(rows)


def update_attempt(
    tx: Transaction,
    rollout_id: str,
    attempt_id: str,
    *,
    status: AttemptStatus | None,
    reason: str | None,
    now: float,
) -> Attempt:
    """Record a runner's report on an attempt: a heartbeat, a new status, or both.

    Every report counts as a heartbeat. A report on an attempt in a final status is refused
    with ConflictError (the store has moved on: timed it out, retried it, cancelled it), except
    the same final status again, which changes nothing, so a client may retry a report.
    """
    rollout, attempt = _get_attempt(tx, rollout_id, attempt_id)
    if attempt.status.is_final and status == attempt.status:
        return attempt  # the same final report again (a client retry): nothing changes
    if attempt.status.is_final:
        raise ConflictError(
            f"attempt {attempt_id!r} of rollout {rollout_id!r} already ended as "
            f"{attempt.status.value!r}"
            + (f" ({attempt.reason})" if attempt.reason else "")
            + "; its result is not recorded",
            field="attempt_id",
            value=attempt_id,
        )
    if status == AttemptStatus.PREPARING and attempt.status == AttemptStatus.RUNNING:
        raise ConflictError(
            f"attempt {attempt_id!r} is running and cannot go back to 'preparing'",
            field="status",
            value=status.value,
        )
    attempt.last_heartbeat_time = now
    if reason is not None:
        attempt.reason = reason
    if status is None or status == attempt.status:
        tx.attempt_upsert(attempt, _deadline(rollout, attempt))
        if attempt.worker_id is not None:
            tx.worker_seen(attempt.worker_id, now, claimed=None)
        return attempt
    _move_attempt(tx, rollout, attempt, status=status, reason=reason, now=now)
    if attempt.worker_id is not None:
        tx.worker_seen(attempt.worker_id, now, claimed=None)
    return attempt


def cancel(tx: Transaction, rollout_id: str, now: float) -> Rollout:
    """Cancel a rollout that has not finished; a finished one is returned unchanged."""
    rollout = get_rollout(tx, rollout_id)
    if rollout.status.is_final:
        return rollout
    if rollout.latest_attempt_id is not None:
        attempt = tx.attempt_get(rollout_id, rollout.latest_attempt_id)
        if attempt is not None and not attempt.status.is_final:
            _move_attempt(
                tx, rollout, attempt, status=AttemptStatus.CANCELLED, reason="cancelled", now=now
            )
            return rollout
    rollout.status = RolloutStatus.CANCELLED
    rollout.end_time = now
    tx.rollout_update(rollout)
    return rollout


def sweep(tx: Transaction, now: float) -> int:
    """End the attempts that ran past their timeout or stopped sending heartbeats.

    An attempt the store never heard of after the claim (still ``preparing``, no heartbeat,
    no span) never started: its runner died before it could, or the claim's answer never
    reached one (the server went down after committing it). It ends ``released``, not
    ``timeout`` or ``unresponsive``: the rollout goes back to the queue without using up a try,
    since its agent never ran.
    """
    swept = 0
    for due in tx.attempts_due(now):
        # Read again after the rollout: a backend that locks the rollout's row (PostgreSQL)
        # then sees what another server wrote meanwhile (a heartbeat, the same sweep).
        rollout = tx.rollout_get(due.rollout_id)
        attempt = tx.attempt_get(due.rollout_id, due.attempt_id) if rollout else None
        if rollout is None or attempt is None or attempt.status.is_final:
            continue
        deadline = _deadline(rollout, attempt)
        if deadline is None or deadline > now:
            continue
        config = rollout.config
        if (
            config.timeout_seconds is not None
            and now - attempt.start_time >= config.timeout_seconds
        ):
            status, limit = AttemptStatus.TIMEOUT, f"timeout_seconds={config.timeout_seconds:g}"
            reason = f"ran longer than {limit}"
        elif config.unresponsive_seconds is not None:
            limit = f"unresponsive_seconds={config.unresponsive_seconds:g}"
            status, reason = AttemptStatus.UNRESPONSIVE, f"no heartbeat for {limit}"
        else:  # pragma: no cover - a deadline always comes from one of the two limits
            continue
        if attempt.status == AttemptStatus.PREPARING and attempt.last_heartbeat_time is None:
            status = AttemptStatus.RELEASED
            reason = (
                f"never started: no word from {attempt.worker_id or 'its runner'} within "
                f"{limit} of the claim; back in the queue without using up a try"
            )
        _move_attempt(tx, rollout, attempt, status=status, reason=reason, now=now)
        swept += 1
    return swept


def add_spans(tx: Transaction, spans: Sequence[Span], now: float) -> list[int]:
    """Store spans, assigning sequence ids; spans already stored keep theirs.

    The whole batch is checked first; one span naming an unknown rollout or attempt rejects
    the batch, naming its index.
    """
    attempts = tx.attempts_get_many({(span.rollout_id, span.attempt_id) for span in spans})
    for index, span in enumerate(spans):
        if (span.rollout_id, span.attempt_id) in attempts:
            continue
        if tx.rollout_get(span.rollout_id) is None:
            raise NotFoundError(
                f"spans[{index}] names rollout {span.rollout_id!r}, which the store does not hold",
                field=f"spans[{index}].rollout_id",
                value=span.rollout_id,
            )
        raise NotFoundError(
            f"spans[{index}] names attempt {span.attempt_id!r}, which rollout "
            f"{span.rollout_id!r} does not have",
            field=f"spans[{index}].attempt_id",
            value=span.attempt_id,
        )

    keys: list[SpanKey] = [
        (span.rollout_id, span.attempt_id, span.trace_id, span.span_id) for span in spans
    ]
    known = tx.spans_existing(keys)
    fresh: dict[SpanKey, Span] = {}
    for key, span in zip(keys, spans, strict=True):
        if key not in known and key not in fresh:
            fresh[key] = span
    per_rollout: dict[str, int] = {}
    for key in fresh:
        per_rollout[key[0]] = per_rollout.get(key[0], 0) + 1
    # In id order: backends that lock a rollout to count its spans then lock in one order.
    next_id = tx.spans_reserve({rid: per_rollout[rid] for rid in sorted(per_rollout)})
    new: list[tuple[Span, int]] = []
    for key, span in fresh.items():
        sequence_id = next_id[key[0]]
        next_id[key[0]] = sequence_id + 1
        known[key] = sequence_id
        new.append((span, sequence_id))
    if new:
        tx.spans_insert(new)
    # Spans from a live attempt show it is alive; refreshing at most every
    # HEARTBEAT_REFRESH_SECONDS keeps a stream of small batches from rewriting it each time.
    stale = [
        attempt
        for attempt in attempts.values()
        if not attempt.status.is_final
        and now - (attempt.last_heartbeat_time or attempt.start_time) >= HEARTBEAT_REFRESH_SECONDS
    ]
    if stale:
        rollouts = tx.rollouts_get_many({attempt.rollout_id for attempt in stale})
        # Read again after the rollouts: where reading them locks them (PostgreSQL), another
        # server may have just ended an attempt, and that must not be written over.
        current = tx.attempts_get_many({(a.rollout_id, a.attempt_id) for a in stale}).values()
        alive = [attempt for attempt in current if not attempt.status.is_final]
        for attempt in alive:
            attempt.last_heartbeat_time = now
        if alive:
            tx.attempts_upsert_many(
                [(attempt, _deadline(rollouts[attempt.rollout_id], attempt)) for attempt in alive]
            )
    return [known[key] for key in keys]


def query_spans(
    tx: Transaction,
    rollout_id: str,
    attempt_id: str | None,
    *,
    after: int = 0,
    limit: int | None = None,
) -> list[Span]:
    """Return a rollout's spans (of one attempt, or all) in sequence order, those with a
    ``sequence_id`` above ``after``, at most ``limit`` of them."""
    if isinstance(after, bool) or not isinstance(after, int) or not 0 <= after <= MAX_OFFSET:
        raise InvalidInputError(
            f"after must be a whole number from 0 to {MAX_OFFSET}, got {after!r}",
            field="after",
            value=after,
        )
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise InvalidInputError(
            f"limit must be a whole number >= 1 (or None: all), got {limit!r}",
            field="limit",
            value=limit,
        )
    if attempt_id is not None:
        _get_attempt(tx, rollout_id, attempt_id)
    else:
        get_rollout(tx, rollout_id)
    return tx.spans_query(rollout_id, attempt_id, after, limit)


def get_rollout(tx: Transaction, rollout_id: str) -> Rollout:
    """Return a rollout or raise NotFoundError."""
    rollout = tx.rollout_get(rollout_id)
    if rollout is None:
        raise NotFoundError(
            f"rollout {rollout_id!r} is not in the store", field="rollout_id", value=rollout_id
        )
    return rollout


def get_rollouts(tx: Transaction, rollout_ids: Sequence[str]) -> list[Rollout]:
    """Return the named rollouts in the given order; any unknown id raises NotFoundError."""
    result = []
    for index, rollout_id in enumerate(rollout_ids):
        rollout = tx.rollout_get(rollout_id)
        if rollout is None:
            raise NotFoundError(
                f"rollout_ids[{index}] = {rollout_id!r} is not in the store",
                field=f"rollout_ids[{index}]",
                value=rollout_id,
            )
        result.append(rollout)
    return result


MAX_SEARCH_LENGTH = MAX_ID_LENGTH
"""The longest text a rollout query searches ids for: a search is checked as an id is
(:mod:`agl._ids`), since only what an id may hold can match one."""


def rollout_filter(
    status: RolloutStatus | Sequence[RolloutStatus] | None,
    mode: RolloutMode | None,
    *,
    search: str | None = None,
    worker_id: str | None = None,
    since: float | None = None,
    until: float | None = None,
    newest_first: bool = False,
) -> RolloutFilter:
    """Check the filters of a rollout query (see :meth:`Store.query_rollouts`) and bundle them.

    Raises InvalidInputError naming the field: a ``status`` that is none (``status[i]``), a
    ``search`` or ``worker_id`` that is no id (:mod:`agl._ids`: empty, over 256 characters,
    control characters), a ``since``/``until`` that is not a finite number.
    """
    statuses = [status] if isinstance(status, str) else status
    if statuses is not None:
        statuses = [_as_status(value, index) for index, value in enumerate(statuses)]
    if search is not None:
        check_id(search, "search")  # NUL, say, matches no id (and PostgreSQL refuses it)
    if worker_id is not None:
        check_id(worker_id, "worker_id")
    for field, value in (("since", since), ("until", until)):
        if value is not None and (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
        ):
            raise InvalidInputError(
                f"{field} must be a finite number of Unix seconds, got {value!r}",
                field=field,
                value=value,
            )
    return RolloutFilter(
        statuses=None if statuses is None else tuple(statuses),
        mode=mode,
        search=search,
        worker_id=worker_id,
        since=None if since is None else float(since),
        until=None if until is None else float(until),
        newest_first=bool(newest_first),
    )


def _as_status(value: str, index: int) -> RolloutStatus:
    try:
        return RolloutStatus(value)
    except ValueError:
        raise InvalidInputError(
            f"status[{index}] = {value!r} is not a rollout status; expected one of "
            f"{[status.value for status in RolloutStatus]}",
            field=f"status[{index}]",
            value=value,
        ) from None


def query_rollouts(tx: Transaction, where: RolloutFilter, limit: int, offset: int) -> RolloutPage:
    """Return one page of the rollouts ``where`` matches, in enqueue order or its reverse."""
    _check_page(limit, offset)
    rollouts, total = tx.rollouts_query(where, limit, offset)
    end = offset + len(rollouts)
    return RolloutPage(
        rollouts=rollouts, total=total, offset=offset, next_offset=end if end < total else None
    )


def query_attempts(tx: Transaction, rollout_id: str) -> list[Attempt]:
    """Return a rollout's attempts, first to latest."""
    get_rollout(tx, rollout_id)
    return sorted(tx.attempts_of(rollout_id), key=lambda attempt: attempt.sequence)


def add_resources(
    tx: Transaction, resources: dict[str, Resource], resources_id: str | None, now: float
) -> ResourcesUpdate:
    """Publish a set of resources as the next version; a known id returns the stored set."""
    if resources_id is not None:
        check_id(resources_id, "resources_id", segment=True)
        existing = tx.resources_get(resources_id)
        if existing is not None:
            return existing
    latest = tx.resources_latest()
    update = ResourcesUpdate(
        resources_id=resources_id or new_id("rs"),
        version=1 if latest is None else latest.version + 1,
        create_time=now,
        resources=resources,
    )
    tx.resources_insert(update)
    return update


def get_resources(tx: Transaction, resources_id: str | None) -> ResourcesUpdate | None:
    """Return the named set, or the latest (None if nothing was published)."""
    if resources_id is None:
        return tx.resources_latest()
    update = tx.resources_get(resources_id)
    if update is None:
        raise NotFoundError(
            f"resources {resources_id!r} are not in the store",
            field="resources_id",
            value=resources_id,
        )
    return update


def query_resources(tx: Transaction, limit: int, offset: int) -> ResourcesPage:
    """Return one page of the published resource sets, newest version first."""
    _check_page(limit, offset)
    updates, total = tx.resources_page(limit, offset)
    end = offset + len(updates)
    return ResourcesPage(
        resources=updates, total=total, offset=offset, next_offset=end if end < total else None
    )


def query_metrics(tx: Transaction, run: str | None, limit: int, offset: int) -> MetricsPage:
    """Return one page of metrics rows (of one run, or all) in the order they were added."""
    if run is not None:
        check_id(run, "run")
    _check_page(limit, offset)
    rows, total = tx.metrics_query(run, limit, offset)
    end = offset + len(rows)
    return MetricsPage(
        rows=rows, total=total, offset=offset, next_offset=end if end < total else None
    )


# --- helpers --------------------------------------------------------------------------------


def _check_page(limit: int, offset: int) -> None:
    if not 1 <= limit <= MAX_PAGE_SIZE:
        raise InvalidInputError(
            f"limit must be between 1 and {MAX_PAGE_SIZE}, got {limit}", field="limit", value=limit
        )
    if offset < 0:
        raise InvalidInputError(f"offset must be >= 0, got {offset}", field="offset", value=offset)


def _get_attempt(tx: Transaction, rollout_id: str, attempt_id: str) -> tuple[Rollout, Attempt]:
    rollout = get_rollout(tx, rollout_id)
    attempt = tx.attempt_get(rollout_id, attempt_id)
    if attempt is None:
        raise NotFoundError(
            f"rollout {rollout_id!r} has no attempt {attempt_id!r}",
            field="attempt_id",
            value=attempt_id,
        )
    return rollout, attempt


def _move_attempt(
    tx: Transaction,
    rollout: Rollout,
    attempt: Attempt,
    *,
    status: AttemptStatus,
    reason: str | None,
    now: float,
) -> None:
    """Move a live attempt to ``status`` and its rollout along with it (see the state machine)."""
    attempt.status = status
    if reason is not None:
        attempt.reason = reason
    if status.is_final:
        attempt.end_time = now
    tx.attempt_upsert(attempt, _deadline(rollout, attempt))
    if rollout.latest_attempt_id != attempt.attempt_id or rollout.status.is_final:
        return  # only the latest attempt of a live rollout moves the rollout
    if status == AttemptStatus.PREPARING:
        rollout.status = RolloutStatus.PREPARING
    elif status == AttemptStatus.RUNNING:
        rollout.status = RolloutStatus.RUNNING
    elif status == AttemptStatus.SUCCEEDED:
        rollout.status = RolloutStatus.SUCCEEDED
        rollout.end_time = now
    elif status == AttemptStatus.CANCELLED:
        rollout.status = RolloutStatus.CANCELLED
        rollout.end_time = now
    elif status == AttemptStatus.RELEASED or (
        status in rollout.config.retry_on
        and _counted_attempts(tx, rollout) < rollout.config.max_attempts
    ):
        rollout.status = RolloutStatus.REQUEUING
    else:
        rollout.status = RolloutStatus.FAILED
        rollout.end_time = now
    tx.rollout_update(rollout)


def _counted_attempts(tx: Transaction, rollout: Rollout) -> int:
    """Attempts that count towards ``max_attempts``: all but those a runner released."""
    if rollout.num_attempts < rollout.config.max_attempts:
        return rollout.num_attempts  # below the limit even counting every attempt
    released = sum(
        1
        for attempt in tx.attempts_of(rollout.rollout_id)
        if attempt.status == AttemptStatus.RELEASED
    )
    return rollout.num_attempts - released


def _deadline(rollout: Rollout, attempt: Attempt) -> float | None:
    """When the store must next check a live attempt, or None if it never has to."""
    if attempt.status.is_final:
        return None
    config = rollout.config
    candidates = []
    if config.timeout_seconds is not None:
        candidates.append(attempt.start_time + config.timeout_seconds)
    if config.unresponsive_seconds is not None:
        last = attempt.last_heartbeat_time or attempt.start_time
        candidates.append(last + config.unresponsive_seconds)
    return min(candidates) if candidates else None
