"""Calls a client may repeat: the store remembers each answer by a client-chosen request id.

A dequeue claims rollouts and an ``add_metrics`` appends rows: sent twice, each would do its
work twice. A client that cannot know whether its request was carried out (the answer was
lost, or a server answered 503 for a commit in doubt and the client failed over to another
server over the same database) sends it again with the same ``request_id``, and the store
answers as it did the first time, without claiming or adding anything. The store keeps an
answer for at least :data:`REQUEST_MEMORY_SECONDS`.
"""

from __future__ import annotations

import json
from typing import Any

from agl._errors import ConflictError, InvalidInputError
from agl._rollouts import Claim, unaddressable
from agl.store._tx import Transaction

__all__ = [
    "MAX_REQUEST_ID_LENGTH",
    "REQUEST_MEMORY_SECONDS",
    "check_request_id",
    "claims_again",
    "remember",
    "remembered",
]

REQUEST_MEMORY_SECONDS = 3600.0
"""How long the store remembers the answer to a request sent with a ``request_id``."""

MAX_REQUEST_ID_LENGTH = 128
"""The longest ``request_id`` a store takes."""


def check_request_id(request_id: object) -> str:
    """Return ``request_id`` if it is a usable id, else raise InvalidInputError naming it."""
    if not isinstance(request_id, str):
        raise InvalidInputError(
            f"request_id must be a string, got {type(request_id).__name__}", field="request_id"
        )
    if not 1 <= len(request_id) <= MAX_REQUEST_ID_LENGTH:
        raise InvalidInputError(
            f"request_id must be 1 to {MAX_REQUEST_ID_LENGTH} characters, got {len(request_id)}",
            field="request_id",
        )
    problem = unaddressable(request_id, "request_id")
    if problem is not None:
        raise InvalidInputError(problem, field="request_id", value=request_id)
    return request_id


def remembered(
    tx: Transaction, request_id: str, operation: str, worker_id: str | None
) -> dict[str, Any] | None:
    """The answer remembered for ``request_id``, or None when this is its first time.

    Raises ConflictError when the id was used for another operation or another worker: a
    request id names one request, not a client.
    """
    stored = tx.request_get(request_id)
    if stored is None:
        return None
    answer: dict[str, Any] = json.loads(stored)
    if answer.get("operation") != operation or answer.get("worker_id") != worker_id:
        raise ConflictError(
            f"request_id {request_id!r} was already used by another request "
            f"({answer.get('operation')} for worker {answer.get('worker_id')!r}); "
            "send a new id with every new request and repeat an id only with the same request",
            field="request_id",
            value=request_id,
        )
    return answer


def remember(
    tx: Transaction,
    request_id: str,
    operation: str,
    worker_id: str | None,
    now: float,
    **answer: Any,
) -> None:
    """Keep the answer to ``request_id``; forget those older than REQUEST_MEMORY_SECONDS."""
    body = json.dumps({"operation": operation, "worker_id": worker_id, **answer})
    tx.request_put(request_id, body, now, forget_before=now - REQUEST_MEMORY_SECONDS)


def claims_again(tx: Transaction, keys: list[list[str]]) -> list[Claim]:
    """The claims of a repeated dequeue, as they stand now.

    An attempt that has ended meanwhile (the store released it: no runner said a word of it
    within its limit) is left out: its rollout is back in the queue, or claimed by another.
    """
    claims = []
    for rollout_id, attempt_id in keys:
        rollout = tx.rollout_get(rollout_id)
        attempt = tx.attempt_get(rollout_id, attempt_id) if rollout is not None else None
        if rollout is not None and attempt is not None and not attempt.status.is_final:
            claims.append(Claim(rollout=rollout, attempt=attempt))
    return claims
