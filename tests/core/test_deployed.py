"""agl deployed as the README deploys it: ``agl store serve``, ``agl gateway serve`` and
``agl runner`` as separate processes, the algorithm's side played by this test.

Nothing here flushes anything by hand: what the algorithm reads is what a deployment gives it.
The upstream is the scripted OpenAI-compatible server (vLLM's wire format, real token ids).
"""

from __future__ import annotations

import asyncio
import importlib
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import agl
from agl import RolloutConfig, RolloutRequest, RolloutStatus, semconv
from agl._results import fetch_results
from agl.lightning import TransitionBuilder, extract_calls
from agl.store._http import starting_at as spread
from agl.testing.openai_server import OpenAIServer, echo, encode, render_chat, tool_reply
from agl.testing.ports import free_port
from agl.testing.postgres import PostgresServer
from agl.testing.processes import Processes, calling_agent, runner_summary, write_agent

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

TOKEN = "gateway-secret"

AGENT = calling_agent()  # two calls through the gateway; reward task / 10


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def model() -> Iterator[OpenAIServer]:
    with OpenAIServer() as server:
        yield server


async def test_a_remote_gateway_sends_a_lone_call_to_the_store_unflushed(
    tmp_path: Path, processes: Processes, model: OpenAIServer
) -> None:
    store_url, gateway_url = f"http://127.0.0.1:{free_port()}", f"http://127.0.0.1:{free_port()}"
    await processes.store_server(
        "store", db=f"sqlite:///{tmp_path / 'agl.db'}", port=int(store_url.rsplit(":", 1)[1])
    )
    await processes.gateway_server(
        "gateway", upstreams=[model.url], store=store_url, port=int(gateway_url.rsplit(":", 1)[1])
    )
    async with agl.open_store(store_url) as store:
        await store.enqueue_rollouts([RolloutRequest(input=1)])
        [claim] = await store.dequeue_rollouts()
        ids = claim.rollout.rollout_id, claim.attempt.attempt_id
        async with httpx.AsyncClient() as client:
            reply = await client.post(
                f"{gateway_url}/rollout/{ids[0]}/attempt/{ids[1]}/v1/chat/completions",
                json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
            )
        assert reply.status_code == 200, reply.text

        async def recorded() -> bool:
            spans = await store.query_spans(ids[0])
            return any(s.attributes.get(semconv.AGL_SPAN_TYPE) == "gateway" for s in spans)

        # The gateway's sender delay is 100 ms; before the fix the span came only at shutdown.
        await processes.until(recorded, "the gateway's span in the store", 10)


