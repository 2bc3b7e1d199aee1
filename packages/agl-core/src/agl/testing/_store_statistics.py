"""The store conformance suite's part on workers and statistics: the counts agree with the queries.

Mixed into :class:`agl.testing.store.StoreConformance`; a backend runs these with the rest.
"""

from __future__ import annotations

from typing import Any

from agl import LLM, AttemptStatus, RolloutConfig, RolloutRequest, RolloutStatus, Store
from agl.testing._store_support import claim_rollouts, make_span

__all__ = ["StoreStatisticsRules"]


class StoreStatisticsRules:
    """What the statistics count, checked against the queries."""

    async def test_statistics_count_what_is_stored(self, store: Store) -> None:
        claims = await claim_rollouts(store, RolloutRequest(input=1), RolloutRequest(input=2))
        await store.enqueue_rollouts([RolloutRequest(input=3)])
        await store.add_spans([make_span(claims[0], "s"), make_span(claims[1], "t")])
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
        spans = [make_span(claim, f"s{i}") for claim in claims.values() for i in range(3)]
        await store.add_spans(spans)
        await store.add_spans([*spans[:4], make_span(claims["ok"], "more")])  # 4 known, 1 new

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
        await store.add_spans([make_span(again["retry"], "second try")])
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
