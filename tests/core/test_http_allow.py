"""A 405 lists every method its path takes (:mod:`agl._serving._http_allow`), on the store
server and the gateway, each a real server on loopback; the standalone dashboard's is in
``tests/dashboard/test_passthrough.py``."""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import pytest

from agl._serving._http_allow import METHODS
from agl.gateway import GatewayServer
from agl.store._memory import MemoryStore
from agl.store._serve import StoreServer


@pytest.fixture(scope="module")
def store_url() -> Iterator[str]:
    with StoreServer("memory://") as server:
        yield server.url


@pytest.fixture(scope="module")
def gateway_url() -> Iterator[str]:
    with GatewayServer(["http://127.0.0.1:9/v1"], MemoryStore()) as gateway:
        yield gateway.url


def check_every_path(url: str) -> int:
    """For every path of the server's OpenAPI document, every method it does not document is
    a 405 whose Allow lists exactly the ones it does (those of every route the path matches:
    ``/v1/rollouts/enqueue`` is also ``/v1/rollouts/{rollout_id}``). Returns how many paths
    have several methods."""
    doc = httpx.get(f"{url}/openapi.json").json()
    templates = {
        re.compile(re.sub(r"\\\{[^}]+\\\}", "[^/]+", re.escape(template)) + "$"): operations
        for template, operations in doc["paths"].items()
    }
    several = 0
    with httpx.Client(base_url=url, timeout=30) as http:
        for template in doc["paths"]:
            path = re.sub(r"\{[^}]+\}", "x1", template)
            documented = [
                method
                for method in METHODS
                if any(
                    method.lower() in operations
                    for pattern, operations in templates.items()
                    if pattern.match(path)
                )
            ]
            several += len(documented) > 1
            for method in METHODS:
                if method in documented:
                    continue
                reply = http.request(method, path)
                assert reply.status_code == 405, (method, path, reply.status_code)
                assert reply.headers["allow"] == ", ".join(documented), (method, path)
    return several


def test_the_store_servers_405s_name_every_method_of_the_path(store_url: str) -> None:
    assert check_every_path(store_url) >= 2  # /v1/metrics and /v1/resources: GET and POST
    reply = httpx.delete(f"{store_url}/v1/metrics")
    assert reply.headers["allow"] == "GET, POST"
    assert reply.json()["error"]["type"] == "InvalidInputError"  # the store's error format


def test_the_gateways_405s_name_every_method_of_the_path(gateway_url: str) -> None:
    check_every_path(gateway_url)
    reply = httpx.get(f"{gateway_url}/rollout/r/attempt/a/v1/chat/completions")
    assert (reply.status_code, reply.headers["allow"]) == (405, "POST")
    assert reply.json()["error"]["code"] == 405  # the OpenAI wire's error format
