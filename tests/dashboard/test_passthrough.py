"""The standalone ``agl dashboard``'s pass-through to its store server: only the store's own
``GET /v1/...`` routes are reachable, whatever a path hides in percent-encoding.

A real store server (in this process) and ``agl dashboard`` as its own process; requests are
sent with :mod:`http.client`, which puts a path on the wire exactly as given (no client-side
normalization of ``..`` or of escapes).
"""

from __future__ import annotations

import asyncio
import http.client
import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pytest

import agl
from agl.dashboard._app import forwarded_segments
from agl.store._serve import StoreServer
from agl.testing.ports import free_port
from agl.testing.processes import Processes


@pytest.fixture(scope="module")
def dashboard(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int]]:
    """(store server URL, dashboard port), the store holding one rollout ``ro-é``."""
    with StoreServer("memory://") as store:

        async def fill() -> None:
            async with agl.open_store(store.url) as opened:
                await opened.enqueue_rollouts([agl.RolloutRequest(input=1, rollout_id="ro-é")])

        asyncio.run(fill())
        port = free_port()
        with Processes(tmp_path_factory.mktemp("dashboard")) as procs:
            child = procs.start("dashboard", "dashboard", "--store", store.url, "--port", str(port))
            asyncio.run(procs.serving(child, f"http://127.0.0.1:{port}/"))
            yield store.url, port


def get(port: int, path: str, method: str = "GET") -> tuple[int, dict[str, str], Any]:
    """Send ``path`` as it is; return the status, the headers (lower-cased) and the JSON."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request(method, path)
        reply = connection.getresponse()
        body = reply.read()
        headers = {key.lower(): value for key, value in reply.getheaders()}
    finally:
        connection.close()
    return reply.status, headers, json.loads(body) if body else None


TRAVERSALS = [
    "/v1/..%2fopenapi.json",
    "/v1/..%2Fopenapi.json",
    "/v1/%2e%2e/openapi.json",
    "/v1/%2E%2E%2Fopenapi.json",
    "/v1/.%2e/openapi.json",
    "/v1/%252e%252e%252fopenapi.json",  # double encoding
    "/v1/%252e%252e/openapi.json",
    "/v1/rollouts%2f..%2f..%2fopenapi.json",
    "/v1/rollouts/..%2f..%2fopenapi.json",
    "/v1/..%5copenapi.json",  # a backslash, which browsers read as a slash
    "/v1/..%5Copenapi.json",
    "/v1/..\\openapi.json",
    "/v1/../openapi.json",
    "/v1/rollouts/../../openapi.json",
    "/v1/./rollouts",
    "/v1/rollouts//ro-x",
    "/v1/rollouts/%00",
    "/v1/rollouts/%ff",
]


def test_an_encoded_traversal_reaches_nothing_outside_the_api(dashboard: tuple[str, int]) -> None:
    _, port = dashboard
    for path in TRAVERSALS:
        status, _, body = get(port, path)
        assert status == 400, (path, status, str(body)[:200])
        assert body["error"]["type"] == "InvalidInputError", path
        assert body["error"]["field"] == "path", path
        assert "openapi" not in body  # the store's document was not fetched


def test_the_stores_own_routes_still_pass_through(dashboard: tuple[str, int]) -> None:
    _, port = dashboard
    status, _, page = get(port, "/v1/rollouts?limit=5")
    assert status == 200, page
    assert [rollout["rollout_id"] for rollout in page["rollouts"]] == ["ro-é"]
    status, _, rollout = get(port, "/v1/rollouts/ro-%C3%A9")
    assert (status, rollout["rollout_id"]) == (200, "ro-é")
    status, _, attempts = get(port, "/v1/rollouts/ro-%C3%A9/attempts")
    assert (status, attempts) == (200, {"attempts": []})
    status, _, missing = get(port, "/v1/rollouts/ro-missing")
    assert (status, missing["error"]["type"]) == (404, "NotFoundError")
    status, _, view = get(port, "/v1/views/rollouts/ro-%C3%A9")
    assert (status, view["rollout"]["rollout_id"]) == (200, "ro-é")


def test_anything_but_get_is_a_405_naming_get(dashboard: tuple[str, int]) -> None:
    _, port = dashboard
    for method, path in [
        ("POST", "/v1/rollouts/enqueue"),
        ("DELETE", "/v1/rollouts/ro-%C3%A9"),
        ("PUT", "/v1/views/rollouts/ro-%C3%A9"),
        ("POST", "/"),
    ]:
        status, headers, body = get(port, path, method)
        assert (status, headers["allow"]) == (405, "GET"), (method, path)
        if path.startswith("/v1/"):
            assert "read-only" in body["error"]["message"]


def test_segments_are_decoded_once_and_checked() -> None:
    assert forwarded_segments(b"/v1/rollouts/ro-%C3%A9/spans") == (
        ["rollouts", "ro-é", "spans"],
        None,
    )
    for raw in (b"/v1/..%2fx", b"/v1/%252e", b"/v1/a%5cb", b"/v1/", b"/openapi.json"):
        segments, problem = forwarded_segments(raw)
        assert segments == [], raw
        assert problem, raw


def test_the_dashboard_refuses_no_id_the_store_takes() -> None:
    """Every id the store takes passes the pass-through (the two apply the same rule), but for
    a backslash, which browsers read as a slash."""
    for rollout_id in ("ro-1", "task.7", "a:b@c", "ünï", "x" * 256, "..."):
        agl.RolloutRequest(input=1, rollout_id=rollout_id)  # the store takes it
        raw = f"/v1/rollouts/{quote(rollout_id, safe='')}".encode()
        assert forwarded_segments(raw) == (["rollouts", rollout_id], None), rollout_id
    agl.RolloutRequest(input=1, rollout_id="a\\b")
    segments, problem = forwarded_segments(b"/v1/rollouts/a%5Cb")
    assert segments == []
    assert "browsers read as '/'" in str(problem)
