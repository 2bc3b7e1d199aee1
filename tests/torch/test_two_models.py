"""Two models trained at once, one per agent: ``{"writer": LightningRLTorch(a), "checker":
LightningRLTorch(b)}``. Each model is served by its own policy server behind its own gateway,
learns from its own agent's calls only, and keeps its checkpoints and final model apart."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import openai
import pytest

import agl
from agl import read_metrics
from agl.lightning import extract_calls
from agl_torch import LightningRLTorch
from agl_torch.served_policy import find_checkpoint
from agl_torch.settings import ServingSettings
from agl_torch.tiny import build_tiny_model

from .conftest import CORPUS


async def _ask(llm: agl.LLM, text: str) -> str:
    async with openai.AsyncOpenAI(base_url=llm.endpoint, api_key="-", max_retries=0) as client:
        reply = await client.chat.completions.create(
            model=llm.model, messages=[{"role": "user", "content": text}], max_tokens=6
        )
    return reply.choices[0].message.content or ""


@agl.rollout
async def write_then_check(task: dict[str, Any], llm: agl.LLM, checker_llm: agl.LLM) -> float:
    with agl.agent_span("writer"):
        draft = await _ask(llm, f"write about {task['q']}")
    with agl.agent_span("checker"):
        verdict = await _ask(checker_llm, f"check: {draft}")
    return (min(len(draft), 12) + min(len(verdict), 12)) / 24


TASKS = [{"q": "a fox"}, {"q": "the sea"}, {"q": "a story"}, {"q": "numbers"}]


def _fit(algorithm: Any, agent: Any, tmp_path: Path) -> agl.FitResult:
    """Train ``algorithm`` on the four tasks, the run in ``tmp_path / "run"``."""
    trainer = agl.Trainer(
        algorithm,
        store=f"sqlite:///{tmp_path / 'store.db'}",
        run_dir=tmp_path / "run",
        instrument=["openai"],
        concurrency=8,
        progress=False,
        console=False,
        plot=False,
    )
    return trainer.fit(agent, TASKS)


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("max_staleness", [0, 1])
def test_two_models_train_at_once_each_on_its_own_agents_calls(
    tmp_path: Path, max_staleness: int
) -> None:
    models = {
        name: build_tiny_model(tmp_path / f"{name}-base", corpus=CORPUS, seed=seed)
        for name, seed in (("writer", 0), ("checker", 1))
    }

    def algorithm(agent: str, resource: str) -> LightningRLTorch:
        return LightningRLTorch(
            models[agent],
            resource=resource,
            serving=ServingSettings(model_name=f"{agent}-policy"),
            loop=agl.LoopSettings(
                n_samples=2, batch_size=2, max_steps=2, max_staleness=max_staleness
            ),
            sampling=agl.SamplingSettings(max_tokens=6),
            # a random model's rewards may tie within a group: keep those groups too
            transitions=agl.TransitionBuilder(drop_zero_variance=False),
        )

    writer, checker = algorithm("writer", "llm"), algorithm("checker", "checker_llm")
    run_dir = tmp_path / "run"
    result = _fit({"writer": writer, "checker": checker}, write_then_check, tmp_path)
    assert result.totals["succeeded"] == 8

    # each model learned, once per step
    for policy in (writer.policy, checker.policy):
        assert policy.learner is not None
        assert policy.learner.updates == 2

    # each on its own agent's calls: 2 tasks x 2 samples per step, none of the other's
    rows = [row for row in read_metrics(run_dir) if "lightningrl-torch-writer/calls" in row]
    assert [row["step"] for row in rows] == [1, 2]
    for row in rows:
        assert row["lightningrl-torch-writer/calls"] == 4
        assert row["lightningrl-torch-checker/calls"] == 4
        assert row["agents/writer/transitions"] == 4
        assert row["agents/checker/transitions"] == 4
        assert row["lightningrl-torch-writer/actor/updates"] > 0
        assert row["lightningrl-torch-checker/actor/updates"] > 0
        if max_staleness:  # each model's data held to its own weight versions
            assert row["lightningrl-torch-writer/staleness/max"] <= 1
            assert row["lightningrl-torch-checker/staleness/max"] <= 1

    # their files stay apart: checkpoints and the final model under each one's folder
    for label in ("lightningrl-torch-writer", "lightningrl-torch-checker"):
        checkpoint = find_checkpoint(run_dir / label)
        assert checkpoint is not None
        assert checkpoint.name == "step-000002"
        assert (run_dir / label / "model" / "config.json").is_file()
    assert not (run_dir / "checkpoints").exists()

    # each agent called its own model, through its own gateway (token ids recorded)
    called, resources = asyncio.run(_read_back(tmp_path / "store.db"))
    assert called == {"writer": {"writer-policy"}, "checker": {"checker-policy"}}
    llm, checker_llm = resources["llm"], resources["checker_llm"]
    assert isinstance(llm, agl.LLM)
    assert isinstance(checker_llm, agl.LLM)
    assert urlsplit(llm.endpoint).port != urlsplit(checker_llm.endpoint).port


async def _read_back(db: Path) -> tuple[dict[str, set[str]], dict[str, Any]]:
    """The models each agent's calls asked for (as the gateway recorded the requests, with
    the engine's token ids), and the resources the run published last."""
    called: dict[str, set[str]] = {}
    async with agl.open_store(f"sqlite:///{db}") as store:
        page = await store.query_rollouts(limit=100)
        for rollout in page.rollouts:
            for call in extract_calls(await store.query_spans(rollout.rollout_id)).calls:
                assert call.request is not None
                assert call.response_ids
                called.setdefault(call.agent or "-", set()).add(json.loads(call.request)["model"])
        latest = await store.get_resources()
    assert latest is not None
    return called, dict(latest.resources)


@agl.rollout
async def write(task: dict[str, Any], llm: agl.LLM) -> float:
    with agl.agent_span("writer"):
        draft = await _ask(llm, f"write about {task['q']}")
    return min(len(draft), 12) / 12


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_per_agent_runs_staleness_reaches_the_learner(tmp_path: Path) -> None:
    """``PerAgent(..., max_staleness=1)`` over an algorithm whose own loop is synchronous: the
    run trains on data one version stale, so ``off_policy="auto"`` must pick decoupled PPO (it
    picked plain PPO from the algorithm's own settings, against the data it got)."""
    writer = LightningRLTorch(
        build_tiny_model(tmp_path / "base", corpus=CORPUS, seed=0),
        loop=agl.LoopSettings(n_samples=2, batch_size=2, max_steps=2),  # max_staleness=0
        sampling=agl.SamplingSettings(max_tokens=6),
        transitions=agl.TransitionBuilder(drop_zero_variance=False),
    )
    per_agent = agl.PerAgent({"writer": writer, "*": None}, max_staleness=1)
    assert writer.loop.max_staleness == 0
    run_dir = tmp_path / "run"
    result = _fit(per_agent, write, tmp_path)
    assert result.totals["succeeded"] == 8
    assert writer.policy is not None
    assert writer.policy.learner is not None
    assert writer.policy.learner.off_policy == "decoupled"
    rows = [row for row in read_metrics(run_dir) if "actor/updates" in row]
    assert [row["step"] for row in rows] == [1, 2]
    assert all("actor/importance_mean" in row for row in rows), rows  # decoupled PPO's figures
