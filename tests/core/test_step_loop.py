"""The training loop with rollouts and updates overlapping: ``LoopSettings(max_staleness=k)``.

A real run (Trainer, runners, gateway, SQLite store) against the scripted OpenAI-compatible
server, which names a weight version on every answer as agl-torch's policy server does; the
algorithm acts out an update by sleeping and then moving that version on. One task's agent is
slow (its first call comes at once, its second after a long pause): the long tail.
"""

from __future__ import annotations

import asyncio
import importlib
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import openai
import pytest

import agl
from agl.lightning import TransitionBuilder
from agl.testing.openai_server import OpenAIServer
from agl.testing.processes import write_agent

SLOW_SECONDS = 2.5
UPDATE_SECONDS = 0.3
TASKS: list[Any] = [{"delay": SLOW_SECONDS if i == 0 else 0.05, "task": i} for i in range(8)]
"""8 tasks, 2 a step: 4 steps. Task 0 (the first group of the first batch) is the slow one."""


@agl.rollout
async def tailed(task: dict[str, Any], llm: agl.LLM, rollout: agl.Rollout) -> float:
    client = openai.AsyncOpenAI(base_url=llm.endpoint, api_key="-", max_retries=0)
    async with client:
        for turn in ("first", "second"):
            await client.chat.completions.create(
                model=llm.model, messages=[{"role": "user", "content": turn}]
            )
            if turn == "first":
                await asyncio.sleep(task["delay"])
    return float(rollout.metadata["sample"])  # 0 and 1: every group has something to learn


@dataclass
class Seen:
    step: int
    version: int
    lags: list[int]
    groups: set[str]
    update: tuple[float, float]


class ActedUpdates(agl.StepAlgorithm):
    """Trains nothing; records what each step got, and names a new weight version after each
    update (which takes ``UPDATE_SECONDS``)."""

    name = "acted"

    def __init__(self, server: OpenAIServer, loop: agl.LoopSettings) -> None:
        self.server = server
        self.loop = loop
        self.transitions = TransitionBuilder(advantage="grpo")
        self.seen: list[Seen] = []

    async def setup(self, ctx: agl.AlgorithmContext) -> Mapping[str, agl.Resource]:
        self.server.weight_version = 0
        return {"llm": await ctx.serve_llm([self.server.url], "policy")}

    def policy_version(self) -> int | None:
        return self.server.weight_version

    async def step(self, ctx: agl.AlgorithmContext, batch: agl.StepBatch) -> dict[str, Any]:
        version = self.server.weight_version
        assert version is not None
        assert batch.transitions is not None
        started = time.time()
        await asyncio.sleep(UPDATE_SECONDS)
        self.server.weight_version = version + 1
        self.seen.append(
            Seen(
                batch.step,
                version,
                [version - (t.weight_version or 0) for t in batch.transitions],
                {t.group_id for t in batch.transitions},
                (started, time.time()),
            )
        )
        return {}


@pytest.fixture(scope="module")
def server() -> Iterator[OpenAIServer]:
    with OpenAIServer() as running:
        yield running


def fit(server: OpenAIServer, run_dir: Path, **loop: Any) -> tuple[ActedUpdates, agl.FitResult]:
    settings = agl.LoopSettings(batch_size=2, n_samples=2, **loop)
    algorithm = ActedUpdates(server, settings)
    trainer = agl.Trainer(algorithm, run_dir=run_dir, console=False, progress=False, plot=False)
    return algorithm, trainer.fit(tailed, TASKS)


def stale_drops(result: agl.FitResult) -> float:
    return sum(row.get("transitions/dropped/stale", 0.0) for row in result.history)


def test_synchronous_steps_train_their_own_batch_on_fresh_weights(
    server: OpenAIServer, tmp_path: Path
) -> None:
    algorithm, result = fit(server, tmp_path)
    assert [seen.step for seen in algorithm.seen] == [1, 2, 3, 4]
    for seen in algorithm.seen:
        assert set(seen.lags) == {0}
        assert seen.groups == {f"step{seen.step}-task0", f"step{seen.step}-task1"}
    assert stale_drops(result) == 0


