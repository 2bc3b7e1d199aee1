"""lightningrl-verl's step against a real store, gateway and OpenAI-compatible upstream.

verl's GPU engine (FSDP workers, vLLM replicas) is what this machine cannot run; in its place
the test engine serves the scripted upstream (vLLM's wire format: token ids and logprobs) and
records each batch the algorithm hands to ``update``. Everything before that is the real
path: runners, the gateway recording token ids, the SQLite store, attempt timeouts, failed
rollouts, the step timeout, LightningRL, and the conversion to verl's ``DataProto``, checked
token for token against what the upstream returned.
"""

from __future__ import annotations

import asyncio
import importlib
import threading
import time
from pathlib import Path
from typing import Any, ClassVar

import openai
import pytest
import torch
from verl import DataProto

import agl
import agl._train._metrics
from agl import semconv
from agl.testing.openai_server import EOS_ID, OpenAIServer, encode, render_chat, text_reply
from agl_verl.rl import LightningRLVerl

FOLLOW_UP = "sure?"


def answer(request: dict[str, Any]) -> Any:
    """'slow' questions take 30 s; otherwise 'yes' when the question says so."""
    question = request["messages"][0]["content"]
    if "slow" in question:
        return text_reply("thinking", delay=30.0)
    return "yes" if "yes" in question else "no"


class RecordingEngine:
    """Stands in for :class:`agl_verl.engine.VerlEngine`: serves the scripted upstream and
    records every batch it is asked to train on."""

    instances: ClassVar[list[RecordingEngine]] = []

    def __init__(self, config: Any, *, total_steps: int, steps_per_epoch: int) -> None:
        self.config = config
        self.total_steps = total_steps
        self.steps_per_epoch = steps_per_epoch
        self.server = OpenAIServer(answer)
        self.batches: list[tuple[int, DataProto]] = []
        self.resumed_step = 0
        self.closed = False
        self.threads: set[str] = set()
        RecordingEngine.instances.append(self)

    def start(self) -> list[str]:
        self.server.start()
        return [self.server.url]

    @property
    def pad_token_id(self) -> int:
        return 2

    def update(self, data: DataProto, step: int) -> dict[str, float]:
        self.threads.add(threading.current_thread().name)
        self.batches.append((step, data))
        return {"verl/samples": float(len(data))}

    def close(self) -> None:
        self.closed = True
        self.server.stop()


@agl.rollout
async def judge(task: dict[str, Any], llm: agl.LLM, rollout: agl.Rollout) -> float:
    """Two calls; reward 1 when the second answer is 'yes'. The question may depend on the
    sample, so a task's samples can differ (GRPO learns nothing from equal rewards)."""
    sample = int(rollout.metadata["sample"])  # type: ignore[arg-type]
    question = task["questions"][sample % len(task["questions"])]
    if question == "crash":
        raise RuntimeError("the agent broke")
    async with openai.AsyncOpenAI(base_url=llm.endpoint, api_key="none", max_retries=0) as client:
        history: list[Any] = [{"role": "user", "content": question}]
        first = await client.chat.completions.create(model=llm.model, messages=history)
        history += [
            {"role": "assistant", "content": first.choices[0].message.content or ""},
            {"role": "user", "content": FOLLOW_UP},
        ]
        second = await client.chat.completions.create(model=llm.model, messages=history)
    return 1.0 if second.choices[0].message.content == "yes" else 0.0


TASKS = [
    {"questions": ["say yes", "say no"]},  # rewards 1, 0: trained
    {"questions": ["say yes"]},  # rewards 1, 1: nothing to learn, dropped
    {"questions": ["crash"]},  # both fail: dropped
    {"questions": ["slow"]},  # both time out (attempt limit): dropped
    {"questions": ["say no", "crash"]},  # one left: no group, dropped
]


@pytest.fixture
def engine_class() -> type[RecordingEngine]:
    RecordingEngine.instances.clear()
    return RecordingEngine


def run(
    tmp_path: Path, model_dir: Path, *, attempt_timeout: float = 5.0, **options: Any
) -> agl.RunResult:
    """One ``fit`` over :data:`TASKS`. The runners share the trainer's event loop, and an
    agent's blocking work holds it: the OpenAI SDK imports its resources on first use (over a
    second), and each new client loads the CA bundle. The attempt limit leaves room for that;
    the import is done here, before any rollout's clock starts."""
    importlib.import_module("openai.resources.chat.completions")
    algorithm = LightningRLVerl(
        str(model_dir),
        engine=RecordingEngine,
        loop=agl.LoopSettings(n_samples=2, **options),
        config={"data.max_prompt_length": 256, "data.max_response_length": 64},
    )
    trainer = agl.Trainer(
        algorithm,
        store=f"sqlite:///{tmp_path / 'store.db'}",
        run_dir=tmp_path / "run",
        rollout_config=agl.RolloutConfig(timeout_seconds=attempt_timeout),
        concurrency=16,
        console=False,
        plot=False,
    )
    return trainer.fit(judge, TASKS)


