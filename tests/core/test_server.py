"""The store server over raw HTTP: a real uvicorn server on loopback, spoken to with httpx.

Every error the server sends must be a JSON body ``{"error": {"type", "message", "field",
"value"}}`` with the documented status code and never a traceback; the OTLP/HTTP endpoint must
take what the OpenTelemetry SDK and its exporter really send.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from google.protobuf import json_format
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import agl
from agl.semconv import AGL_ATTEMPT_ID, AGL_ROLLOUT_ID
from agl.store._http import HttpStore
from agl.store._memory import MemoryStore
from agl.store._serve import StoreServer, check_bind_address
from agl.testing.ports import free_port

ERROR_KEYS = {"type", "message", "field", "value"}
TOKEN = "s3cret-token"


# --- fixtures and helpers ---------------------------------------------------------------------


@pytest.fixture(scope="module", params=["memory", "sqlite"])
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[StoreServer]:
    """One server per backend for the module: each test makes its own rollouts."""
    if request.param == "memory":
        url = "memory://"
    else:
        url = f"sqlite:///{tmp_path_factory.mktemp('server') / 'server.db'}"
    with StoreServer(url) as running:
        yield running


@pytest.fixture
def client(server: StoreServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=10) as http:
        yield http


@pytest.fixture
def no_token_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """HttpStore and the CLI read AGL_STORE_TOKEN; these tests must not see one."""
    monkeypatch.delenv("AGL_STORE_TOKEN", raising=False)


def error_of(
    response: httpx.Response,
    status: int,
    kind: str,
    *,
    field: str | None = None,
    value: Any = None,
) -> dict[str, Any]:
    """Check that ``response`` is the agl JSON error described; return its ``error`` object."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    assert "Traceback" not in response.text
    assert 'File "' not in response.text
    body = response.json()
    assert set(body) == {"error"}
    error = body["error"]
    assert set(error) <= ERROR_KEYS
    assert error["type"] == kind
    assert isinstance(error["message"], str)
    assert error["message"]
    if field is not None:
        assert error.get("field") == field
    if value is not None:
        assert error.get("value") == value
    return dict(error)


def claim(client: httpx.Client, config: dict[str, Any] | None = None) -> tuple[str, str]:
    """Enqueue one rollout and claim it over HTTP; return (rollout id, attempt id)."""
    request: dict[str, Any] = {"input": {"question": "2+2"}}
    if config is not None:
        request["config"] = config
    response = client.post("/v1/rollouts/enqueue", json={"requests": [request]})
    assert response.status_code == 200, response.text
    rollout_id = response.json()["rollouts"][0]["rollout_id"]
    response = client.post("/v1/rollouts/dequeue", json={"limit": 1, "worker_id": "w1"})
    assert response.status_code == 200, response.text
    [claimed] = response.json()["claims"]
    assert claimed["rollout"]["rollout_id"] == rollout_id
    return rollout_id, claimed["attempt"]["attempt_id"]


def span_json(rollout_id: str, attempt_id: str, name: str, **changes: Any) -> dict[str, Any]:
    span = agl.Span.create(rollout_id=rollout_id, attempt_id=attempt_id, name=name)
    return {**span.model_dump(mode="json", exclude={"sequence_id"}), **changes}


def stored_spans(client: httpx.Client, rollout_id: str) -> list[dict[str, Any]]:
    response = client.get(f"/v1/rollouts/{rollout_id}/spans")
    assert response.status_code == 200, response.text
    spans: list[dict[str, Any]] = response.json()["spans"]
    return spans


