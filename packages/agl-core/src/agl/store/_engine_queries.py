"""The store's rules for what is read in pages: rollout queries, resources, metrics.

Every page is checked the same way (:func:`check_page`), and a rollout query's filters once,
for every backend (:func:`rollout_filter`, which :class:`~agl.store.ClosingStore` calls). Part
of :mod:`agl.store._engine`, whose rules hold here too.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from agl._errors import InvalidInputError, NotFoundError
from agl._ids import MAX_ID_LENGTH, check_id
from agl._metric_rows import MetricsPage, MetricsRow
from agl._resources import Resource, ResourcesPage, ResourcesUpdate
from agl._rollouts import (
    RolloutMode,
    RolloutPage,
    RolloutStatus,
    new_id,
)
from agl.store import _repeats as repeats
from agl.store._tx import RolloutFilter, Transaction

__all__ = [
    "MAX_OFFSET",
    "MAX_PAGE_SIZE",
    "MAX_SEARCH_LENGTH",
    "add_metrics",
    "add_resources",
    "check_page",
    "get_resources",
    "query_metrics",
    "query_resources",
    "query_rollouts",
    "rollout_filter",
]

MAX_PAGE_SIZE = 10_000
"""The most rows one page holds."""
MAX_OFFSET = 2**63 - 1
"""The largest offset or sequence id a query takes (a signed 64-bit integer, as databases keep)."""
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
    check_page(limit, offset)
    rollouts, total = tx.rollouts_query(where, limit, offset)
    end = offset + len(rollouts)
    return RolloutPage(
        rollouts=rollouts, total=total, offset=offset, next_offset=end if end < total else None
    )


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
    check_page(limit, offset)
    updates, total = tx.resources_page(limit, offset)
    end = offset + len(updates)
    return ResourcesPage(
        resources=updates, total=total, offset=offset, next_offset=end if end < total else None
    )


def add_metrics(
    tx: Transaction, rows: Sequence[MetricsRow], now: float, request_id: str | None = None
) -> None:
    """Append metrics rows; a ``request_id`` the store has answered before adds nothing."""
    if request_id is not None:
        if repeats.remembered(tx, request_id, "add_metrics", None) is not None:
            return
        repeats.remember(tx, request_id, "add_metrics", None, now, rows=len(rows))
    tx.metrics_insert(rows)


def query_metrics(tx: Transaction, run: str | None, limit: int, offset: int) -> MetricsPage:
    """Return one page of metrics rows (of one run, or all) in the order they were added."""
    if run is not None:
        check_id(run, "run")
    check_page(limit, offset)
    rows, total = tx.metrics_query(run, limit, offset)
    end = offset + len(rows)
    return MetricsPage(
        rows=rows, total=total, offset=offset, next_offset=end if end < total else None
    )


def check_page(limit: int, offset: int) -> None:
    """Refuse a page that is none, naming ``limit`` or ``offset``."""
    if not 1 <= limit <= MAX_PAGE_SIZE:
        raise InvalidInputError(
            f"limit must be between 1 and {MAX_PAGE_SIZE}, got {limit}", field="limit", value=limit
        )
    if offset < 0:
        raise InvalidInputError(f"offset must be >= 0, got {offset}", field="offset", value=offset)