def test_a_step_trains_on_the_finished_rollouts_token_for_token(
    tmp_path: Path, model_dir: Path, engine_class: type[RecordingEngine]
) -> None:
    started = time.monotonic()
    result = run(tmp_path, model_dir, batch_size=5, max_steps=1)
    assert time.monotonic() - started < 60  # the slow rollouts timed out; nothing hung

    (engine,) = engine_class.instances
    assert engine.closed
    assert (engine.total_steps, engine.steps_per_epoch) == (1, 1)
    assert engine.config.data.train_batch_size == 5
    assert engine.config.actor_rollout_ref.rollout.n == 2
    (step, data), *rest = engine.batches
    assert (step, rest) == (1, [])
    # only the first task's two rollouts, two calls each
    assert len(data) == 4
    assert len(set(data.non_tensor_batch["uid"])) == 1
    assert len(set(data.non_tensor_batch["agl_rollout_id"])) == 2
    assert sorted(data.non_tensor_batch["agl_call_index"].tolist()) == [0, 0, 1, 1]

    # token for token what the upstream saw and produced
    for row in range(len(data)):
        reward = float(data.batch["token_level_scores"][row].sum())
        question = "say yes" if reward == 1.0 else "say no"
        reply = "yes" if reward == 1.0 else "no"
        messages = [{"role": "user", "content": question}]
        if int(data.non_tensor_batch["agl_call_index"][row]) == 1:
            messages += [
                {"role": "assistant", "content": reply},
                {"role": "user", "content": FOLLOW_UP},
            ]
        prompt = encode(render_chat(messages))
        response = [*encode(reply), EOS_ID]
        mask = data.batch["attention_mask"][row].bool()
        width = data.batch["prompts"].shape[1]
        assert data.batch["input_ids"][row][mask].tolist() == prompt + response
        assert data.batch["prompts"][row][-len(prompt) :].tolist() == prompt
        assert data.batch["responses"][row][: len(response)].tolist() == response
        assert data.batch["response_mask"][row].sum() == len(response)
        assert int(mask[:width].sum()) == len(prompt)
        # the engine's logprobs rode along: every sampled token has one, all <= 0
        logprobs = data.batch["rollout_log_probs"][row][: len(response)]
        assert bool((logprobs < 0).all())

    # rollout-level GRPO: rewards 1 and 0 -> +-0.7071, halved by the weight of 2 calls each
    firsts = data.batch["advantages"][:, 0]
    expected = torch.where(data.batch["token_level_scores"].sum(-1) > 0, 0.35355, -0.35355)
    assert torch.allclose(firsts, expected, atol=1e-4)
    assert data.batch["prompts"].shape[1] == 256
    assert data.batch["responses"].shape[1] == 64

    row = next(r for r in agl.read_metrics(tmp_path / "run") if r.get("step") == 1)
    assert row["verl/samples"] == 4
    assert row["rollouts/failed"] == 5  # 2 crashed, 2 timed out, 1 crashed in the last task
    assert row["transitions/dropped/zero_variance_group"] == 4
    assert row["transitions/dropped/single_rollout_group"] == 2
    assert result.totals["succeeded"] == 5


def test_the_step_timeout_bounds_a_step_whose_rollouts_never_finish(
    tmp_path: Path, model_dir: Path, engine_class: type[RecordingEngine]
) -> None:
    # The slow rollouts' own limit is far beyond the step's: the agents' blocking work (see
    # run) holds the step's clock too, and the store must not time them out before it fires.
    started = time.monotonic()
    result = run(
        tmp_path, model_dir, batch_size=5, max_steps=1, step_timeout=1.0, attempt_timeout=20.0
    )
    assert time.monotonic() - started < 60

    (engine,) = engine_class.instances
    # whatever finished within a second trained; the rest was cancelled and counted
    assert result.totals["timed_out"] >= 2
    assert result.totals["cancelled"] == result.totals["timed_out"]
    assert engine.closed
    for _, data in engine.batches:
        assert len(set(data.non_tensor_batch["uid"])) <= 1


def test_a_step_with_nothing_to_learn_skips_the_update(
    tmp_path: Path, model_dir: Path, engine_class: type[RecordingEngine]
) -> None:
    """Equal rewards in every group: no transitions, no update, the run goes on."""
    algorithm = LightningRLVerl(
        str(model_dir),
        engine=RecordingEngine,
        loop=agl.LoopSettings(n_samples=2, batch_size=1, max_steps=2),
    )
    trainer = agl.Trainer(algorithm, run_dir=tmp_path / "run", console=False, plot=False)
    trainer.fit(judge, [{"questions": ["say yes"]}, {"questions": ["say no"]}])

    (engine,) = engine_class.instances
    assert engine.batches == []
    rows = [r for r in agl.read_metrics(tmp_path / "run") if "reward/mean" in r]
    assert [r["verl/skipped_update"] for r in rows] == [1.0, 1.0]