def record_sdk_spans(resource: dict[str, Any], names: list[str]) -> list[ReadableSpan]:
    """Record a parent span with one child per name, with the OpenTelemetry SDK."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create(resource))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("agent", "1.0")
    with tracer.start_as_current_span("agent run", attributes={"step": 0}):
        for index, name in enumerate(names, start=1):
            with tracer.start_as_current_span(name, attributes={"step": index}):
                pass
    provider.shutdown()
    return list(exporter.get_finished_spans())


def to_otlp_json(request: ExportTraceServiceRequest) -> bytes:
    """OTLP/JSON: the proto3 JSON mapping, but with trace and span ids as hex strings."""
    data = json_format.MessageToDict(request)
    for resource_spans in data.get("resourceSpans", []):
        for scope_spans in resource_spans.get("scopeSpans", []):
            for span in scope_spans.get("spans", []):
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in span:
                        span[key] = base64.b64decode(span[key]).hex()
    return json.dumps(data).encode()


def hex_ids(sdk_span: ReadableSpan) -> tuple[str, str]:
    context = sdk_span.get_span_context()
    assert context is not None
    return f"{context.trace_id:032x}", f"{context.span_id:016x}"


# --- meta routes ------------------------------------------------------------------------------


def test_health(client: httpx.Client) -> None:
    response = client.get("/health")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_openapi_spec_lists_the_routes(client: httpx.Client) -> None:
    response = client.get("/openapi.json")
    assert response.status_code == 200
    spec = response.json()
    paths = spec["paths"]
    expected = {
        "/health": "get",
        "/v1/rollouts/enqueue": "post",
        "/v1/rollouts/dequeue": "post",
        "/v1/rollouts/wait": "post",
        "/v1/rollouts": "get",
        "/v1/rollouts/{rollout_id}": "get",
        "/v1/rollouts/{rollout_id}/cancel": "post",
        "/v1/rollouts/{rollout_id}/attempts": "get",
        "/v1/rollouts/{rollout_id}/attempts/{attempt_id}": "post",
        "/v1/spans": "post",
        "/v1/rollouts/{rollout_id}/spans": "get",
        "/v1/resources": "post",
        "/v1/resources/latest": "get",
        "/v1/resources/{resources_id}": "get",
        "/v1/metrics": "post",
        "/v1/metrics/runs": "get",
        "/v1/workers": "get",
        "/v1/statistics": "get",
        "/v1/traces": "post",
    }
    for path, method in expected.items():
        assert method in paths.get(path, {}), f"{method.upper()} {path} missing from the spec"
    assert {"get", "post"} <= set(paths["/v1/resources"])
    assert {"get", "post"} <= set(paths["/v1/metrics"])
    rollout_params = {param["name"] for param in paths["/v1/rollouts"]["get"]["parameters"]}
    assert {"search", "worker_id", "since", "until", "order"} <= rollout_params
    # The span route parses its body by hand; the spec must still describe it.
    body = paths["/v1/spans"]["post"]["requestBody"]["content"]["application/json"]
    assert body["schema"] == {"$ref": "#/components/schemas/SpansBody"}
    traces = paths["/v1/traces"]["post"]["requestBody"]["content"]
    assert set(traces) == {"application/x-protobuf", "application/json"}

    # Every reference in the spec resolves.
    schemas = spec["components"]["schemas"]
    refs: set[str] = set()

    def collect(node: Any) -> None:
        if isinstance(node, dict):
            for key, child in node.items():
                if key == "$ref":
                    refs.add(child)
                else:
                    collect(child)
        elif isinstance(node, list):
            for child in node:
                collect(child)

    collect(spec)
    assert refs
    assert {ref.rsplit("/", 1)[-1] for ref in refs} <= set(schemas)


# --- malformed and invalid requests -----------------------------------------------------------


@pytest.mark.parametrize("path", ["/v1/spans", "/v1/rollouts/enqueue", "/v1/rollouts/dequeue"])
@pytest.mark.parametrize("body", [b"{not json", b'{"spans": [', b"\xff\xfe"])
def test_malformed_json_is_400(client: httpx.Client, path: str, body: bytes) -> None:
    response = client.post(path, content=body, headers={"content-type": "application/json"})
    error = error_of(response, 400, "InvalidInputError")
    assert "JSON" in error["message"]


def test_wrong_query_type_is_422(client: httpx.Client) -> None:
    response = client.get("/v1/rollouts", params={"limit": "x"})
    error = error_of(response, 422, "InvalidInputError", field="limit", value="x")
    assert error["message"].startswith("limit:")


def test_wrong_body_type_is_422(client: httpx.Client) -> None:
    response = client.post("/v1/rollouts/dequeue", json={"limit": "x"})
    error_of(response, 422, "InvalidInputError", field="limit", value="x")
    response = client.post("/v1/rollouts/dequeue", json={"limit": 1, "surprise": True})
    error_of(response, 422, "InvalidInputError", field="surprise")
    response = client.post("/v1/rollouts/enqueue", json={"requests": [{"input": 1, "mode": "x"}]})
    error_of(response, 422, "InvalidInputError", field="requests[0].mode", value="x")


def test_bad_span_field_is_422_naming_its_path(client: httpx.Client) -> None:
    rollout_id, attempt_id = claim(client)
    spans = [span_json(rollout_id, attempt_id, f"s{i}") for i in range(3)]
    spans[2]["trace_id"] = "not-a-trace-id"
    response = client.post("/v1/spans", json={"spans": spans})
    error = error_of(
        response, 422, "InvalidInputError", field="spans[2].trace_id", value="not-a-trace-id"
    )
    assert "spans[2].trace_id" in error["message"]


def test_a_bad_span_rejects_the_whole_batch(client: httpx.Client) -> None:
    rollout_id, attempt_id = claim(client)
    earlier = [span_json(rollout_id, attempt_id, f"early{i}") for i in range(2)]
    response = client.post("/v1/spans", json={"spans": earlier})
    assert response.status_code == 200, response.text
    assert response.json() == {"sequence_ids": [1, 2]}

    # Invalid in shape: rejected while the body is parsed.
    batch = [span_json(rollout_id, attempt_id, f"late{i}") for i in range(3)]
    batch[1]["trace_id"] = "XYZ"
    response = client.post("/v1/spans", json={"spans": batch})
    error_of(response, 422, "InvalidInputError", field="spans[1].trace_id", value="XYZ")

    # Valid in shape, but naming a rollout the store does not hold: rejected by the store.
    batch = [span_json(rollout_id, attempt_id, f"late{i}") for i in range(3)]
    batch[1]["rollout_id"] = "ro-unknown"
    response = client.post("/v1/spans", json={"spans": batch})
    error_of(response, 404, "NotFoundError", field="spans[1].rollout_id", value="ro-unknown")

    spans = stored_spans(client, rollout_id)
    assert [span["name"] for span in spans] == ["early0", "early1"]
    assert [span["sequence_id"] for span in spans] == [1, 2]

    # The same batch without the bad span goes in whole, numbered after the earlier spans.
    del batch[1]
    response = client.post("/v1/spans", json={"spans": batch})
    assert response.status_code == 200, response.text
    assert response.json() == {"sequence_ids": [3, 4]}
    assert [span["name"] for span in stored_spans(client, rollout_id)] == [
        "early0",
        "early1",
        "late0",
        "late2",
    ]


def test_unknown_rollout_is_404(client: httpx.Client) -> None:
    for method, path in [
        ("GET", "/v1/rollouts/ro-nope"),
        ("GET", "/v1/rollouts/ro-nope/spans"),
        ("GET", "/v1/rollouts/ro-nope/attempts"),
        ("POST", "/v1/rollouts/ro-nope/cancel"),
    ]:
        response = client.request(method, path)
        error = error_of(response, 404, "NotFoundError", field="rollout_id", value="ro-nope")
        assert "ro-nope" in error["message"]
    rollout_id, _ = claim(client)
    response = client.post(f"/v1/rollouts/{rollout_id}/attempts/at-nope", json={})
    error_of(response, 404, "NotFoundError", field="attempt_id", value="at-nope")


# --- what a dashboard reads: rollout filters, resource history, metrics -------------------------


def test_rollouts_are_filtered_and_ordered_by_query_parameters(client: httpx.Client) -> None:
    prefix = f"q-{uuid.uuid4().hex[:8]}"
    requests = [{"input": i, "rollout_id": f"{prefix}-{i}"} for i in range(4)]
    response = client.post("/v1/rollouts/enqueue", json={"requests": requests})
    assert response.status_code == 200, response.text
    enqueued = response.json()["rollouts"][0]["enqueue_time"]
    worker = f"w-{prefix}"
    response = client.post("/v1/rollouts/dequeue", json={"limit": 1, "worker_id": worker})
    assert response.status_code == 200, response.text

    def ids(**params: Any) -> list[str]:
        response = client.get("/v1/rollouts", params={"search": prefix, **params})
        assert response.status_code == 200, response.text
        return [rollout["rollout_id"] for rollout in response.json()["rollouts"]]

    assert ids() == [f"{prefix}-{i}" for i in range(4)]
    assert ids(order="oldest", limit=2) == [f"{prefix}-0", f"{prefix}-1"]
    assert ids(order="newest", limit=2) == [f"{prefix}-3", f"{prefix}-2"]
    page = client.get("/v1/rollouts", params={"search": prefix, "order": "newest", "limit": 3})
    assert (page.json()["total"], page.json()["next_offset"]) == (4, 3)
    assert ids(worker_id=worker) == [f"{prefix}-0"]
    assert ids(status="queuing", order="newest") == [f"{prefix}-{i}" for i in (3, 2, 1)]
    assert ids(since=enqueued, until=enqueued + 3600) == [f"{prefix}-{i}" for i in range(4)]
    assert ids(until=enqueued) == []
    assert ids(search=f"{prefix}-2") == [f"{prefix}-2"]
    for i in range(1, 4):  # the server is the module's: leave nothing queued for other tests
        assert client.post(f"/v1/rollouts/{prefix}-{i}/cancel").status_code == 200


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"search": ""}, "search"),
        ({"search": "x" * 257}, "search"),
        ({"worker_id": ""}, "worker_id"),
        ({"since": "nan"}, "since"),
        ({"until": "inf"}, "until"),
        ({"since": "yesterday"}, "since"),
        ({"order": "sideways"}, "order"),
        ({"limit": "0"}, "limit"),
        ({"offset": str(2**63)}, "offset"),  # beyond any database's integers: not a 500
    ],
)
def test_bad_rollout_query_parameters_are_422_naming_the_field(
    client: httpx.Client, params: dict[str, str], field: str
) -> None:
    response = client.get("/v1/rollouts", params=params)
    error = error_of(response, 422, "InvalidInputError", field=field)
    assert field in error["message"]


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        (
            "/v1/rollouts/enqueue",
            b'{"requests": [{"input": "x"}, {"input": "y\\ud800"}]}',
            "requests[1].input",
        ),
        (
            "/v1/rollouts/enqueue",
            b'{"requests": [{"input": {"a": ["ok", "\\udfff"]}}]}',
            "requests[0].input.a[1]",
        ),
        (
            "/v1/resources",
            b'{"resources": {"p": {"type": "prompt_template", "template": "\\ud83d"}}}',
            "resources.p.template",
        ),
        ("/v1/rollouts/enqueue", b'{"requests": [{"input": NaN}]}', "requests[0].input"),
        (
            "/v1/rollouts/enqueue",
            b'{"requests": [{"input": 1, "config": {"timeout_seconds": Infinity}}]}',
            "requests[0].config.timeout_seconds",
        ),
        (
            "/v1/rollouts/enqueue",
            b'{"requests": [{"input": 1, "metadata": {"x": [-Infinity]}}]}',
            "requests[0].metadata.x[0]",
        ),
        (
            "/v1/resources",
            b'{"resources": {"llm": {"type": "llm", "endpoint": "http://x", "model": "m", '
            b'"sampling_parameters": {"temperature": NaN}}}}',
            "resources.llm.sampling_parameters.temperature",
        ),
    ],
)
def test_unstorable_values_are_400_naming_the_field_and_store_nothing(
    client: httpx.Client, path: str, body: bytes, field: str
) -> None:
    """JSON may escape a lone UTF-16 surrogate or write NaN and Infinity, which no database
    keeps as they are: refused (not a 500, nor a silent null)."""
    total = client.get("/v1/rollouts", params={"limit": 1}).json()["total"]
    latest = client.get("/v1/resources/latest")
    response = client.post(path, content=body, headers={"content-type": "application/json"})
    error = error_of(response, 400, "InvalidInputError", field=field)
    assert "surrogate" in error["message"] or "not a finite number" in error["message"]
    assert client.get("/v1/rollouts", params={"limit": 1}).json()["total"] == total
    assert client.get("/v1/resources/latest").text == latest.text


def test_resource_history_pages_newest_first(client: httpx.Client) -> None:
    published = []
    for model in ("m1", "m2", "m3"):
        body = {"resources": {"llm": {"type": "llm", "endpoint": "http://x/v1", "model": model}}}
        response = client.post("/v1/resources", json=body)
        assert response.status_code == 200, response.text
        published.append(response.json())
    page = client.get("/v1/resources", params={"limit": 2})
    assert page.status_code == 200, page.text
    newest = page.json()
    assert [update["version"] for update in newest["resources"]] == [
        published[2]["version"],
        published[1]["version"],
    ]
    assert newest["resources"][0] == published[2]
    assert newest["next_offset"] == 2
    assert newest["total"] >= 3
    older = client.get("/v1/resources", params={"limit": 1, "offset": 2}).json()
    assert older["resources"] == [published[0]]
    # The routes that were there before keep working.
    assert client.get("/v1/resources/latest").json() == published[2]
    assert client.get(f"/v1/resources/{published[0]['resources_id']}").json() == published[0]
    error_of(client.get("/v1/resources", params={"offset": "-1"}), 422, "InvalidInputError",
             field="offset")  # fmt: skip


def test_metrics_are_added_and_read_back(client: httpx.Client) -> None:
    run = f"run-{uuid.uuid4().hex[:8]}"
    # Python's json writes NaN as a bare token; the server takes it and drops the value.
    body = (
        '{"rows": [{"run": "RUN", "step": 0, "time": 1.5, "values": {"loss": NaN, "reward": 0.5}},'
        ' {"run": "RUN", "step": 1, "time": 2.5, "values": {"reward": 0.75, "kl": null}}]}'
    ).replace("RUN", run)
    response = client.post(
        "/v1/metrics", content=body, headers={"content-type": "application/json"}
    )
    assert response.status_code == 204, response.text
    page = client.get("/v1/metrics", params={"run": run, "limit": 1})
    assert page.status_code == 200, page.text
    assert page.json() == {
        "rows": [{"run": run, "step": 0, "time": 1.5, "values": {"reward": 0.5}}],
        "total": 2,
        "offset": 0,
        "next_offset": 1,
    }
    rest = client.get("/v1/metrics", params={"run": run, "offset": 1}).json()
    assert rest["rows"] == [{"run": run, "step": 1, "time": 2.5, "values": {"reward": 0.75}}]
    assert run in client.get("/v1/metrics/runs").json()["runs"]


def test_bad_metrics_are_422_and_store_nothing(client: httpx.Client) -> None:
    run = f"run-{uuid.uuid4().hex[:8]}"
    rows = [
        {"run": run, "step": 0, "time": 1.0, "values": {}},
        {"run": run, "step": -1, "time": 1.0, "values": {}},
    ]
    response = client.post("/v1/metrics", json={"rows": rows})
    error_of(response, 422, "InvalidInputError", field="rows[1].step", value=-1)
    response = client.post("/v1/metrics", json={"rows": [{**rows[0], "values": {"a": "x"}}]})
    error_of(response, 422, "InvalidInputError", field="rows[0].values.a", value="x")
    assert client.get("/v1/metrics", params={"run": run}).json()["total"] == 0
    error_of(client.get("/v1/metrics", params={"run": ""}), 422, "InvalidInputError", field="run")


def test_unknown_route_is_404_json(client: httpx.Client) -> None:
    error_of(client.get("/v1/no-such-route"), 404, "NotFoundError")
    error_of(client.post("/nowhere", json={}), 404, "NotFoundError")
    error_of(client.get("/v1/spans"), 405, "InvalidInputError")


def test_server_failure_is_500_without_details(no_token_env: None) -> None:
    class BrokenStore(MemoryStore):
        async def statistics(self) -> agl.StoreStatistics:
            raise RuntimeError("secret internal detail")

    with StoreServer(BrokenStore("memory://")) as running:
        with httpx.Client(base_url=running.url, timeout=10) as http:
            response = http.get("/v1/statistics")
            error = error_of(response, 500, "StoreError")
            assert "secret internal detail" not in response.text
            assert "RuntimeError" in error["message"]
        # The server goes on serving (on a new connection: see the test below).
        with httpx.Client(base_url=running.url, timeout=10) as http:
            assert http.get("/health").status_code == 200


def read_response(sock: socket.socket) -> tuple[bytes, bytes]:
    """Read one HTTP/1.1 response with a Content-Length; return (head, body)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"connection closed mid-response: {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.lower().split(b"\r\n")
        if line.startswith(b"content-length:")
    )
    while len(body) < length:
        chunk = sock.recv(65536)
        assert chunk
        body += chunk
    return head, body


