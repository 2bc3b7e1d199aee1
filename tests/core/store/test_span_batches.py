"""Span batches: one bad span no longer loses the good ones sent with it, and a batch too large
for one request goes in several.

Over the memory and SQLite stores and a real store server (``StoreServer``, an HTTP client).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import agl
from agl import InvalidInputError, NotFoundError, RolloutRequest, Span
from agl.store._http import HttpStore
from agl.store._serve import StoreServer
from agl.store._span_batches import (
    RejectedSpan,
    add_spans_keeping_good,
    byte_chunks,
    renumbered,
)

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["memory", "sqlite", "http"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[agl.Store]:
    if request.param == "http":
        with StoreServer(f"sqlite:///{tmp_path / 'served.db'}") as server:
            async with agl.open_store(server.url) as opened:
                yield opened
        return
    url = "memory://" if request.param == "memory" else f"sqlite:///{tmp_path / 'agl.db'}"
    async with agl.open_store(url) as opened:
        yield opened


async def _attempt(store: agl.Store) -> tuple[str, str]:
    await store.enqueue_rollouts([RolloutRequest(input=0)])
    [claim] = await store.dequeue_rollouts(worker_id="w")
    return claim.rollout.rollout_id, claim.attempt.attempt_id


def _spans(rollout_id: str, attempt_id: str, names: list[str], size: int = 0) -> list[Span]:
    return [
        Span.create(
            rollout_id=rollout_id,
            attempt_id=attempt_id,
            name=name,
            attributes={"blob": "x" * size} if size else {},
        )
        for name in names
    ]


async def test_one_bad_span_no_longer_loses_the_good_ones(store: agl.Store) -> None:
    rollout_id, attempt_id = await _attempt(store)
    batch = _spans(rollout_id, attempt_id, [f"good-{i}" for i in range(100)])
    batch.insert(40, *_spans("ro-nobody", "at-nobody", ["orphan"]))
    # two spans of an attempt the rollout does not have: refused together
    batch[70:70] = _spans(rollout_id, "at-other", ["stray-1", "stray-2"])

    with pytest.raises(NotFoundError):  # add_spans itself stays all or nothing
        await store.add_spans(batch)
    assert await store.query_spans(rollout_id) == []

    outcome = await add_spans_keeping_good(store, batch)
    assert [r.index for r in outcome.rejected] == [40, 70, 71]
    assert outcome.rejected[0] == RejectedSpan(
        40, "spans[40] names rollout 'ro-nobody', which the store does not hold"
    )
    assert outcome.rejected[2].message == (
        f"spans[71] names attempt 'at-other', which rollout {rollout_id!r} does not have"
    )
    assert outcome.stored == 100
    stored = await store.query_spans(rollout_id)
    assert [s.name for s in stored] == [f"good-{i}" for i in range(100)]
    kept = [i for i in range(len(batch)) if i not in (40, 70, 71)]
    assert [outcome.sequence_ids[i] for i in kept] == [s.sequence_id for s in stored]
    assert [outcome.sequence_ids[i] for i in (40, 70, 71)] == [None, None, None]

    again = await add_spans_keeping_good(store, batch)  # sent again: nothing new
    assert again.sequence_ids == outcome.sequence_ids
    assert len(await store.query_spans(rollout_id)) == 100


async def test_a_batch_the_store_cannot_tell_apart_is_refused_whole(store: agl.Store) -> None:
    outcome = await add_spans_keeping_good(store, _spans("ro-x", "at-x", ["a", "b"]))
    assert [r.index for r in outcome.rejected] == [0, 1]
    assert outcome.stored == 0
    assert outcome.refusals(1) == (
        "spans[0] names rollout 'ro-x', which the store does not hold; and 1 more"
    )


async def test_a_batch_over_the_servers_body_limit_goes_in_parts(tmp_path: Path) -> None:
    """512 spans of 4 KB (2 MB) to a server taking 256 KB a request: all stored. The client's
    own cut (``max_span_bytes``) is above the limit, so the server's 413s halve the parts."""
    with StoreServer(f"sqlite:///{tmp_path / 'agl.db'}", max_body_bytes=256 * 1024) as server:
        async with HttpStore(server.url, max_span_bytes=1024 * 1024) as store:
            rollout_id, attempt_id = await _attempt(store)
            batch = _spans(rollout_id, attempt_id, [f"s{i}" for i in range(512)], size=4000)
            assert await store.add_spans(batch) == list(range(1, 513))
            assert len(await store.query_spans(rollout_id)) == 512

            # one span over the limit on its own: refused by index, the others stored
            mixed = _spans(rollout_id, attempt_id, ["t0", "t1", "huge", "t3"])
            mixed[2] = _spans(rollout_id, attempt_id, ["huge"], size=300_000)[0]
            with pytest.raises(InvalidInputError) as caught:
                await store.add_spans(mixed)
            assert caught.value.field == "spans[2]"
            assert "more than the store server takes in one request" in caught.value.message
            outcome = await add_spans_keeping_good(store, mixed)
            assert [r.index for r in outcome.rejected] == [2]
            names = [s.name for s in await store.query_spans(rollout_id)]
            assert names[512:] == ["t0", "t1", "t3"]


async def test_an_error_in_a_later_part_names_the_index_in_the_whole_batch(
    tmp_path: Path,
) -> None:
    with StoreServer(f"sqlite:///{tmp_path / 'agl.db'}") as server:
        async with HttpStore(server.url, max_span_bytes=20_000) as store:
            rollout_id, attempt_id = await _attempt(store)
            batch = _spans(rollout_id, attempt_id, [f"s{i}" for i in range(20)], size=3000)
            batch[13] = _spans("ro-gone", attempt_id, ["orphan"], size=3000)[0]
            with pytest.raises(NotFoundError) as caught:
                await store.add_spans(batch)
            assert caught.value.field == "spans[13].rollout_id"
            assert caught.value.message.startswith("spans[13] names rollout 'ro-gone'")
            outcome = await add_spans_keeping_good(store, batch)
            assert [r.index for r in outcome.rejected] == [13]
            assert outcome.stored == 19


def test_byte_chunks_stay_under_the_size() -> None:
    items = [b"x" * n for n in (10, 10, 10, 50, 5, 5)]
    assert byte_chunks(items, 25) == [(0, 2), (2, 3), (3, 4), (4, 6)]
    assert byte_chunks(items, 1000) == [(0, 6)]
    assert byte_chunks([], 10) == []


def test_renumbered_moves_the_index_to_the_whole_batch() -> None:
    error = NotFoundError("spans[3] names rollout 'r'", field="spans[3].rollout_id", value="r")
    moved = renumbered(error, 10)
    assert isinstance(moved, NotFoundError)
    assert (moved.message, moved.field, moved.value) == (
        "spans[13] names rollout 'r'",
        "spans[13].rollout_id",
        "r",
    )
    other = InvalidInputError("expected a list", field="spans")
    assert renumbered(other, 10) is other
