"""The store conformance suite: what every store backend must do, as pytest tests.

A backend passes by subclassing :class:`StoreConformance` and providing one fixture, ``store``,
that yields a fresh, empty store::

    import pytest
    from agl.testing.store import StoreConformance

    class TestMyStore(StoreConformance):
        @pytest.fixture
        async def store(self, tmp_path):
            async with MyStore(tmp_path / "db") as store:
                yield store

Persistent backends set ``persistent = True`` and also provide ``reopen``: a fixture returning
an async function that closes the given store and opens the same data again.

Tests must not be deleted or overridden to make a backend pass. A test a backend cannot pass is
overridden with ``@pytest.mark.xfail(reason="…")`` naming what is missing;
``test_suite_is_intact`` fails otherwise. The suite runs on anyio's pytest plugin (asyncio).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar, Literal

import pytest
from pydantic import ValidationError

import agl
from agl import (
    LLM,
    Attempt,
    AttemptStatus,
    ConflictError,
    InvalidInputError,
    MetricsRow,
    NotFoundError,
    PromptTemplate,
    Resource,
    RolloutConfig,
    RolloutRequest,
    RolloutStatus,
    Span,
    SpanEvent,
    SpanKind,
    SpanLink,
    SpanStatus,
    StatusCode,
    Store,
)
from agl._spans import new_span_id, new_trace_id
from agl.testing._store_ids import StoreIdRules
from agl.testing._suite import check_suite_intact

__all__ = ["StoreConformance"]


@agl.register_resource_type
class _SuiteResource(Resource):
    """A resource type registered by a plugin, for the round-trip test."""

    type: Literal["agl-testing-suite"] = "agl-testing-suite"
    weights_path: str
    step: int


async def _claim(store: Store, *requests: RolloutRequest) -> list[agl.Claim]:
    """Enqueue requests (default: one) and claim them all."""
    requests = requests or (RolloutRequest(input={"task": 1}),)
    await store.enqueue_rollouts(list(requests))
    return await store.dequeue_rollouts(limit=len(requests), worker_id="suite-worker")


def _span(claim: agl.Claim, name: str = "step", **fields: Any) -> Span:
    return Span.create(
        rollout_id=claim.rollout.rollout_id,
        attempt_id=claim.attempt.attempt_id,
        name=name,
        **fields,
    )


async def _until(
    check: Callable[[], Awaitable[bool]], timeout: float = 5.0, interval: float = 0.05
) -> None:
    """Wait until ``check`` holds (for conditions the store reaches on its own clock)."""
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(interval)


@pytest.mark.anyio
class StoreConformance(StoreIdRules):
    """Subclass me and provide a ``store`` fixture yielding a fresh, empty store."""

    persistent: ClassVar[bool] = False
    """Whether the backend keeps its data when closed and reopened (then ``reopen`` is needed)."""

    @pytest.fixture
    def anyio_backend(self) -> str:
        return "asyncio"

    # --- the suite guards itself ------------------------------------------------------------

    def test_suite_is_intact(self) -> None:
        """No suite test was deleted, or overridden without an xfail that gives a reason."""
        check_suite_intact(self, StoreConformance, "store conformance suite")

    # --- rollouts -----------------------------------------------------------------------------

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
        await _claim(store, RolloutRequest(input=1), RolloutRequest(input=2))
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

    # --- the attempt state machine --------------------------------------------------------------

    async def test_rollout_follows_its_attempt_to_success(self, store: Store) -> None:
        [claim] = await _claim(store)
        ids = (claim.rollout.rollout_id, claim.attempt.attempt_id)
        running = await store.update_attempt(*ids, status=AttemptStatus.RUNNING)
        assert running.status == AttemptStatus.RUNNING
        assert (await store.get_rollout(ids[0])).status == RolloutStatus.RUNNING
        done = await store.update_attempt(*ids, status=AttemptStatus.SUCCEEDED)
        assert done.status == AttemptStatus.SUCCEEDED
        assert done.end_time is not None
        rollout = await store.get_rollout(ids[0])
        assert rollout.status == RolloutStatus.SUCCEEDED
        assert rollout.end_time is not None

    async def test_heartbeat_updates_the_attempt(self, store: Store) -> None:
        [claim] = await _claim(store)
        ids = (claim.rollout.rollout_id, claim.attempt.attempt_id)
        beat = await store.update_attempt(*ids)
        assert beat.status == AttemptStatus.PREPARING
        assert beat.last_heartbeat_time is not None
        later = await store.update_attempt(*ids, reason="still thinking")
        assert later.last_heartbeat_time is not None
        assert later.last_heartbeat_time >= beat.last_heartbeat_time
        assert later.reason == "still thinking"

    async def test_a_running_attempt_cannot_go_back(self, store: Store) -> None:
        [claim] = await _claim(store)
        ids = (claim.rollout.rollout_id, claim.attempt.attempt_id)
        await store.update_attempt(*ids, status=AttemptStatus.RUNNING)
        with pytest.raises(ConflictError):
            await store.update_attempt(*ids, status=AttemptStatus.PREPARING)

    async def test_update_unknown_attempt_raises(self, store: Store) -> None:
        [claim] = await _claim(store)
        with pytest.raises(NotFoundError) as caught:
            await store.update_attempt(claim.rollout.rollout_id, "at-unknown")
        assert caught.value.field == "attempt_id"
        with pytest.raises(NotFoundError):
            await store.update_attempt("ro-unknown", claim.attempt.attempt_id)

    async def test_failure_without_retries_left_fails_the_rollout(self, store: Store) -> None:
        [claim] = await _claim(store)
        ids = (claim.rollout.rollout_id, claim.attempt.attempt_id)
        await store.update_attempt(*ids, status=AttemptStatus.FAILED, reason="agent raised")
        rollout = await store.get_rollout(ids[0])
        assert rollout.status == RolloutStatus.FAILED
        [attempt] = await store.query_attempts(ids[0])
        assert attempt.reason == "agent raised"
        assert await store.dequeue_rollouts() == []

    async def test_failure_is_retried_while_attempts_are_left(self, store: Store) -> None:
        config = RolloutConfig(max_attempts=2)
        [first] = await _claim(store, RolloutRequest(input=1, config=config))
        rollout_id = first.rollout.rollout_id
        await store.update_attempt(
            rollout_id, first.attempt.attempt_id, status=AttemptStatus.FAILED
        )
        assert (await store.get_rollout(rollout_id)).status == RolloutStatus.REQUEUING
        [second] = await store.dequeue_rollouts()
        assert second.rollout.rollout_id == rollout_id
        assert second.attempt.sequence == 2
        assert second.attempt.attempt_id != first.attempt.attempt_id
        await store.update_attempt(
            rollout_id, second.attempt.attempt_id, status=AttemptStatus.FAILED
        )
        rollout = await store.get_rollout(rollout_id)
        assert (rollout.status, rollout.num_attempts) == (RolloutStatus.FAILED, 2)
        attempts = await store.query_attempts(rollout_id)
        assert [a.sequence for a in attempts] == [1, 2]

    async def test_released_attempt_requeues_without_using_up_tries(self, store: Store) -> None:
        # max_attempts=1: a failure would end the rollout, a release gives it back.
        [first] = await _claim(store)
        rollout_id = first.rollout.rollout_id
        await store.update_attempt(
            rollout_id,
            first.attempt.attempt_id,
            status=AttemptStatus.RELEASED,
            reason="runner shutting down",
        )
        assert (await store.get_rollout(rollout_id)).status == RolloutStatus.REQUEUING
        [second] = await store.dequeue_rollouts()
        assert (second.rollout.rollout_id, second.attempt.sequence) == (rollout_id, 2)
        # The released try does not count: this failure is the first counted one, and final.
        await store.update_attempt(
            rollout_id, second.attempt.attempt_id, status=AttemptStatus.FAILED
        )
        rollout = await store.get_rollout(rollout_id)
        assert (rollout.status, rollout.num_attempts) == (RolloutStatus.FAILED, 2)
        first_attempt = (await store.query_attempts(rollout_id))[0]
        assert first_attempt.status == AttemptStatus.RELEASED
        assert first_attempt.reason == "runner shutting down"
        with pytest.raises(ConflictError):  # a released attempt is final
            await store.update_attempt(
                rollout_id, first.attempt.attempt_id, status=AttemptStatus.SUCCEEDED
            )

    async def test_release_counts_only_failures_towards_max_attempts(self, store: Store) -> None:
        config = RolloutConfig(max_attempts=2)
        [first] = await _claim(store, RolloutRequest(input=1, config=config))
        rollout_id = first.rollout.rollout_id
        await store.update_attempt(
            rollout_id, first.attempt.attempt_id, status=AttemptStatus.FAILED
        )
        [second] = await store.dequeue_rollouts()
        await store.update_attempt(
            rollout_id, second.attempt.attempt_id, status=AttemptStatus.RELEASED
        )
        [third] = await store.dequeue_rollouts()
        await store.update_attempt(
            rollout_id, third.attempt.attempt_id, status=AttemptStatus.FAILED
        )
        assert (await store.get_rollout(rollout_id)).status == RolloutStatus.FAILED
        assert third.attempt.sequence == 3

    async def test_retry_on_chooses_which_outcomes_retry(self, store: Store) -> None:
        config = RolloutConfig(max_attempts=3, retry_on=frozenset({AttemptStatus.TIMEOUT}))
        [claim] = await _claim(store, RolloutRequest(input=1, config=config))
        await store.update_attempt(
            claim.rollout.rollout_id, claim.attempt.attempt_id, status=AttemptStatus.FAILED
        )
        assert (await store.get_rollout(claim.rollout.rollout_id)).status == RolloutStatus.FAILED

    async def test_timeout_is_detected_and_retried(self, store: Store) -> None:
        config = RolloutConfig(timeout_seconds=0.3, max_attempts=2)
        [first] = await _claim(store, RolloutRequest(input=1, config=config))
        rollout_id = first.rollout.rollout_id
        await store.update_attempt(
            rollout_id, first.attempt.attempt_id, status=AttemptStatus.RUNNING
        )
        claims = await store.dequeue_rollouts(wait=5)
        assert [claim.rollout.rollout_id for claim in claims] == [rollout_id]
        [old, new] = await store.query_attempts(rollout_id)
        assert old.status == AttemptStatus.TIMEOUT
        assert old.reason is not None
        assert "timeout" in old.reason
        assert new.sequence == 2
        # The retry starts and times out too, and no tries are left.
        await store.update_attempt(rollout_id, new.attempt_id, status=AttemptStatus.RUNNING)
        await _until(
            lambda: _status_is(store, rollout_id, RolloutStatus.FAILED), timeout=5, interval=0.1
        )

    async def test_missing_heartbeats_make_an_attempt_unresponsive(self, store: Store) -> None:
        config = RolloutConfig(unresponsive_seconds=0.4)
        [alive, silent] = await _claim(
            store, RolloutRequest(input=1, config=config), RolloutRequest(input=2, config=config)
        )
        # The silent one started (a claim never heard of again is released instead, see below).
        await store.update_attempt(
            silent.rollout.rollout_id, silent.attempt.attempt_id, status=AttemptStatus.RUNNING
        )
        for _ in range(6):
            await asyncio.sleep(0.15)
            await store.update_attempt(alive.rollout.rollout_id, alive.attempt.attempt_id)
        silent_rollout = await store.get_rollout(silent.rollout.rollout_id)
        assert silent_rollout.status == RolloutStatus.FAILED
        [attempt] = await store.query_attempts(silent.rollout.rollout_id)
        assert attempt.status == AttemptStatus.UNRESPONSIVE
        assert (await store.get_rollout(alive.rollout.rollout_id)).status == RolloutStatus.PREPARING

    async def test_another_event_loop_claims_and_beats_while_this_one_is_held(
        self, store: Store
    ) -> None:
        # A runner claims and beats from a thread of its own while its agents hold its loop.
        [rollout] = await store.enqueue_rollouts([RolloutRequest(input=1)])

        async def elsewhere() -> Attempt:
            [claim] = await store.dequeue_rollouts(worker_id="beats", wait=5)
            try:
                return await store.update_attempt(rollout.rollout_id, claim.attempt.attempt_id)
            finally:
                release = getattr(store, "release_loop", None)
                if release is not None:
                    await release()

        beaten: list[Attempt] = []
        thread = threading.Thread(target=lambda: beaten.append(asyncio.run(elsewhere())))
        thread.start()
        thread.join(30)  # holding this loop, as a blocking agent holds its runner's
        assert beaten, "a second event loop could not use the store while the first was held"
        [attempt] = beaten
        assert attempt.last_heartbeat_time is not None
        assert await store.query_attempts(rollout.rollout_id) == [attempt]  # this loop still can

    @pytest.mark.parametrize(
        "config",
        [RolloutConfig(unresponsive_seconds=0.3), RolloutConfig(timeout_seconds=0.3)],
        ids=["unresponsive", "timeout"],
    )
    async def test_a_claim_never_started_goes_back_to_the_queue_without_using_a_try(
        self, store: Store, config: RolloutConfig
    ) -> None:
        # The claim's answer reached no runner, or its runner died before starting it: the
        # store never hears of the attempt again. max_attempts=1, yet the rollout runs.
        [orphan, heard] = await _claim(
            store, RolloutRequest(input=1, config=config), RolloutRequest(input=2, config=config)
        )
        rollout_id = orphan.rollout.rollout_id
        await store.update_attempt(heard.rollout.rollout_id, heard.attempt.attempt_id)
        claims = await store.dequeue_rollouts(wait=5, worker_id="second")
        assert [claim.rollout.rollout_id for claim in claims] == [rollout_id]
        first, second = await store.query_attempts(rollout_id)
        assert first.status == AttemptStatus.RELEASED
        assert first.reason is not None
        assert "never started" in first.reason
        assert "suite-worker" in first.reason
        assert (second.sequence, second.worker_id) == (2, "second")
        # The released try is not counted: this failure is the one counted try, and final.
        await store.update_attempt(rollout_id, second.attempt_id, status=AttemptStatus.FAILED)
        assert (await store.get_rollout(rollout_id)).status == RolloutStatus.FAILED
        # An attempt the store heard of (a heartbeat) started: it is not released.
        heard_id = heard.rollout.rollout_id
        await _until(lambda: _status_is(store, heard_id, RolloutStatus.FAILED))
        [attempt] = await store.query_attempts(heard_id)
        assert attempt.status in (AttemptStatus.UNRESPONSIVE, AttemptStatus.TIMEOUT)

    async def test_late_result_of_a_superseded_attempt_is_refused(self, store: Store) -> None:
        config = RolloutConfig(timeout_seconds=0.2, max_attempts=2)
        [first] = await _claim(store, RolloutRequest(input=1, config=config))
        rollout_id = first.rollout.rollout_id
        await store.update_attempt(
            rollout_id, first.attempt.attempt_id, status=AttemptStatus.RUNNING
        )
        await asyncio.sleep(0.3)
        [second] = await store.dequeue_rollouts(wait=5)
        await store.update_attempt(
            rollout_id, second.attempt.attempt_id, status=AttemptStatus.RUNNING
        )
        with pytest.raises(ConflictError) as caught:
            await store.update_attempt(
                rollout_id, first.attempt.attempt_id, status=AttemptStatus.SUCCEEDED
            )
        assert "timeout" in caught.value.message
        assert (await store.get_rollout(rollout_id)).status == RolloutStatus.RUNNING
        await store.update_attempt(
            rollout_id, second.attempt.attempt_id, status=AttemptStatus.SUCCEEDED
        )
        assert (await store.get_rollout(rollout_id)).status == RolloutStatus.SUCCEEDED

    async def test_a_rollout_is_never_counted_finished_twice(self, store: Store) -> None:
        [claim] = await _claim(store)
        ids = (claim.rollout.rollout_id, claim.attempt.attempt_id)
        await store.update_attempt(*ids, status=AttemptStatus.SUCCEEDED)
        # The same report again (a client retry) changes nothing; a different one is refused.
        again = await store.update_attempt(*ids, status=AttemptStatus.SUCCEEDED)
        assert again.status == AttemptStatus.SUCCEEDED
        with pytest.raises(ConflictError):
            await store.update_attempt(*ids, status=AttemptStatus.FAILED)
        with pytest.raises(ConflictError):
            await store.update_attempt(*ids)  # a heartbeat for a finished attempt
        stats = await store.statistics()
        assert stats.rollouts_by_status[RolloutStatus.SUCCEEDED] == 1
        assert stats.rollouts_by_status[RolloutStatus.FAILED] == 0

    async def test_cancel(self, store: Store) -> None:
        running, done, queued = await store.enqueue_rollouts(
            [RolloutRequest(input=i) for i in range(3)]
        )
        [claim_running, claim_done] = await store.dequeue_rollouts(limit=2)
        await store.update_attempt(
            done.rollout_id, claim_done.attempt.attempt_id, status=AttemptStatus.SUCCEEDED
        )
        await store.enqueue_rollouts([RolloutRequest(input=3)])
        assert (await store.cancel_rollout(running.rollout_id)).status == RolloutStatus.CANCELLED
        [attempt] = await store.query_attempts(running.rollout_id)
        assert attempt.status == AttemptStatus.CANCELLED
        with pytest.raises(ConflictError):
            await store.update_attempt(
                running.rollout_id, claim_running.attempt.attempt_id, status=AttemptStatus.SUCCEEDED
            )
        # A finished rollout stays as it was.
        assert (await store.cancel_rollout(done.rollout_id)).status == RolloutStatus.SUCCEEDED
        assert (await store.cancel_rollout(queued.rollout_id)).status == RolloutStatus.CANCELLED
        [claim] = await store.dequeue_rollouts(limit=5)  # only the one enqueued last is left
        assert claim.rollout.input == 3
        with pytest.raises(NotFoundError):
            await store.cancel_rollout("ro-unknown")

    async def test_cancelled_queued_rollout_is_not_claimed(self, store: Store) -> None:
        [rollout] = await store.enqueue_rollouts([RolloutRequest(input=1)])
        await store.cancel_rollout(rollout.rollout_id)
        assert await store.dequeue_rollouts() == []

    async def test_wait_for_rollouts_returns_when_all_finish(self, store: Store) -> None:
        claims = await _claim(store, RolloutRequest(input=1), RolloutRequest(input=2))

        async def finish_later() -> None:
            for claim in claims:
                await asyncio.sleep(0.2)
                await store.update_attempt(
                    claim.rollout.rollout_id,
                    claim.attempt.attempt_id,
                    status=AttemptStatus.SUCCEEDED,
                )

        task = asyncio.create_task(finish_later())
        started = time.monotonic()
        finished = await store.wait_for_rollouts([c.rollout.rollout_id for c in claims], 10)
        await task
        assert [r.rollout_id for r in finished] == [c.rollout.rollout_id for c in claims]
        assert time.monotonic() - started < 5

    async def test_wait_for_rollouts_returns_the_finished_ones_at_timeout(
        self, store: Store
    ) -> None:
        done, pending = await _claim(store, RolloutRequest(input=1), RolloutRequest(input=2))
        await store.update_attempt(
            done.rollout.rollout_id, done.attempt.attempt_id, status=AttemptStatus.FAILED
        )
        started = time.monotonic()
        finished = await store.wait_for_rollouts(
            [pending.rollout.rollout_id, done.rollout.rollout_id], 0.3
        )
        assert time.monotonic() - started >= 0.29
        assert [r.rollout_id for r in finished] == [done.rollout.rollout_id]
        with pytest.raises(NotFoundError):
            await store.wait_for_rollouts(["ro-unknown"], 0.1)

    # --- spans --------------------------------------------------------------------------------

    async def test_spans_round_trip_every_field(self, store: Store) -> None:
        [claim] = await _claim(store)
        trace_id = new_trace_id()
        parent = _span(claim, "agent", trace_id=trace_id, kind=SpanKind.SERVER)
        child = _span(
            claim,
            "llm",
            trace_id=trace_id,
            parent_id=parent.span_id,
            kind=SpanKind.CLIENT,
            status=SpanStatus(code=StatusCode.ERROR, description="rate limited"),
            attributes={
                "text": "héllo",
                "int": 3,
                "float": 0.5,
                "bool": True,
                "ids": [1, 2, 3],
                "nested": {"a": [None, "b"]},
            },
            events=[SpanEvent(name="retry", time_unix_nano=123, attributes={"n": 1})],
            links=[SpanLink(trace_id=new_trace_id(), span_id=new_span_id(), attributes={})],
            resource={"service.name": "suite"},
            end_time_unix_nano=None,
        )
        assert await store.add_spans([parent, child]) == [1, 2]
        back = await store.query_spans(claim.rollout.rollout_id)
        assert back == [
            parent.model_copy(update={"sequence_id": 1}),
            child.model_copy(update={"sequence_id": 2}),
        ]

    async def test_sequence_ids_increase_per_rollout_across_batches(self, store: Store) -> None:
        first, second = await _claim(store, RolloutRequest(input=1), RolloutRequest(input=2))
        await store.add_spans([_span(first, f"a{i}") for i in range(3)])
        await store.add_spans([_span(second, "b0"), _span(first, "a3"), _span(second, "b1")])
        spans_first = await store.query_spans(first.rollout.rollout_id)
        spans_second = await store.query_spans(second.rollout.rollout_id)
        assert [(s.name, s.sequence_id) for s in spans_first] == [
            ("a0", 1),
            ("a1", 2),
            ("a2", 3),
            ("a3", 4),
        ]
        assert [(s.name, s.sequence_id) for s in spans_second] == [("b0", 1), ("b1", 2)]

    async def test_re_adding_a_span_stores_it_once(self, store: Store) -> None:
        [claim] = await _claim(store)
        spans = [_span(claim, f"s{i}") for i in range(3)]
        assert await store.add_spans(spans) == [1, 2, 3]
        assert await store.add_spans([spans[1], _span(claim, "s3"), spans[1]]) == [2, 4, 2]
        # A span's own sequence_id is not trusted: the store's is kept.
        assert await store.add_spans([spans[0].model_copy(update={"sequence_id": 99})]) == [1]
        assert len(await store.query_spans(claim.rollout.rollout_id)) == 4
        assert (await store.statistics()).spans == 4

    async def test_a_batch_with_one_bad_span_is_rejected_whole(self, store: Store) -> None:
        [claim] = await _claim(store)
        await store.add_spans([_span(claim, "kept")])
        orphan = Span.create(rollout_id="ro-unknown", attempt_id="at-x", name="orphan")
        with pytest.raises(NotFoundError) as caught:
            await store.add_spans([_span(claim, "a"), orphan, _span(claim, "b")])
        assert caught.value.field == "spans[1].rollout_id"
        wrong_attempt = Span.create(
            rollout_id=claim.rollout.rollout_id, attempt_id="at-unknown", name="x"
        )
        with pytest.raises(NotFoundError) as caught:
            await store.add_spans([wrong_attempt])
        assert caught.value.field == "spans[0].attempt_id"
        assert [s.name for s in await store.query_spans(claim.rollout.rollout_id)] == ["kept"]

    async def test_query_spans_of_one_attempt(self, store: Store) -> None:
        config = RolloutConfig(max_attempts=2)
        [first] = await _claim(store, RolloutRequest(input=1, config=config))
        rollout_id = first.rollout.rollout_id
        await store.add_spans([_span(first, "try1")])
        await store.update_attempt(
            rollout_id, first.attempt.attempt_id, status=AttemptStatus.FAILED
        )
        [second] = await store.dequeue_rollouts()
        await store.add_spans([_span(second, "try2")])
        # Spans that arrive after their attempt ended are still kept (a late flush).
        await store.add_spans([_span(first, "try1-late")])
        everything = await store.query_spans(rollout_id)
        assert [s.name for s in everything] == ["try1", "try2", "try1-late"]
        only_second = await store.query_spans(rollout_id, second.attempt.attempt_id)
        assert [s.name for s in only_second] == ["try2"]
        with pytest.raises(NotFoundError):
            await store.query_spans("ro-unknown")
        with pytest.raises(NotFoundError):
            await store.query_spans(rollout_id, "at-unknown")

    async def test_spans_read_in_pages(self, store: Store) -> None:
        """``after`` and ``limit`` read a long trace in pages, over all attempts or one;
        the store server answers 1,000 spans at most per request, which its client follows."""
        config = RolloutConfig(max_attempts=2)
        [first] = await _claim(store, RolloutRequest(input=1, config=config))
        rollout_id = first.rollout.rollout_id
        await store.add_spans([_span(first, f"a{i}") for i in range(1200)])
        await store.update_attempt(
            rollout_id, first.attempt.attempt_id, status=AttemptStatus.FAILED
        )
        [second] = await store.dequeue_rollouts()
        await store.add_spans([_span(second, f"b{i}") for i in range(5)])
        whole = await store.query_spans(rollout_id)
        assert [s.sequence_id for s in whole] == list(range(1, 1206))
        page = await store.query_spans(rollout_id, after=1195, limit=4)
        assert [(s.name, s.sequence_id) for s in page] == [
            ("a1195", 1196),
            ("a1196", 1197),
            ("a1197", 1198),
            ("a1198", 1199),
        ]
        paged: list[Span] = []
        while batch := await store.query_spans(
            rollout_id, after=paged[-1].sequence_id or 0 if paged else 0, limit=500
        ):
            paged += batch
        assert paged == whole
        assert len(await store.query_spans(rollout_id, limit=1100)) == 1100
        mine = await store.query_spans(rollout_id, second.attempt.attempt_id, after=1202)
        assert [s.name for s in mine] == ["b2", "b3", "b4"]
        assert await store.query_spans(rollout_id, after=1205) == []
        with pytest.raises(InvalidInputError) as caught:
            await store.query_spans(rollout_id, after=-1)
        assert caught.value.field == "after"
        with pytest.raises(InvalidInputError) as caught:
            await store.query_spans(rollout_id, limit=0)
        assert caught.value.field == "limit"

    async def test_add_spans_rejects_what_is_not_a_span_list(self, store: Store) -> None:
        with pytest.raises(InvalidInputError):
            await store.add_spans("not a list")  # type: ignore[arg-type]
        with pytest.raises(InvalidInputError) as caught:
            await store.add_spans([{"name": "dict"}])  # type: ignore[list-item]
        assert caught.value.field == "spans[0]"
        assert await store.add_spans([]) == []

    async def test_spans_keep_a_live_attempt_alive(self, store: Store) -> None:
        config = RolloutConfig(unresponsive_seconds=0.5)
        [claim] = await _claim(store, RolloutRequest(input=1, config=config))
        for i in range(8):
            await asyncio.sleep(0.15)
            await store.add_spans([_span(claim, f"s{i}")])
        rollout = await store.get_rollout(claim.rollout.rollout_id)
        assert rollout.status == RolloutStatus.PREPARING

    # --- resources ----------------------------------------------------------------------------

    async def test_resources_are_versioned(self, store: Store) -> None:
        assert await store.get_resources() is None
        v1 = await store.add_resources({"llm": LLM(endpoint="http://a/v1", model="m1")})
        v2 = await store.add_resources({"llm": LLM(endpoint="http://a/v1", model="m2")})
        assert (v1.version, v2.version) == (1, 2)
        assert v1.resources_id != v2.resources_id
        latest = await store.get_resources()
        assert latest == v2
        assert await store.get_resources(v1.resources_id) == v1
        with pytest.raises(NotFoundError):
            await store.get_resources("rs-unknown")

    async def test_resources_round_trip_their_types(self, store: Store) -> None:
        resources: dict[str, Resource] = {
            "llm": LLM(endpoint="http://a/v1", model="m", sampling_parameters={"temperature": 0.7}),
            "prompt": PromptTemplate(template="Q: {{ q }}", engine="jinja2"),
            "plugin": _SuiteResource(weights_path="/ckpt/7", step=7),
        }
        update = await store.add_resources(resources, resources_id="rs-fixed")
        back = await store.get_resources("rs-fixed")
        assert back == update
        assert back is not None
        assert isinstance(back.resources["prompt"], PromptTemplate)
        assert back.resources["prompt"].format(q="why?") == "Q: why?"
        assert isinstance(back.resources["plugin"], _SuiteResource)
        assert back.resources["plugin"].step == 7
        # A set published twice under one id is stored once.
        again = await store.add_resources({"llm": LLM(endpoint="x", model="y")}, "rs-fixed")
        assert again == update
        assert (await store.statistics()).resources == 1

    async def test_rollouts_can_name_their_resources(self, store: Store) -> None:
        update = await store.add_resources({"llm": LLM(endpoint="http://a/v1", model="m")})
        [rollout] = await store.enqueue_rollouts(
            [RolloutRequest(input=1, resources_id=update.resources_id)]
        )
        assert (await store.get_rollout(rollout.rollout_id)).resources_id == update.resources_id

    async def test_resource_history_pages_newest_first(self, store: Store) -> None:
        empty = await store.query_resources()
        assert (empty.resources, empty.total, empty.next_offset) == ([], 0, None)
        published = [
            await store.add_resources({"llm": LLM(endpoint="http://a/v1", model=f"m{i}")})
            for i in range(5)
        ]
        first = await store.query_resources(limit=2)
        assert [update.version for update in first.resources] == [5, 4]
        assert (first.total, first.offset, first.next_offset) == (5, 0, 2)
        assert first.resources[0] == published[-1]
        last = await store.query_resources(limit=2, offset=4)
        assert (last.resources, last.next_offset) == ([published[0]], None)
        everything = await store.query_resources()
        assert everything.resources == published[::-1]
        with pytest.raises(InvalidInputError) as caught:
            await store.query_resources(limit=0)
        assert caught.value.field == "limit"
        with pytest.raises(InvalidInputError) as caught:
            await store.query_resources(offset=-1)
        assert caught.value.field == "offset"

    async def test_a_resources_id_must_be_addressable_by_url(self, store: Store) -> None:
        llm = {"llm": LLM(endpoint="http://a/v1", model="m")}
        kept = await store.add_resources(llm, resources_id="prompts-v1.2_x")
        for bad in ("a/b", "..", "with space", "x" * 257, ""):
            with pytest.raises(InvalidInputError) as caught:
                await store.add_resources(llm, resources_id=bad)
            assert caught.value.field == "resources_id"
        # nothing was published by the refusals, and the good id reads back
        assert (await store.query_resources()).total == 1
        assert await store.get_resources("prompts-v1.2_x") == kept

    # --- training metrics ---------------------------------------------------------------------

    async def test_metrics_round_trip_in_order(self, store: Store) -> None:
        assert await store.metric_runs() == []
        assert (await store.query_metrics()).total == 0
        rows = [
            MetricsRow(run="run-b", step=0, time=1.5, values={"val/reward/mean": 0.25}),
            *(
                MetricsRow(run="run-a", step=step, time=2.0 + step, values={"loss": 1 / (step + 1)})
                for step in range(3)
            ),
        ]
        await store.add_metrics(rows[:2])
        await store.add_metrics(rows[2:])
        await store.add_metrics([])
        await store.add_metrics([rows[0].model_copy(update={"step": 1})])
        everything = await store.query_metrics()
        assert everything.rows == [*rows, rows[0].model_copy(update={"step": 1})]
        assert (everything.total, everything.next_offset) == (5, None)
        run_a = await store.query_metrics(run="run-a")
        assert run_a.rows == rows[1:]
        assert await store.metric_runs() == ["run-b", "run-a"]  # first seen first
        assert (await store.query_metrics(run="run-c")).total == 0

    async def test_metrics_page(self, store: Store) -> None:
        await store.add_metrics(
            [MetricsRow(run="r", step=step, time=float(step), values={}) for step in range(7)]
        )
        await store.add_metrics([MetricsRow(run="other", step=0, time=0.0)])
        page = await store.query_metrics(run="r", limit=3, offset=3)
        assert [row.step for row in page.rows] == [3, 4, 5]
        assert (page.total, page.offset, page.next_offset) == (7, 3, 6)
        tail = await store.query_metrics(run="r", limit=3, offset=6)
        assert ([row.step for row in tail.rows], tail.next_offset) == ([6], None)
        assert (await store.query_metrics(limit=2)).next_offset == 2

    async def test_metrics_keep_only_finite_values(self, store: Store) -> None:
        nan, inf = float("nan"), float("inf")
        row = MetricsRow(
            run="r", step=3, time=10.0, values={"reward": 0.5, "loss": nan, "grad": inf, "n": -inf}
        )
        assert row.values == {"reward": 0.5}
        # JSON has no NaN: a sender writes null for one, which is dropped as well.
        from_json = MetricsRow.model_validate_json(
            '{"run": "r", "step": 4, "time": 11.0, "values": {"reward": null, "kl": 0.1}}'
        )
        assert from_json.values == {"kl": 0.1}
        await store.add_metrics([row, from_json])
        assert [r.values for r in (await store.query_metrics()).rows] == [
            {"reward": 0.5},
            {"kl": 0.1},
        ]

    async def test_metrics_refuse_bad_input_naming_the_field(self, store: Store) -> None:
        with pytest.raises(ValidationError, match="run"):  # rows check themselves
            MetricsRow(run="", step=0, time=0.0)
        with pytest.raises(ValidationError, match="step"):
            MetricsRow(run="r", step=-1, time=0.0)
        with pytest.raises(InvalidInputError) as caught:
            await store.add_metrics("not a list")  # type: ignore[arg-type]
        assert caught.value.field == "rows"
        good = MetricsRow(run="r", step=0, time=0.0)
        with pytest.raises(InvalidInputError) as caught:
            await store.add_metrics([good, {"run": "r"}])  # type: ignore[list-item]
        assert caught.value.field == "rows[1]"
        assert (await store.query_metrics()).total == 0
        bad: list[tuple[str, Any]] = [("run", ""), ("limit", 0), ("limit", 10_001), ("offset", -1)]
        for field, value in bad:
            with pytest.raises(InvalidInputError) as caught:
                await store.query_metrics(**{field: value})
            assert caught.value.field == field

    # --- concurrency and isolation ------------------------------------------------------------

    async def test_concurrent_claims_never_share_a_rollout(self, store: Store) -> None:
        await store.enqueue_rollouts([RolloutRequest(input=i) for i in range(40)])

        async def runner(name: str) -> list[str]:
            claimed: list[str] = []
            while claims := await store.dequeue_rollouts(limit=3, worker_id=name):
                claimed.extend(claim.rollout.rollout_id for claim in claims)
            return claimed

        results = await asyncio.gather(*(runner(f"w{i}") for i in range(8)))
        everything = [rollout_id for result in results for rollout_id in result]
        assert len(everything) == 40
        assert len(set(everything)) == 40

    async def test_concurrent_span_writers_get_distinct_sequence_ids(self, store: Store) -> None:
        [claim] = await _claim(store)

        async def writer(index: int) -> None:
            for batch in range(5):
                await store.add_spans([_span(claim, f"w{index}-{batch}-{i}") for i in range(4)])

        await asyncio.gather(*(writer(i) for i in range(10)))
        spans = await store.query_spans(claim.rollout.rollout_id)
        assert [span.sequence_id for span in spans] == list(range(1, 201))
        assert len({span.span_id for span in spans}) == 200

    async def test_returned_objects_are_not_the_stored_ones(self, store: Store) -> None:
        [rollout] = await store.enqueue_rollouts([RolloutRequest(input={"a": 1})])
        rollout.metadata["changed"] = True
        assert isinstance(rollout.input, dict)
        rollout.input["a"] = 2
        fetched = await store.get_rollout(rollout.rollout_id)
        assert fetched.input == {"a": 1}
        assert fetched.metadata == {}

    async def test_statistics_count_what_is_stored(self, store: Store) -> None:
        claims = await _claim(store, RolloutRequest(input=1), RolloutRequest(input=2))
        await store.enqueue_rollouts([RolloutRequest(input=3)])
        await store.add_spans([_span(claims[0], "s"), _span(claims[1], "t")])
        await store.update_attempt(
            claims[0].rollout.rollout_id,
            claims[0].attempt.attempt_id,
            status=AttemptStatus.SUCCEEDED,
        )
        await store.add_resources({"llm": LLM(endpoint="e", model="m")})
        stats = await store.statistics()
        assert stats.rollouts == 3
        assert stats.rollouts_by_status[RolloutStatus.SUCCEEDED] == 1
        assert stats.rollouts_by_status[RolloutStatus.PREPARING] == 1
        assert stats.rollouts_by_status[RolloutStatus.QUEUING] == 1
        assert (stats.attempts, stats.spans, stats.resources, stats.workers) == (2, 2, 1, 1)

    async def test_statistics_match_the_queries_through_every_transition(
        self, store: Store
    ) -> None:
        """Kept counts agree with what the queries find after enqueues, claims, spans (some sent
        twice), successes, retries, releases, cancels, timeouts and idempotent repeats."""
        retried = RolloutConfig(max_attempts=2)
        # Time enough to report it running first (else it ends released: never started).
        timed = RolloutConfig(timeout_seconds=2, max_attempts=1)
        for _ in range(2):  # the same resources id again changes nothing
            await store.add_resources({"llm": LLM(endpoint="e", model="m")}, resources_id="rs")
        await store.add_resources({"llm": LLM(endpoint="e", model="m2")})
        requests = [
            RolloutRequest(input=0, rollout_id="ok"),
            RolloutRequest(input=1, rollout_id="retry", config=retried),
            RolloutRequest(input=2, rollout_id="release", config=retried),
            RolloutRequest(input=3, rollout_id="cancel-run"),
            RolloutRequest(input=4, rollout_id="timeout", config=timed),
            RolloutRequest(input=5, rollout_id="fail"),
        ]
        await store.enqueue_rollouts(requests)
        await store.enqueue_rollouts([requests[0], RolloutRequest(input=6, rollout_id="wait")])
        await store.enqueue_rollouts([RolloutRequest(input=7, rollout_id="cancel-queued")])
        claims = {
            claim.rollout.rollout_id: claim
            for worker in ("w1", "w2", "w3")
            for claim in await store.dequeue_rollouts(limit=2, worker_id=worker)
        }
        assert set(claims) == {"ok", "retry", "release", "cancel-run", "timeout", "fail"}
        timing = claims["timeout"].attempt.attempt_id
        await store.update_attempt("timeout", timing, status=AttemptStatus.RUNNING)
        spans = [_span(claim, f"s{i}") for claim in claims.values() for i in range(3)]
        await store.add_spans(spans)
        await store.add_spans([*spans[:4], _span(claims["ok"], "more")])  # 4 known, 1 new

        async def report(rollout_id: str, status: AttemptStatus, claim: Any = None) -> None:
            attempt_id = (claim or claims[rollout_id]).attempt.attempt_id
            await store.update_attempt(rollout_id, attempt_id, status=status)

        for rollout_id in ("ok", "retry", "fail", "cancel-run"):
            await report(rollout_id, AttemptStatus.RUNNING)
        await report("ok", AttemptStatus.SUCCEEDED)
        await report("ok", AttemptStatus.SUCCEEDED)  # a client's retry of the same report
        await report("retry", AttemptStatus.FAILED)  # back in the queue: requeuing
        await report("release", AttemptStatus.RELEASED)
        await report("fail", AttemptStatus.FAILED)
        await store.cancel_rollout("cancel-run")
        await store.cancel_rollout("cancel-queued")
        await store.cancel_rollout("cancel-queued")  # finished: unchanged
        finished = await store.wait_for_rollouts(["timeout"], timeout=60)  # the store sweeps
        assert [rollout.status for rollout in finished] == [RolloutStatus.FAILED]
        again = {
            claim.rollout.rollout_id: claim
            for claim in await store.dequeue_rollouts(limit=3, worker_id="w4")
        }
        assert set(again) == {"wait", "retry", "release"}
        await store.add_spans([_span(again["retry"], "second try")])
        await report("retry", AttemptStatus.SUCCEEDED, again["retry"])

        stats = await store.statistics()
        every = await store.query_rollouts(limit=100)
        assert stats.rollouts == every.total == 8
        for status in RolloutStatus:
            found = await store.query_rollouts(status=status)
            assert stats.rollouts_by_status[status] == found.total, status
        assert stats.rollouts_by_status[RolloutStatus.SUCCEEDED] == 2
        assert stats.rollouts_by_status[RolloutStatus.FAILED] == 2
        assert stats.rollouts_by_status[RolloutStatus.CANCELLED] == 2
        assert stats.rollouts_by_status[RolloutStatus.PREPARING] == 2
        attempts = [await store.query_attempts(r.rollout_id) for r in every.rollouts]
        assert stats.attempts == sum(map(len, attempts)) == 9
        stored = [await store.query_spans(r.rollout_id) for r in every.rollouts]
        assert stats.spans == sum(map(len, stored)) == 6 * 3 + 2
        assert stats.resources == (await store.query_resources()).total == 2
        assert stats.workers == len(await store.query_workers()) == 4

    # --- persistence (backends with persistent = True) ---------------------------------------

    async def test_data_survives_reopening(
        self, store: Store, request: pytest.FixtureRequest
    ) -> None:
        if not self.persistent:
            pytest.skip("this backend does not keep data across a reopen (persistent = False)")
        reopen: Callable[[Store], Awaitable[Store]] = request.getfixturevalue("reopen")
        config = RolloutConfig(max_attempts=2)
        [claim] = await _claim(store, RolloutRequest(input={"x": 1}, config=config))
        await store.add_spans([_span(claim, f"s{i}") for i in range(3)])
        update = await store.add_resources({"llm": LLM(endpoint="e", model="m")})
        await store.enqueue_rollouts([RolloutRequest(input="queued")])
        store = await reopen(store)
        rollout = await store.get_rollout(claim.rollout.rollout_id)
        assert rollout.input == {"x": 1}
        assert [s.name for s in await store.query_spans(rollout.rollout_id)] == ["s0", "s1", "s2"]
        assert await store.get_resources() == update
        # Sequence ids go on after the stored ones; the queue is intact.
        assert await store.add_spans([_span(claim, "s3")]) == [4]
        [next_claim] = await store.dequeue_rollouts()
        assert next_claim.rollout.input == "queued"

    async def test_metrics_survive_reopening(
        self, store: Store, request: pytest.FixtureRequest
    ) -> None:
        if not self.persistent:
            pytest.skip("this backend does not keep data across a reopen (persistent = False)")
        reopen: Callable[[Store], Awaitable[Store]] = request.getfixturevalue("reopen")
        rows = [MetricsRow(run="r", step=step, time=1.0, values={"x": step}) for step in range(3)]
        await store.add_metrics(rows)
        store = await reopen(store)
        assert (await store.query_metrics(run="r")).rows == rows
        await store.add_metrics([MetricsRow(run="s", step=0, time=2.0)])
        assert await store.metric_runs() == ["r", "s"]


async def _status_is(store: Store, rollout_id: str, status: RolloutStatus) -> bool:
    return (await store.get_rollout(rollout_id)).status == status