def test_server_failure_keeps_the_connection_usable() -> None:
    class BrokenStore(MemoryStore):
        async def statistics(self) -> agl.StoreStatistics:
            raise RuntimeError("secret internal detail")

    with StoreServer(BrokenStore("memory://")) as running:
        host, port = running.url.removeprefix("http://").rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(b"GET /v1/statistics HTTP/1.1\r\nHost: agl\r\n\r\n")
            head, _ = read_response(sock)
            assert head.startswith(b"HTTP/1.1 500 ")
            if b"\r\nconnection: close" in head.lower():
                return  # the client was told not to reuse the connection: fine
            time.sleep(0.2)  # let the server do whatever it does with the connection
            try:
                sock.sendall(b"GET /health HTTP/1.1\r\nHost: agl\r\n\r\n")
                head, body = read_response(sock)
            except (ConnectionError, AssertionError) as exc:
                pytest.fail(f"connection silently closed after a 500: {exc!r}")
            assert head.startswith(b"HTTP/1.1 200 ")
            assert json.loads(body) == {"status": "ok"}


# --- body size limit --------------------------------------------------------------------------

LIMIT = 1024


@pytest.fixture
def small_server() -> Iterator[StoreServer]:
    with StoreServer("memory://", max_body_bytes=LIMIT) as running:
        yield running


