"""The store's rules for rollouts and attempts: the queue, the state machine, the sweep.

A rollout's status follows its latest attempt (:func:`_move_attempt` is the state machine);
the sweep ends the attempts that ran past their timeout or stopped sending heartbeats. Part of
:mod:`agl.store._engine`, whose rules hold here too.
"""

from __future__ import annotations

from collections.abc import Sequence

from agl._errors import ConflictError, InvalidInputError, NotFoundError
from agl._rollouts import (
    Attempt,
    AttemptStatus,
    Claim,
    Rollout,
    RolloutRequest,
    RolloutStatus,
    new_id,
)
from agl.store import _repeats as repeats
from agl.store._tx import Transaction

__all__ = [
    "attempt_deadline",
    "cancel",
    "dequeue",
    "enqueue",
    "get_attempt",
    "get_rollout",
    "get_rollouts",
    "query_attempts",
    "sweep",
    "update_attempt",
]


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
        tx.attempt_upsert(attempt, attempt_deadline(rollout, attempt))
        tx.rollout_update(rollout)
        claims.append(Claim(rollout=rollout, attempt=attempt))
    if worker_id is not None:
        tx.worker_seen(worker_id, now, claimed=len(claims))
    if request_id is not None and claims:  # nothing claimed: repeating it is harmless
        keys = [[claim.rollout.rollout_id, claim.attempt.attempt_id] for claim in claims]
        repeats.remember(tx, request_id, "dequeue", worker_id, now, claims=keys)
    return claims


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
    rollout, attempt = get_attempt(tx, rollout_id, attempt_id)
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
        tx.attempt_upsert(attempt, attempt_deadline(rollout, attempt))
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
        due_at = attempt_deadline(rollout, attempt)
        if due_at is None or due_at > now:
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


def query_attempts(tx: Transaction, rollout_id: str) -> list[Attempt]:
    """Return a rollout's attempts, first to latest."""
    get_rollout(tx, rollout_id)
    return sorted(tx.attempts_of(rollout_id), key=lambda attempt: attempt.sequence)


def get_attempt(tx: Transaction, rollout_id: str, attempt_id: str) -> tuple[Rollout, Attempt]:
    """Return an attempt and its rollout, or raise NotFoundError naming the unknown one."""
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
    tx.attempt_upsert(attempt, attempt_deadline(rollout, attempt))
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


def attempt_deadline(rollout: Rollout, attempt: Attempt) -> float | None:
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
