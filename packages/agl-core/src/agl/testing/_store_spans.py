"""The store conformance suite's part on spans.

Round trip, sequence ids, idempotent and whole batches, pages.

Mixed into :class:`agl.testing.store.StoreConformance`; a backend runs these with the rest.
"""

from __future__ import annotations

import asyncio

import pytest

from agl import (
    AttemptStatus,
    InvalidInputError,
    NotFoundError,
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
from agl.testing._store_support import claim_rollouts, make_span

__all__ = ["StoreSpanRules"]


class StoreSpanRules:
    """What adding and reading spans must do."""

    async def test_spans_round_trip_every_field(self, store: Store) -> None:
        [claim] = await claim_rollouts(store)
        trace_id = new_trace_id()
        parent = make_span(claim, "agent", trace_id=trace_id, kind=SpanKind.SERVER)
        child = make_span(
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
        first, second = await claim_rollouts(
            store, RolloutRequest(input=1), RolloutRequest(input=2)
        )
        await store.add_spans([make_span(first, f"a{i}") for i in range(3)])
        await store.add_spans(
            [make_span(second, "b0"), make_span(first, "a3"), make_span(second, "b1")]
        )
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
        [claim] = await claim_rollouts(store)
        spans = [make_span(claim, f"s{i}") for i in range(3)]
        assert await store.add_spans(spans) == [1, 2, 3]
        assert await store.add_spans([spans[1], make_span(claim, "s3"), spans[1]]) == [2, 4, 2]
        # A span's own sequence_id is not trusted: the store's is kept.
        assert await store.add_spans([spans[0].model_copy(update={"sequence_id": 99})]) == [1]
        assert len(await store.query_spans(claim.rollout.rollout_id)) == 4
        assert (await store.statistics()).spans == 4

    async def test_a_batch_with_one_bad_span_is_rejected_whole(self, store: Store) -> None:
        [claim] = await claim_rollouts(store)
        await store.add_spans([make_span(claim, "kept")])
        orphan = Span.create(rollout_id="ro-unknown", attempt_id="at-x", name="orphan")
        with pytest.raises(NotFoundError) as caught:
            await store.add_spans([make_span(claim, "a"), orphan, make_span(claim, "b")])
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
        [first] = await claim_rollouts(store, RolloutRequest(input=1, config=config))
        rollout_id = first.rollout.rollout_id
        await store.add_spans([make_span(first, "try1")])
        await store.update_attempt(
            rollout_id, first.attempt.attempt_id, status=AttemptStatus.FAILED
        )
        [second] = await store.dequeue_rollouts()
        await store.add_spans([make_span(second, "try2")])
        # Spans that arrive after their attempt ended are still kept (a late flush).
        await store.add_spans([make_span(first, "try1-late")])
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
        [first] = await claim_rollouts(store, RolloutRequest(input=1, config=config))
        rollout_id = first.rollout.rollout_id
        await store.add_spans([make_span(first, f"a{i}") for i in range(1200)])
        await store.update_attempt(
            rollout_id, first.attempt.attempt_id, status=AttemptStatus.FAILED
        )
        [second] = await store.dequeue_rollouts()
        await store.add_spans([make_span(second, f"b{i}") for i in range(5)])
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
        [claim] = await claim_rollouts(store, RolloutRequest(input=1, config=config))
        for i in range(8):
            await asyncio.sleep(0.15)
            await store.add_spans([make_span(claim, f"s{i}")])
        rollout = await store.get_rollout(claim.rollout.rollout_id)
        assert rollout.status == RolloutStatus.PREPARING
