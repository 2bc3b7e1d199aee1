"""Both servers describe what they accept: a schema-based fuzzer (schemathesis) sends each
route of the store server and of the gateway requests generated from their OpenAPI documents,
valid and invalid, and fails on any 5xx, any answer the document does not describe, and any
valid request refused or invalid one accepted (for the gateway's calls that reach the engine,
which fields are valid is the engine's call: those are checked for the rest). Bounded: 30
examples per route, long polls held 0.1 s."""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import checks

import agl
from agl._ids import ID_SCHEMA
from agl.gateway import GatewayServer
from agl.store._memory import MemoryStore
from agl.store._serve import StoreServer
from agl.testing.openai_server import OpenAIServer, echo


@pytest.fixture(scope="module")
def store_server() -> Iterator[StoreServer]:
    with StoreServer("memory://") as server:
        yield server


def fuzz(url: str, examples: int, path: dict[str, str] | None = None) -> list[str]:
    """Fuzz every operation of the OpenAPI document at ``url``; return their labels.

    ``path``: path parameters given to every other case (ids the server knows), so requests
    get past the lookup; the others keep the generated ones.
    """
    schema = schemathesis.openapi.from_url(url)
    labels = []
    for found in schema.get_all_operations():
        operation = found.ok()
        labels.append(operation.label)

        @given(case=operation.as_strategy())
        @settings(
            max_examples=examples,
            deadline=None,
            derandomize=True,  # the same examples every run: CI stays reproducible
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        def check(case: Any) -> None:
            _short_polls(case)
            excluded = []
            if case.operation.label == "POST /v1/traces":
                # OTLP's body is opentelemetry-proto's message, not restated in the document
                # ("an object"): what it accepts is tested with a real OTLP exporter
                # (test_otlp.py). No 5xx and documented answers still hold.
                excluded = [checks.positive_data_acceptance]
            if (
                path
                and case.path_parameters
                and zlib.crc32(repr(case.body).encode(errors="replace")) % 2
            ):
                case.path_parameters = {**case.path_parameters, **path}
                # Forwarded upstream: which OpenAI fields are valid is the engine's call (the
                # gateway passes them on); no 5xx and answers as documented still hold.
                excluded = [checks.positive_data_acceptance, checks.negative_data_rejection]
            case.call_and_validate(excluded_checks=excluded)

        check()
    return labels


def test_the_store_server_answers_as_its_document_says(store_server: StoreServer) -> None:
    labels = fuzz(f"{store_server.url}/openapi.json", 30)
    assert "POST /v1/rollouts/dequeue" in labels


def test_the_gateway_answers_as_its_document_says() -> None:
    store = MemoryStore()

    async def claim() -> dict[str, str]:
        await store.enqueue_rollouts([agl.RolloutRequest(input=0)])
        [claimed] = await store.dequeue_rollouts()
        return {"rollout_id": claimed.rollout.rollout_id, "attempt_id": claimed.attempt.attempt_id}

    ids = asyncio.run(claim())
    with (
        OpenAIServer(echo, max_model_len=256) as upstream,
        GatewayServer([upstream.url], store) as gateway,
    ):
        labels = fuzz(f"{gateway.url}/openapi.json", 30, path=ids)
    assert "POST /rollout/{rollout_id}/attempt/{attempt_id}/v1/chat/completions" in labels
    assert "POST /rollout/{rollout_id}/attempt/{attempt_id}/v1/completions" in labels
    assert "POST /rollout/{rollout_id}/attempt/{attempt_id}/v1/responses" in labels
    assert "POST /rollout/{rollout_id}/attempt/{attempt_id}/v1/messages" in labels


def _short_polls(case: Any) -> None:
    """A long poll the server accepts (0 to 60 s) is held for 0.1 s at most here, so the run
    stays bounded; waits out of range are sent as generated, to be refused."""
    body = case.body
    if not isinstance(body, dict):
        return
    for key in ("wait", "timeout"):
        value = body.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool) and 0.1 < value <= 60:
            body[key] = 0.1


