"""The store conformance suite's part on persistence (backends with ``persistent = True``).

Data and metrics survive a close and reopen.

Mixed into :class:`agl.testing.store.StoreConformance`; a backend runs these with the rest.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import ClassVar

import pytest

from agl import LLM, MetricsRow, RolloutConfig, RolloutRequest, Store
from agl.testing._store_support import claim_rollouts, make_span

__all__ = ["StorePersistenceRules"]


class StorePersistenceRules:
    """What a persistent backend keeps across a close and reopen."""

    persistent: ClassVar[bool] = False
    """Whether the backend keeps its data when closed and reopened (then ``reopen`` is needed)."""

    async def test_data_survives_reopening(
        self, store: Store, request: pytest.FixtureRequest
    ) -> None:
        if not self.persistent:
            pytest.skip("this backend does not keep data across a reopen (persistent = False)")
        reopen: Callable[[Store], Awaitable[Store]] = request.getfixturevalue("reopen")
        config = RolloutConfig(max_attempts=2)
        [claim] = await claim_rollouts(store, RolloutRequest(input={"x": 1}, config=config))
        await store.add_spans([make_span(claim, f"s{i}") for i in range(3)])
        update = await store.add_resources({"llm": LLM(endpoint="e", model="m")})
        await store.enqueue_rollouts([RolloutRequest(input="queued")])
        store = await reopen(store)
        rollout = await store.get_rollout(claim.rollout.rollout_id)
        assert rollout.input == {"x": 1}
        assert [s.name for s in await store.query_spans(rollout.rollout_id)] == ["s0", "s1", "s2"]
        assert await store.get_resources() == update
        # Sequence ids go on after the stored ones; the queue is intact.
        assert await store.add_spans([make_span(claim, "s3")]) == [4]
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
