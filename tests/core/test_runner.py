"""The runner, in process: concurrency, outcomes, heartbeats, cancellation, stop, resources."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import openai
import pytest

import agl
from agl import AttemptStatus, RolloutConfig, RolloutRequest, RolloutStatus, Runner, semconv
from agl._results import fetch_results
from agl.gateway import GatewayServer
from agl.store._memory import MemoryStore
from agl.testing.openai_server import OpenAIServer, echo

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def store() -> MemoryStore:
    return MemoryStore()


async def enqueue(store: agl.Store, *inputs: Any, **request: Any) -> list[str]:
    rollouts = await store.enqueue_rollouts([RolloutRequest(input=i, **request) for i in inputs])
    return [rollout.rollout_id for rollout in rollouts]


async def results(store: agl.Store, ids: list[str]) -> list[Any]:
    return await fetch_results(store, [await store.get_rollout(i) for i in ids])


async def running(store: agl.Store, count: int, timeout: float = 5.0) -> None:
    """Wait until ``count`` rollouts are running."""
    deadline = time.monotonic() + timeout
    while len((await store.query_rollouts(status=RolloutStatus.RUNNING)).rollouts) < count:
        assert time.monotonic() < deadline, f"{count} rollouts never ran"
        await asyncio.sleep(0.02)


def runner(agent: Any, store: agl.Store, **options: Any) -> Runner:
    return Runner(agent, store, handle_signals=False, poll_wait=0.2, **options)


async def test_runs_rollouts_concurrently_and_records_rewards(store: MemoryStore) -> None:
    running = 0
    peak = 0

    @agl.rollout
    async def agent(task: int) -> float:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.05)
        running -= 1
        return task / 10

    ids = await enqueue(store, *range(20))
    stats = await runner(agent, store, concurrency=10, max_rollouts=20).run()
    assert (stats.claimed, stats.succeeded, stats.failed) == (20, 20, 0)
    assert peak == 10  # ten agents were inside their sleep at once
    found = await results(store, ids)
    assert [r.reward for r in found] == [i / 10 for i in range(20)]
    assert all(r.status == RolloutStatus.SUCCEEDED for r in found)
    workers = await store.query_workers()
    assert [w.num_claimed for w in workers] == [20]


async def test_sync_agent_runs_on_a_thread_with_its_trace(store: MemoryStore) -> None:
    threads = set()

    @agl.rollout
    def agent(task: int) -> None:
        threads.add(threading.current_thread().name)
        agl.emit_message(f"working on {task}")
        agl.emit_reward({"correct": 1.0, "length": 3.0}, primary="correct")
        time.sleep(0.02)

    ids = await enqueue(store, 1, 2, 3)
    stats = await runner(agent, store, concurrency=3, max_rollouts=3).run()
    assert stats.succeeded == 3
    assert all(name.startswith("agl-agent") for name in threads)
    for result in await results(store, ids):
        assert result.reward == 1.0
        types = [s.attributes.get(semconv.AGL_SPAN_TYPE) for s in result.spans]
        assert types.count("message") == 1
        assert types.count("rollout") == 1
        message = next(s for s in result.spans if s.attributes.get("agl.span.type") == "message")
        assert message.attributes[semconv.AGL_MESSAGE] == f"working on {result.rollout.input}"


async def test_every_failure_becomes_a_reasoned_attempt(store: MemoryStore) -> None:
    @agl.rollout
    async def agent(task: str) -> Any:
        if task == "raise":
            raise KeyError("missing-field")
        if task == "garbage":
            return "not a reward"
        if task == "hang":
            await asyncio.sleep(60)
        if task == "nan":
            return float("nan")
        return 1.0

    ids = await enqueue(store, "raise", "garbage", "nan", "ok")
    [hang] = await enqueue(store, "hang", config=RolloutConfig(timeout_seconds=0.3))
    stats = await runner(agent, store, concurrency=5, max_rollouts=5).run()
    assert (stats.succeeded, stats.failed, stats.timed_out) == (1, 3, 1)
    found = {r.rollout.input: r for r in await results(store, [*ids, hang])}
    assert found["raise"].error == "failed: KeyError: 'missing-field'"
    assert "returned 'not a reward' (str)" in str(found["garbage"].error)
    assert "non-finite" in str(found["nan"].error)
    assert found["hang"].attempts[-1].status == AttemptStatus.TIMEOUT
    assert "timeout_seconds=0.3" in str(found["hang"].error)
    for key in ("raise", "garbage", "hang"):
        exceptions = [
            s for s in found[key].spans if s.attributes.get(semconv.AGL_SPAN_TYPE) == "exception"
        ]
        assert len(exceptions) == 1, key
    assert found["ok"].reward == 1.0
    assert found["ok"].error is None


async def test_sync_agent_that_hangs_is_timed_out(store: MemoryStore) -> None:
    release = threading.Event()

    @agl.rollout
    def agent(task: int) -> float:
        release.wait(10)
        return 1.0

    [rollout_id] = await enqueue(store, 1, config=RolloutConfig(timeout_seconds=0.2))
    try:
        stats = await runner(agent, store, max_rollouts=1).run()
    finally:
        release.set()
    assert stats.timed_out == 1
    assert (await store.get_rollout(rollout_id)).status == RolloutStatus.FAILED


async def test_heartbeats_keep_a_long_attempt_alive(store: MemoryStore) -> None:
    @agl.rollout
    async def agent(task: int) -> float:
        await asyncio.sleep(1.0)
        return 1.0

    config = RolloutConfig(unresponsive_seconds=0.4)
    [rollout_id] = await enqueue(store, 1, config=config)
    stats = await runner(agent, store, max_rollouts=1).run()
    assert stats.succeeded == 1  # 1 s > 0.4 s: only heartbeats (every ~0.13 s) kept it alive
    [attempt] = await store.query_attempts(rollout_id)
    assert attempt.status == AttemptStatus.SUCCEEDED


async def test_an_idle_runner_beats_for_a_new_claim_within_its_short_limit(
    store: MemoryStore,
) -> None:
    """The runner was idle (beating every 10 s) when a rollout with a 0.6 s limit came: its
    first heartbeat comes within a third of that, not when the idle interval ends."""

    @agl.rollout
    async def agent(task: int) -> float:
        await asyncio.sleep(2.0)
        return 1.0

    worker = runner(agent, store, max_rollouts=1)
    running = asyncio.create_task(worker.run())
    await asyncio.sleep(0.5)  # idle: the heartbeat loop is waiting out its 10 s
    [rollout_id] = await enqueue(store, 1, config=RolloutConfig(unresponsive_seconds=0.6))
    while not running.done():  # a reader (a trainer, a dashboard): the store checks deadlines
        await store.query_attempts(rollout_id)
        await asyncio.sleep(0.05)
    stats = await asyncio.wait_for(running, 30)
    assert stats.succeeded == 1, stats
    [attempt] = await store.query_attempts(rollout_id)
    assert attempt.status == AttemptStatus.SUCCEEDED


async def test_a_rollout_cancelled_in_the_store_stops_its_agent(store: MemoryStore) -> None:
    cancelled = asyncio.Event()

    @agl.rollout
    async def agent(task: int) -> float:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return 1.0

    [rollout_id] = await enqueue(store, 1)
    run = asyncio.create_task(runner(agent, store, max_rollouts=1, heartbeat_interval=0.1).run())
    await running(store, 1)
    await store.cancel_rollout(rollout_id)
    stats = await asyncio.wait_for(run, 5)
    assert cancelled.is_set()
    assert stats.abandoned == 1
    assert stats.succeeded == 0
    assert (await store.get_rollout(rollout_id)).status == RolloutStatus.CANCELLED


async def test_stop_without_drain_releases_running_rollouts(store: MemoryStore) -> None:
    @agl.rollout
    async def agent(task: int) -> float:
        await asyncio.sleep(30)
        return 1.0

    ids = await enqueue(store, 1, 2)
    the_runner = runner(agent, store, concurrency=2)
    run = asyncio.create_task(the_runner.run())
    await running(store, 2)
    the_runner.stop(drain=False)
    stats = await asyncio.wait_for(run, 5)
    assert stats.released == 2
    for rollout_id in ids:
        rollout = await store.get_rollout(rollout_id)
        assert rollout.status == RolloutStatus.REQUEUING  # max_attempts=1, yet back in queue
        [attempt] = await store.query_attempts(rollout_id)
        assert attempt.status == AttemptStatus.RELEASED

    @agl.rollout
    async def quick(task: int) -> float:
        return 2.0

    stats = await runner(quick, store, concurrency=2, max_rollouts=2).run()
    assert stats.succeeded == 2
    assert [r.reward for r in await results(store, ids)] == [2.0, 2.0]


async def test_stop_with_drain_lets_running_rollouts_finish(store: MemoryStore) -> None:
    @agl.rollout
    async def agent(task: int) -> float:
        await asyncio.sleep(0.3)
        return 1.0

    ids = await enqueue(store, 1, 2, 3)
    the_runner = runner(agent, store, concurrency=2)
    run = asyncio.create_task(the_runner.run())
    await running(store, 2)
    the_runner.stop()
    stats = await asyncio.wait_for(run, 5)
    assert (stats.claimed, stats.succeeded, stats.released) == (2, 2, 0)
    statuses = [(await store.get_rollout(i)).status for i in ids]
    assert sorted(statuses) == sorted(
        [RolloutStatus.SUCCEEDED, RolloutStatus.SUCCEEDED, RolloutStatus.QUEUING]
    )


async def test_missing_resource_fails_the_attempt_not_the_runner(store: MemoryStore) -> None:
    @agl.rollout
    def agent(task: int, critic: agl.LLM) -> float:
        return 1.0

    [rollout_id] = await enqueue(store, 1)
    stats = await runner(agent, store, max_rollouts=1).run()
    assert stats.failed == 1
    [result] = await results(store, [rollout_id])
    assert "asks for 'critic'" in str(result.error)


@pytest.fixture(scope="module")
def upstream() -> Iterator[OpenAIServer]:
    with OpenAIServer() as server:
        server.script = echo
        yield server


async def test_llm_resource_points_at_the_gateway_for_this_attempt(
    store: MemoryStore, upstream: OpenAIServer
) -> None:
    seen_urls = []

    @agl.rollout
    async def agent(task: str, llm: agl.LLM, prompt_template: agl.PromptTemplate) -> float:
        seen_urls.append(llm.endpoint)
        client = openai.AsyncOpenAI(base_url=llm.endpoint, api_key="unused", max_retries=0)
        for _ in range(2):
            response = await client.chat.completions.create(
                model=llm.model,
                messages=[{"role": "user", "content": prompt_template.format(q=task)}],
            )
        await client.close()
        return 1.0 if response.choices[0].message.content else 0.0

    with GatewayServer([upstream.url], store) as gateway:
        update = await store.add_resources(
            {
                "llm": agl.LLM(endpoint=gateway.endpoint_template, model="policy"),
                "prompt": agl.PromptTemplate(template="Q: {q}"),
            }
        )
        ids = await enqueue(store, "a", "b", resources_id=update.resources_id)
        stats = await runner(agent, store, concurrency=2, max_rollouts=2).run()
        await asyncio.to_thread(gateway.gateway.sender.flush)  # type: ignore[union-attr]
    assert stats.succeeded == 2
    for result in await results(store, ids):
        expected = (
            f"{gateway.url}/rollout/{result.rollout.rollout_id}"
            f"/attempt/{result.rollout.latest_attempt_id}/v1"
        )
        assert expected in seen_urls
        assert result.llm_calls == 2
        calls = [s for s in result.spans if s.attributes.get(semconv.AGL_SPAN_TYPE) == "gateway"]
        assert all(s.attributes[semconv.AGL_PROMPT_TOKEN_IDS] for s in calls)


async def test_runner_opens_and_closes_a_store_url(tmp_path: Any) -> None:
    url = f"sqlite:///{tmp_path}/runner.db"
    async with agl.open_store(url) as store:
        [rollout_id] = await enqueue(store, 7)

    @agl.rollout
    def agent(task: int) -> float:
        return float(task)

    stats = await Runner(agent, url, handle_signals=False, max_rollouts=1).run()
    assert stats.succeeded == 1
    async with agl.open_store(url) as store:
        [result] = await results(store, [rollout_id])
    assert result.reward == 7.0


def test_bad_concurrency_is_refused() -> None:
    with pytest.raises(agl.InvalidInputError, match="concurrency"):
        Runner(lambda task: None, MemoryStore(), concurrency=0)


async def test_an_unreachable_gateway_flush_is_counted_and_the_attempt_still_reported(
    store: MemoryStore,
) -> None:
    from agl.testing.ports import free_port

    template = f"http://127.0.0.1:{free_port()}/rollout/{{rollout_id}}/attempt/{{attempt_id}}/v1"
    await store.add_resources({"llm": agl.LLM(endpoint=template, model="m")})
    seen: list[agl.LLM] = []

    @agl.rollout
    def agent(task: int, llm: agl.LLM) -> float:
        seen.append(llm)
        return 1.0

    ids = await enqueue(store, 1)
    stats = await runner(
        agent, store, max_rollouts=1, gateway_token="tok", gateway_flush_timeout=2
    ).run()
    assert stats.succeeded == 1
    assert stats.gateway_flush_failures == 1
    [result] = await results(store, ids)
    assert result.status == RolloutStatus.SUCCEEDED
    assert [llm.api_key for llm in seen] == ["tok"]