async def test_agl_gateway_serve_records_every_wire_token_exact(
    tmp_path: Path, processes: Processes, model: OpenAIServer
) -> None:
    """The Responses and Messages APIs, plain and streamed with tools, by their own SDKs,
    through ``agl gateway serve`` (with a token, as deployed) to the vLLM-format engine."""
    import anthropic
    import openai

    store_url, gateway_url = f"http://127.0.0.1:{free_port()}", f"http://127.0.0.1:{free_port()}"
    await processes.store_server(
        "store", db=f"sqlite:///{tmp_path / 'agl.db'}", port=int(store_url.rsplit(":", 1)[1])
    )
    await processes.gateway_server(
        "gateway",
        upstreams=[model.url],
        store=store_url,
        port=int(gateway_url.rsplit(":", 1)[1]),
        env={"AGL_GATEWAY_TOKEN": TOKEN},
    )
    model.script = lambda request: (
        tool_reply("get_weather", {"city": "Paris"})
        if request.get("tools") and request["messages"][-1]["role"] != "tool"
        else "sunny"
    )
    tools: Any = [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}]
    schema: Any = [{"name": "get_weather", "input_schema": {"type": "object"}}]
    try:
        async with agl.open_store(store_url) as store:
            await store.enqueue_rollouts([RolloutRequest(input=1)])
            [claim] = await store.dequeue_rollouts()
            ids = claim.rollout.rollout_id, claim.attempt.attempt_id
            url = f"{gateway_url}/rollout/{ids[0]}/attempt/{ids[1]}/v1"
            async with openai.AsyncOpenAI(base_url=url, api_key=TOKEN, max_retries=0) as gpt:
                called = await gpt.responses.create(model="m", input="Weather?", tools=tools)
                assert called.output[0].type == "function_call"
                events = [e async for e in await gpt.responses.create(
                    model="m", input="Hi", stream=True
                )]  # fmt: skip
                assert events[-1].type == "response.completed"
            base = url.removesuffix("/v1")
            async with anthropic.AsyncAnthropic(base_url=base, api_key=TOKEN, max_retries=0) as ant:
                ask: Any = {"model": "m", "max_tokens": 200, "tools": schema}
                message = await ant.messages.create(
                    **ask, messages=[{"role": "user", "content": "Weather?"}]
                )
                assert message.stop_reason == "tool_use"
                async with ant.messages.stream(
                    **ask, messages=[{"role": "user", "content": "Hi"}]
                ) as stream:
                    final = await stream.get_final_message()
                assert final.stop_reason == "tool_use"

            async def all_recorded() -> bool:
                spans = await store.query_spans(ids[0])
                return sum(s.attributes.get(semconv.AGL_SPAN_TYPE) == "gateway" for s in spans) == 4

            await processes.until(all_recorded, "the four calls in the store", 20)
            spans = [
                s
                for s in await store.query_spans(ids[0])
                if s.attributes.get(semconv.AGL_SPAN_TYPE) == "gateway"
            ]
    finally:
        model.script = echo
    wires = sorted(str(s.attributes[semconv.AGL_WIRE]) for s in spans)
    assert wires == ["messages", "messages", "responses", "responses"]
    for span in spans:
        chat = json.loads(str(span.attributes[semconv.AGL_REQUEST_JSON]))
        prompt = encode(render_chat(chat["messages"], chat.get("tools")))
        assert span.attributes[semconv.AGL_PROMPT_TOKEN_IDS] == prompt
        assert span.attributes[semconv.AGL_RESPONSE_TOKEN_IDS]


async def test_every_finished_rollout_has_its_calls_token_ids_with_a_remote_gateway(
    tmp_path: Path, processes: Processes, model: OpenAIServer
) -> None:
    store_port, gateway_port = free_port(), free_port()
    store_url = f"http://127.0.0.1:{store_port}"
    await processes.store_server("store", db=f"sqlite:///{tmp_path / 'agl.db'}", port=store_port)
    # A sender delay far longer than the test reads: only the runner's flush can explain
    # every call being there the moment the rollout is finished.
    await processes.gateway_server(
        "gateway",
        upstreams=[model.url],
        store=store_url,
        port=gateway_port,
        options=("--send-delay", "30", "--enforce-resources"),
        env={"AGL_GATEWAY_TOKEN": TOKEN},
    )
    endpoint = f"http://127.0.0.1:{gateway_port}/rollout/{{rollout_id}}/attempt/{{attempt_id}}/v1"
    tasks = list(range(8))
    async with agl.open_store(store_url) as store:
        await store.add_resources({"llm": agl.LLM(endpoint=endpoint, model="policy")})
        rollouts = await store.enqueue_rollouts(
            [RolloutRequest(input=task, metadata={"task_index": task}) for task in tasks]
        )
        runner = processes.runner(
            "runner",
            store_url,
            write_agent(tmp_path, "two_calls", AGENT),
            "--instrument",
            "openai",
            "--max-rollouts",
            str(len(tasks)),
            env={"AGL_GATEWAY_TOKEN": TOKEN},
        )
        pending = {rollout.rollout_id for rollout in rollouts}
        deadline = time.monotonic() + 60
        checked = 0
        while pending:
            assert time.monotonic() < deadline, processes.logs()
            done = await store.wait_for_rollouts(sorted(pending), timeout=1)
            # Read each rollout the moment the store says it is finished, as an algorithm does.
            for result in await fetch_results(store, done):
                assert result.status == RolloutStatus.SUCCEEDED, (result.error, processes.logs())
                calls = extract_calls(result.spans)
                assert len(calls.calls) == 2
                assert all(call.has_tokens for call in calls.calls), calls
                assert calls.counts.get("instrumented_only", 0) == 0
                batch = TransitionBuilder(drop_zero_variance=False).build([result])
                assert batch.report.transitions == 2, batch.report
                assert not batch.report.dropped_calls, batch.report
                checked += 1
            pending -= {rollout.rollout_id for rollout in done}
    assert checked == len(tasks)
    assert runner.exit_code(30) == 0, processes.logs()
    assert runner_summary(runner)["succeeded"] == len(tasks)
    assert all(request.body["model"] == "policy" for request in model.requests[-16:])
    # The gateway's token authenticated the agents and was not passed on upstream.
    assert all(request.headers.get("authorization") is None for request in model.requests[-16:]), [
        request.headers.get("authorization") for request in model.requests[-16:]
    ]


