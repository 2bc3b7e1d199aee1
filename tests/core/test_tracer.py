"""The tracer binds spans to rollouts and gets them to the store, whatever happens."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from opentelemetry import trace as otel_trace

import agl
from agl import RolloutRequest, semconv
from agl.store._memory import MemoryStore
from agl.store._serve import StoreServer
from agl.testing.ports import free_port

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def store() -> AsyncIterator[agl.Store]:
    async with MemoryStore() as store:
        yield store


async def claim(store: agl.Store, count: int = 1) -> list[tuple[str, str]]:
    await store.enqueue_rollouts([RolloutRequest(input=i) for i in range(count)])
    claims = await store.dequeue_rollouts(limit=count)
    return [(c.rollout.rollout_id, c.attempt.attempt_id) for c in claims]


async def test_spans_in_a_rollout_reach_the_store_with_its_ids(store: agl.Store) -> None:
    [(rollout_id, attempt_id)] = await claim(store)
    with agl.Tracer(store) as tracer:
        async with tracer.rollout(rollout_id, attempt_id):
            with (
                tracer.otel_tracer.start_as_current_span("plan"),
                tracer.otel_tracer.start_as_current_span("llm"),
            ):
                pass
        spans = await store.query_spans(rollout_id)
    by_name = {span.name: span for span in spans}
    assert set(by_name) == {"agl.rollout", "plan", "llm"}
    assert all(span.attempt_id == attempt_id for span in spans)
    assert by_name["llm"].parent_id == by_name["plan"].span_id
    assert by_name["plan"].parent_id == by_name["agl.rollout"].span_id
    assert len({span.trace_id for span in spans}) == 1
    assert by_name["llm"].attributes[semconv.AGL_ROLLOUT_ID] == rollout_id
    assert by_name["agl.rollout"].resource["service.name"] == "agl-agent"


async def test_ids_follow_tasks_threads_and_executors(store: agl.Store) -> None:
    [(rollout_id, attempt_id)] = await claim(store)
    with agl.Tracer(store) as tracer:
        otel = tracer.otel_tracer

        def in_thread(name: str) -> None:
            with otel.start_as_current_span(name):
                pass

        async with tracer.rollout(rollout_id, attempt_id):
            await asyncio.create_task(asyncio.sleep(0, result=in_thread("task")))
            thread = threading.Thread(target=in_thread, args=("thread",))
            thread.start()
            thread.join()
            await asyncio.to_thread(in_thread, "to_thread")
            await asyncio.get_running_loop().run_in_executor(None, in_thread, "executor")
        names = sorted(span.name for span in await store.query_spans(rollout_id))
    assert names == ["agl.rollout", "executor", "task", "thread", "to_thread"]


async def test_concurrent_rollouts_never_mix(store: agl.Store) -> None:
    ids = await claim(store, 50)
    with agl.Tracer(store) as tracer:

        async def agent(rollout_id: str, attempt_id: str) -> None:
            async with tracer.rollout(rollout_id, attempt_id):
                for step in range(5):
                    with tracer.otel_tracer.start_as_current_span(f"{rollout_id}/{step}"):
                        await asyncio.sleep(0.001)

        await asyncio.gather(*(agent(*pair) for pair in ids))
        for rollout_id, attempt_id in ids:
            spans = await store.query_spans(rollout_id)
            assert len(spans) == 6
            assert all(s.attempt_id == attempt_id for s in spans)
            assert all(s.name == "agl.rollout" or s.name.startswith(rollout_id) for s in spans)
        assert tracer.stats.exported == 300
        assert tracer.stats.dropped == tracer.stats.rejected == 0


async def test_spans_are_flushed_when_the_agent_raises(store: agl.Store) -> None:
    [(rollout_id, attempt_id)] = await claim(store)
    with agl.Tracer(store, delay=10.0) as tracer:  # only the rollout's end can flush in time

        async def agent() -> None:
            async with tracer.rollout(rollout_id, attempt_id):
                with tracer.otel_tracer.start_as_current_span("before the crash"):
                    pass
                raise RuntimeError("agent broke")

        with pytest.raises(RuntimeError, match="agent broke"):
            await agent()
        spans = await store.query_spans(rollout_id)
    root = next(span for span in spans if span.name == "agl.rollout")
    assert {span.name for span in spans} == {"agl.rollout", "before the crash"}
    assert root.status.code == agl.StatusCode.ERROR
    assert "agent broke" in (root.status.description or "")


async def test_spans_outside_a_rollout_are_counted_not_sent(store: agl.Store) -> None:
    with agl.Tracer(store) as tracer:
        with tracer.otel_tracer.start_as_current_span("stray"):
            pass
        assert tracer.flush()
        assert tracer.unattributed == 1
        assert tracer.stats.queued == 0


async def test_the_global_provider_is_left_alone_unless_asked(store: agl.Store) -> None:
    before = otel_trace.get_tracer_provider()
    with agl.Tracer(store) as tracer:
        assert otel_trace.get_tracer_provider() is before
        assert tracer.provider is not before


async def test_a_rejected_batch_is_counted_and_not_retried(
    store: agl.Store, caplog: pytest.LogCaptureFixture
) -> None:
    with agl.Tracer(store) as tracer:
        async with tracer.rollout("ro-not-in-the-store", "at-x"):
            pass
        assert tracer.stats.rejected == 1
        assert tracer.stats.exported == 0
    assert "refused" in caplog.text


async def test_spans_wait_for_an_unreachable_store_and_arrive_later(tmp_path: Path) -> None:
    port, db = free_port(), f"sqlite:///{tmp_path}/store.db"
    with StoreServer(db, port=port) as server:
        async with agl.open_store(server.url) as admin:
            [(rollout_id, attempt_id)] = await claim(admin)
    # The server is down now: spans are kept and retried.
    store = agl.open_store(f"http://127.0.0.1:{port}", retries=0, timeout=1)
    with agl.Tracer(store, flush_timeout=0.5, max_backoff=0.2) as tracer:
        async with tracer.rollout(rollout_id, attempt_id):
            with tracer.otel_tracer.start_as_current_span("while the store is down"):
                pass
        assert tracer.stats.retries >= 1
        assert tracer.stats.exported == 0
        with StoreServer(db, port=port):
            assert await asyncio.to_thread(tracer.flush, 10)
            async with agl.open_store(f"http://127.0.0.1:{port}") as check:
                names = {span.name for span in await check.query_spans(rollout_id)}
        assert names == {"agl.rollout", "while the store is down"}
        assert tracer.stats.dropped == 0
    await store.close()


async def test_a_full_buffer_drops_the_oldest_and_says_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = agl.open_store(f"http://127.0.0.1:{free_port()}", retries=0, timeout=1)
    caplog.set_level(logging.WARNING, logger="agl.tracing")
    tracer = agl.Tracer(store, max_buffer=10, max_batch=5, flush_timeout=0.2, max_backoff=0.1)
    try:
        async with tracer.rollout("ro-1", "at-1"):
            for index in range(30):
                with tracer.otel_tracer.start_as_current_span(f"s{index}"):
                    pass
        assert tracer.stats.dropped >= 16  # 31 spans, at most 10 buffered + 5 in flight
        assert "buffer is full" in caplog.text
    finally:
        await asyncio.to_thread(tracer.close)  # the store never comes back: the rest is lost
        await store.close()
    assert tracer.stats.exported == 0
    assert tracer.stats.dropped == tracer.stats.queued


async def test_a_span_with_lone_surrogates_is_stored_valid_beside_its_batch(tmp_path: Path) -> None:
    """An agent's text may hold lone UTF-16 surrogates, which SQLite cannot store: the span is
    stored with U+FFFD in their place, and the spans sent with it are stored too."""
    from agl.store._sqlite import SQLiteStore

    async with SQLiteStore(tmp_path / "store.db") as store:
        [(rollout_id, attempt_id)] = await claim(store)
        with agl.Tracer(store) as tracer:
            async with tracer.rollout(rollout_id, attempt_id):
                with tracer.otel_tracer.start_as_current_span("before"):
                    pass
                with tracer.otel_tracer.start_as_current_span("odd \udc80") as span:
                    span.set_attribute("prompt", "hi \ud800")
                    span.set_attribute("parts", ["\udfff", "fine"])
                    span.add_event("seen \ud800", {"k\udc00": "v"})
                with tracer.otel_tracer.start_as_current_span("after"):
                    pass
            assert tracer.sender.stats.rejected == 0
        by_name = {span.name: span for span in await store.query_spans(rollout_id)}
    assert set(by_name) == {"agl.rollout", "before", "odd \ufffd", "after"}
    odd = by_name["odd \ufffd"]
    assert odd.attributes["prompt"] == "hi \ufffd"
    assert odd.attributes["parts"] == ["\ufffd", "fine"]
    assert (odd.events[0].name, odd.events[0].attributes) == ("seen \ufffd", {"k\ufffd": "v"})
