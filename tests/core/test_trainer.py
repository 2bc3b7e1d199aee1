"""The trainer: fit and dev end to end, runner processes, the gateway on demand, metrics."""

from __future__ import annotations

import asyncio
import dataclasses
import io
import json
import socket
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import openai
import pytest
from rich.console import Console

import agl
import agl._train._metrics
import agl.lightning
from agl.testing.openai_server import OpenAIServer, echo


def console() -> tuple[Console, io.StringIO]:
    buffer = io.StringIO()
    return Console(file=buffer, width=200, force_terminal=False), buffer


@agl.rollout
async def scored(task: dict[str, Any]) -> float:
    await asyncio.sleep(0.005)
    if task["x"] < 0:
        raise ValueError(f"negative input {task['x']}")
    return task["x"] / 10


def test_fit_runs_every_batch_and_writes_metrics(tmp_path: Path) -> None:
    out, buffer = console()
    trainer = agl.Trainer(
        agl.Baseline(loop=agl.LoopSettings(n_epochs=2, batch_size=3)),
        run_dir=tmp_path / "run",
        console=out,
    )
    train = [{"x": x} for x in (1, 2, 3, 4, -1, 5)]
    result = trainer.fit(scored, train, val_dataset=[{"x": 9}])

    assert result.totals == {
        "rollouts": 14, "succeeded": 12, "failed": 2, "cancelled": 0, "retried": 0,
        "timed_out": 0,
    }  # fmt: skip
    rows = agl.read_metrics(tmp_path / "run")
    train_rows = [row for row in rows if "reward/mean" in row]
    assert [row["step"] for row in train_rows] == [1, 2, 3, 4]
    assert train_rows[0]["reward/mean"] == pytest.approx(0.2)  # (0.1 + 0.2 + 0.3) / 3
    assert train_rows[1]["reward/mean"] == pytest.approx(0.3)  # (0.4 + 0 + 0.5) / 3, one failed
    assert train_rows[1]["rollouts/failed"] == 1  # a count
    assert train_rows[1]["rollouts/success_rate"] == pytest.approx(2 / 3)  # a fraction
    val_rows = [row for row in rows if "val/reward/mean" in row]
    assert [(row["step"], row["val/reward/mean"]) for row in val_rows] == [(0, 0.9), (4, 0.9)]
    assert (tmp_path / "run" / "metrics.csv").exists()
    png = tmp_path / "run" / "reward.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert result.last("reward/mean") == pytest.approx(0.3)
    text = buffer.getvalue()
    assert "agl run summary" in text
    assert "14 (12 succeeded, 2 failed" in text
    assert f"agl rollouts list --store sqlite:///{tmp_path}/run/store.db" in text


@agl.rollout
async def sometimes_hangs(task: dict[str, Any]) -> float:
    if task["x"] < 0:
        await asyncio.sleep(3600)
    return 1.0


def test_a_step_timeout_cancels_what_has_not_finished_and_the_run_goes_on(
    tmp_path: Path,
) -> None:
    algorithm = agl.Baseline(loop=agl.LoopSettings(batch_size=3))
    algorithm.loop = dataclasses.replace(algorithm.loop, step_timeout=1.0)
    out, buffer = console()
    trainer = agl.Trainer(algorithm, run_dir=tmp_path / "run", console=out)

    result = trainer.fit(sometimes_hangs, [{"x": 1}, {"x": -1}, {"x": 2}, {"x": 3}])

    assert result.totals["timed_out"] == 1
    assert result.totals["cancelled"] == 1
    assert result.totals["succeeded"] == 3
    rows = [row for row in agl.read_metrics(tmp_path / "run") if "reward/mean" in row]
    assert [row["step"] for row in rows] == [1, 2]
    assert rows[0]["rollouts/failed"] == 1
    assert rows[0]["time/rollout_s"] < 30
    assert "1 past the step timeout" in buffer.getvalue()


def test_the_default_store_keeps_every_trace(tmp_path: Path) -> None:
    result = agl.Trainer(run_dir=tmp_path / "run", console=False).fit(scored, [{"x": 3}])
    assert result.store_url == f"sqlite:///{tmp_path}/run/store.db"

    async def read() -> list[agl.Rollout]:
        async with agl.open_store(result.store_url) as store:
            return (await store.query_rollouts()).rollouts

    [rollout] = asyncio.run(read())
    assert (rollout.input, rollout.status) == ({"x": 3}, agl.RolloutStatus.SUCCEEDED)


def test_a_run_writes_its_step_metrics_into_its_store(tmp_path: Path) -> None:
    trainer = agl.Trainer(
        agl.Baseline(loop=agl.LoopSettings(n_epochs=1, batch_size=2)),
        run_dir=tmp_path / "run-7",
        console=False,
        plot=False,
    )
    result = trainer.fit(scored, [{"x": x} for x in (1, 2, 3, -1)], val_dataset=[{"x": 9}])

    async def read() -> tuple[list[str], list[agl.MetricsRow]]:
        async with agl.open_store(result.store_url) as store:
            return await store.metric_runs(), (await store.query_metrics(run="run-7")).rows

    runs, rows = asyncio.run(read())
    assert runs == ["run-7"]  # the run directory's name
    logged = agl.read_metrics(tmp_path / "run-7")
    assert [(row.step, row.values) for row in rows] == [
        (record["step"], {k: v for k, v in record.items() if k not in ("step", "time")})
        for record in logged
    ]
    assert [row.step for row in rows if "reward/mean" in row.values] == [1, 2]
    assert rows[0].values["val/reward/mean"] == pytest.approx(0.9)  # validation before step 1


