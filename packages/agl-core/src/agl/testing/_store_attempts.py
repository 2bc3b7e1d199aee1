"""The store conformance suite's part on attempts: statuses, retries, time limits, heartbeats.

Cancelling a rollout and waiting for rollouts to finish are here too.

Mixed into :class:`agl.testing.store.StoreConformance`; a backend runs these with the rest.
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from agl import (
    Attempt,
    AttemptStatus,
    ConflictError,
    NotFoundError,
    RolloutConfig,
    RolloutRequest,
    RolloutStatus,
    Store,
)
from agl.testing._store_support import claim_rollouts, status_is, wait_until

__all__ = ["StoreAttemptRules"]


class StoreAttemptRules:
    """How attempts move, retry and end, and how their rollout follows them."""

    async def test_rollout_follows_its_attempt_to_success(self, store: Store) -> None:
        [claim] = await claim_rollouts(store)
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
        [claim] = await claim_rollouts(store)
        ids = (claim.rollout.rollout_id, claim.attempt.attempt_id)
        beat = await store.update_attempt(*ids)
        assert beat.status == AttemptStatus.PREPARING
        assert beat.last_heartbeat_time is not None
        later = await store.update_attempt(*ids, reason="still thinking")
        assert later.last_heartbeat_time is not None
        assert later.last_heartbeat_time >= beat.last_heartbeat_time
        assert later.reason == "still thinking"

    async def test_a_running_attempt_cannot_go_back(self, store: Store) -> None:
        [claim] = await claim_rollouts(store)
        ids = (claim.rollout.rollout_id, claim.attempt.attempt_id)
        await store.update_attempt(*ids, status=AttemptStatus.RUNNING)
        with pytest.raises(ConflictError):
            await store.update_attempt(*ids, status=AttemptStatus.PREPARING)

    async def test_update_unknown_attempt_raises(self, store: Store) -> None:
        [claim] = await claim_rollouts(store)
        with pytest.raises(NotFoundError) as caught:
            await store.update_attempt(claim.rollout.rollout_id, "at-unknown")
        assert caught.value.field == "attempt_id"
        with pytest.raises(NotFoundError):
            await store.update_attempt("ro-unknown", claim.attempt.attempt_id)

    async def test_failure_without_retries_left_fails_the_rollout(self, store: Store) -> None:
        [claim] = await claim_rollouts(store)
        ids = (claim.rollout.rollout_id, claim.attempt.attempt_id)
        await store.update_attempt(*ids, status=AttemptStatus.FAILED, reason="agent raised")
        rollout = await store.get_rollout(ids[0])
        assert rollout.status == RolloutStatus.FAILED
        [attempt] = await store.query_attempts(ids[0])
        assert attempt.reason == "agent raised"
        assert await store.dequeue_rollouts() == []

    async def test_failure_is_retried_while_attempts_are_left(self, store: Store) -> None:
        config = RolloutConfig(max_attempts=2)
        [first] = await claim_rollouts(store, RolloutRequest(input=1, config=config))
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
        [first] = await claim_rollouts(store)
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
        [first] = await claim_rollouts(store, RolloutRequest(input=1, config=config))
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
        [claim] = await claim_rollouts(store, RolloutRequest(input=1, config=config))
        await store.update_attempt(
            claim.rollout.rollout_id, claim.attempt.attempt_id, status=AttemptStatus.FAILED
        )
        assert (await store.get_rollout(claim.rollout.rollout_id)).status == RolloutStatus.FAILED

    async def test_timeout_is_detected_and_retried(self, store: Store) -> None:
        config = RolloutConfig(timeout_seconds=0.3, max_attempts=2)
        [first] = await claim_rollouts(store, RolloutRequest(input=1, config=config))
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
        await wait_until(
            lambda: status_is(store, rollout_id, RolloutStatus.FAILED), timeout=5, interval=0.1
        )

    async def test_missing_heartbeats_make_an_attempt_unresponsive(self, store: Store) -> None:
        config = RolloutConfig(unresponsive_seconds=0.4)
        [alive, silent] = await claim_rollouts(
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
        [orphan, heard] = await claim_rollouts(
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
        await wait_until(lambda: status_is(store, heard_id, RolloutStatus.FAILED))
        [attempt] = await store.query_attempts(heard_id)
        assert attempt.status in (AttemptStatus.UNRESPONSIVE, AttemptStatus.TIMEOUT)

    async def test_late_result_of_a_superseded_attempt_is_refused(self, store: Store) -> None:
        config = RolloutConfig(timeout_seconds=0.2, max_attempts=2)
        [first] = await claim_rollouts(store, RolloutRequest(input=1, config=config))
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
        [claim] = await claim_rollouts(store)
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
        claims = await claim_rollouts(store, RolloutRequest(input=1), RolloutRequest(input=2))

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
        done, pending = await claim_rollouts(
            store, RolloutRequest(input=1), RolloutRequest(input=2)
        )
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
