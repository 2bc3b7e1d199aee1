"""An agent written for Agent Lightning runs on agl with one import changed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import openai
import pytest

import agl
import agl.compat.agentlightning as al
from agl.testing.openai_server import OpenAIServer, echo


class Echoer(al.LitAgent[dict[str, Any]]):
    """Written as for Agent Lightning: *_async training, sync validation, get_base_url."""

    async def training_rollout_async(
        self, task: dict[str, Any], resources: dict[str, Any], rollout: Any
    ) -> float:
        llm = resources["main_llm"]
        base_url = llm.get_base_url(rollout.rollout_id, rollout.attempt.attempt_id)
        async with openai.AsyncOpenAI(base_url=base_url, api_key="-", max_retries=0) as client:
            reply = await client.chat.completions.create(
                model=llm.model, messages=[{"role": "user", "content": task["say"]}]
            )
        return 1.0 if reply.choices[0].message.content == f"ok: {task['say']}" else 0.0

    def validation_rollout(
        self, task: dict[str, Any], resources: dict[str, Any], rollout: Any
    ) -> float:
        assert rollout.mode == "val"
        return 0.5


@pytest.fixture(scope="module")
def server() -> Any:
    with OpenAIServer(echo) as running:
        yield running


def trainer(tmp_path: Path, server: OpenAIServer, **options: Any) -> al.Trainer:
    return al.Trainer(
        algorithm=options.pop("algorithm", agl.Baseline()),
        n_workers=1,
        initial_resources={"main_llm": al.LLM(endpoint=server.url, model="m")},
        run_dir=tmp_path / "run",
        console=False,
        plot=False,
        **options,
    )


def test_dev_and_fit_with_agent_lightnings_names(tmp_path: Path, server: OpenAIServer) -> None:
    tasks = [{"say": "hello"}, {"say": "there"}]
    result = trainer(tmp_path, server).dev(Echoer(), train_dataset=tasks)
    assert [r.reward for r in result.results] == [1.0, 1.0]
    fitted = trainer(tmp_path, server).fit(Echoer(), train_dataset=tasks, val_dataset=tasks[:1])
    assert fitted.last("reward/mean") == 1.0
    assert fitted.last("val/reward/mean") == 0.5  # the sync validation method


class _Recorder(agl.StepAlgorithm):
    name = "recorder"
    loop = agl.LoopSettings(batch_size=2)

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.transitions = agl.TransitionBuilder(drop_zero_variance=False)
        self.agents: set[str | None] = set()

    async def setup(self, ctx: agl.AlgorithmContext) -> dict[str, agl.Resource]:
        return {"main_llm": await ctx.serve_llm([self.upstream], "m")}

    async def step(self, ctx: agl.AlgorithmContext, batch: agl.StepBatch) -> None:
        assert batch.transitions is not None
        self.agents |= {t.agent for t in batch.transitions}


class TwoAgents(al.LitAgent[str]):
    async def rollout_async(self, task: str, resources: dict[str, Any], rollout: Any) -> float:
        llm = resources["main_llm"]
        async with openai.AsyncOpenAI(
            base_url=llm.get_base_url(), api_key="-", max_retries=0
        ) as client:
            for agent in ("sql_writer", "sql_checker", "sql_rewriter"):
                with agl.agent_span(agent):
                    await client.chat.completions.create(
                        model=llm.model, messages=[{"role": "user", "content": agent}]
                    )
        return 1.0


def test_trained_agents_selects_what_rl_trains(tmp_path: Path, server: OpenAIServer) -> None:
    recorder = _Recorder(server.url)
    run = al.Trainer(
        algorithm=recorder, n_workers=1, run_dir=tmp_path / "run", console=False, plot=False
    )
    run.fit(TwoAgents(trained_agents="sql_(writer|rewriter)"), train_dataset=["a", "b"])
    assert recorder.agents == {"sql_writer", "sql_rewriter"}


def test_an_agent_without_the_three_arguments_is_refused() -> None:
    class Wrong(al.LitAgent[str]):
        def rollout(self, task: str) -> float:  # type: ignore[override]
            return 1.0

    with pytest.raises(agl.InvalidInputError, match=r"must take \(task, resources, rollout\)"):
        al.Trainer(algorithm=agl.Baseline()).dev(Wrong(), train_dataset=["a"])
