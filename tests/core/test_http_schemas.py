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


def test_the_http_client_waits_longer_than_one_poll_by_polling_again() -> None:
    from agl.store._http_wire import polls as _polls

    assert _polls(130) == [60.0, 60.0, 10.0]
    assert _polls(120) == [60.0, 60.0]
    assert _polls(5) == [5]
    assert _polls(-1) == [-1]  # refused by the server, as it is
    assert _polls(4000) == [4000]
