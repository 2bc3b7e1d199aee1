"""The store's rules, written once for every stateful backend.

Each function here is one store operation over a :class:`~agl.store._tx.Transaction`. They
validate everything before writing anything, so an operation that raises leaves the store as it
was (the memory backend relies on this; SQLite also rolls back its savepoint).

The rules live in three parts, re-exported here: the rollouts' queue, state machine and sweep
(:mod:`agl.store._engine_rollouts`), spans (:mod:`agl.store._engine_spans`), and what is read
in pages, with resources and metrics (:mod:`agl.store._engine_queries`).
"""

from __future__ import annotations

from agl.store._engine_queries import (
    MAX_OFFSET,
    MAX_PAGE_SIZE,
    MAX_SEARCH_LENGTH,
    add_metrics,
    add_resources,
    get_resources,
    query_metrics,
    query_resources,
    query_rollouts,
    rollout_filter,
)
from agl.store._engine_rollouts import (
    cancel,
    dequeue,
    enqueue,
    get_rollout,
    get_rollouts,
    query_attempts,
    sweep,
    update_attempt,
)
from agl.store._engine_spans import HEARTBEAT_REFRESH_SECONDS, add_spans, query_spans

__all__ = [
    "HEARTBEAT_REFRESH_SECONDS",
    "MAX_OFFSET",
    "MAX_PAGE_SIZE",
    "MAX_SEARCH_LENGTH",
    "add_metrics",
    "add_resources",
    "add_spans",
    "cancel",
    "dequeue",
    "enqueue",
    "get_resources",
    "get_rollout",
    "get_rollouts",
    "query_attempts",
    "query_metrics",
    "query_resources",
    "query_rollouts",
    "query_spans",
    "rollout_filter",
    "sweep",
    "update_attempt",
]
