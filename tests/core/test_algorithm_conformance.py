"""Core's algorithms pass the algorithm conformance suite, and so does one serving an LLM."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import agl
from agl import reward_metrics
from agl.testing.algorithm import AlgorithmConformance, llm_agent
from agl.testing.openai_server import OpenAIServer


class TestBaseline(AlgorithmConformance):
    plugin_name = "baseline"

    @pytest.fixture
    def algorithm_factory(self) -> Callable[[], agl.Algorithm]:
        return lambda: agl.Baseline(loop=agl.LoopSettings(n_epochs=2, batch_size=4))


class ServeAndSample(agl.Algorithm):
    """Serves the upstream model through the gateway and samples each task twice per step."""

    name = "serve-and-sample"

    def __init__(self, upstream: str, steps: int = 2) -> None:
        self.upstream = upstream
        self.steps = steps

    async def run(self, ctx: agl.AlgorithmContext) -> None:
        llm = await ctx.serve_llm([self.upstream], "policy", {"temperature": 0.7})
        for step in range(1, self.steps + 1):
            update = await ctx.publish({"llm": llm})
            results = await ctx.run_rollouts(ctx.train_tasks, n=2, resources_id=update.resources_id)
            ctx.log(step, reward_metrics(results))


class TestAlgorithmServingAnLLM(AlgorithmConformance):
    @pytest.fixture
    def algorithm_factory(self, openai_server: OpenAIServer) -> Callable[[], agl.Algorithm]:
        return lambda: ServeAndSample(openai_server.url)

    @pytest.fixture
    def agent(self) -> Any:
        return llm_agent()

    def test_the_agent_called_the_served_llm(
        self, fit: Any, algorithm_factory: Callable[[], agl.Algorithm], openai_server: OpenAIServer
    ) -> None:
        before = openai_server.request_count
        outcome = fit(algorithm_factory())
        assert openai_server.request_count - before == 2 * 2 * 8  # steps x samples x tasks
        rows = [row for row in outcome.result.history if "reward/mean" in row]
        assert [row["llm_calls/mean"] for row in rows] == [1.0, 1.0]
        assert rows[0]["reward/mean"] == pytest.approx(sum(x % 4 for x in range(8)) / 4 / 8)
