"""Faults, with real processes: runners killed or signalled mid-rollout, the store server killed
and restarted under its runners, and agents that hang, raise or return garbage.

Nothing is mocked. Runners are ``python -m agl runner`` subprocesses (one test also runs an
in-process :class:`agl.Runner`) whose agents are modules written into ``tmp_path``; the store
is ``agl store serve`` on a SQLite file or a :class:`~agl.store.StoreServer` thread, once
behind a TCP proxy that cuts the line at a chosen moment.
Each test asserts what the store holds afterwards, attempt by attempt, and what the runners
say they did, never how long anything took. Waits poll with deadlines and fail with the
children's logs.
"""

from __future__ import annotations

import asyncio
import importlib.util
import re
import signal
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import agl
from agl import AttemptStatus, RolloutConfig, RolloutRequest, RolloutStatus, Runner, Span, semconv
from agl._results import RolloutResult, fetch_results
from agl.store._serve import StoreServer
from agl.testing.openai_server import OpenAIServer, error_reply
from agl.testing.ports import free_port
from agl.testing.processes import OUTCOMES, Processes, runner_summary, write_agent

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


# --- child processes --------------------------------------------------------------------------


@pytest.fixture
def children(tmp_path: Path) -> Iterator[Processes]:
    with Processes(tmp_path) as started:
        yield started


def summary(**counts: int) -> dict[str, int]:
    return {name: counts.get(name, 0) for name in OUTCOMES}


async def result_of(store: agl.Store, rollout_id: str) -> RolloutResult:
    [result] = await fetch_results(store, [await store.get_rollout(rollout_id)])
    return result


def of_type(spans: list[Span], span_type: str) -> list[Span]:
    return [span for span in spans if span.attributes.get(semconv.AGL_SPAN_TYPE) == span_type]


# --- 1. kill -9 a runner mid-rollout --------------------------------------------------------

KILLED_AGENT = """
    import asyncio
    from pathlib import Path

    import agl
    from agl.tracing import current_binding


    @agl.rollout
    async def agent(task, attempt):
        if task["hang"] and attempt.sequence == 1:
            agl.emit_message("first try")
            agl.emit_reward(0.25)
            # These spans reach the store before the test is told to kill this process.
            await current_binding().tracer.sender.flush_async(10)
            (Path(__file__).parent / "hanging").touch()
            await asyncio.sleep(3600)
        agl.emit_message(f"try {attempt.sequence}")
        return 1.0 if task["hang"] else task["index"] / 10
"""