def test_a_gateway_beyond_loopback_needs_a_token(processes: Processes) -> None:
    child = processes.start(
        "gateway",
        "gateway", "serve", "--upstream", "http://127.0.0.1:9/v1",
        "--store", "http://127.0.0.1:9", "--host", "0.0.0.0", "--port", str(free_port()),
    )  # fmt: skip
    assert child.exit_code(60) == 2
    assert "refusing to serve the gateway on '0.0.0.0' without a token" in child.log()


SLOW_AGENT = calling_agent(pause=0.2)

SLEEPY_AGENT = """
    import asyncio

    import agl


    @agl.rollout
    async def agent(task):
        await asyncio.sleep(0.5)
        return task / 10
"""


@pytest.fixture(scope="module")
def postgres() -> Iterator[PostgresServer]:
    with PostgresServer() as server:
        yield server


@pytest.mark.timeout(480)  # five processes start: minutes on a loaded machine
async def test_three_store_servers_over_postgresql_lose_one_and_the_run_finishes(
    tmp_path: Path, processes: Processes, model: OpenAIServer, postgres: PostgresServer
) -> None:
    db = postgres.create_database("three_servers")
    ports = [free_port() for _ in range(3)]
    servers = [
        await processes.store_server(f"store-{i}", db=db, port=port) for i, port in enumerate(ports)
    ]
    urls = [f"http://127.0.0.1:{port}" for port in ports]

    def starting_at(first: int) -> str:  # every client knows all three, each starts elsewhere
        return spread(",".join(urls), first)

    gateway_port = free_port()
    await processes.gateway_server(
        "gateway", upstreams=[model.url], store=starting_at(1), port=gateway_port
    )
    endpoint = f"http://127.0.0.1:{gateway_port}/rollout/{{rollout_id}}/attempt/{{attempt_id}}/v1"
    agent = write_agent(tmp_path, "slow_calls", SLOW_AGENT)
    config = RolloutConfig(unresponsive_seconds=10, max_attempts=3)
    tasks = list(range(16))
    async with agl.open_store(starting_at(2)) as store:
        await store.add_resources({"llm": agl.LLM(endpoint=endpoint, model="policy")})
        rollouts = await store.enqueue_rollouts(
            [RolloutRequest(input=task, config=config) for task in tasks]
        )
        options = ("--instrument", "openai", "--concurrency", "2")
        runners = [
            processes.runner(f"runner-{i}", starting_at(i), agent, *options) for i in range(2)
        ]
        ids = [rollout.rollout_id for rollout in rollouts]

        async def some_finished() -> bool:
            return len(await store.wait_for_rollouts(ids, timeout=0.5)) >= 4

        await processes.until(some_finished, "4 rollouts finished", 60, *runners)
        servers[0].process.kill()  # runner-0's first server, mid-run: SIGKILL
        servers[0].process.wait(timeout=30)
        killed_at = time.time()

        async def all_finished() -> bool:
            return len(await store.wait_for_rollouts(ids, timeout=1)) == len(ids)

        await processes.until(all_finished, "every rollout finished", 120, *runners)
        results = await fetch_results(store, await store.wait_for_rollouts(ids, timeout=1))
        for result in results:
            assert result.status == RolloutStatus.SUCCEEDED, (result.error, processes.logs())
            attempts = await store.query_attempts(result.rollout.rollout_id)
            succeeded = [a for a in attempts if a.status == agl.AttemptStatus.SUCCEEDED]
            assert len(succeeded) == 1, attempts  # counted once, whatever was retried
            calls = extract_calls(result.spans)
            assert len(calls.calls) >= 2
            assert all(call.has_tokens for call in calls.calls), calls
        assert sorted(result.reward or 0.0 for result in results) == [t / 10 for t in tasks]
        # runner-0 went on through another server: it claimed, or finished, rollouts after the
        # kill (every store call it made then went to a server still alive).
        worked_after = [
            attempt
            for result in results
            for attempt in result.attempts
            if attempt.worker_id == "runner-0"
            and max(attempt.start_time, attempt.end_time or 0.0) > killed_at
        ]
        assert worked_after, processes.logs()