def test_a_store_that_refuses_metrics_does_not_stop_training(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    class Refusing(agl.store.MemoryStore):
        async def add_metrics(self, rows: Any, *, request_id: str | None = None) -> None:
            raise agl.StoreUnavailableError("store at http://nowhere unreachable")

    trainer = agl.Trainer(
        agl.Baseline(loop=agl.LoopSettings(batch_size=1)),
        store=Refusing(),
        run_dir=tmp_path / "run",
        console=False,
        plot=False,
    )
    with caplog.at_level("WARNING", logger="agl._train._store_metrics"):
        result = trainer.fit(scored, [{"x": 1}, {"x": 2}, {"x": 3}])
    assert [row["step"] for row in result.history] == [1, 2, 3]
    assert len(agl.read_metrics(tmp_path / "run")) == 3
    warnings = [r for r in caplog.records if r.name == "agl._train._store_metrics"]
    assert len(warnings) == 1  # once a run, not once a step
    assert "unreachable" in warnings[0].getMessage()
    assert "training goes on" in warnings[0].getMessage()


def test_fit_reads_a_jsonl_dataset(tmp_path: Path) -> None:
    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps({"x": x}) + "\n" for x in range(4)))
    result = agl.Trainer(run_dir=tmp_path / "run", console=False).fit(scored, str(data))
    assert result.last("reward/mean") == pytest.approx(0.15)


def test_dev_prints_each_rollout(tmp_path: Path) -> None:
    out, buffer = console()
    trainer = agl.Trainer(run_dir=tmp_path / "dev", console=out, store="memory://")
    result = trainer.dev(scored, [{"x": 2}, {"x": -3}])
    assert [r.reward for r in result.results] == [0.2, None]
    assert result.results[1].error == "failed: ValueError: negative input -3"
    text = buffer.getvalue()
    assert "agl dev" in text
    assert "ValueError: negative input -3" in text
    for r in result.results:
        assert r.rollout.rollout_id in text


@agl.rollout
async def two_agents(task: str, llm: agl.LLM) -> float:
    async with openai.AsyncOpenAI(base_url=llm.endpoint, api_key="-", max_retries=0) as client:
        for name in ("writer", "checker", "checker"):
            with agl.agent_span(name):
                await client.chat.completions.create(
                    model=llm.model, messages=[{"role": "user", "content": task}]
                )
    return 0.5


def test_dev_prints_llm_calls_per_agent_of_a_multi_agent_system(tmp_path: Path) -> None:
    out, buffer = console()
    with OpenAIServer() as server:
        trainer = agl.Trainer(
            run_dir=tmp_path,
            console=out,
            store="memory://",
            resources={"llm": agl.LLM(endpoint=server.url, model="m")},
            instrument=["openai"],
        )
        result = trainer.dev(two_agents, ["a", "b"])
    stats = agl.lightning.agent_stats(result.results)
    assert {agent: (s.calls, s.rollouts, s.mean_reward) for agent, s in stats.items()} == {
        "writer": (2, 2, 0.5),
        "checker": (4, 2, 0.5),
    }
    rows = [line.split() for line in buffer.getvalue().splitlines() if "writer" in line]
    assert ["│", "writer", "│", "2", "│", "2", "│", "0.500", "│"] in rows


