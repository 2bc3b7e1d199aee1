"""A PydanticAI agent on an Anthropic model class, trained through agl's gateway.

``AnthropicModel`` with ``AnthropicProvider(base_url=<the attempt's gateway URL without /v1>)``
speaks the Anthropic Messages API to agl's gateway, which serves each call as one chat call to
the engine and records the engine's token ids under the message id PydanticAI
saw (``msg_...``), which is also the ``gen_ai.response.id`` of PydanticAI's own model-call span:
agl-pydantic-ai's spans join the gateway's on it, each call is attributed to the agent, and the
calls become transitions. With the scripted engine the agent makes a tool call round trip; with
agl-torch's policy server the transitions hold a real model's template ids, and its learner
takes an RL step on them.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import Agent, ModelSettings
from pydantic_ai.models.anthropic import AnthropicModel
from pydantic_ai.providers.anthropic import AnthropicProvider

import agl
from agl import semconv
from agl._results import fetch_results
from agl.gateway import GatewayServer
from agl.lightning import TransitionBuilder
from agl.store._memory import MemoryStore
from agl.testing.gateway_rollouts import Job, joined_calls, run_through_gateway, spans_of_type
from agl.testing.openai_server import OpenAIServer, Reply, encode, render_chat, tool_reply
from agl_pydantic_ai.instrumentor import PydanticAIInstrumentor

pytestmark = pytest.mark.anyio

INSTRUCTIONS = "You tell the weather. Look it up first."


def weather(request: dict[str, Any]) -> Reply | str:
    """Call the tool first, then answer with what it said."""
    last = request["messages"][-1]
    if last["role"] != "tool":
        return tool_reply("get_weather", {"city": "Paris"})
    return f"It is {last['content']} in Paris."


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def upstream() -> Iterator[OpenAIServer]:
    with OpenAIServer(weather) as server:
        yield server


Traced = tuple[MemoryStore, agl.Tracer, GatewayServer]


@asynccontextmanager
async def gateway_to(engine_url: str) -> AsyncIterator[Traced]:
    """A store, a tracer with agl-pydantic-ai on, and agl's gateway in front of the engine."""
    async with MemoryStore() as store:
        with agl.Tracer(store) as tracer, GatewayServer([engine_url], store) as gateway:
            instrumentor = PydanticAIInstrumentor(tracer)
            instrumentor.instrument()
            try:
                yield store, tracer, gateway
            finally:
                instrumentor.uninstrument()


@pytest.fixture
async def traced(upstream: OpenAIServer) -> AsyncIterator[Traced]:
    async with gateway_to(upstream.url) as traced:
        yield traced


async def rollouts(traced: Traced, job: Job, rewards: Sequence[float]) -> list[agl.RolloutResult]:
    """Run ``job`` as one rollout per reward, each checked to be joined with the gateway's
    records on the response ids; return their results."""
    store, tracer, gateway = traced
    ids = []
    for reward in rewards:
        rollout_id, spans = await run_through_gateway(job, store, tracer, gateway, reward=reward)
        joined_calls(spans)
        ids.append(rollout_id)
    return await fetch_results(store, [await store.get_rollout(i) for i in ids])


def forecaster(base_url: str, *, tool: bool = True, **settings: Any) -> Agent[None, str]:
    """The agent, as anyone writes it for Claude, its model at ``base_url`` with ``settings``
    (PydanticAI's model settings), and the ``get_weather`` tool unless ``tool`` is false."""
    provider = AnthropicProvider(base_url=base_url, api_key="sk-ant-test")
    model = AnthropicModel(
        "claude-sonnet-4-5", provider=provider, settings=ModelSettings(**settings)
    )
    agent = Agent(model, name="forecaster", instructions=INSTRUCTIONS)
    if tool:

        @agent.tool_plain
        def get_weather(city: str) -> str:
            """The weather in a city."""
            return "sunny" if city == "Paris" else "unknown"

    return agent


