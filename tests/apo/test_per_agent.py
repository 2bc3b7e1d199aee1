"""APO beside another algorithm in one run: ``{"writer": <RL stand-in>, "checker": "apo"}``.

The agents really call an LLM (agl's scripted OpenAI-compatible server, echoing) through the
OpenAI client, traced by agl's OpenAI instrumentation; the reward depends on what the checker's
LLM answered. APO, built by name with its defaults and configured from the environment, reads
only the checker's calls, and changes only the checker's prompt.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import openai
import pytest

import agl
from agl import LLM, PromptTemplate, Resource
from agl.store._memory import MemoryStore
from agl.testing.openai_server import OpenAIServer, echo


async def _ask(llm: LLM, text: str) -> str:
    async with openai.AsyncOpenAI(base_url=llm.endpoint, api_key="-", max_retries=0) as client:
        reply = await client.chat.completions.create(
            model=llm.model, messages=[{"role": "user", "content": text}]
        )
    return reply.choices[0].message.content or ""


@agl.rollout
async def pipeline(
    task: dict[str, Any], writer_llm: LLM, checker_llm: LLM, checker_prompt: PromptTemplate
) -> float:
    with agl.agent_span("writer"):
        await _ask(writer_llm, f"draft about {task['q']} #writer-only")
    with agl.agent_span("checker"):
        verdict = await _ask(checker_llm, checker_prompt.format(text=f"a draft on {task['q']}"))
    return sum(word in verdict.lower() for word in task["need"]) / len(task["need"])


class WriterRL(agl.StepAlgorithm):
    """A stand-in for RL on the writer: owns its LLM, changes the temperature every step."""

    name = "writer-rl"
    loop = agl.LoopSettings(batch_size=2, n_samples=1)

    def __init__(self, url: str) -> None:
        self.url = url
        self.temperatures: list[float] = []
        self.batches: list[agl.StepBatch] = []

    def llm(self, temperature: float) -> LLM:
        self.temperatures.append(temperature)
        return LLM(
            endpoint=self.url, model="writer", sampling_parameters={"temperature": temperature}
        )

    async def setup(self, ctx: agl.AlgorithmContext) -> dict[str, Resource]:
        return {"writer_llm": self.llm(1.0)}

    async def step(self, ctx: agl.AlgorithmContext, batch: agl.StepBatch) -> dict[str, Resource]:
        self.batches.append(batch)
        return {"writer_llm": self.llm(1.0 / (batch.step + 1))}


@pytest.fixture
def agents_llm() -> Iterator[OpenAIServer]:
    with OpenAIServer(echo) as server:
        yield server


def test_apo_optimizes_the_checker_while_rl_trains_the_writer(
    rig: Any, agents_llm: OpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGL_APO_BASE_URL", rig.server.url)
    monkeypatch.setenv("AGL_APO_MODEL", "optimizer")
    writer = WriterRL(agents_llm.url)
    seed = "Check this draft: {text}"
    resources = {
        "checker_llm": LLM(endpoint=agents_llm.url, model="checker"),
        "checker_prompt": PromptTemplate(template=seed),
    }
    train = rig.tasks("strict", "strict", "brief", "strict")
    val = rig.tasks("strict", "brief", "strict")

    async def session() -> tuple[agl.FitResult, list[agl.ResourcesUpdate]]:
        published: list[agl.ResourcesUpdate] = []

        class Recording(MemoryStore):
            async def add_resources(self, resources: Any, resources_id: Any = None) -> Any:
                update = await super().add_resources(resources, resources_id)
                published.append(update)
                return update

        async with Recording(poll_interval=0.01) as store:
            trainer = agl.Trainer(
                {"writer": writer, "checker": "apo"},
                store=store,
                run_dir=rig.tmp_path / "run",
                resources=resources,
                instrument=["openai"],
                progress=False,
                console=False,
                plot=False,
            )
            result = await trainer.fit_async(pipeline, train, val)
        return result, published

    result, published = asyncio.run(session())

    # APO ran its rounds on the writer's loop (2 steps of 2 tasks) and found the checker's words
    states = [r for u in published for r in u.resources.values() if r.type == "apo_state"]
    state = states[-1]
    assert state.resources == ["checker_prompt"]
    assert state.rounds == 2
    best = state.best_candidate()
    assert best is not None
    assert best.score == 1.0
    final = published[-1].resources
    assert final["checker_prompt"].template == best.templates["checker_prompt"] != seed  # type: ignore[attr-defined]
    # the writer's LLM changed only as the writer's algorithm changed it
    writer_versions = {
        u.resources["writer_llm"].sampling_parameters["temperature"]
        for u in published
        if "writer_llm" in u.resources
    }  # type: ignore[attr-defined]
    assert writer_versions == set(writer.temperatures)
    assert len(writer.batches) == 2
    # APO got the checker's calls only: each critique shows the checker's messages and the
    # LLM's replies, read from the traces, and nothing of the writer's
    critiques = rig.script.texts("critique")
    assert critiques
    for text in critiques:
        runs = rig.block(text, "runs")
        assert "by agent checker" in runs
        assert "[user] Check this draft: a draft on question" in runs
        assert "[reply] ok: Check this draft: a draft on question" in runs
        assert "#writer-only" not in text
        assert "by agent writer" not in text
    assert result.last("apo/calls") == 2.0  # PerAgent's count of the calls APO was given
    assert result.last("writer-rl/calls") == 2.0
    assert result.last("apo/best_score") == 1.0
    assert (result.run_dir / "apo" / "best_prompt.txt").exists()
    assert (result.run_dir / "apo" / "scores.png").exists()  # APO() plots by default