def test_the_store_document_states_the_limits_it_enforces(store_server: StoreServer) -> None:
    import httpx

    doc = httpx.get(f"{store_server.url}/openapi.json").json()
    schemas = doc["components"]["schemas"]
    assert schemas["DequeueBody"]["properties"]["wait"]["maximum"] == 60
    assert schemas["WaitBody"]["properties"]["timeout"]["maximum"] == 60
    retry_on = schemas["RolloutConfig"]["properties"]["retry_on"]
    assert retry_on["items"] == {"enum": ["failed", "timeout", "unresponsive"]}
    assert schemas["ResourceJson"]["required"] == ["type"]
    assert "pattern" in schemas["RolloutRequest"]["properties"]["rollout_id"]["anyOf"][0]


def test_a_long_poll_over_the_maximum_is_refused_naming_it(store_server: StoreServer) -> None:
    import httpx

    for path, body in (
        ("/v1/rollouts/dequeue", {"wait": 61}),
        ("/v1/rollouts/wait", {"rollout_ids": ["x"], "timeout": 2860}),
    ):
        reply = httpx.post(f"{store_server.url}{path}", json=body)
        assert reply.status_code == 422, reply.text  # the server's status for a bad field
        error = reply.json()["error"]
        assert error["field"] in ("wait", "timeout")
        assert "60" in error["message"]


def test_a_wrong_method_is_a_405_with_allow(store_server: StoreServer) -> None:
    import httpx

    reply = httpx.get(f"{store_server.url}/v1/spans")
    assert reply.status_code == 405
    assert reply.headers["allow"] == "POST"
    for path in ("/v1/metrics", "/v1/resources"):  # each served by two routes
        reply = httpx.patch(f"{store_server.url}{path}")
        assert (reply.status_code, reply.headers["allow"]) == (405, "GET, POST"), path


SPAN = {
    "rollout_id": "ro-x",
    "attempt_id": "at-x",
    "trace_id": "0" * 32,
    "span_id": "0" * 16,
    "name": "s",
    "start_time_unix_nano": 1,
}

# (where in the document, what it states, a request breaking it: path, body, the field named)
CONSTRAINTS: list[tuple[str, dict[str, Any], str, dict[str, Any], str]] = [
    ("DequeueBody/limit", {"type": "integer"}, "dequeue", {"limit": True}, "limit"),
    ("DequeueBody/limit", {"type": "integer"}, "dequeue", {"limit": "1"}, "limit"),
    ("DequeueBody/limit", {"minimum": 1}, "dequeue", {"limit": 0}, "limit"),
    ("DequeueBody/wait", {"type": "number"}, "dequeue", {"wait": True}, "wait"),
    ("DequeueBody/wait", {"minimum": 0}, "dequeue", {"wait": -0.5}, "wait"),
    ("DequeueBody/worker_id", {"maxLength": 256}, "dequeue", {"worker_id": "w" * 257},
     "worker_id"),
    ("DequeueBody/worker_id", {"pattern": "^[^\\x00-\\x1f\\x7f-\\x9f]+$"}, "dequeue",
     {"worker_id": "w\x00"}, "worker_id"),
    ("WaitBody/timeout", {"type": "number"}, "wait", {"rollout_ids": [], "timeout": False},
     "timeout"),
    ("AttemptUpdateBody/heartbeat", {"type": "boolean"}, "attempt", {"heartbeat": 1},
     "heartbeat"),
    ("RolloutConfig/timeout_seconds", {"minimum": 0.1}, "enqueue",
     {"timeout_seconds": 5e-324}, "requests[0].config.timeout_seconds"),
    ("RolloutConfig/timeout_seconds", {"type": "number"}, "enqueue",
     {"timeout_seconds": True}, "requests[0].config.timeout_seconds"),
    ("RolloutConfig/unresponsive_seconds", {"minimum": 0.1}, "enqueue",
     {"unresponsive_seconds": 0.05}, "requests[0].config.unresponsive_seconds"),
    ("RolloutConfig/max_attempts", {"type": "integer"}, "enqueue", {"max_attempts": True},
     "requests[0].config.max_attempts"),
    ("RolloutConfig/max_attempts", {"minimum": 1}, "enqueue", {"max_attempts": 0},
     "requests[0].config.max_attempts"),
    ("RolloutConfig/retry_on", {"uniqueItems": True}, "enqueue",
     {"retry_on": ["failed", "timeout", "failed"]}, "requests[0].config.retry_on"),
    ("MetricsRow/step", {"type": "integer"}, "metrics", {"step": True}, "rows[0].step"),
    ("MetricsRow/time", {"type": "number"}, "metrics", {"time": "1.5"}, "rows[0].time"),
    ("MetricsRow/values", {"additionalProperties": {"type": "number"}}, "metrics",
     {"values": {"reward": True}}, "rows[0].values.reward"),
    ("MetricsRow/values", {"propertyNames": ID_SCHEMA}, "metrics", {"values": {"a\x00": 1}},
     "rows[0].values"),
    ("Span/start_time_unix_nano", {"type": "integer"}, "spans",
     {"start_time_unix_nano": True}, "spans[0].start_time_unix_nano"),
    ("Span/sequence_id", {"minimum": 1}, "spans", {"sequence_id": 0}, "spans[0].sequence_id"),
]  # fmt: skip


