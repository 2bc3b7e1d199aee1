"""The store conformance suite's part on rollouts and the queue.

Enqueue, dequeue (long polls, repeated requests), request ids and rollout queries.

Mixed into :class:`agl.testing.store.StoreConformance`; a backend runs these with the rest.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from agl import (
    AttemptStatus,
    ConflictError,
    InvalidInputError,
    MetricsRow,
    NotFoundError,
    PromptTemplate,
    RolloutConfig,
    RolloutRequest,
    RolloutStatus,
    Store,
)
from agl.testing._store_support import claim_rollouts

__all__ = ["StoreRolloutRules"]


class StoreRolloutRules:
    """What enqueueing, claiming and querying rollouts must do."""

    async def test_enqueue_round_trip(self, store: Store) -> None:
        config = RolloutConfig(timeout_seconds=30, unresponsive_seconds=10, max_attempts=3)
        request = RolloutRequest(
            input={"question": "2+2", "nested": [1, {"a": None}]},
            mode="val",
            config=config,
            metadata={"split": "dev", "index": 7},
        )
        [rollout] = await store.enqueue_rollouts([request])
        assert rollout.status == RolloutStatus.QUEUING
        assert rollout.num_attempts == 0
        fetched = await store.get_rollout(rollout.rollout_id)
        assert fetched == rollout
        assert fetched.input == {"question": "2+2", "nested": [1, {"a": None}]}
        assert fetched.mode == "val"
        assert fetched.config == config
        assert fetched.metadata == {"split": "dev", "index": 7}

    async def test_enqueue_keeps_order_and_assigns_distinct_ids(self, store: Store) -> None:
        rollouts = await store.enqueue_rollouts([RolloutRequest(input=i) for i in range(20)])
        assert [rollout.input for rollout in rollouts] == list(range(20))
        assert len({rollout.rollout_id for rollout in rollouts}) == 20

    async def test_enqueue_with_known_id_is_idempotent(self, store: Store) -> None:
        [first] = await store.enqueue_rollouts([RolloutRequest(input=1, rollout_id="task-1")])
        [again] = await store.enqueue_rollouts([RolloutRequest(input=2, rollout_id="task-1")])
        assert first.rollout_id == again.rollout_id == "task-1"
        assert again.input == 1
        assert (await store.statistics()).rollouts == 1

    async def test_enqueue_naming_unknown_resources_is_rejected_whole(self, store: Store) -> None:
        requests = [RolloutRequest(input=1), RolloutRequest(input=2, resources_id="rs-missing")]
        with pytest.raises(NotFoundError) as caught:
            await store.enqueue_rollouts(requests)
        assert caught.value.field == "requests[1].resources_id"
        assert (await store.statistics()).rollouts == 0

    async def test_values_no_store_keeps_as_they_are_are_refused(self, store: Store) -> None:
        """NaN and lone surrogates would come back as something else (or not at all)."""
        requests = [RolloutRequest(input=1), RolloutRequest(input={"x": [1.0, float("nan")]})]
        with pytest.raises(InvalidInputError) as caught:
            await store.enqueue_rollouts(requests)
        assert caught.value.field == "requests[1].input.x[1]"
        assert "nan is not a finite number" in caught.value.message
        with pytest.raises(InvalidInputError) as caught:
            await store.enqueue_rollouts([RolloutRequest(input="lone \ud800")])
        assert caught.value.field == "requests[0].input"
        assert (await store.statistics()).rollouts == 0
        template = PromptTemplate(template="{x}", engine="f-string")
        with pytest.raises(InvalidInputError) as caught:
            await store.add_resources({"prompt\udc00": template})
        assert "lone UTF-16 surrogate" in caught.value.message
        assert (await store.statistics()).resources == 0

    async def test_get_unknown_rollout_raises(self, store: Store) -> None:
        with pytest.raises(NotFoundError) as caught:
            await store.get_rollout("ro-unknown")
        assert "ro-unknown" in caught.value.message

    async def test_dequeue_claims_oldest_first(self, store: Store) -> None:
        rollouts = await store.enqueue_rollouts([RolloutRequest(input=i) for i in range(3)])
        claims = await store.dequeue_rollouts(limit=2, worker_id="w1")
        assert [claim.rollout.rollout_id for claim in claims] == [
            rollout.rollout_id for rollout in rollouts[:2]
        ]
        for claim in claims:
            assert claim.rollout.status == RolloutStatus.PREPARING
            assert claim.attempt.status == AttemptStatus.PREPARING
            assert claim.attempt.sequence == 1
            assert claim.attempt.worker_id == "w1"
            assert claim.rollout.latest_attempt_id == claim.attempt.attempt_id
        [last] = await store.dequeue_rollouts(limit=5)
        assert last.rollout.rollout_id == rollouts[2].rollout_id
        assert await store.dequeue_rollouts() == []

    async def test_dequeue_rejects_bad_arguments(self, store: Store) -> None:
        with pytest.raises(InvalidInputError):
            await store.dequeue_rollouts(limit=0)
        with pytest.raises(InvalidInputError):
            await store.dequeue_rollouts(wait=-1)

    async def test_dequeue_long_polls_until_a_rollout_arrives(self, store: Store) -> None:
        async def enqueue_later() -> None:
            await asyncio.sleep(0.3)
            await store.enqueue_rollouts([RolloutRequest(input="late")])

        started = time.monotonic()
        task = asyncio.create_task(enqueue_later())
        claims = await store.dequeue_rollouts(wait=10)
        elapsed = time.monotonic() - started
        await task
        assert [claim.rollout.input for claim in claims] == ["late"]
        assert 0.25 <= elapsed < 5, elapsed

    async def test_dequeue_wait_returns_empty_after_the_wait(self, store: Store) -> None:
        started = time.monotonic()
        assert await store.dequeue_rollouts(wait=0.3) == []
        assert time.monotonic() - started >= 0.29

    async def test_dequeue_records_the_worker(self, store: Store) -> None:
        await claim_rollouts(store, RolloutRequest(input=1), RolloutRequest(input=2))
        [worker] = await store.query_workers()
        assert worker.worker_id == "suite-worker"
        assert worker.num_claimed == 2
        assert worker.last_dequeue_time is not None

    async def test_a_repeated_dequeue_returns_the_first_answer(self, store: Store) -> None:
        rollouts = await store.enqueue_rollouts([RolloutRequest(input=i) for i in range(3)])
        first = await store.dequeue_rollouts(limit=2, worker_id="w1", request_id="rq-once")
        again = await store.dequeue_rollouts(limit=2, worker_id="w1", request_id="rq-once")
        assert [c.attempt.attempt_id for c in again] == [c.attempt.attempt_id for c in first]
        assert [c.rollout.rollout_id for c in again] == [r.rollout_id for r in rollouts[:2]]
        assert all(c.attempt.status == AttemptStatus.PREPARING for c in again)
        for rollout in rollouts[:2]:  # one attempt each: the repeat claimed nothing
            assert len(await store.query_attempts(rollout.rollout_id)) == 1
        [worker] = await store.query_workers()
        assert worker.num_claimed == 2
        # A new id claims what is left; an answer of no claims is not kept (nothing to repeat).
        assert await store.dequeue_rollouts(worker_id="w1", request_id="rq-empty", wait=0) != []
        assert await store.dequeue_rollouts(worker_id="w1", request_id="rq-none") == []
        await store.enqueue_rollouts([RolloutRequest(input=3)])
        [late] = await store.dequeue_rollouts(worker_id="w1", request_id="rq-none")
        assert late.rollout.input == 3

    async def test_a_repeated_dequeue_leaves_out_attempts_that_ended(self, store: Store) -> None:
        await store.enqueue_rollouts([RolloutRequest(input=i) for i in range(2)])
        first = await store.dequeue_rollouts(limit=2, worker_id="w1", request_id="rq-1")
        ended = first[0].attempt
        await store.update_attempt(ended.rollout_id, ended.attempt_id, AttemptStatus.RELEASED)
        again = await store.dequeue_rollouts(limit=2, worker_id="w1", request_id="rq-1")
        assert [c.attempt.attempt_id for c in again] == [first[1].attempt.attempt_id]
        # The released rollout went back to the queue: a new request claims it.
        [retry] = await store.dequeue_rollouts(worker_id="w2", request_id="rq-2")
        assert retry.rollout.rollout_id == ended.rollout_id
        assert retry.attempt.sequence == 2

    async def test_a_request_id_names_one_request(self, store: Store) -> None:
        await store.enqueue_rollouts([RolloutRequest(input=i) for i in range(2)])
        await store.dequeue_rollouts(worker_id="w1", request_id="rq-taken")
        with pytest.raises(ConflictError) as refused:
            await store.dequeue_rollouts(worker_id="w2", request_id="rq-taken")
        assert refused.value.field == "request_id"
        assert "already used" in refused.value.message
        with pytest.raises(ConflictError):
            await store.add_metrics(
                [MetricsRow(run="r", step=1, time=1.0, values={"x": 1.0})], request_id="rq-taken"
            )
        for bad in ["", "a/b", "nul\x00", "x" * 257]:  # the id rule (agl._ids)
            with pytest.raises(InvalidInputError) as caught:
                await store.dequeue_rollouts(request_id=bad)
            assert caught.value.field == "request_id"
        assert (await store.query_rollouts(status=RolloutStatus.QUEUING)).total == 1

    async def test_a_repeated_metrics_batch_is_stored_once(self, store: Store) -> None:
        rows = [
            MetricsRow(run="r", step=step, time=float(step), values={"loss": 1.0 / step})
            for step in (1, 2)
        ]
        await store.add_metrics(rows, request_id="rq-m")
        await store.add_metrics(rows, request_id="rq-m")
        await store.add_metrics(rows[:1])  # no id: a step logged again is a new row
        page = await store.query_metrics(run="r")
        assert [row.step for row in page.rows] == [1, 2, 1]

    async def test_query_rollouts_filters_and_pages(self, store: Store) -> None:
        await store.enqueue_rollouts(
            [RolloutRequest(input=i, mode="train" if i % 2 else "val") for i in range(10)]
        )
        await store.dequeue_rollouts(limit=3)
        page = await store.query_rollouts(limit=4)
        assert (page.total, len(page.rollouts), page.next_offset) == (10, 4, 4)
        last = await store.query_rollouts(limit=4, offset=8)
        assert (len(last.rollouts), last.next_offset) == (2, None)
        assert [r.input for r in page.rollouts + last.rollouts] == [0, 1, 2, 3, 8, 9]
        preparing = await store.query_rollouts(status=RolloutStatus.PREPARING)
        assert [r.input for r in preparing.rollouts] == [0, 1, 2]
        both = await store.query_rollouts(status=[RolloutStatus.PREPARING, RolloutStatus.QUEUING])
        assert both.total == 10
        nothing = await store.query_rollouts(status=[])  # no status: no rollout is in one
        assert (nothing.total, nothing.rollouts, nothing.next_offset) == (0, [], None)
        with pytest.raises(InvalidInputError):
            await store.query_rollouts(status=[], limit=0)
        val = await store.query_rollouts(mode="val", status=RolloutStatus.QUEUING)
        assert [r.input for r in val.rollouts] == [4, 6, 8]
        with pytest.raises(InvalidInputError):
            await store.query_rollouts(limit=0)

    async def test_query_rollouts_searches_ids_literally(self, store: Store) -> None:
        ids = ["a_b-1", "aXb-2", "A_B-3", "a\\b-4"]
        await store.enqueue_rollouts([RolloutRequest(input=i, rollout_id=i) for i in ids])

        async def found(text: str) -> list[str]:
            page = await store.query_rollouts(search=text)
            assert page.total == len(page.rollouts)
            return [rollout.rollout_id for rollout in page.rollouts]

        assert await found("_") == ["a_b-1", "A_B-3"]  # an underscore, not a wildcard
        assert await found("a_") == ["a_b-1"]  # case-sensitive
        assert await found("%") == []  # not a wildcard either
        assert await found("\\") == ["a\\b-4"]
        assert await found("X") == ["aXb-2"]
        assert await found("x") == []
        assert await found("-") == ids
        assert await found("b-" + "9" * 254) == []  # 256 characters: the longest allowed

    async def test_query_rollouts_by_worker(self, store: Store) -> None:
        config = RolloutConfig(max_attempts=2)
        rollouts = await store.enqueue_rollouts(
            [RolloutRequest(input=i, config=config) for i in range(4)]
        )
        [first] = await store.dequeue_rollouts(worker_id="w1")
        await store.update_attempt(
            first.rollout.rollout_id, first.attempt.attempt_id, status=AttemptStatus.FAILED
        )
        assert len(await store.dequeue_rollouts(limit=4, worker_id="w2")) == 4  # r0's retry too
        by_w1 = await store.query_rollouts(worker_id="w1")
        assert [r.rollout_id for r in by_w1.rollouts] == [rollouts[0].rollout_id]
        assert by_w1.total == 1
        by_w2 = await store.query_rollouts(worker_id="w2", newest_first=True, limit=3)
        assert [r.input for r in by_w2.rollouts] == [3, 2, 1]
        assert (by_w2.total, by_w2.next_offset) == (4, 3)
        rest = await store.query_rollouts(worker_id="w2", newest_first=True, limit=3, offset=3)
        assert ([r.input for r in rest.rollouts], rest.next_offset) == ([0], None)
        both = await store.query_rollouts(
            worker_id="w1", status=[RolloutStatus.PREPARING, RolloutStatus.RUNNING]
        )
        assert [r.input for r in both.rollouts] == [0]
        assert (await store.query_rollouts(worker_id="w1", mode="val")).total == 0
        assert (await store.query_rollouts(worker_id="nobody")).total == 0

    async def test_query_rollouts_by_enqueue_time(self, store: Store) -> None:
        batches = []
        for batch in range(3):
            if batch:
                await asyncio.sleep(0.02)
            batches.append(
                await store.enqueue_rollouts([RolloutRequest(input=f"{batch}{i}") for i in "ab"])
            )
        t0, t1, t2 = (batch[0].enqueue_time for batch in batches)
        assert t0 < t1 < t2

        async def inputs(**window: float) -> list[Any]:
            page = await store.query_rollouts(**window)  # type: ignore[arg-type]
            assert page.total == len(page.rollouts)
            return [rollout.input for rollout in page.rollouts]

        assert await inputs(since=t1) == ["1a", "1b", "2a", "2b"]  # since: inclusive
        assert await inputs(until=t1) == ["0a", "0b"]  # until: exclusive
        assert await inputs(since=t1, until=t2) == ["1a", "1b"]
        assert await inputs(since=t2 + 1) == []
        assert await inputs(since=0, until=t2 + 1) == ["0a", "0b", "1a", "1b", "2a", "2b"]
        newest = await store.query_rollouts(since=t1, newest_first=True, limit=3)
        assert [r.input for r in newest.rollouts] == ["2b", "2a", "1b"]
        assert (newest.total, newest.next_offset) == (4, 3)

    async def test_query_rollouts_newest_first_pages_back(self, store: Store) -> None:
        await store.enqueue_rollouts(
            [RolloutRequest(input=i, mode="val" if i % 2 else "train") for i in range(7)]
        )
        await store.dequeue_rollouts(limit=2)
        pages = []
        offset: int | None = 0
        while offset is not None:
            page = await store.query_rollouts(limit=3, offset=offset, newest_first=True)
            assert (page.total, page.offset) == (7, offset)
            pages.append([r.input for r in page.rollouts])
            offset = page.next_offset
        assert pages == [[6, 5, 4], [3, 2, 1], [0]]
        oldest = await store.query_rollouts(limit=3)  # the default order is unchanged
        assert [r.input for r in oldest.rollouts] == [0, 1, 2]
        queued = await store.query_rollouts(
            status=RolloutStatus.QUEUING, newest_first=True, limit=2, offset=1
        )
        assert [r.input for r in queued.rollouts] == [5, 4]
        assert (queued.total, queued.next_offset) == (5, 3)
        val = await store.query_rollouts(mode="val", newest_first=True)
        assert [r.input for r in val.rollouts] == [5, 3, 1]

    async def test_query_rollouts_refuses_bad_filters_naming_the_field(self, store: Store) -> None:
        bad: list[tuple[str, Any]] = [
            ("search", ""),
            ("search", "x" * 257),
            ("worker_id", ""),
            ("since", float("nan")),
            ("since", float("-inf")),
            ("until", float("inf")),
        ]
        for field, value in bad:
            with pytest.raises(InvalidInputError) as caught:
                await store.query_rollouts(**{field: value})
            assert caught.value.field == field, (field, value, caught.value)
        pages: list[tuple[str, Any]] = [("limit", 0), ("limit", 10_001), ("offset", -1)]
        for field, value in pages:
            with pytest.raises(InvalidInputError) as caught:
                await store.query_rollouts(**{field: value})
            assert caught.value.field == field
