"""The store conformance suite's part on concurrency and isolation.

Concurrent claims and span writers, and callers never sharing the stored objects.

Mixed into :class:`agl.testing.store.StoreConformance`; a backend runs these with the rest.
"""

from __future__ import annotations

import asyncio

from agl import RolloutRequest, Store
from agl.testing._store_support import claim_rollouts, make_span

__all__ = ["StoreConcurrencyRules"]


class StoreConcurrencyRules:
    """What stays true when callers race, and that callers never share the stored objects."""

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
        [claim] = await claim_rollouts(store)

        async def writer(index: int) -> None:
            for batch in range(5):
                await store.add_spans([make_span(claim, f"w{index}-{batch}-{i}") for i in range(4)])

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