async def ask(url: str, *, stream: bool) -> None:
    """Ask the agent through the attempt's gateway ``url`` (an Anthropic client's base URL is
    that URL without ``/v1``)."""
    async with forecaster(url.removesuffix("/v1")) as agent:  # closes the model's client
        if stream:
            async with agent.run_stream("Weather in Paris?") as result:
                answer = await result.get_output()
        else:
            answer = (await agent.run("Weather in Paris?")).output
    assert answer == "It is sunny in Paris."


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_a_tool_round_trip_is_joined_on_the_message_id(traced: Traced, stream: bool) -> None:
    store, tracer, gateway = traced

    async def job(url: str) -> None:
        await ask(url, stream=stream)

    _, spans = await run_through_gateway(job, store, tracer, gateway)
    calls = joined_calls(spans)  # joined on the ids, in order, each with its token ids
    assert [call.agent for call in calls.calls] == ["forecaster", "forecaster"]
    recorded = spans_of_type(spans, semconv.SPAN_TYPE_GATEWAY)
    assert [s.attributes[semconv.AGL_WIRE] for s in recorded] == ["messages", "messages"]
    assert all(str(call.response_id).startswith("msg_") for call in calls.calls)
    [tool] = spans_of_type(spans, semconv.SPAN_TYPE_TOOL)
    assert tool.attributes[semconv.AGL_TOOL_NAME] == "get_weather"
    assert tool.attributes[semconv.AGL_TOOL_RESULT] == "sunny"
    # the second call's prompt is the first's, its answer (the tool call) and the tool's result:
    # one conversation, rendered by the engine once per call
    first, second = (call.prompt_ids or [] for call in calls.calls)
    assert second[: len(first) + len(calls.calls[0].response_ids or [])] == [
        *first,
        *(calls.calls[0].response_ids or []),
    ]
    asked = [json.loads(str(s.attributes[semconv.AGL_REQUEST_JSON])) for s in recorded]
    call = asked[1]["messages"][-2]["tool_calls"][0]
    assert call["function"]["name"] == "get_weather"
    assert json.loads(call["function"]["arguments"]) == {"city": "Paris"}
    assert asked[1]["messages"][-1] == {
        "role": "tool",
        "tool_call_id": call["id"],
        "content": "sunny",
    }
    assert first == encode(render_chat(asked[0]["messages"], asked[0]["tools"]))


async def test_the_calls_become_transitions_of_the_agent(traced: Traced) -> None:
    async def job(url: str) -> None:
        await ask(url, stream=False)

    results = await rollouts(traced, job, [1.0, 0.0])
    batch = TransitionBuilder(agents=["forecaster"]).build(results)
    assert [t.agent for t in batch] == ["forecaster"] * 4
    assert [t.reward for t in batch] == [1.0, 1.0, 0.0, 0.0]
    assert [t.advantage > 0 for t in batch] == [True, True, False, False]
    assert all(t.prompt_ids and t.response_ids for t in batch)
    assert not batch.report.dropped_calls, batch.report.summary()
    assert batch.report.notes["joined_by_order"] == batch.report.notes["gateway_only"] == 0


async def test_agl_torch_trains_the_model_that_answered_on_the_messages_wire(
    tmp_path: Path,
) -> None:
    """The engine is agl-torch's policy server (a tiny model built here): the transitions hold
    the model's own template ids of each request, and its learner takes an RL step on them."""
    pytest.importorskip("agl_torch", reason="the policy server and the RL step need agl-torch")
    from agl_torch.learner import Learner, LearnerSettings
    from agl_torch.policy import load_policy
    from agl_torch.server import PolicyServer
    from agl_torch.tiny import build_tiny_model

    async def job(url: str) -> None:
        # a seed (vLLM's, which the wire passes on): the same reply every run, never an empty one
        seeded = {"max_tokens": 6, "extra_body": {"seed": 7}}
        async with forecaster(url.removesuffix("/v1"), tool=False, **seeded) as agent:
            await agent.run("Weather in Paris?")

    folder = build_tiny_model(tmp_path / "tiny", vocab_size=512)
    with PolicyServer(folder) as engine:
        async with gateway_to(engine.url) as traced:
            results = await rollouts(traced, job, [1.0, 0.0])
    batch = TransitionBuilder(agents=["forecaster"]).build(results)
    assert [t.agent for t in batch] == ["forecaster", "forecaster"]
    model, tokenizer = load_policy(folder, quiet=True)
    for result, transition in zip(results, batch, strict=True):
        [recorded] = spans_of_type(result.spans, semconv.SPAN_TYPE_GATEWAY)
        asked = json.loads(str(recorded.attributes[semconv.AGL_REQUEST_JSON]))
        assert asked["seed"] == 7
        template = tokenizer.apply_chat_template(
            asked["messages"], add_generation_prompt=True, return_dict=True
        )
        assert transition.prompt_ids == list(template["input_ids"])
        assert 1 < len(transition.response_ids) <= 6
    metrics = Learner(model, tokenizer, LearnerSettings(lr=1e-4)).rl_step(list(batch))
    assert metrics["updates"] == 1
    assert metrics["samples"] == 2