async def test_runner_killed_mid_rollout_is_retried_once_and_its_late_spans_change_nothing(
    tmp_path: Path, children: Processes
) -> None:
    agent = write_agent(tmp_path, "killed_agent", KILLED_AGENT)
    config = RolloutConfig(
        unresponsive_seconds=1.5, max_attempts=2, retry_on={AttemptStatus.UNRESPONSIVE}
    )
    with StoreServer(f"sqlite:///{tmp_path / 'store.db'}") as server:
        async with agl.open_store(server.url) as store:
            requests = [
                RolloutRequest(input={"hang": index == 0, "index": index}, config=config)
                for index in range(4)
            ]
            ids = [rollout.rollout_id for rollout in await store.enqueue_rollouts(requests)]
            hung = ids[0]

            # Runner A claims the first rollout (FIFO, one at a time) and hangs in it.
            runner_a = children.runner("runner-a", server.url, agent, "--concurrency", "1")
            await children.until(
                (tmp_path / "hanging").exists, "the first attempt to hang", 30, runner_a
            )
            [first] = await store.query_attempts(hung)
            assert (first.sequence, first.status, first.worker_id) == (
                1,
                AttemptStatus.RUNNING,
                "runner-a",
            )
            runner_a.process.kill()  # kill -9: no release, no last report, no flush
            assert runner_a.exit_code(10) == -signal.SIGKILL
            killed_at = time.time()
            for rollout_id in ids[1:]:
                assert (await store.get_rollout(rollout_id)).status == RolloutStatus.QUEUING

            # Runner B runs the three others, then the hung one once the store gives up on A.
            runner_b = children.runner(
                "runner-b", server.url, agent, "--concurrency", "4", "--max-rollouts", "4"
            )
            assert runner_b.exit_code(30) == 0, children.logs()
            assert runner_summary(runner_b) == summary(claimed=4, succeeded=4)

            rollouts = await store.wait_for_rollouts(ids, timeout=5)
            assert [rollout.status for rollout in rollouts] == [RolloutStatus.SUCCEEDED] * 4
            stats = await store.statistics()
            by_status = stats.rollouts_by_status
            final = (RolloutStatus.SUCCEEDED, RolloutStatus.FAILED, RolloutStatus.CANCELLED)
            assert sum(by_status[status] for status in final) == len(ids)
            assert by_status[RolloutStatus.SUCCEEDED] == len(ids)
            assert stats.attempts == 5

            # The hung rollout succeeded exactly once: attempt 1 unresponsive, attempt 2 ok.
            rollout = await store.get_rollout(hung)
            first, second = await store.query_attempts(hung)
            assert rollout.num_attempts == 2
            assert rollout.latest_attempt_id == second.attempt_id
            assert (first.status, first.worker_id) == (AttemptStatus.UNRESPONSIVE, "runner-a")
            assert first.reason == "no heartbeat for unresponsive_seconds=1.5"
            assert first.last_heartbeat_time is not None
            assert first.last_heartbeat_time <= killed_at
            assert first.end_time is not None
            assert first.end_time >= first.last_heartbeat_time + 1.5
            assert (second.sequence, second.status, second.worker_id) == (
                2,
                AttemptStatus.SUCCEEDED,
                "runner-b",
            )
            for rollout_id in ids[1:]:
                [only] = await store.query_attempts(rollout_id)
                assert (only.status, only.worker_id) == (AttemptStatus.SUCCEEDED, "runner-b")

            # What the dead attempt managed to send is stored, and ignored by the result.
            first_spans = await store.query_spans(hung, first.attempt_id)
            assert [span.name for span in first_spans] == ["agl.message", "agl.reward"]
            assert first_spans[1].attributes[semconv.AGL_REWARD] == 0.25
            second_spans = await store.query_spans(hung, second.attempt_id)
            assert [span.name for span in second_spans] == [
                "agl.message",
                "agl.reward",
                "agl.rollout agent",
            ]
            assert second_spans[0].attributes[semconv.AGL_MESSAGE] == "try 2"
            result = await result_of(store, hung)
            assert result.succeeded
            assert result.retried
            assert (result.rewards, result.reward, result.error) == ([1.0], 1.0, None)
            assert result.spans == second_spans
            others = await fetch_results(store, rollouts[1:])
            assert [other.reward for other in others] == [0.1, 0.2, 0.3]

            # The dead attempt's late spans arrive after the retry finished: they are filed
            # under attempt 1 and change neither the result nor attempt 2's spans.
            late = [
                Span.create(
                    rollout_id=hung,
                    attempt_id=first.attempt_id,
                    name="agl.reward",
                    attributes={
                        semconv.AGL_SPAN_TYPE: semconv.SPAN_TYPE_REWARD,
                        semconv.AGL_REWARD: 999.0,
                        semconv.AGL_REWARD_PRIMARY: "reward",
                    },
                ),
                Span.create(
                    rollout_id=hung,
                    attempt_id=first.attempt_id,
                    name="agl.rollout agent",
                    attributes={semconv.AGL_SPAN_TYPE: "rollout"},
                ),
            ]
            sequence_ids = await store.add_spans(late)
            assert min(sequence_ids) > max(span.sequence_id or 0 for span in second_spans)
            # Nor can its late report or heartbeat: the store ended that attempt.
            with pytest.raises(agl.ConflictError):
                await store.update_attempt(hung, first.attempt_id, status=AttemptStatus.SUCCEEDED)
            with pytest.raises(agl.ConflictError):
                await store.update_attempt(hung, first.attempt_id)

            assert await result_of(store, hung) == result
            assert await store.query_spans(hung, second.attempt_id) == second_spans
            assert await store.query_attempts(hung) == [first, second]
            assert await store.get_rollout(hung) == rollout
            after = await store.query_spans(hung, first.attempt_id)
            assert after[:2] == first_spans
            assert [span.sequence_id for span in after[2:]] == sequence_ids