@pytest.mark.timeout(480)  # five processes start: minutes on a loaded machine
async def test_a_trainer_over_three_store_servers_finishes_when_one_is_killed(
    tmp_path: Path, processes: Processes, postgres: PostgresServer
) -> None:
    db = postgres.create_database("trainer_three_servers")
    ports = [free_port() for _ in range(3)]
    servers = [
        await processes.store_server(f"store-{i}", db=db, port=port) for i, port in enumerate(ports)
    ]
    url = ",".join(f"http://127.0.0.1:{port}" for port in ports)
    module = write_agent(tmp_path, "sleepy", SLEEPY_AGENT).split(":")[0]
    sys.path.insert(0, str(tmp_path))
    try:
        agent = importlib.import_module(module).agent
        # Two runner processes (the pool starts runner i at server i) and the trainer (server 0).
        trainer = agl.Trainer(
            run_dir=tmp_path / "run", store=url, n_runners=2, concurrency=2, console=False
        )
        running = asyncio.ensure_future(trainer.dev_async(agent, list(range(16))))
        async with agl.open_store(spread(url, 2)) as watcher:

            async def some_succeeded() -> bool:
                stats = await watcher.statistics()
                return stats.rollouts_by_status[RolloutStatus.SUCCEEDED] >= 4

            await processes.until(some_succeeded, "4 rollouts succeeded", 240)
            servers[0].process.kill()  # the trainer's and runner-0's first server
            servers[0].process.wait(timeout=30)
            stats = await watcher.statistics()
            assert stats.rollouts_by_status[RolloutStatus.SUCCEEDED] < 16  # killed mid-run
            result = await asyncio.wait_for(running, 120)
            assert [r.status for r in result.results] == [RolloutStatus.SUCCEEDED] * 16
            assert sorted(r.reward or 0.0 for r in result.results) == [t / 10 for t in range(16)]
            page = await watcher.query_rollouts(limit=100)
            assert page.total == 16  # nothing enqueued twice by a repeated request
            for rollout in page.rollouts:
                attempts = await watcher.query_attempts(rollout.rollout_id)
                assert [a.status for a in attempts].count(agl.AttemptStatus.SUCCEEDED) == 1
            workers = {w.worker_id for w in await watcher.query_workers() if w.num_claimed}
            assert len(workers) == 2, workers  # both runner processes claimed rollouts
    finally:
        sys.path.remove(str(tmp_path))
