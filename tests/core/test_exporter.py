"""The span sender gets every span to the store on its own schedule, survives bad spans, and
keeps what the store cannot take yet."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
import textwrap
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest
from pydantic_core import to_json

import agl
from agl import RolloutRequest, Span
from agl.store._memory import MemoryStore
from agl.store._sqlite import SQLiteStore
from agl.testing.disks import fill, small_disk
from agl.testing.ports import free_port
from agl.testing.processes import wait_until
from agl.tracing._exporter import SpanSender
from agl.tracing._kept import buffer_bound

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def store() -> AsyncIterator[MemoryStore]:
    async with MemoryStore() as store:
        yield store


async def attempt_of(store: agl.Store) -> tuple[str, str]:
    await store.enqueue_rollouts([RolloutRequest(input=0)])
    [claim] = await store.dequeue_rollouts()
    return claim.rollout.rollout_id, claim.attempt.attempt_id


async def spans_within(store: agl.Store, rollout_id: str, count: int, seconds: float) -> int:
    """How many spans the rollout has once it has ``count`` of them, or when ``seconds`` pass."""
    deadline = time.monotonic() + seconds
    while True:
        found = len(await store.query_spans(rollout_id))
        if found >= count or time.monotonic() > deadline:
            return found
        await asyncio.sleep(0.01)


async def test_a_lone_span_is_sent_after_the_delay_with_nothing_flushing(
    store: MemoryStore,
) -> None:
    rollout_id, attempt_id = await attempt_of(store)
    sender = SpanSender(store, delay=0.05)
    try:
        sender.submit(Span.create(rollout_id=rollout_id, attempt_id=attempt_id, name="one"))
        # The old sender slept until a full batch (512) or a flush: this span never came.
        assert await spans_within(store, rollout_id, 1, 10) == 1
        sender.submit(Span.create(rollout_id=rollout_id, attempt_id=attempt_id, name="two"))
        assert await spans_within(store, rollout_id, 2, 10) == 2
        assert sender.stats.exported == 2
    finally:
        await asyncio.to_thread(sender.close)


async def test_spans_arriving_together_go_in_one_batch(store: MemoryStore) -> None:
    rollout_id, attempt_id = await attempt_of(store)
    sizes: list[int] = []
    add_spans = store.add_spans

    async def recording(spans: Sequence[Span]) -> list[int]:
        sizes.append(len(spans))
        return await add_spans(spans)

    store.add_spans = recording  # type: ignore[method-assign]
    sender = SpanSender(store, delay=5.0)
    try:
        for index in range(10):
            sender.submit(
                Span.create(rollout_id=rollout_id, attempt_id=attempt_id, name=f"{index}")
            )
        assert await asyncio.to_thread(sender.flush, 10)
    finally:
        await asyncio.to_thread(sender.close)
    assert sizes == [10]


class _Exploding(MemoryStore):
    """A store whose client fails, with an error no store raises, on spans named 'bad'."""

    async def add_spans(self, spans: Sequence[Span]) -> list[int]:
        if any(span.name == "bad" for span in spans):
            raise UnicodeEncodeError("utf-8", "\ud800", 0, 1, "surrogates not allowed")
        return await super().add_spans(spans)


async def test_the_sender_survives_a_span_its_store_cannot_take() -> None:
    async with _Exploding() as store:
        rollout_id, attempt_id = await attempt_of(store)
        sender = SpanSender(store, delay=0.01)
        try:
            sender.submit(Span.create(rollout_id=rollout_id, attempt_id=attempt_id, name="bad"))
            assert await asyncio.to_thread(sender.flush, 10)
            sender.submit(Span.create(rollout_id=rollout_id, attempt_id=attempt_id, name="good"))
            assert await spans_within(store, rollout_id, 1, 10) == 1
        finally:
            await asyncio.to_thread(sender.close, 10)
        assert [span.name for span in await store.query_spans(rollout_id)] == ["good"]
        assert sender.stats.rejected == 1
        assert "UnicodeEncodeError" in (sender.stats.last_error or "")


async def test_a_span_naming_an_unknown_rollout_no_longer_loses_its_batch(
    store: MemoryStore, caplog: pytest.LogCaptureFixture
) -> None:
    rollout_id, attempt_id = await attempt_of(store)
    sender = SpanSender(store, delay=5.0)
    try:
        for index in range(100):
            if index == 30:
                sender.submit(Span.create(rollout_id="ro-gone", attempt_id="at-1", name="late"))
            sender.submit(
                Span.create(rollout_id=rollout_id, attempt_id=attempt_id, name=f"{index}")
            )
        assert await asyncio.to_thread(sender.flush, 10)  # one batch of 101
    finally:
        await asyncio.to_thread(sender.close)
    assert len(await store.query_spans(rollout_id)) == 100
    assert (sender.stats.exported, sender.stats.rejected) == (100, 1)
    assert sender.stats.last_error == (
        "spans[30] names rollout 'ro-gone', which the store does not hold"
    )
    assert "agl store refused 1 of 101 spans (the rest are stored): spans[30]" in caplog.text


async def test_what_the_store_cannot_take_is_kept_to_the_byte_bound_and_stored_once_it_can(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A store on a real full disk: the sender keeps the newest spans that fit its bound in
    bytes, warns once that it drops the oldest, and stores what it kept once there is room."""
    caplog.set_level(logging.INFO, logger="agl.tracing")
    with small_disk(tmp_path / "disk") as disk:
        async with SQLiteStore(disk / "agl.db") as full:
            rollout_id, attempt_id = await attempt_of(full)
            spans = [
                Span.create(
                    rollout_id=rollout_id,
                    attempt_id=attempt_id,
                    name=f"s{index}",
                    attributes={"text": "x" * 10_000},
                )
                for index in range(30)
            ]
            size = len(to_json(spans[-1]))  # s20 ... s29 weigh the same
            filler = fill(disk)
            sender = SpanSender(full, max_batch=5, max_buffer_bytes=10 * size + size // 2)
            try:
                for one in spans:
                    sender.submit(one)
                await wait_until(
                    lambda: (sender.stats.dropped, sender.stats.kept) == (20, 10),
                    "the sender to keep the newest 10 spans and drop the rest",
                    120,
                )
                full_warnings = [r for r in caplog.records if "buffer is full" in r.message]
                assert len(full_warnings) == 1, caplog.text
                assert "drop" in full_warnings[0].message
                assert sender.stats.rejected == 0
                filler.unlink()
                assert await asyncio.to_thread(sender.flush, 120)
                stored = await full.query_spans(rollout_id)
                assert [span.name for span in stored] == [f"s{index}" for index in range(20, 30)]
                assert sender.stats.kept == 0
                assert sender.stats.exported == 10
                assert "20 span(s)" in caplog.records[-1].message, caplog.text
                assert "were dropped" in caplog.records[-1].message
            finally:
                await asyncio.to_thread(sender.close)


@pytest.mark.parametrize(
    ("setting", "bound"), [(None, 64 * 2**20), ("8", 8 * 2**20), ("0.5", 2**19)]
)
def test_the_byte_bound_comes_from_the_environment_unless_given(
    monkeypatch: pytest.MonkeyPatch, setting: str | None, bound: int
) -> None:
    if setting is None:
        monkeypatch.delenv("AGL_SPAN_BUFFER_MB", raising=False)
    else:
        monkeypatch.setenv("AGL_SPAN_BUFFER_MB", setting)
    assert buffer_bound() == bound
    assert buffer_bound(1234) == 1234  # an argument wins


@pytest.mark.parametrize("setting", ["lots", "0", "-1", "inf", "nan"])
def test_a_bad_byte_bound_is_refused_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, setting: str
) -> None:
    monkeypatch.setenv("AGL_SPAN_BUFFER_MB", setting)
    with pytest.raises(agl.InvalidInputError, match="AGL_SPAN_BUFFER_MB must be a positive"):
        SpanSender(MemoryStore())
    monkeypatch.delenv("AGL_SPAN_BUFFER_MB")
    with pytest.raises(agl.InvalidInputError, match="max_buffer_bytes must be a positive"):
        SpanSender(MemoryStore(), max_buffer_bytes=0)


def test_a_fresh_process_keeps_spans_while_the_store_is_away() -> None:
    """In a process that has not serialized a span yet (a runner's), keeping one measures it:
    a span converted from the SDK skips validation, so Span's deferred serializer is built only
    on first use, which pydantic_core's own ``to_json`` skipped (the span was counted as
    rejected and lost)."""
    code = textwrap.dedent(
        f"""
        import time
        import agl

        store = agl.open_store("http://127.0.0.1:{free_port()}", retries=0, timeout=1)
        tracer = agl.Tracer(store, max_backoff=0.05, flush_timeout=0.1)
        sender = tracer.sender
        with tracer.rollout_sync("r", "a"):  # the agent's span, converted as a runner does
            pass
        deadline = time.monotonic() + 120
        while sender.stats.kept + sender.stats.rejected == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        print(sender.stats.kept, sender.stats.rejected)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1", "0"], done.stderr