# --- 2. restart the store server mid-run ----------------------------------------------------

STEADY_AGENT = """
    import asyncio

    import agl


    @agl.rollout
    async def agent(task):
        await asyncio.sleep(0.15)
        return task["index"] / 100
"""


@pytest.mark.slow  # two server and two runner start-ups: about 6 s
async def test_store_server_restarted_mid_run_loses_and_repeats_nothing(
    tmp_path: Path, children: Processes
) -> None:
    agent = write_agent(tmp_path, "steady_agent", STEADY_AGENT)
    db, port = tmp_path / "store.db", free_port()
    url = f"http://127.0.0.1:{port}"
    count = 40
    # A claim whose response died with the server would sit in 'preparing' forever: the
    # unresponsive limit hands it out again (released: it never started, so it uses up no try).
    # An attempt may also miss its heartbeats while the server is away (unresponsive); either
    # way the rollout is retried, and must still succeed only once.
    config = RolloutConfig(
        unresponsive_seconds=5, max_attempts=3, retry_on={AttemptStatus.UNRESPONSIVE}
    )
    server = await children.store_server("server-1", db=f"sqlite:///{db}", port=port)
    async with agl.open_store(url) as store:
        requests = [RolloutRequest(input={"index": i}, config=config) for i in range(count)]
        ids = [rollout.rollout_id for rollout in await store.enqueue_rollouts(requests)]
        runners = [
            children.runner(name, url, agent, "--concurrency", "4")
            for name in ("runner-a", "runner-b")
        ]

        async def some_succeeded() -> bool:
            stats = await store.statistics()
            return stats.rollouts_by_status[RolloutStatus.SUCCEEDED] >= 8

        await children.until(some_succeeded, "8 rollouts to succeed", 30, *runners)
        before_kill = (await store.statistics()).rollouts_by_status[RolloutStatus.SUCCEEDED]
    server.process.kill()
    assert server.exit_code(10) == -signal.SIGKILL
    killed_at = time.time()
    assert before_kill < count, "the run finished before the server could be killed"

    await asyncio.sleep(0.3)  # the runners meet a dead port for a moment
    assert all(runner.alive() for runner in runners), children.logs()
    await children.store_server("server-2", db=f"sqlite:///{db}", port=port)

    async with agl.open_store(url) as store:

        async def all_final() -> bool:
            page = await store.query_rollouts(
                status=[RolloutStatus.SUCCEEDED, RolloutStatus.FAILED, RolloutStatus.CANCELLED],
                limit=count,
            )
            return page.total == count

        await children.until(all_final, "every rollout to finish", 60, *runners)

        async def reconnected() -> bool:
            workers = {worker.worker_id: worker for worker in await store.query_workers()}
            return all(
                name in workers and workers[name].last_seen_time > killed_at
                for name in ("runner-a", "runner-b")
            )

        await children.until(reconnected, "both runners to reach the new server", 30, *runners)

        succeeded_by: dict[str, int] = {}
        across_the_outage = 0
        for rollout_id in ids:
            rollout = await store.get_rollout(rollout_id)
            attempts = await store.query_attempts(rollout_id)
            across_the_outage += sum(
                1
                for attempt in attempts
                if attempt.start_time < killed_at < (attempt.end_time or 0)
            )
            statuses = [attempt.status for attempt in attempts]
            outcomes = [(attempt.status.value, attempt.reason) for attempt in attempts]
            assert rollout.status == RolloutStatus.SUCCEEDED, outcomes
            assert statuses.count(AttemptStatus.SUCCEEDED) == 1, (rollout_id, attempts)
            # Anything before the success was given up on by the store, never failed.
            assert statuses[-1] == AttemptStatus.SUCCEEDED
            assert set(statuses[:-1]) <= {AttemptStatus.UNRESPONSIVE, AttemptStatus.RELEASED}
            assert rollout.num_attempts == len(attempts)
            assert rollout.latest_attempt_id == attempts[-1].attempt_id
            worker = attempts[-1].worker_id
            assert worker in ("runner-a", "runner-b")
            succeeded_by[worker] = succeeded_by.get(worker, 0) + 1
        by_status = (await store.statistics()).rollouts_by_status
        assert by_status[RolloutStatus.SUCCEEDED] == count
        assert by_status[RolloutStatus.FAILED] == by_status[RolloutStatus.CANCELLED] == 0
        # Some attempts were running when the server died and reported to its successor.
        assert across_the_outage >= 1
        found = await fetch_results(store, (await store.query_rollouts(limit=count)).rollouts)
        assert [result.reward for result in found] == [i / 100 for i in range(count)]

    # The runners rode the outage out; SIGTERM stops them cleanly.
    assert all(runner.alive() for runner in runners), children.logs()
    for runner in runners:
        runner.process.send_signal(signal.SIGTERM)
    for runner in runners:
        assert runner.exit_code(10) == 0, runner.log()
        done = runner_summary(runner)
        assert done["succeeded"] == succeeded_by.get(runner.name, 0), runner.log()
        assert done["claimed"] == done["succeeded"] + done["abandoned"], runner.log()
        assert done["failed"] == done["timed_out"] == done["released"] == 0, runner.log()