@agl.rollout
async def writer_and_checker(
    task: dict[str, Any], llm: agl.LLM, checker_llm: agl.LLM, rollout: agl.Rollout
) -> float:
    """The writer calls the model verl trains; the checker calls a frozen one."""
    sample = int(rollout.metadata["sample"])  # type: ignore[arg-type]
    with agl.agent_span("writer"):
        async with openai.AsyncOpenAI(base_url=llm.endpoint, api_key="-", max_retries=0) as c:
            messages: Any = [{"role": "user", "content": task["questions"][sample]}]
            draft = await c.chat.completions.create(model=llm.model, messages=messages)
    with agl.agent_span("checker"):
        async with openai.AsyncOpenAI(
            base_url=checker_llm.endpoint, api_key="-", max_retries=0
        ) as c:
            messages = [{"role": "user", "content": "check: say yes"}]
            await c.chat.completions.create(model=checker_llm.model, messages=messages)
    return 1.0 if draft.choices[0].message.content == "yes" else 0.0


def test_verl_trains_one_agent_of_several_on_that_agents_calls_only(
    tmp_path: Path, model_dir: Path, engine_class: type[RecordingEngine]
) -> None:
    algorithm = LightningRLVerl(
        str(model_dir),
        engine=RecordingEngine,
        loop=agl.LoopSettings(n_samples=2, batch_size=2, max_steps=1),
        config={"data.max_prompt_length": 256, "data.max_response_length": 64},
    )
    # the upstream says "yes" to "say yes" and "no" otherwise: a task's two samples share a
    # reward, so GRPO's groups would be dropped; a sample-dependent question keeps them
    tasks = [{"questions": ["say yes", "say no"]}, {"questions": ["say no", "say yes"]}]
    with OpenAIServer(lambda request: "fine") as frozen:
        trainer = agl.Trainer(
            {"writer": algorithm, "checker": None},
            store=f"sqlite:///{tmp_path / 'store.db'}",
            run_dir=tmp_path / "run",
            resources={"checker_llm": agl.LLM(endpoint=frozen.url, model="frozen")},
            instrument=["openai"],
            console=False,
            plot=False,
        )
        result = trainer.fit(writer_and_checker, tasks)
    assert result.totals["succeeded"] == 4

    (engine,) = engine_class.instances
    [(step, data)] = engine.batches
    assert step == 1
    # the writer's four calls (2 tasks x 2 samples), none of the checker's
    assert list(data.non_tensor_batch["agl_agent"]) == ["writer"] * 4
    for row in range(len(data)):
        reward = float(data.batch["token_level_scores"][row].sum())
        prompt = encode(
            render_chat([{"role": "user", "content": "say yes" if reward else "say no"}])
        )
        assert data.batch["prompts"][row][-len(prompt) :].tolist() == prompt
    metrics = next(r for r in agl.read_metrics(tmp_path / "run") if r.get("step") == 1)
    assert metrics["agents/writer/calls"] == 4
    assert metrics["agents/checker/calls"] == 4


def test_with_max_staleness_calls_carry_the_resource_weight_version(
    tmp_path: Path, model_dir: Path, engine_class: type[RecordingEngine]
) -> None:
    # vLLM names no weight version: the LLM resource published after each update does, and
    # the gateway records it on every call of the rollouts enqueued with it.
    algorithm = LightningRLVerl(
        str(model_dir),
        engine=RecordingEngine,
        loop=agl.LoopSettings(n_samples=2, batch_size=1, max_steps=4, max_staleness=1),
        config={"data.max_prompt_length": 256, "data.max_response_length": 64},
    )
    trainer = agl.Trainer(
        algorithm, run_dir=tmp_path / "run", concurrency=16, console=False, plot=False
    )
    result = trainer.fit(judge, [{"questions": ["say yes", "say no"]}] * 4)
    (engine,) = engine_class.instances
    assert [step for step, _ in engine.batches] == [1, 2, 3, 4]
    assert algorithm.version == 4
    rows = [row for row in result.history if "staleness/max" in row]
    assert len(rows) == 4
    assert all(row["staleness/max"] <= 1 for row in rows)
    assert not any(row.get("transitions/dropped/no_weight_version") for row in result.history)
    assert [row["weights/version"] for row in rows] == [1.0, 2.0, 3.0, 4.0]
    spans = asyncio.run(_gateway_versions(result.store_url))
    assert set(spans) <= {0, 1, 2, 3}
    assert 0 in spans


async def _gateway_versions(url: str) -> list[int]:
    async with agl.open_store(url) as store:
        page = await store.query_rollouts(limit=100)
        spans = [s for r in page.rollouts for s in await store.query_spans(r.rollout_id)]
    gateway = semconv.SPAN_TYPE_GATEWAY
    return [
        int(span.attributes[semconv.AGL_WEIGHT_VERSION])  # type: ignore[arg-type]
        for span in spans
        if span.attributes.get(semconv.AGL_SPAN_TYPE) == gateway
    ]
