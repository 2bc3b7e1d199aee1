"""The store's rules for spans: sequence ids, idempotent whole batches, paged reads.

Spans of a live attempt count as its heartbeat. Part of :mod:`agl.store._engine`, whose rules
hold here too.
"""

from __future__ import annotations

from collections.abc import Sequence

from agl._errors import InvalidInputError, NotFoundError
from agl._spans import Span
from agl.store._engine_queries import MAX_OFFSET
from agl.store._engine_rollouts import attempt_deadline, get_attempt, get_rollout
from agl.store._tx import SpanKey, Transaction

__all__ = ["HEARTBEAT_REFRESH_SECONDS", "add_spans", "query_spans"]

HEARTBEAT_REFRESH_SECONDS = 0.1
"""A span refreshes its live attempt's heartbeat at most this often (seconds)."""


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
                [(a, attempt_deadline(rollouts[a.rollout_id], a)) for a in alive]
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
        get_attempt(tx, rollout_id, attempt_id)
    else:
        get_rollout(tx, rollout_id)
    return tx.spans_query(rollout_id, attempt_id, after, limit)
