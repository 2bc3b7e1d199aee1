"""One rule for ids (:mod:`agl._ids`), the same at every door: the rule itself, the store
server over HTTP (bodies, queries, paths and its OpenAPI document), the gateway's URL path and
the ``agl`` command line. Every backend's Python API runs the conformance suite's part on ids
(:mod:`agl.testing._store_ids`)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest

import agl
from agl._ids import MAX_ID_LENGTH, check_id, id_problem
from agl.gateway import GatewayServer
from agl.store._memory import MemoryStore
from agl.store._serve import StoreServer
from agl.testing.openai_server import OpenAIServer, echo

HUGE = "w" + "x" * 99_999 + "\x00ab"
"""The 100,003-character worker id with a NUL that the store once took."""


@pytest.fixture(scope="module")
def server() -> Iterator[StoreServer]:
    with StoreServer("memory://") as running:
        yield running


def test_the_rule() -> None:
    assert id_problem("runner-1") is None
    assert id_problem("x" * MAX_ID_LENGTH) is None
    assert id_problem("a b/c%d", segment=False) is None  # a name, not a path segment
    assert id_problem("héllo-ünïcode", segment=True) is None
    assert id_problem("") == "is empty"
    assert "at most 256" in str(id_problem("x" * (MAX_ID_LENGTH + 1)))
    assert "'\\x00'" in str(id_problem("a\x00b"))
    for control in ("\t", "\n", "\x1f", "\x7f", "\x85", "\x9f"):
        assert "control characters" in str(id_problem(f"a{control}b")), repr(control)
    for not_segment in ("a/b", ".", "..", "a b", "50%", "a?b", "a#b"):
        assert id_problem(not_segment) is None
        assert "URL path segment" in str(id_problem(not_segment, segment=True)), not_segment
    assert id_problem(7) == "must be text, got int"
    with pytest.raises(agl.InvalidInputError) as caught:
        check_id(HUGE, "worker_id")
    assert caught.value.field == "worker_id"
    assert caught.value.message.startswith("worker_id is 100,003 characters long")
    assert len(caught.value.message) < 200


# --- the store server over HTTP ----------------------------------------------------------------


def _refusal(reply: httpx.Response, field: str) -> dict[str, Any]:
    assert reply.status_code == 422, reply.text[:300]
    error: dict[str, Any] = reply.json()["error"]
    assert (error["type"], error["field"]) == ("InvalidInputError", field), error
    assert len(error["message"]) < 400, len(error["message"])  # the value is cut
    assert len(str(error.get("value", ""))) <= 200
    return error


def test_the_store_server_refuses_bad_ids_at_every_door(server: StoreServer) -> None:
    with httpx.Client(base_url=server.url, timeout=30) as http:
        [rollout] = http.post("/v1/rollouts/enqueue", json={"requests": [{"input": 1}]}).json()[
            "rollouts"
        ]
        rid = rollout["rollout_id"]
        error = _refusal(http.post("/v1/rollouts/dequeue", json={"worker_id": HUGE}), "worker_id")
        assert "100,003 characters" in error["message"]
        error = _refusal(
            http.post("/v1/rollouts/dequeue", json={"worker_id": "a\x00"}), "worker_id"
        )
        assert "control characters" in error["message"]
        bodies: list[tuple[str, dict[str, Any], str]] = [
            (
                "/v1/rollouts/enqueue",
                {"requests": [{"input": 1, "rollout_id": "a\x00"}]},
                "requests[0].rollout_id",
            ),
            (
                "/v1/rollouts/enqueue",
                {"requests": [{"input": 1, "resources_id": "x" * 257}]},
                "requests[0].resources_id",
            ),
            ("/v1/rollouts/wait", {"rollout_ids": [rid, "a/b"], "timeout": 0}, "rollout_ids[1]"),
            ("/v1/resources", {"resources": {"a\x07": {"type": "llm"}}}, "resources"),
            ("/v1/resources", {"resources": {}, "resources_id": ".."}, "resources_id"),
            ("/v1/metrics", {"rows": [{"run": "", "step": 0, "time": 0}]}, "rows[0].run"),
        ]
        for path, body, field in bodies:
            _refusal(http.post(path, json=body), field)
        queries = [
            ("/v1/rollouts", {"worker_id": "w\x01"}, "worker_id"),
            ("/v1/rollouts", {"search": "a\x00"}, "search"),
            ("/v1/metrics", {"run": "r" * 257}, "run"),
            (f"/v1/rollouts/{rid}/spans", {"attempt_id": "a b"}, "attempt_id"),
        ]
        for path, params, field in queries:
            _refusal(http.get(path, params=params), field)
        nul, escape, space = quote("a\x00b"), quote("at\x1b"), quote("with space")
        for path, field in [
            (f"/v1/rollouts/{nul}", "rollout_id"),
            (f"/v1/rollouts/{'x' * 257}/attempts", "rollout_id"),
            (f"/v1/resources/{space}", "resources_id"),
        ]:
            _refusal(http.get(path), field)
        reply = http.post(f"/v1/rollouts/{rid}/attempts/{escape}", json={})
        _refusal(reply, "attempt_id")
        # the refusals left nothing behind: no worker seen, the rollout still queued
        assert http.get("/v1/workers").json() == {"workers": []}
        assert http.get(f"/v1/rollouts/{rid}").json()["status"] == "queuing"


def test_the_store_document_states_the_id_rule(server: StoreServer) -> None:
    doc = httpx.get(f"{server.url}/openapi.json").json()
    schemas = doc["components"]["schemas"]

    def only(schema: dict[str, Any]) -> dict[str, Any]:
        return schema["anyOf"][0] if "anyOf" in schema else schema

    stated = [
        only(schemas["DequeueBody"]["properties"]["worker_id"]),
        only(schemas["RolloutRequest"]["properties"]["rollout_id"]),
        only(schemas["RolloutRequest"]["properties"]["resources_id"]),
        only(schemas["ResourcesBody"]["properties"]["resources_id"]),
        schemas["ResourcesBody"]["properties"]["resources"]["propertyNames"],
        schemas["WaitBody"]["properties"]["rollout_ids"]["items"],
        schemas["Span"]["properties"]["rollout_id"],
        schemas["Span"]["properties"]["attempt_id"],
        schemas["MetricsRow"]["properties"]["run"],
    ]
    parameters = {
        (path, parameter["name"]): parameter["schema"]
        for path, operations in doc["paths"].items()
        for operation in operations.values()
        for parameter in operation.get("parameters", [])
    }
    for key in [
        ("/v1/rollouts/{rollout_id}", "rollout_id"),
        ("/v1/rollouts/{rollout_id}/attempts/{attempt_id}", "attempt_id"),
        ("/v1/rollouts/{rollout_id}/spans", "attempt_id"),
        ("/v1/resources/{resources_id}", "resources_id"),
        ("/v1/rollouts", "worker_id"),
        ("/v1/metrics", "run"),
    ]:
        stated.append(only(parameters[key]))  # noqa: PERF401 - one line per parameter
    for schema in stated:
        assert (schema["type"], schema["minLength"], schema["maxLength"]) == (
            "string",
            1,
            MAX_ID_LENGTH,
        ), schema
        assert "\\x00-\\x1f\\x7f-\\x9f" in schema["pattern"], schema


# --- the gateway's URL path --------------------------------------------------------------------


def test_the_gateway_refuses_bad_ids_in_its_path_in_the_wires_format() -> None:
    store = MemoryStore()

    async def claim() -> tuple[str, str]:
        await store.enqueue_rollouts([agl.RolloutRequest(input=0)])
        [claimed] = await store.dequeue_rollouts()
        return claimed.rollout.rollout_id, claimed.attempt.attempt_id

    rid, aid = asyncio.run(claim())
    chat = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    messages = {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
    with (
        OpenAIServer(echo, max_model_len=256) as upstream,
        GatewayServer([upstream.url], store) as gateway,
        httpx.Client(base_url=gateway.url, timeout=30) as http,
    ):
        for rollout_id, attempt_id, field in [
            (quote("a\x00b"), aid, "rollout_id"),
            (rid, "x" * 257, "attempt_id"),
            (rid, quote("a b"), "attempt_id"),
        ]:
            base = f"/rollout/{rollout_id}/attempt/{attempt_id}"
            for method, path, body in [
                ("POST", "/v1/chat/completions", chat),
                ("GET", "/v1/models", None),
                ("POST", "/flush", None),
            ]:
                reply = http.request(method, base + path, json=body)
                assert reply.status_code == 400, (path, reply.text[:300])
                assert reply.json()["error"]["message"].startswith(field), reply.text[:300]
            reply = http.post(base + "/v1/messages", json=messages)
            assert reply.status_code == 400, reply.text[:300]
            assert reply.json()["type"] == "error"  # Anthropic's shape
            assert reply.json()["error"]["message"].startswith(field)
        ok = http.post(f"/rollout/{rid}/attempt/{aid}/v1/chat/completions", json=chat)
        assert ok.status_code == 200, ok.text[:300]


# --- the command line --------------------------------------------------------------------------


def test_the_cli_refuses_bad_ids_naming_them(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'agl.db'}"
    agl_cli = [sys.executable, "-m", "agl"]
    runner = subprocess.run(
        [*agl_cli, "runner", "--agent", "json:dumps", "--store", db, "--worker-id", "w" * 300],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
        env={"COLUMNS": "300", "PATH": "", "PYTHONIOENCODING": "utf-8"},
    )
    assert runner.returncode == 1, runner.stdout + runner.stderr
    said = " ".join((runner.stdout + runner.stderr).split())  # whatever the terminal's width
    assert "worker_id is 300 characters long; an id has at most 256" in said
    asyncio.run(_fill(db))
    show = subprocess.run(
        [*agl_cli, "rollouts", "show", "a\tb", "--store", db],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
        env={"COLUMNS": "300", "PATH": "", "PYTHONIOENCODING": "utf-8"},
    )
    assert show.returncode == 1, show.stdout + show.stderr
    said = " ".join((show.stdout + show.stderr).split())
    assert "rollout_id holds control characters ('\\t')" in said


async def _fill(url: str) -> None:
    async with agl.open_store(url) as store:
        await store.enqueue_rollouts([agl.RolloutRequest(input=1, rollout_id="ro-1")])
