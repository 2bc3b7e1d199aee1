"""agentlightning 0.3.0's side of ``versus.py``: run with the python of the reference's own
environment (``versus.py`` makes it), never agl's. Standard library plus agentlightning.

``python _versus_ref.py INDEX``: a load-client process over the reference's
``LightningStoreClient`` (one client per concurrent task, kept from job to job), answering the
driver's jobs (``_versus_wire.py``): the same rows as ``_versus_agl.py``, through the
reference's own calls (``add_span``; ``add_many_spans``, which its client sends one span per
request; ``dequeue_rollout``; ``update_attempt``), and ``rollouts``: publish the LLM resource,
enqueue ``count`` rollouts and wait until they finish, checking each succeeded with at least
``extra["calls"]`` LLM-call spans.

``python _versus_ref.py runner STORE_URL``: one runner process (the reference's
``LitAgentRunner`` with its default tracer, ``AgentOpsTracer``, which instruments the openai
client) running ``four_calls`` one rollout at a time until terminated.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import sys
import time
from typing import Any

import agentlightning as agl  # type: ignore[import-not-found]
import openai
from agentlightning.store.client_server import (  # type: ignore[import-not-found]
    LightningStoreClient,
)
from agentlightning.types import EnqueueRolloutRequest, Span  # type: ignore[import-not-found]

from _versus_wire import Body, Check, Job, serve_jobs, until

_clients: dict[tuple[str, int], Any] = {}
_ids = itertools.count(1)


async def _client(url: str, task: int) -> Any:
    if (url, task) not in _clients:
        client = LightningStoreClient(url)
        await client.statistics()  # connect now, not on the clock
        _clients[url, task] = client
    return _clients[url, task]


def _span(rollout_id: str, attempt_id: str, sequence_id: int) -> Any:
    n = next(_ids)
    return Span.model_validate(
        {
            "rollout_id": rollout_id,
            "attempt_id": attempt_id,
            "sequence_id": sequence_id,
            "trace_id": f"{os.getpid():016x}{n:016x}",
            "span_id": f"{n:016x}",
            "parent_id": None,
            "name": "versus",
            "status": {"status_code": "OK"},
            "attributes": {"gen_ai.request.model": "m", "gen_ai.usage.input_tokens": 9},
            "events": [],
            "links": [],
            "start_time": time.time(),
            "end_time": time.time(),
            "context": None,
            "parent": None,
            "resource": {"attributes": {}, "schema_url": ""},
        }
    )


async def spans_row(job: Job, index: int) -> tuple[list[Body], Check]:
    owned: list[tuple[Any, str, str, list[list[Any]]]] = []
    for task in range(job.tasks):
        client = await _client(job.url, task)
        claim = await client.start_rollout(input=f"{job.row}-{index}-{task}")
        ids = claim.rollout_id, claim.attempt.attempt_id
        spans = [_span(*ids, sequence_id) for sequence_id in range(1, job.count + 1)]
        batches = [spans[i : i + job.batch] for i in range(0, len(spans), job.batch)]
        owned.append((client, *ids, batches))

    def body(client: Any, batches: list[list[Any]]) -> Body:
        async def send(batch: list[Any]) -> None:
            if job.row == "add_span":
                await client.add_span(batch[0])
            else:
                await client.add_many_spans(batch)

        async def run(deadline: float) -> int:
            sent = await until(deadline, batches, send)
            return sum(map(len, batches[:sent]))

        return run

    async def check(done: list[int]) -> dict[str, Any]:
        for (client, rollout_id, attempt_id, _), want in zip(owned, done, strict=True):
            stored = await client.query_spans(rollout_id, attempt_id)
            if len(stored) != want:
                raise RuntimeError(f"rollout {rollout_id}: {len(stored)} spans stored, {want} sent")
        return {}

    return [body(client, batches) for client, _, _, batches in owned], check


async def dequeue_row(job: Job, index: int) -> tuple[list[Body], Check]:
    enqueued: list[str] = []
    clients = [await _client(job.url, task) for task in range(job.tasks)]
    for client in clients:
        requests = [EnqueueRolloutRequest(input="dequeue") for _ in range(job.count)]
        enqueued += [r.rollout_id for r in await client.enqueue_many_rollouts(requests)]
    claimed: list[str] = []

    def body(client: Any) -> Body:
        worker = f"versus-{os.getpid()}"

        async def claim(_: int) -> None:
            got = await client.dequeue_rollout(worker_id=worker)
            if got is None:
                raise RuntimeError("dequeue_rollout returned nothing with rollouts waiting")
            claimed.append(got.rollout_id)

        async def run(deadline: float) -> int:
            return await until(deadline, list(range(job.count)), claim)

        return run

    async def check(done: list[int]) -> dict[str, Any]:
        return {"enqueued": enqueued, "claimed": claimed}

    return [body(client) for client in clients], check


async def update_row(job: Job, index: int) -> tuple[list[Body], Check]:
    owned: list[tuple[Any, list[tuple[str, str]]]] = []
    for task in range(job.tasks):
        client = await _client(job.url, task)
        tag = f"update-{index}-{task}"
        claims = [await client.start_rollout(input=tag) for _ in range(job.count)]
        owned.append((client, [(c.rollout_id, c.attempt.attempt_id) for c in claims]))
    wrong: list[str] = []

    def body(client: Any, attempts: list[tuple[str, str]]) -> Body:
        async def finish(ids: tuple[str, str]) -> None:
            attempt = await client.update_attempt(*ids, status="succeeded")
            if attempt.status != "succeeded":
                wrong.append(f"{ids}: {attempt.status}")

        async def run(deadline: float) -> int:
            return await until(deadline, attempts, finish)

        return run

    async def check(done: list[int]) -> dict[str, Any]:
        if wrong:
            raise RuntimeError(f"{len(wrong)} attempts not succeeded after the update: {wrong[0]}")
        return {}

    return [body(client, attempts) for client, attempts in owned], check


async def rollouts_row(job: Job, index: int) -> tuple[list[Body], Check]:
    """Enqueue ``count`` rollouts at once and wait (on the clock) until every one finished."""
    client = await _client(job.url, 0)
    llm = job.extra["llm"]
    await client.add_resources({"llm": agl.LLM(endpoint=llm, model="bench")})
    ids: list[str] = []

    async def run(deadline: float) -> int:
        requests = [EnqueueRolloutRequest(input=i, mode="train") for i in range(job.count)]
        ids.extend(r.rollout_id for r in await client.enqueue_many_rollouts(requests))
        finished: list[Any] = []
        while len(finished) < len(ids) and time.monotonic() < deadline:
            finished = await client.wait_for_rollouts(rollout_ids=ids, timeout=0.0)
            await asyncio.sleep(0.02)
        return len(finished)

    async def check(done: list[int]) -> dict[str, Any]:
        for rollout_id in ids:
            rollout = await client.get_rollout_by_id(rollout_id)
            if rollout is None or rollout.status != "succeeded":
                raise RuntimeError(f"rollout {rollout_id}: {rollout and rollout.status}")
            spans = await client.query_spans(rollout_id, "latest")
            calls = [s for s in spans if "chat" in s.name or "openai" in s.name]
            if len(calls) < job.extra["calls"]:
                names = sorted({s.name for s in spans})
                raise RuntimeError(f"rollout {rollout_id}: {len(calls)} LLM-call spans; {names}")
        return {}

    return [run], check


@agl.rollout
async def four_calls(task: Any, llm: Any) -> float:
    """Four chat calls with the openai client, each reply fed back; reward 1."""
    client = openai.AsyncOpenAI(base_url=llm.endpoint, api_key="unused", max_retries=0)
    messages: list[dict[str, str]] = [{"role": "user", "content": f"task {task}"}]
    for _ in range(4):
        response = await client.chat.completions.create(model=llm.model, messages=messages)  # type: ignore[arg-type]
        messages.append({"role": "assistant", "content": response.choices[0].message.content or ""})
        messages.append({"role": "user", "content": "and then?"})
    return 1.0


async def run_runner(url: str) -> None:
    """One runner, one rollout at a time, polling every 0.05 s when the queue is empty."""
    tracer = agl.AgentOpsTracer()
    runner = agl.LitAgentRunner(tracer, poll_interval=0.05, interval_jitter=0.0)
    runner.init(four_calls)
    runner.init_worker(os.getpid(), LightningStoreClient(url))
    print("ready", flush=True)
    while True:  # iter() returns when a poll finds nothing and no event is given
        await runner.iter(event=agl.ThreadingEvent())


if __name__ == "__main__":
    if sys.argv[1] == "runner":
        asyncio.run(run_runner(sys.argv[2]))
    else:
        serve_jobs(
            {
                "add_span": spans_row,
                "batched": spans_row,
                "dequeue": dequeue_row,
                "update": update_row,
                "rollouts": rollouts_row,
            }
        )