class LineCutter:
    """A TCP proxy to a store server that cuts the line right after it forwards a claim.

    Once a dequeue response carrying a claim has passed to the client, every connection is
    closed and new ones are refused (the port is closed) until :meth:`restore`: to the runner
    it is exactly as if the server died the moment it handed out the rollout.
    """

    CLAIM = re.compile(rb'"claims":\s*\[\s*\{')

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.cut = threading.Event()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="line-cutter")
        self._listener: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    def __enter__(self) -> LineCutter:
        self._thread.start()
        self.restore()
        return self

    def __exit__(self, *exc_info: object) -> None:
        asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    def restore(self) -> None:
        """Listen again, forwarding everything (the next claim cuts the line again)."""
        self.cut.clear()
        asyncio.run_coroutine_threadsafe(self._listen(), self._loop).result(10)

    async def _listen(self) -> None:
        self._listener = await asyncio.start_server(
            self._connect, "127.0.0.1", self.port, reuse_address=True
        )

    async def _cut(self) -> None:
        self.cut.set()
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        for writer in self._writers:
            writer.close()  # what was written before is still flushed
        self._writers.clear()

    async def _shutdown(self) -> None:
        await self._cut()
        tasks = asyncio.all_tasks() - {asyncio.current_task()}
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _connect(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.cut.is_set():
            writer.close()
            return
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        self._writers |= {writer, up_writer}
        await asyncio.gather(
            self._pipe(reader, up_writer, watch=False), self._pipe(up_reader, writer, watch=True)
        )

    async def _pipe(
        self, source: asyncio.StreamReader, sink: asyncio.StreamWriter, *, watch: bool
    ) -> None:
        try:
            while data := await source.read(65536):
                sink.write(data)
                await sink.drain()
                if watch and self.CLAIM.search(data) and not self.cut.is_set():
                    await self._cut()
        except (ConnectionError, RuntimeError):
            pass  # the line was cut under us
        finally:
            sink.close()


async def test_store_lost_right_after_a_claim_does_not_fail_the_attempt(tmp_path: Path) -> None:
    """The store goes away between handing out a rollout and the runner starting it.

    The runner cannot report 'running' (it may skip that) nor read the resources; once the
    store is back the attempt must run and succeed: a store outage is not the agent failing,
    and must not use up one of the rollout's tries.
    """

    @agl.rollout
    async def agent(task: dict[str, Any]) -> float:
        return 1.0

    with StoreServer(f"sqlite:///{tmp_path / 'store.db'}") as server:
        port = int(server.url.rsplit(":", 1)[1])
        async with agl.open_store(server.url) as store:
            [rollout] = await store.enqueue_rollouts([RolloutRequest(input={"task": 1})])
            with LineCutter(port) as line:
                # Few client retries, so each store call gives up within a fraction of a second.
                async with agl.open_store(line.url, retries=1, timeout=5) as remote:
                    runner = Runner(
                        agent, remote, max_rollouts=1, poll_wait=0.2, handle_signals=False
                    )
                    running = asyncio.create_task(runner.run())
                    deadline = time.monotonic() + 10
                    while not line.cut.is_set():
                        assert time.monotonic() < deadline, "the runner never claimed"
                        assert not running.done()
                        await asyncio.sleep(0.01)
                    await asyncio.sleep(1.0)  # the outage: every call the runner makes fails
                    line.restore()
                    stats = await asyncio.wait_for(running, 30)

            [attempt] = await store.query_attempts(rollout.rollout_id)
            assert attempt.status == AttemptStatus.SUCCEEDED, attempt.reason
            assert (await store.get_rollout(rollout.rollout_id)).status == RolloutStatus.SUCCEEDED
            assert (stats.claimed, stats.succeeded, stats.failed) == (1, 1, 0)
            assert stats.store_errors >= 1


# --- 3. SIGTERM drains; a second one releases -----------------------------------------------

SIGNALLED_AGENT = """
    import asyncio
    from pathlib import Path

    import agl


    @agl.rollout
    async def agent(task, attempt):
        (Path(__file__).parent / f"{task['name']}-{attempt.sequence}.started").touch()
        if attempt.sequence == 1:
            await asyncio.sleep(task["seconds"])
        return 1.0
"""


async def test_second_sigterm_releases_the_attempt_for_another_runner(
    tmp_path: Path, children: Processes
) -> None:
    agent = write_agent(tmp_path, "signalled_agent", SIGNALLED_AGENT)
    with StoreServer("memory://") as server:
        async with agl.open_store(server.url) as store:
            [rollout] = await store.enqueue_rollouts(
                [RolloutRequest(input={"name": "slow", "seconds": 30})]  # max_attempts=1
            )
            rollout_id = rollout.rollout_id
            options = ("--concurrency", "1", "--drain-timeout", "30")
            runner = children.runner("runner-a", server.url, agent, *options)
            started = tmp_path / "slow-1.started"
            await children.until(started.exists, "the agent to start", 30, runner)
            assert (await store.get_rollout(rollout_id)).status == RolloutStatus.RUNNING

            runner.process.send_signal(signal.SIGTERM)
            await children.until(
                lambda: "SIGTERM: no new rollouts; finishing 1 running" in runner.log(),
                "the runner to start draining",
                10,
                runner,
            )
            assert runner.alive()  # draining: the agent has 30 s to go
            runner.process.send_signal(signal.SIGTERM)
            signalled = time.monotonic()
            assert runner.exit_code(10) == 0, runner.log()
            assert time.monotonic() - signalled < 5, runner.log()
            assert "second SIGTERM: releasing running rollouts now" in runner.log()
            assert runner_summary(runner) == summary(claimed=1, released=1)

            [attempt] = await store.query_attempts(rollout_id)
            assert (attempt.status, attempt.worker_id) == (AttemptStatus.RELEASED, "runner-a")
            assert attempt.reason == "the runner stopped before the attempt ended"
            rollout = await store.get_rollout(rollout_id)
            assert (rollout.status, rollout.num_attempts) == (RolloutStatus.REQUEUING, 1)

            # The released try did not use up the rollout's only one: another runner gets it.
            other = children.runner("runner-b", server.url, agent, "--max-rollouts", "1")
            assert other.exit_code(30) == 0, other.log()
            assert runner_summary(other) == summary(claimed=1, succeeded=1)
            first, second = await store.query_attempts(rollout_id)
            assert first == attempt
            assert (second.sequence, second.status, second.worker_id) == (
                2,
                AttemptStatus.SUCCEEDED,
                "runner-b",
            )
            result = await result_of(store, rollout_id)
            assert (result.status, result.reward, result.error) == (
                RolloutStatus.SUCCEEDED,
                1.0,
                None,
            )


async def test_sigterm_lets_a_short_rollout_finish_before_exiting(
    tmp_path: Path, children: Processes
) -> None:
    agent = write_agent(tmp_path, "signalled_agent", SIGNALLED_AGENT)
    with StoreServer("memory://") as server:
        async with agl.open_store(server.url) as store:
            [rollout] = await store.enqueue_rollouts(
                [RolloutRequest(input={"name": "short", "seconds": 0.5})]
            )
            options = ("--concurrency", "1", "--drain-timeout", "30")
            runner = children.runner("runner-a", server.url, agent, *options)
            started = tmp_path / "short-1.started"
            await children.until(started.exists, "the agent to start", 30, runner)
            runner.process.send_signal(signal.SIGTERM)
            assert runner.exit_code(10) == 0, runner.log()
            assert "SIGTERM: no new rollouts; finishing 1 running" in runner.log()
            assert runner_summary(runner) == summary(claimed=1, succeeded=1)

            [attempt] = await store.query_attempts(rollout.rollout_id)
            assert (attempt.status, attempt.worker_id) == (AttemptStatus.SUCCEEDED, "runner-a")
            result = await result_of(store, rollout.rollout_id)
            assert (result.status, result.reward) == (RolloutStatus.SUCCEEDED, 1.0)


# --- 4. bad agents through a real runner ----------------------------------------------------

MISBEHAVING_AGENT = """
    import asyncio

    import openai

    import agl


    @agl.rollout
    async def agent(task, llm):
        kind = task["kind"]
        if kind == "hang":
            await asyncio.sleep(3600)
        elif kind == "raise":
            agl.emit_message("about to fail")
            raise ValueError(f"no answer for {task['question']!r}")
        elif kind == "string":
            return "forty-two"
        elif kind == "llm":
            client = openai.AsyncOpenAI(base_url=llm.endpoint, api_key="x", max_retries=0)
            async with client:
                await client.chat.completions.create(
                    model=llm.model, messages=[{"role": "user", "content": task["question"]}]
                )
        return 1.0
"""

KINDS = ("hang", "ok", "raise", "string", "llm", "ok2")
OVERLOADED = "the engine is overloaded"


@pytest.fixture
def failing_llm() -> Iterator[OpenAIServer]:
    """An OpenAI-compatible server that answers every call with a 503."""
    with OpenAIServer(lambda _: error_reply(503, OVERLOADED)) as server:
        yield server


async def enqueue_misbehaving(store: agl.Store, llm: OpenAIServer) -> list[str]:
    """Publish the LLM; queue a rollout per misbehaviour, and good ones (one after the hang)."""
    await store.add_resources({"llm": agl.LLM(endpoint=llm.url, model="agl-test-model")})
    requests = [
        RolloutRequest(
            input={"kind": kind, "question": "why?"},
            config=RolloutConfig(timeout_seconds=0.5) if kind == "hang" else RolloutConfig(),
        )
        for kind in KINDS
    ]
    return [rollout.rollout_id for rollout in await store.enqueue_rollouts(requests)]


async def check_misbehaving(store: agl.Store, ids: list[str], llm: OpenAIServer) -> None:
    """Each misbehaviour ended its own attempt, with a reason, and the good rollouts ran."""
    named = zip(KINDS, ids, strict=True)
    results = {kind: await result_of(store, rollout_id) for kind, rollout_id in named}
    for kind, result in results.items():
        assert len(result.attempts) == 1, (kind, result.attempts)
    attempt = {kind: result.attempts[0] for kind, result in results.items()}

    for kind in ("ok", "ok2"):
        assert (results[kind].status, results[kind].reward) == (RolloutStatus.SUCCEEDED, 1.0)
    # The runner kept serving after the hung rollout: the next one started once it ended.
    assert attempt["hang"].end_time is not None
    assert attempt["ok"].start_time >= attempt["hang"].end_time

    hang = results["hang"]
    assert (hang.status, attempt["hang"].status) == (RolloutStatus.FAILED, AttemptStatus.TIMEOUT)
    assert "timeout_seconds=0.5" in str(attempt["hang"].reason)
    [timeout_span] = of_type(hang.spans, semconv.SPAN_TYPE_EXCEPTION)
    assert timeout_span.events[0].attributes["exception.type"] == "TimeoutError"

    raised = results["raise"]
    assert (raised.status, attempt["raise"].status) == (RolloutStatus.FAILED, AttemptStatus.FAILED)
    assert attempt["raise"].reason == "ValueError: no answer for 'why?'"
    assert raised.error == "failed: ValueError: no answer for 'why?'"
    [message] = of_type(raised.spans, semconv.SPAN_TYPE_MESSAGE)
    assert message.attributes[semconv.AGL_MESSAGE] == "about to fail"
    [exception] = of_type(raised.spans, semconv.SPAN_TYPE_EXCEPTION)
    assert exception.status.code == agl.StatusCode.ERROR
    assert exception.status.description == "ValueError: no answer for 'why?'"
    [event] = [event for event in exception.events if event.name == "exception"]
    assert event.attributes["exception.type"] == "ValueError"
    assert event.attributes["exception.message"] == "no answer for 'why?'"

    assert attempt["string"].status == AttemptStatus.FAILED
    assert str(attempt["string"].reason).startswith("agent returned 'forty-two' (str)")
    assert results["string"].reward is None
    assert len(of_type(results["string"].spans, semconv.SPAN_TYPE_EXCEPTION)) == 1

    assert attempt["llm"].status == AttemptStatus.FAILED
    reason = str(attempt["llm"].reason)
    assert reason.startswith("InternalServerError: Error code: 503"), reason
    assert OVERLOADED in reason
    [exception] = of_type(results["llm"].spans, semconv.SPAN_TYPE_EXCEPTION)
    assert exception.events[0].attributes["exception.type"] == "openai.InternalServerError"
    calls = [request for request in llm.requests if request.path == "/v1/chat/completions"]
    assert len(calls) == 1  # max_retries=0: the failure is the agent's, not retried
    assert calls[0].body["messages"] == [{"role": "user", "content": "why?"}]

    stats = await store.statistics()
    assert stats.rollouts_by_status[RolloutStatus.SUCCEEDED] == 2
    assert stats.rollouts_by_status[RolloutStatus.FAILED] == 4


async def test_misbehaving_agents_fail_their_attempts_not_the_runner_process(
    tmp_path: Path, children: Processes, failing_llm: OpenAIServer
) -> None:
    agent = write_agent(tmp_path, "misbehaving_agent", MISBEHAVING_AGENT)
    with StoreServer(f"sqlite:///{tmp_path / 'store.db'}") as server:
        async with agl.open_store(server.url) as store:
            ids = await enqueue_misbehaving(store, failing_llm)
            options = ("--concurrency", "1", "--max-rollouts", str(len(ids)))
            runner = children.runner("runner", server.url, agent, *options)
            assert runner.exit_code(60) == 0, runner.log()
            assert runner_summary(runner) == summary(claimed=6, succeeded=2, failed=3, timed_out=1)
            await check_misbehaving(store, ids, failing_llm)


async def test_misbehaving_agents_in_an_in_process_runner(
    tmp_path: Path, failing_llm: OpenAIServer
) -> None:
    path = tmp_path / "misbehaving_in_process.py"
    path.write_text(textwrap.dedent(MISBEHAVING_AGENT))
    spec = importlib.util.spec_from_file_location("agl_test_misbehaving_in_process", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    agent: Any = module.agent

    async with agl.open_store(f"sqlite:///{tmp_path / 'store.db'}") as store:
        ids = await enqueue_misbehaving(store, failing_llm)
        runner = Runner(
            agent, store, concurrency=1, max_rollouts=len(ids), poll_wait=0.2, handle_signals=False
        )
        stats = await runner.run()
        assert (stats.claimed, stats.succeeded, stats.failed, stats.timed_out) == (6, 2, 3, 1)
        assert (stats.released, stats.abandoned, stats.store_errors) == (0, 0, 0)
        assert sorted(stats.reasons.values()) == [1, 1, 1, 1], stats.reasons
        reasons = sorted(stats.reasons)
        assert reasons[0].startswith("InternalServerError: Error code: 503")
        assert reasons[1] == "ValueError: no answer for 'why?'"
        assert reasons[2].startswith("agent returned 'forty-two' (str)")
        assert reasons[3] == "ran longer than timeout_seconds=0.5 and was cancelled"
        await check_misbehaving(store, ids, failing_llm)