def chunks(total: int, size: int = 256) -> Iterator[bytes]:
    """A body streamed in chunks, so httpx sends it without a Content-Length."""
    sent = 0
    while sent < total:
        yield b" " * min(size, total - sent)
        sent += size


@pytest.mark.parametrize("path", ["/v1/spans", "/v1/rollouts/enqueue", "/v1/traces"])
def test_oversized_body_with_length_is_413(small_server: StoreServer, path: str) -> None:
    with httpx.Client(base_url=small_server.url, timeout=10) as http:
        body = b" " * (LIMIT + 1)
        response = http.post(path, content=body, headers={"content-type": "application/json"})
        error = error_of(response, 413, "InvalidInputError", field="body")
        assert str(LIMIT) in error["message"]
        # A body at the limit is let through (and judged on its content).
        response = http.post(
            path, content=b" " * LIMIT, headers={"content-type": "application/json"}
        )
        assert response.status_code != 413
        assert http.get("/health").status_code == 200


@pytest.mark.parametrize(
    "path",
    [
        "/v1/spans",
        "/v1/traces",
        "/v1/rollouts/enqueue",
        "/v1/resources",
    ],
)
def test_oversized_streamed_body_is_413(small_server: StoreServer, path: str) -> None:
    with httpx.Client(base_url=small_server.url, timeout=10) as http:
        request = http.build_request(
            "POST", path, content=chunks(4 * LIMIT), headers={"content-type": "application/json"}
        )
        assert "content-length" not in request.headers
        assert request.headers["transfer-encoding"] == "chunked"
        response = http.send(request)
        error_of(response, 413, "InvalidInputError", field="body")
        assert http.get("/health").status_code == 200