def _stated(doc: dict[str, Any], where: str) -> dict[str, Any]:
    model, field = where.split("/")
    schema: dict[str, Any] = doc["components"]["schemas"][model]["properties"][field]
    branches = [b for b in schema.get("anyOf", [schema]) if b.get("type") != "null"]
    return {**schema, **branches[0]}


def _request(kind: str, change: dict[str, Any], rollout_path: str) -> tuple[str, dict[str, Any]]:
    if kind == "enqueue":
        return "/v1/rollouts/enqueue", {"requests": [{"input": 1, "config": change}]}
    if kind == "metrics":
        return "/v1/metrics", {"rows": [{"run": "r", "step": 0, "time": 0.0, **change}]}
    if kind == "spans":
        return "/v1/spans", {"spans": [{**SPAN, **change}]}
    if kind == "attempt":
        return rollout_path, change
    return f"/v1/rollouts/{kind}", change


def test_each_limit_the_document_states_the_server_enforces(store_server: StoreServer) -> None:
    """What the OpenAPI document says a field takes is what the server takes: a boolean is no
    number, a duplicated retry_on is refused, a time limit under its minimum is refused naming
    it. For each constraint: the document states it, and a request breaking it is a 422 (the
    server's answer to a bad field) naming the field, with nothing stored."""
    import httpx

    with httpx.Client(base_url=store_server.url, timeout=30) as http:
        doc = http.get("/openapi.json").json()
        [rollout] = http.post("/v1/rollouts/enqueue", json={"requests": [{"input": 0}]}).json()[
            "rollouts"
        ]
        [claim] = http.post("/v1/rollouts/dequeue", json={"limit": 1.0}).json()["claims"]
        attempt = f"/v1/rollouts/{rollout['rollout_id']}/attempts/{claim['attempt']['attempt_id']}"
        before = http.get("/v1/statistics").json()
        for where, states, kind, change, field in CONSTRAINTS:
            stated = _stated(doc, where)
            assert {key: stated.get(key) for key in states} == states, (where, stated)
            path, body = _request(kind, change, attempt)
            reply = http.post(path, json=body)
            assert reply.status_code == 422, (where, change, reply.text[:300])
            error = reply.json()["error"]
            assert error["field"] == field, (where, error)
            if "minimum" in states:
                assert f"{states['minimum']:g}" in error["message"], error["message"]
        assert http.get("/v1/statistics").json() == before
        # the edges themselves are taken
        edge = {"timeout_seconds": 0.1, "unresponsive_seconds": 0.1, "max_attempts": 2.0}
        taken = http.post("/v1/rollouts/enqueue", json={"requests": [{"input": 1, "config": edge}]})
        assert taken.status_code == 200, taken.text
        assert taken.json()["rollouts"][0]["config"]["max_attempts"] == 2


def test_the_http_client_waits_longer_than_one_poll_by_polling_again() -> None:
    from agl.store._http_wire import polls as _polls

    assert _polls(130) == [60.0, 60.0, 10.0]
    assert _polls(120) == [60.0, 60.0]
    assert _polls(5) == [5]
    assert _polls(-1) == [-1]  # refused by the server, as it is
    assert _polls(4000) == [4000]