@pytest.fixture
def agent_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    (tmp_path / "trainer_agents.py").write_text(
        textwrap.dedent(
            """
            import asyncio, os, pathlib, time
            import agl

            SEEN = pathlib.Path(__file__).with_name("pids")

            @agl.rollout
            async def where(task):
                # Each runner process leaves its pid; rollouts wait (up to 60 s) until two
                # processes have started, so one fast process cannot take every task.
                SEEN.mkdir(exist_ok=True)
                (SEEN / str(os.getpid())).touch()
                deadline = time.monotonic() + 60
                while len(list(SEEN.iterdir())) < 2 and time.monotonic() < deadline:
                    await asyncio.sleep(0.05)
                agl.emit_message(f"pid {os.getpid()}")
                return 1.0
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    import trainer_agents  # type: ignore[import-not-found]

    yield trainer_agents
    sys.modules.pop("trainer_agents", None)


def test_runner_processes_share_the_work(tmp_path: Path, agent_module: Any) -> None:
    trainer = agl.Trainer(run_dir=tmp_path / "run", n_runners=2, concurrency=4, console=False)
    result = trainer.dev(agent_module.where, [{"i": i} for i in range(24)])
    assert [r.reward for r in result.results] == [1.0] * 24
    pids = {
        span.attributes["agl.message"]
        for r in result.results
        for span in r.spans
        if span.attributes.get("agl.span.type") == "message"
    }
    assert len(pids) == 2  # both processes ran rollouts, and neither is this process
    assert f"pid {__import__('os').getpid()}" not in pids


class _ServeAndRun(agl.Algorithm):
    """Serves an LLM through the gateway, as a training algorithm does, and runs one batch."""

    name = "serve-and-run"

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.endpoint = ""

    async def run(self, ctx: agl.AlgorithmContext) -> None:
        llm = await ctx.serve_llm([self.upstream], "policy", {"temperature": 0.5})
        self.endpoint = llm.endpoint
        await ctx.publish({"llm": llm})
        results = await ctx.run_rollouts(ctx.train_tasks, n=2)
        ctx.log(1, agl.reward_metrics(results))


@agl.rollout
async def chatty(task: str, llm: agl.LLM) -> float:
    client = openai.AsyncOpenAI(base_url=llm.endpoint, api_key="unused", max_retries=0)
    async with client:
        for _ in range(3):
            await client.chat.completions.create(
                model="whatever", messages=[{"role": "user", "content": task}]
            )
    return 1.0


def test_the_gateway_starts_for_a_served_llm_and_stops_after(tmp_path: Path) -> None:
    with OpenAIServer() as upstream:
        upstream.script = echo
        algorithm = _ServeAndRun(upstream.url)
        result = agl.Trainer(algorithm, run_dir=tmp_path / "run", console=False).fit(
            chatty, ["hello", "world"]
        )
        assert "{rollout_id}" in algorithm.endpoint
        assert result.last("llm_calls/mean") == 3.0
        assert upstream.request_count == 12
        # enforce_resources: the model the LLM resource names reached the upstream
        assert {r.body["model"] for r in upstream.requests} == {"policy"}
    gateway = urlsplit(algorithm.endpoint)
    address = (gateway.hostname, gateway.port)
    with pytest.raises(ConnectionRefusedError), socket.create_connection(address, 1):
        pass  # the gateway is gone


def test_bad_arguments_are_refused_before_any_work(tmp_path: Path) -> None:
    with pytest.raises(agl.InvalidInputError, match="n_runners"):
        agl.Trainer(n_runners=0)
    with pytest.raises(agl.InvalidInputError, match=r"agl\.Algorithm"):
        agl.Trainer(algorithm=object())  # type: ignore[arg-type]
    trainer = agl.Trainer(run_dir=tmp_path / "run", console=False)
    with pytest.raises(agl.InvalidInputError, match="empty"):
        trainer.fit(scored, [])
    with pytest.raises(agl.AglError, match="first positional parameter"):
        trainer.fit(lambda: 1.0, [{"x": 1}])
    assert not (tmp_path / "run").exists()


def test_fit_inside_an_event_loop_points_to_fit_async(tmp_path: Path) -> None:
    trainer = agl.Trainer(run_dir=tmp_path / "run", console=False, store="memory://")

    async def inside() -> agl.FitResult:
        with pytest.raises(agl.AglError, match="fit_async"):
            trainer.fit(scored, [{"x": 1}])
        return await trainer.fit_async(scored, [{"x": 1}])

    assert asyncio.run(inside()).last("reward/mean") == pytest.approx(0.1)


class _Broken(agl.Algorithm):
    name = "broken"

    async def run(self, ctx: agl.AlgorithmContext) -> None:
        raise ValueError("the algorithm's own mistake")


def test_an_error_from_fit_is_the_first_thing_its_traceback_says(tmp_path: Path) -> None:
    import traceback

    trainer = agl.Trainer(_Broken(), run_dir=tmp_path / "run", console=False)
    with pytest.raises(ValueError, match="the algorithm's own mistake") as caught:
        trainer.fit(scored, [{"x": 1}])
    text = "".join(traceback.format_exception(caught.value))
    assert "no running event loop" not in text
    assert "During handling of the above exception" not in text


def test_runner_processes_without_the_server_extra_name_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib.util

    find_spec = importlib.util.find_spec

    def without_fastapi(name: str, *args: Any) -> Any:
        return None if name == "fastapi" else find_spec(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", without_fastapi)
    trainer = agl.Trainer(agl.Baseline(), n_runners=8, run_dir=tmp_path / "run", console=False)
    with pytest.raises(agl.AglError) as caught:
        trainer.fit(scored, [{"x": 1}])
    message = str(caught.value)
    assert "n_runners=8 serves the store to the runner processes over HTTP" in message
    assert "fastapi not installed" in message
    assert "pip install 'agl-core[server]'" in message


def test_the_trainer_and_the_store_have_one_unresponsive_default() -> None:
    from agl._rollouts import DEFAULT_UNRESPONSIVE_SECONDS
    from agl._train._trainer import DEFAULT_ROLLOUT_CONFIG

    assert DEFAULT_ROLLOUT_CONFIG.unresponsive_seconds == agl.RolloutConfig().unresponsive_seconds
    assert DEFAULT_UNRESPONSIVE_SECONDS == 300.0  # the README's "5 minutes unless you set it"