def test_streamed_body_under_the_limit_is_accepted(small_server: StoreServer) -> None:
    with httpx.Client(base_url=small_server.url, timeout=10) as http:
        rollout_id, attempt_id = claim(http)
        body = json.dumps({"spans": [span_json(rollout_id, attempt_id, "s")]}).encode()
        assert len(body) < LIMIT
        response = http.post(
            "/v1/spans",
            content=iter([body[:100], body[100:]]),
            headers={"content-type": "application/json"},
        )
        assert response.status_code == 200, response.text
        assert response.json() == {"sequence_ids": [1]}


# --- the bearer token -------------------------------------------------------------------------


@pytest.fixture
def token_server() -> Iterator[StoreServer]:
    with StoreServer("memory://", token=TOKEN) as running:
        yield running


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"authorization": "Bearer wrong"},
        {"authorization": TOKEN},
        {"authorization": f"Basic {TOKEN}"},
        {"authorization": f"Bearer {TOKEN}x"},
    ],
    ids=["none", "wrong", "no-scheme", "basic", "longer"],
)
def test_token_required(token_server: StoreServer, headers: dict[str, str]) -> None:
    with httpx.Client(base_url=token_server.url, timeout=10, headers=headers) as http:
        for method, path in [
            ("GET", "/health"),
            ("GET", "/openapi.json"),
            ("GET", "/v1/no-such-route"),
            ("GET", "/v1/rollouts"),
        ]:
            error_of(http.request(method, path), 401, "UnauthorizedError")
        response = http.post("/v1/rollouts/enqueue", json={"requests": [{"input": 1}]})
        error_of(response, 401, "UnauthorizedError")
    with httpx.Client(
        base_url=token_server.url, timeout=10, headers={"authorization": f"Bearer {TOKEN}"}
    ) as http:
        page = http.get("/v1/rollouts").json()
        assert page["total"] == 0  # the refused enqueue did nothing


def test_right_token_is_accepted(token_server: StoreServer) -> None:
    with httpx.Client(
        base_url=token_server.url, timeout=10, headers={"authorization": f"Bearer {TOKEN}"}
    ) as http:
        assert http.get("/health").json() == {"status": "ok"}
        assert http.get("/openapi.json").status_code == 200
        rollout_id, attempt_id = claim(http)
        response = http.post("/v1/spans", json={"spans": [span_json(rollout_id, attempt_id, "s")]})
        assert response.status_code == 200, response.text


