"""A gateway with a token lets in only requests that carry it, on every route; the rule and
the mechanism are the store's (:mod:`agl._serving._server_auth`)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from starlette.routing import Route

import agl
from agl import InvalidInputError, RolloutRequest
from agl._serving._server_auth import bearer_token
from agl.gateway import GatewayServer
from agl.gateway._serve import check_bind_address
from agl.store._memory import MemoryStore
from agl.testing.openai_server import OpenAIServer, echo

pytestmark = pytest.mark.anyio
TOKEN = "s3cret-token"
BODIES: dict[str, Any] = {
    "chat/completions": {"model": "m", "messages": [{"role": "user", "content": "hi"}]},
    "completions": {"model": "m", "prompt": "hi", "max_tokens": 4},
    "responses": {"model": "m", "input": "hi", "max_output_tokens": 4},
    "messages": {"model": "m", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]},
    "messages/count_tokens": {"model": "m", "messages": [{"role": "user", "content": "hi"}]},
}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def upstream() -> Iterator[OpenAIServer]:
    with OpenAIServer(echo) as server:
        yield server


@pytest.fixture
def store() -> MemoryStore:
    return MemoryStore()


@pytest.fixture
def gateway(upstream: OpenAIServer, store: MemoryStore) -> Iterator[GatewayServer]:
    with GatewayServer([upstream.url], store, token=TOKEN) as server:
        yield server


async def every_route(gateway: GatewayServer, store: agl.Store) -> list[tuple[str, str, Any]]:
    """(method, url, json body) for every route the gateway's app has."""
    await store.enqueue_rollouts([RolloutRequest(input=0)])
    [claim] = await store.dequeue_rollouts()
    assert gateway.gateway is not None
    found = []
    for route in gateway.gateway.app.routes:
        assert isinstance(route, Route)
        path = route.path.format(
            rollout_id=claim.rollout.rollout_id, attempt_id=claim.attempt.attempt_id
        )
        for method in sorted(route.methods or {"GET"}):
            if method == "HEAD":
                continue
            body = next((b for suffix, b in BODIES.items() if path.endswith("/v1/" + suffix)), None)
            found.append((method, gateway.url + path, body))
    return found


@pytest.mark.parametrize(
    "header",
    [None, "Bearer wrong-token", f"Basic {TOKEN}", TOKEN, "Bearer", f"Bearer {TOKEN}x"],
    ids=["none", "wrong", "other-scheme", "no-scheme", "empty", "longer"],
)
async def test_every_route_refuses_a_missing_or_wrong_token(
    gateway: GatewayServer, store: MemoryStore, upstream: OpenAIServer, header: str | None
) -> None:
    routes = await every_route(gateway, store)
    # health, models, chat, completions, responses, messages, flush, docs, openapi
    assert len(routes) >= 9
    before = len(upstream.requests)
    headers = {"authorization": header} if header is not None else {}
    async with httpx.AsyncClient(headers=headers) as client:
        for method, url, body in routes:
            reply = await client.request(method, url, json=body)
            assert reply.status_code == 401, (method, url, reply.text)
            assert reply.headers["www-authenticate"].startswith("Bearer")
            error = reply.json()["error"]  # the wire's error format, which its clients read
            if "/v1/messages" in url:
                assert error["type"] == "authentication_error"  # Anthropic's
            else:
                assert error["type"] == "AuthenticationError"  # OpenAI's
            assert "Bearer" in error["message"]
    assert len(upstream.requests) == before  # nothing reached the upstream


@pytest.mark.parametrize("scheme", ["Bearer", "bearer", "BEARER"])
async def test_every_route_answers_the_right_token(
    gateway: GatewayServer, store: MemoryStore, scheme: str
) -> None:
    routes = await every_route(gateway, store)
    async with httpx.AsyncClient(headers={"authorization": f"{scheme} {TOKEN}"}) as client:
        for method, url, body in routes:
            reply = await client.request(method, url, json=body)
            assert reply.status_code == 200, (method, url, reply.text)


async def test_an_openai_client_uses_the_token_as_its_api_key_and_it_stays_here(
    gateway: GatewayServer, store: MemoryStore, upstream: OpenAIServer
) -> None:
    await store.enqueue_rollouts([RolloutRequest(input=0)])
    [claim] = await store.dequeue_rollouts()
    url = gateway.rollout_url(claim.rollout.rollout_id, claim.attempt.attempt_id)
    with (
        openai.OpenAI(base_url=url, api_key="not-it", max_retries=0) as wrong,
        pytest.raises(openai.AuthenticationError),
    ):
        wrong.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    with openai.OpenAI(base_url=url, api_key=TOKEN, max_retries=0) as right:
        right.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    assert "authorization" not in upstream.requests[-1].headers


async def test_the_runner_hands_agents_the_gateway_token(tmp_path: Path) -> None:
    template = "http://gw:1/rollout/{rollout_id}/attempt/{attempt_id}/v1"
    llm = agl.LLM(endpoint=template, model="m")
    served = llm.for_attempt("ro-1", "at-1", api_key=TOKEN)
    assert served.api_key == TOKEN
    assert served.endpoint == "http://gw:1/rollout/ro-1/attempt/at-1/v1"
    # The key is never stored or shown.
    assert "api_key" not in served.model_dump()
    assert TOKEN not in repr(served)
    async with agl.open_store(f"sqlite:///{tmp_path / 'agl.db'}") as store:
        await store.add_resources({"llm": served})
        latest = await store.get_resources()
    assert latest is not None
    stored = latest.resources["llm"]
    assert isinstance(stored, agl.LLM)
    assert stored.api_key is None
    # An LLM called directly keeps what it had.
    direct = agl.LLM(endpoint="http://api/v1", model="m")
    assert direct.for_attempt("ro-1", "at-1", api_key=TOKEN).api_key is None


def test_binding_beyond_loopback_needs_a_token() -> None:
    with pytest.raises(InvalidInputError, match="AGL_GATEWAY_TOKEN"):
        check_bind_address("0.0.0.0", None)
    with pytest.raises(InvalidInputError):
        GatewayServer(["http://127.0.0.1:9/v1"], MemoryStore(), host="0.0.0.0")
    check_bind_address("0.0.0.0", TOKEN)
    check_bind_address("127.0.0.1", None)


@pytest.mark.parametrize(
    ("header", "token"),
    [
        (b"Bearer abc", b"abc"),
        (b"bearer abc", b"abc"),
        (b"  BEARER   abc  ", b"abc"),
        (b"Basic abc", None),
        (b"Bearer", None),
        (b"abc", None),
        (b"", None),
    ],
)
def test_bearer_token_parsing(header: bytes, token: bytes | None) -> None:
    assert bearer_token(header) == token