def test_staleness_one_overlaps_and_never_trains_older_data(
    server: OpenAIServer, tmp_path: Path
) -> None:
    algorithm, result = fit(server, tmp_path, max_staleness=1)
    steps = algorithm.seen
    assert [seen.step for seen in steps] == [1, 2, 3, 4]
    # Staleness never exceeds k, checked on the version every trained transition recorded.
    assert all(0 <= lag <= 1 for seen in steps for lag in seen.lags)
    assert max(lag for seen in steps for lag in seen.lags) == 1
    # The slow group did not hold step 1 up: it trained on a group launched for step 2.
    assert "step2-task0" in steps[0].groups or "step2-task1" in steps[0].groups
    # The slow group made its first call on version 0 and finished after 3 updates: it is
    # dropped whole and counted, not trained.
    assert all("step1-task0" not in seen.groups for seen in steps)
    assert stale_drops(result) == 4  # 2 rollouts x 2 calls
    rows = [row for row in result.history if "staleness/max" in row]
    assert [row["staleness/max"] for row in rows] == [float(max(s.lags)) for s in steps]
    # Rollouts ran while updates ran: the slow rollouts started before the first update and
    # finished after it.
    store_rollouts = asyncio.run(_slow_rollout_times(result.store_url))
    first_update = steps[0].update
    assert all(start < first_update[0] and end > first_update[1] for start, end in store_rollouts)


async def _slow_rollout_times(url: str) -> list[tuple[float, float]]:
    async with agl.open_store(url) as store:
        page = await store.query_rollouts(limit=1000)
        slow = [r for r in page.rollouts if r.metadata.get("group_id") == "step1-task0"]
        assert len(slow) == 2
        return [(r.start_time or 0.0, r.end_time or 0.0) for r in slow]


def test_the_bound_is_checked_against_each_algorithms_version(
    server: OpenAIServer, tmp_path: Path
) -> None:
    # With k=3 nothing in this run is too old: the slow group is trained at the last step.
    algorithm, result = fit(server, tmp_path, max_staleness=3)
    assert "step1-task0" in algorithm.seen[-1].groups
    assert max(lag for seen in algorithm.seen for lag in seen.lags) == 3
    assert stale_drops(result) == 0


def test_max_staleness_is_checked() -> None:
    with pytest.raises(agl.InvalidInputError, match="max_staleness"):
        agl.LoopSettings(max_staleness=-1)
    with pytest.raises(agl.InvalidInputError, match="max_staleness"):
        agl.LoopSettings(max_staleness=1.5)  # type: ignore[arg-type]


MARKING_AGENT = """
    import asyncio
    import os
    from pathlib import Path

    import openai

    import agl


    @agl.rollout
    async def agent(task, llm, rollout):
        marks = Path(task["marks"])
        (marks / f"{os.getpid()}-{rollout.rollout_id}").touch()  # this runner is on it now
        client = openai.AsyncOpenAI(base_url=llm.endpoint, api_key="-", max_retries=0)
        async with client:
            await client.chat.completions.create(
                model=llm.model, messages=[{"role": "user", "content": "go"}]
            )
        await asyncio.sleep(task["delay"])
        return float(rollout.metadata["sample"])
"""


def test_a_runner_killed_mid_rollout_with_overlap_is_retried_and_trained_once(
    server: OpenAIServer, tmp_path: Path
) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    module = write_agent(tmp_path, "marking", MARKING_AGENT).split(":")[0]
    sys.path.insert(0, str(tmp_path))
    try:
        agent = importlib.import_module(module).agent
        settings = agl.LoopSettings(batch_size=2, n_samples=2, max_staleness=1)
        algorithm = ActedUpdates(server, settings)
        config = agl.RolloutConfig(
            unresponsive_seconds=2.0,
            max_attempts=3,
            retry_on=frozenset({agl.AttemptStatus.UNRESPONSIVE}),
        )
        trainer = agl.Trainer(
            algorithm,
            run_dir=tmp_path / "run",
            n_runners=2,
            concurrency=4,
            rollout_config=config,
            console=False,
            progress=False,
            plot=False,
        )
        killed: list[int] = []

        def kill_the_first_runner_seen_at_work() -> None:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not killed:
                for mark in marks.iterdir():
                    pid = int(mark.name.split("-")[0])
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
                    break
                time.sleep(0.05)

        killer = threading.Thread(target=kill_the_first_runner_seen_at_work)
        killer.start()
        tasks = [{"delay": 1.0, "marks": str(marks)} for _ in range(6)]
        result = trainer.fit(agent, tasks)
        killer.join()
    finally:
        sys.path.remove(str(tmp_path))
    assert killed
    assert result.totals["retried"] >= 1  # the killed runner's rollouts ran again elsewhere
    steps = algorithm.seen
    assert [seen.step for seen in steps] == [1, 2, 3]
    trained = [group for seen in steps for group in seen.groups]
    assert len(trained) == len(set(trained))  # no group trained twice
    assert all(0 <= lag <= 1 for seen in steps for lag in seen.lags)