def test_http_store_client_and_token(token_server: StoreServer, no_token_env: None) -> None:
    async def scenario() -> None:
        async with HttpStore(token_server.url, token=TOKEN) as store:
            [rollout] = await store.enqueue_rollouts([agl.RolloutRequest(input={"q": 1})])
            assert (await store.get_rollout(rollout.rollout_id)).rollout_id == rollout.rollout_id
        async with agl.open_store(token_server.url, token=TOKEN) as store:
            assert (await store.statistics()).rollouts == 1
        for token in (None, "wrong"):
            async with HttpStore(token_server.url, token=token) as store:
                with pytest.raises(agl.UnauthorizedError) as caught:
                    await store.get_rollout(rollout.rollout_id)
                assert "Bearer" in caught.value.message
                with pytest.raises(agl.UnauthorizedError):
                    await store.enqueue_rollouts([agl.RolloutRequest(input={"q": 2})])
        async with HttpStore(token_server.url, token=TOKEN) as store:
            assert (await store.statistics()).rollouts == 1

    asyncio.run(scenario())


def test_http_store_reads_the_token_from_the_environment(
    token_server: StoreServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGL_STORE_TOKEN", TOKEN)

    async def scenario() -> None:
        async with agl.open_store(token_server.url) as store:
            assert (await store.statistics()).rollouts == 0

    asyncio.run(scenario())


# --- binding beyond loopback ------------------------------------------------------------------


def test_check_bind_address_refuses_public_addresses_without_a_token() -> None:
    with pytest.raises(agl.InvalidInputError) as caught:
        check_bind_address("0.0.0.0", None)
    error = caught.value
    assert error.field == "host"
    assert error.value == "0.0.0.0"
    assert "refusing to serve the store on '0.0.0.0' without a token" in error.message
    assert "--token" in error.message
    assert "AGL_STORE_TOKEN" in error.message
    with pytest.raises(agl.InvalidInputError):
        check_bind_address("::", "")
    with pytest.raises(agl.InvalidInputError):
        StoreServer("memory://", host="0.0.0.0")
    # Loopback needs no token; any address is fine with one.
    for host in ("127.0.0.1", "127.0.0.2", "::1", "localhost"):
        check_bind_address(host, None)
    check_bind_address("0.0.0.0", TOKEN)


def test_cli_refuses_public_address_without_token(tmp_path: Path) -> None:
    env = {key: value for key, value in os.environ.items() if key != "AGL_STORE_TOKEN"}
    env["COLUMNS"] = "200"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "agl",
            "store",
            "serve",
            "--db",
            f"sqlite:///{tmp_path / 'never.db'}",
            "--host",
            "0.0.0.0",
            "--port",
            str(free_port()),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    stderr = " ".join(result.stderr.split())
    assert result.returncode != 0
    assert "refusing to serve the store on '0.0.0.0' without a token" in stderr
    assert "--token" in stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "never.db").exists()  # refused before opening the store


# --- a late result from a superseded attempt --------------------------------------------------


def test_late_result_from_superseded_attempt_is_409(
    client: httpx.Client, server: StoreServer
) -> None:
    rollout_id, first = claim(client, config={"timeout_seconds": 0.2, "max_attempts": 2})
    response = client.post(
        f"/v1/rollouts/{rollout_id}/attempts/{first}", json={"status": "running"}
    )
    assert response.status_code == 200, response.text
    time.sleep(0.5)  # past the timeout: the next claim times the first attempt out and retries
    response = client.post("/v1/rollouts/dequeue", json={"limit": 1, "worker_id": "w2"})
    assert response.status_code == 200, response.text
    [retry] = response.json()["claims"]
    assert retry["rollout"]["rollout_id"] == rollout_id
    second = retry["attempt"]["attempt_id"]
    assert second != first
    assert retry["attempt"]["sequence"] == 2

    response = client.post(
        f"/v1/rollouts/{rollout_id}/attempts/{first}", json={"status": "succeeded"}
    )
    error = error_of(response, 409, "ConflictError", field="attempt_id", value=first)
    assert "timeout" in error["message"]

    async def late_report_through_the_client() -> None:
        async with HttpStore(server.url) as store:
            with pytest.raises(agl.ConflictError) as caught:
                await store.update_attempt(rollout_id, first, agl.AttemptStatus.SUCCEEDED)
            assert caught.value.field == "attempt_id"

    asyncio.run(late_report_through_the_client())

    rollout = client.get(f"/v1/rollouts/{rollout_id}").json()
    assert rollout["status"] == "preparing"
    assert rollout["latest_attempt_id"] == second
    assert rollout["num_attempts"] == 2
    attempts = client.get(f"/v1/rollouts/{rollout_id}/attempts").json()["attempts"]
    assert [(a["attempt_id"], a["status"]) for a in attempts] == [
        (first, "timeout"),
        (second, "preparing"),
    ]

    # The live attempt's result is taken, and the rollout follows it.
    response = client.post(
        f"/v1/rollouts/{rollout_id}/attempts/{second}", json={"status": "succeeded"}
    )
    assert response.status_code == 200, response.text
    rollout = client.get(f"/v1/rollouts/{rollout_id}").json()
    assert rollout["status"] == "succeeded"
    assert rollout["latest_attempt_id"] == second


