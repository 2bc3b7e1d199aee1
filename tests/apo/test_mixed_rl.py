"""RL and APO in one run, both by name: ``{"writer": "lightningrl-torch", "checker": "apo"}``.

The writer calls the policy agl-torch serves (a tiny model built in code, through the gateway);
the checker calls a scripted echoing LLM with the prompt APO optimizes. One step: RL updates the
writer's weights from the writer's calls only, APO rewrites the checker's prompt from the
checker's calls only, and the run publishes both.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

import agl
from agl import LLM, PromptTemplate, read_metrics
from agl.store._memory import MemoryStore
from agl.testing.openai_server import OpenAIServer, echo


async def _ask(llm: LLM, text: str, **options: Any) -> str:
    async with openai.AsyncOpenAI(base_url=llm.endpoint, api_key="-", max_retries=0) as client:
        reply = await client.chat.completions.create(
            model=llm.model, messages=[{"role": "user", "content": text}], **options
        )
    return reply.choices[0].message.content or ""


@agl.rollout
async def pipeline(
    task: dict[str, Any], llm: LLM, checker_llm: LLM, checker_prompt: PromptTemplate
) -> float:
    with agl.agent_span("writer"):
        draft = await _ask(llm, f"write about {task['q']}", max_tokens=8)
    with agl.agent_span("checker"):
        verdict = await _ask(checker_llm, checker_prompt.format(text=f"a draft on {task['q']}"))
    checked = sum(word in verdict.lower() for word in task["need"]) / len(task["need"])
    # mostly the checker's verdict; a little for the writer's draft (its length, up to 32
    # characters), so the samples of a group differ and RL has something to learn from. (Its
    # word count was too coarse: a random tiny model's 8 tokens often hold no space, and one CI
    # run ended with no update, most likely because no group's rewards differed.)
    return 0.9 * checked + 0.1 * min(len(draft), 32) / 32


@pytest.fixture
def agents_llm() -> Iterator[OpenAIServer]:
    with OpenAIServer(echo) as server:
        yield server


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_rl_trains_the_writer_while_apo_optimizes_the_checker(
    rig: Any, agents_llm: OpenAIServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agl_torch.tiny import build_tiny_model

    model = build_tiny_model(tmp_path / "tiny-model", vocab_size=256)
    monkeypatch.setenv("AGL_TORCH_MODEL", str(model))
    monkeypatch.setenv("AGL_APO_BASE_URL", rig.server.url)
    monkeypatch.setenv("AGL_APO_MODEL", "optimizer")
    seed = "Check this draft: {text}"
    resources = {
        "checker_llm": LLM(endpoint=agents_llm.url, model="checker"),
        "checker_prompt": PromptTemplate(template=seed),
    }
    train = rig.tasks("strict", "brief")
    val = rig.tasks("strict", "brief")

    async def session() -> agl.FitResult:
        async with MemoryStore(poll_interval=0.01) as store:
            trainer = agl.Trainer(
                {"writer": "lightningrl-torch", "checker": "apo"},
                store=store,
                run_dir=tmp_path / "run",
                resources=resources,
                instrument=["openai"],
                progress=False,
                console=False,
                plot=False,
            )
            result = await trainer.fit_async(pipeline, train, val)
            latest = await store.get_resources()
            assert latest is not None
            final = latest.resources
            # APO's prompt won, and the writer's LLM is the policy agl-torch serves
            better = final["checker_prompt"].template  # type: ignore[attr-defined]
            assert better != seed
            assert "strict" in better or "brief" in better
            assert final["llm"].model == "policy"  # type: ignore[attr-defined]
            return result

    result = asyncio.run(session())
    [row] = [r for r in read_metrics(result.run_dir) if "lightningrl-torch/actor/updates" in r]
    assert row["lightningrl-torch/actor/updates"] == 1.0, row  # RL updated the writer's weights
    assert row["agents/writer/calls"] == 16.0  # 2 tasks x 8 samples (RL's default group)
    assert row["agents/writer/transitions"] > 0
    assert "agents/checker/transitions" not in row  # APO builds no transitions
    assert row["lightningrl-torch/transitions/other_agents_calls"] == 16.0  # the checker's
    # APO saw the checker's messages only, read from the traces
    critiques = rig.script.texts("critique")
    assert critiques
    for text in critiques:
        assert "by agent checker" in rig.block(text, "runs")
        assert "write about" not in text
        assert "by agent writer" not in text
