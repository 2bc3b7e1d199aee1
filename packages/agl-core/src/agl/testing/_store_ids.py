"""The store conformance suite's part on ids: one rule (:mod:`agl._ids`), every entry point.

Mixed into :class:`agl.testing.store.StoreConformance`; a backend runs these with the rest.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from pydantic import ValidationError

from agl import InvalidInputError, MetricsRow, RolloutRequest, RolloutStatus, Span, Store
from agl._ids import MAX_ID_LENGTH

__all__ = ["StoreIdRules"]

BAD_IDS = [
    "",
    "x" * (MAX_ID_LENGTH + 1),
    "w" + "x" * 100_000 + "\x00ab",  # over-long, with a NUL
    "a\x00b",
    "tab\there",
    "bell\x07",
    "del\x7f",
    "c1\x85",
]
"""Ids no store takes, whatever the field: empty, too long, holding control characters."""

NOT_SEGMENTS = ["a/b", "..", ".", "with space", "50%", "q?x", "h#1"]
"""Ids that are fine as names but not as one URL path segment (rollout, attempt, resources)."""


def _refused(caught: pytest.ExceptionInfo[InvalidInputError], field: str, bad: str) -> None:
    error = caught.value
    assert error.field == field, (field, bad[:20], error)
    assert error.message.startswith(field), error.message
    # an over-long value is not echoed whole
    assert len(error.message) < 300, len(error.message)


class StoreIdRules:
    """Every id a store takes is checked by the same rule, at every entry point."""

    async def test_a_longest_id_is_taken_everywhere(self, store: Store) -> None:
        longest = "x" * MAX_ID_LENGTH
        [rollout] = await store.enqueue_rollouts([RolloutRequest(input=1, rollout_id=longest)])
        [claim] = await store.dequeue_rollouts(worker_id=longest)
        assert (claim.rollout.rollout_id, claim.attempt.worker_id) == (longest, longest)
        await store.add_metrics([MetricsRow(run=longest, step=0, time=0.0)])
        assert (await store.query_metrics(run=longest)).total == 1
        page = await store.query_rollouts(worker_id=longest)
        assert [r.rollout_id for r in page.rollouts] == [rollout.rollout_id]

    async def test_bad_ids_are_refused_naming_the_field(self, store: Store) -> None:
        [queued] = await store.enqueue_rollouts([RolloutRequest(input=1)])
        rid = queued.rollout_id
        calls: list[tuple[str, Callable[[str], Awaitable[Any]], list[str]]] = [
            ("worker_id", lambda bad: store.dequeue_rollouts(worker_id=bad), []),
            ("worker_id", lambda bad: store.query_rollouts(worker_id=bad), []),
            ("search", lambda bad: store.query_rollouts(search=bad), []),
            ("rollout_id", store.get_rollout, NOT_SEGMENTS),
            ("rollout_id", store.cancel_rollout, NOT_SEGMENTS),
            ("rollout_id", store.query_attempts, NOT_SEGMENTS),
            ("rollout_id", store.query_spans, NOT_SEGMENTS),
            ("attempt_id", lambda bad: store.query_spans(rid, bad), NOT_SEGMENTS),
            ("attempt_id", lambda bad: store.update_attempt(rid, bad), NOT_SEGMENTS),
            ("rollout_ids[1]", lambda bad: store.wait_for_rollouts([rid, bad], 0), NOT_SEGMENTS),
            ("resources_id", store.get_resources, NOT_SEGMENTS),
            ("run", lambda bad: store.query_metrics(run=bad), []),
        ]
        for field, call, more in calls:
            for bad in BAD_IDS + more:
                with pytest.raises(InvalidInputError) as caught:
                    await call(bad)
                _refused(caught, field, bad)
        # nothing was claimed or changed by the refusals
        assert (await store.get_rollout(rid)).status == RolloutStatus.QUEUING
        assert await store.query_workers() == []

    async def test_bad_ids_in_what_is_written_are_refused_whole(self, store: Store) -> None:
        await store.enqueue_rollouts([RolloutRequest(input=1)])
        [claim] = await store.dequeue_rollouts()
        rid, aid = claim.rollout.rollout_id, claim.attempt.attempt_id
        for bad in BAD_IDS + NOT_SEGMENTS:
            # The models refuse them...
            with pytest.raises(ValidationError):
                RolloutRequest(input=1, rollout_id=bad)
            with pytest.raises(ValidationError):
                Span.create(rollout_id=bad, attempt_id=aid, name="s")
            # ... and so does the store, for objects built without validation.
            requests = [
                RolloutRequest(input=0),
                RolloutRequest.model_construct(input=1, rollout_id=bad),
            ]
            with pytest.raises(InvalidInputError) as caught:
                await store.enqueue_rollouts(requests)
            _refused(caught, "requests[1].rollout_id", bad)
            good = Span.create(rollout_id=rid, attempt_id=aid, name="ok")
            spans = [good, good.model_copy(update={"attempt_id": bad})]
            with pytest.raises(InvalidInputError) as caught:
                await store.add_spans(spans)
            _refused(caught, "spans[1].attempt_id", bad)
        for bad in BAD_IDS:
            with pytest.raises(ValidationError):
                MetricsRow(run=bad, step=0, time=0.0)
            rows = [MetricsRow(run="r", step=0, time=0.0)]
            rows.append(MetricsRow.model_construct(run=bad, step=1, time=0.0, values={}))
            with pytest.raises(InvalidInputError) as caught:
                await store.add_metrics(rows)
            _refused(caught, "rows[1].run", bad)
        stats = await store.statistics()
        assert (stats.rollouts, stats.spans) == (1, 0)
        assert (await store.query_metrics()).total == 0
