"""A body nested thousands of levels deep is a 400 in each server's own format, never a 500.

Python's JSON parser gives up on such a body with a RecursionError, not a ValueError; every
server must read that as the client's mistake (issue: a 5,000-level array was a plain-text 500
from the gateway).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import httpx
import pytest

import agl
from agl.gateway import GatewayServer
from agl.store import StoreServer
from agl.store._memory import MemoryStore
from agl.testing.openai_server import OpenAIServer

DEEP = {
    "array": ("[" * 5000 + "]" * 5000).encode(),
    "object": ('{"a":' * 5000 + "1" + "}" * 5000).encode(),
}
JSON = {"content-type": "application/json"}


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[str, OpenAIServer, str]]:
    store = MemoryStore()

    async def claim() -> tuple[str, str]:
        await store.enqueue_rollouts([agl.RolloutRequest(input=0)])
        [claimed] = await store.dequeue_rollouts()
        return claimed.rollout.rollout_id, claimed.attempt.attempt_id

    ids = asyncio.run(claim())
    with (
        OpenAIServer() as engine,
        GatewayServer([engine.url], store) as gateway,
        StoreServer("memory://") as store_server,
    ):
        yield gateway.rollout_url(*ids), engine, store_server.url


@pytest.mark.parametrize("shape", sorted(DEEP))
@pytest.mark.parametrize(
    "route", ["chat/completions", "completions", "responses", "messages", "messages/count_tokens"]
)
def test_the_gateway_answers_400_in_the_wires_format(
    servers: tuple[str, OpenAIServer, str], route: str, shape: str
) -> None:
    base, _, _ = servers
    reply = httpx.post(f"{base}/{route}", content=DEEP[shape], headers=JSON)
    assert reply.status_code == 400, reply.text
    body = reply.json()
    message = body["error"]["message"]
    assert "nested too deeply" in message
    if route.startswith("messages"):
        assert body["type"] == "error"  # Anthropic's format
        assert body["error"]["type"] == "invalid_request_error"


@pytest.mark.parametrize("route", ["chat/completions", "completions", "responses", "messages"])
def test_the_scripted_engine_answers_400(
    servers: tuple[str, OpenAIServer, str], route: str
) -> None:
    _, engine, _ = servers
    reply = httpx.post(f"{engine.url}/{route}", content=DEEP["array"], headers=JSON)
    assert reply.status_code == 400, reply.text
    # Deep enough for a deep copy to fail, not the parser: still the client's mistake.
    nested = "[" * 600 + "]" * 600
    body = '{"model":"m","messages":[{"role":"user","content":"x","extra":' + nested + "}]}"
    reply = httpx.post(f"{engine.url}/chat/completions", content=body.encode(), headers=JSON)
    assert reply.status_code == 400, reply.text


@pytest.mark.parametrize("route", ["/v1/rollouts/dequeue", "/v1/spans", "/v1/traces"])
def test_the_store_server_answers_400(servers: tuple[str, OpenAIServer, str], route: str) -> None:
    _, _, store_url = servers
    reply = httpx.post(f"{store_url}{route}", content=DEEP["object"], headers=JSON)
    assert reply.status_code == 400, reply.text
    assert reply.json()["error"]["type"] == "InvalidInputError"
