"""agl_langchain.chat_model: a ChatOpenAI per attempt, without HTTP clients per attempt."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Iterator
from typing import Any

import pytest
from langchain_openai import ChatOpenAI

import agl
import agl_langchain
from agl.testing.openai_server import OpenAIServer

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def server() -> Iterator[OpenAIServer]:
    with OpenAIServer() as running:
        yield running


def attempt_llm(base: str, attempt: int, **fields: Any) -> agl.LLM:
    """The LLM a runner gives attempt ``attempt``: the gateway's URL names it."""
    published = agl.LLM(
        endpoint=f"{base}/rollout/{{rollout_id}}/attempt/{{attempt_id}}/v1", model="m", **fields
    )
    return published.for_attempt(f"ro-{attempt}", f"at-{attempt}", api_key="gateway-token")


async def test_models_for_many_attempts_share_their_http_clients_and_parse_no_ca_bundle(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    first = agl_langchain.chat_model(attempt_llm("http://gateway", 0))
    contexts: list[object] = []
    make_context = ssl.create_default_context

    def counted(*args: Any, **kwargs: Any) -> ssl.SSLContext:
        contexts.append(args)
        return make_context(*args, **kwargs)

    monkeypatch.setattr(ssl, "create_default_context", counted)
    try:
        models = [agl_langchain.chat_model(attempt_llm("http://gateway", i)) for i in range(1, 30)]
        assert contexts == []  # plain ChatOpenAI(base_url=...) makes two a model here
        assert len({id(m) for m in models}) == 29  # one per attempt: each has its own URL
        assert {id(m.http_async_client) for m in models} == {id(first.http_async_client)}
        assert {id(m.http_client) for m in models} == {id(first.http_client)}
        assert models[0].openai_api_base == "http://gateway/rollout/ro-1/attempt/at-1/v1"
        assert models[0].openai_api_key is not None
        assert models[0].openai_api_key.get_secret_value() == "gateway-token"
    finally:
        await agl_langchain.close_chat_models()


async def test_the_same_values_give_the_same_model_and_sampling_goes_where_it_belongs() -> None:
    llm = attempt_llm("http://gateway", 1, sampling_parameters={"temperature": 0.7, "top_k": 20})
    try:
        model = agl_langchain.chat_model(llm, max_retries=0)
        assert agl_langchain.chat_model(llm, max_retries=0) is model
        assert agl_langchain.chat_model(llm, max_retries=1) is not model
        assert (model.model_name, model.temperature, model.max_retries) == ("m", 0.7, 0)
        assert model.extra_body == {"top_k": 20}  # no ChatOpenAI field: sent as it is
        assert agl_langchain.chat_model(llm, temperature=0.0).temperature == 0.0  # kwargs win
    finally:
        await agl_langchain.close_chat_models()


async def test_a_model_calls_its_endpoint_and_each_event_loop_has_its_own_client(
    server: OpenAIServer,
) -> None:
    llm = agl.LLM(endpoint=server.url, model="m")

    async def ask(text: str) -> tuple[str, ChatOpenAI]:
        model = agl_langchain.chat_model(llm, max_retries=0)
        try:
            reply = await model.ainvoke(text)
        finally:
            await agl_langchain.close_chat_models()
        return str(reply.content), model

    here, model = await ask("otters")
    assert here == "ok: otters"
    elsewhere, other = await asyncio.to_thread(asyncio.run, ask("badgers"))
    assert elsewhere == "ok: badgers"
    assert other is not model  # a client's connections belong to its loop
    assert other.http_async_client is not model.http_async_client
    assert [r.body["model"] for r in server.requests[-2:]] == ["m", "m"]


def test_a_loop_that_ends_closes_its_client(server: OpenAIServer) -> None:
    """asyncio.run (a runner's run_sync) shuts the loop down: its shared client closes then."""
    llm = agl.LLM(endpoint=server.url, model="m")

    async def job() -> tuple[str, Any]:
        model = agl_langchain.chat_model(llm, max_retries=0)
        reply = await model.ainvoke("otters")
        return str(reply.content), model.http_async_client

    text, client = asyncio.run(job())
    assert text == "ok: otters"
    assert client.is_closed