# --- OTLP/HTTP ingest -------------------------------------------------------------------------


def test_otlp_protobuf_and_json_payloads_are_stored(client: httpx.Client) -> None:
    rollout_id, attempt_id = claim(client)
    resource = {AGL_ROLLOUT_ID: rollout_id, AGL_ATTEMPT_ID: attempt_id, "service.name": "agent"}

    first = record_sdk_spans(resource, ["llm call", "tool call"])
    request = encode_spans(first)
    response = client.post(
        "/v1/traces",
        content=request.SerializeToString(),
        headers={"content-type": "application/x-protobuf"},
    )
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/x-protobuf"
    ExportTraceServiceResponse.FromString(response.content)  # parses

    second = record_sdk_spans(resource, ["reward"])
    response = client.post(
        "/v1/traces",
        content=to_otlp_json(encode_spans(second)),
        headers={"content-type": "application/json"},
    )
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/json"
    assert isinstance(response.json(), dict)

    spans = stored_spans(client, rollout_id)
    sent = first + second
    assert [span["name"] for span in spans] == [span.name for span in sent]
    assert [(span["trace_id"], span["span_id"]) for span in spans] == [hex_ids(s) for s in sent]
    assert [span["sequence_id"] for span in spans] == list(range(1, len(sent) + 1))
    for span in spans:
        assert span["rollout_id"] == rollout_id
        assert span["attempt_id"] == attempt_id
        assert span["resource"][AGL_ROLLOUT_ID] == rollout_id
        assert span["resource"]["service.name"] == "agent"
    by_name = {span["name"]: span for span in spans[: len(first)]}
    assert by_name["llm call"]["parent_id"] == by_name["agent run"]["span_id"]
    assert by_name["tool call"]["attributes"] == {"step": 2}

    # Exporters retry: the same payload again stores nothing new.
    response = client.post(
        "/v1/traces",
        content=request.SerializeToString(),
        headers={"content-type": "application/x-protobuf"},
    )
    assert response.status_code == 200, response.text
    assert stored_spans(client, rollout_id) == spans


def test_otlp_spans_of_an_unknown_rollout_are_a_partial_success(client: httpx.Client) -> None:
    """OTLP/HTTP: the good spans are stored, the refused ones counted in ``partial_success``."""
    rollout_id, attempt_id = claim(client)
    good = record_sdk_spans({AGL_ROLLOUT_ID: rollout_id, AGL_ATTEMPT_ID: attempt_id}, ["a", "b"])
    gone = record_sdk_spans({AGL_ROLLOUT_ID: "ro-gone", AGL_ATTEMPT_ID: "at-gone"}, ["c"])
    response = client.post(
        "/v1/traces",
        content=encode_spans(good + gone).SerializeToString(),
        headers={"content-type": "application/x-protobuf"},
    )
    assert response.status_code == 200, response.text
    partial = ExportTraceServiceResponse.FromString(response.content).partial_success
    assert partial.rejected_spans == len(gone)
    assert "names rollout 'ro-gone', which the store does not hold" in partial.error_message
    assert [span["name"] for span in stored_spans(client, rollout_id)] == [s.name for s in good]


def span_processor(kind: str, exporter: OTLPSpanExporter) -> SpanProcessor:
    if kind == "batch":
        return BatchSpanProcessor(exporter, schedule_delay_millis=50)
    return SimpleSpanProcessor(exporter)


@pytest.mark.parametrize("processor", ["batch", "simple"])
def test_otel_exporter_end_to_end(
    client: httpx.Client, server: StoreServer, processor: str
) -> None:
    rollout_id, attempt_id = claim(client)
    exporter = OTLPSpanExporter(endpoint=server.url + "/v1/traces", timeout=10)
    provider = TracerProvider(
        resource=Resource.create({AGL_ROLLOUT_ID: rollout_id, AGL_ATTEMPT_ID: attempt_id})
    )
    provider.add_span_processor(span_processor(processor, exporter))
    tracer = provider.get_tracer("agent")
    try:
        with tracer.start_as_current_span("agent run"):
            for step in range(5):
                with tracer.start_as_current_span(f"step {step}", attributes={"step": step}):
                    pass
        assert provider.force_flush(timeout_millis=10_000)
    finally:
        provider.shutdown()
    spans = stored_spans(client, rollout_id)
    assert sorted(span["name"] for span in spans) == sorted(
        ["agent run", *(f"step {step}" for step in range(5))]
    )
    assert {span["attempt_id"] for span in spans} == {attempt_id}
    assert [span["sequence_id"] for span in spans] == list(range(1, 7))


def test_otel_exporter_with_a_token(token_server: StoreServer) -> None:
    headers = {"authorization": f"Bearer {TOKEN}"}
    with httpx.Client(base_url=token_server.url, timeout=10, headers=headers) as http:
        rollout_id, attempt_id = claim(http)
        resource = {AGL_ROLLOUT_ID: rollout_id, AGL_ATTEMPT_ID: attempt_id}
        for exporter_headers in (None, headers):
            exporter = OTLPSpanExporter(
                endpoint=token_server.url + "/v1/traces", headers=exporter_headers, timeout=10
            )
            provider = TracerProvider(resource=Resource.create(resource))
            provider.add_span_processor(SimpleSpanProcessor(exporter))
            with provider.get_tracer("agent").start_as_current_span("agent run"):
                pass
            provider.shutdown()
        # Only the export that carried the token got in.
        assert [span["name"] for span in stored_spans(http, rollout_id)] == ["agent run"]


@pytest.mark.parametrize("encoding", ["protobuf", "json"])
def test_otlp_spans_without_a_rollout_id_are_refused_and_the_good_ones_stored(
    client: httpx.Client, encoding: str
) -> None:
    rollout_id, attempt_id = claim(client)
    good = record_sdk_spans({AGL_ROLLOUT_ID: rollout_id, AGL_ATTEMPT_ID: attempt_id}, ["good"])
    bad = record_sdk_spans({AGL_ATTEMPT_ID: attempt_id}, ["orphan"])
    request = encode_spans(good + bad)  # one resource with ids, one without
    if encoding == "protobuf":
        body, content_type = request.SerializeToString(), "application/x-protobuf"
    else:
        body, content_type = to_otlp_json(request), "application/json"
    response = client.post("/v1/traces", content=body, headers={"content-type": content_type})
    assert response.status_code == 200, response.text
    answer = ExportTraceServiceResponse()
    if encoding == "protobuf":
        answer.ParseFromString(response.content)
    else:
        json_format.Parse(response.content, answer)
    partial = answer.partial_success
    assert partial.rejected_spans == len(bad)
    assert partial.error_message.startswith("resource_spans[1].scope_spans[0].spans[0]: span ")
    assert f"has no {AGL_ROLLOUT_ID!r} attribute" in partial.error_message
    assert [span["name"] for span in stored_spans(client, rollout_id)] == [s.name for s in good]


@pytest.mark.parametrize(
    ("body", "content_type"),
    [
        (b"not protobuf at all", "application/x-protobuf"),
        (
            b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "'
            + b"1" * 32
            + b'", "spanId": "'
            + b"2" * 16
            + b'", "name": "orphan", "startTimeUnixNano": "1"}]}]}]}',
            "application/json",
        ),
    ],
    ids=["garbage", "no-rollout-id"],
)
def test_otlp_bad_data_is_400(client: httpx.Client, body: bytes, content_type: str) -> None:
    response = client.post("/v1/traces", content=body, headers={"content-type": content_type})
    error_of(response, 400, "InvalidInputError")


def test_a_long_poll_whose_worker_hung_up_claims_nothing(server: StoreServer) -> None:
    """A worker that closes its connection during a long-poll dequeue gets no rollout claimed
    in its name: the rollout that arrives meanwhile goes to the next worker that asks."""
    import socket
    from urllib.parse import urlsplit

    address = urlsplit(server.url)
    body = json.dumps({"limit": 1, "worker_id": "gone", "wait": 3}).encode()
    head = (
        f"POST /v1/rollouts/dequeue HTTP/1.1\r\nhost: {address.netloc}\r\n"
        f"content-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
    ).encode()
    with httpx.Client(base_url=server.url, timeout=10) as http:
        with socket.create_connection((address.hostname, address.port), timeout=5) as gone:
            gone.sendall(head + body)
            time.sleep(0.5)  # the server holds the poll
        # hung up; now a rollout arrives while the server still holds the departed poll
        prefix = f"hung-up-{time.monotonic_ns()}"
        enqueued = http.post("/v1/rollouts/enqueue", json={"requests": [{"input": prefix}]}).json()[
            "rollouts"
        ][0]
        deadline = time.monotonic() + 10
        claims: list[Any] = []
        while not claims and time.monotonic() < deadline:
            claims = http.post(
                "/v1/rollouts/dequeue", json={"limit": 1, "worker_id": "here", "wait": 1}
            ).json()["claims"]
        assert [c["rollout"]["rollout_id"] for c in claims] == [enqueued["rollout_id"]]
        assert claims[0]["attempt"]["worker_id"] == "here"
        attempts = http.get(f"/v1/rollouts/{enqueued['rollout_id']}/attempts").json()["attempts"]
        released = [a for a in attempts if a["worker_id"] == "gone"]
        assert all(a["status"] == "released" for a in released), attempts
        http.post(f"/v1/rollouts/{enqueued['rollout_id']}/cancel")


def test_an_enqueue_of_more_than_the_cap_is_422_and_the_client_splits_it() -> None:
    from agl.store._checks import MAX_ENQUEUE
    from agl.store._http import HttpStore

    async def through_the_client(url: str) -> list[str]:
        async with HttpStore(url) as store:
            rollouts = await store.enqueue_rollouts(
                [agl.RolloutRequest(input=i) for i in range(MAX_ENQUEUE + 5)]
            )
            return [str(r.input) for r in rollouts]

    with StoreServer("memory://") as own, httpx.Client(base_url=own.url, timeout=60) as http:
        body = {"requests": [{"input": i} for i in range(MAX_ENQUEUE + 1)]}
        response = http.post("/v1/rollouts/enqueue", json=body)
        error = error_of(response, 422, "InvalidInputError", field="requests")
        assert f"{MAX_ENQUEUE}" in error["message"]
        assert http.get("/v1/rollouts", params={"limit": 1}).json()["total"] == 0
        assert asyncio.run(through_the_client(own.url)) == [str(i) for i in range(MAX_ENQUEUE + 5)]
        assert http.get("/v1/rollouts", params={"limit": 1}).json()["total"] == MAX_ENQUEUE + 5
