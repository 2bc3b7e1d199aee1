"""``POST /v1/traces`` on ``agl store serve`` as deployed: the memory a large export takes."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans
from opentelemetry.proto.trace.v1.trace_pb2 import Span as OtlpSpan

import agl
from agl.semconv import AGL_ATTEMPT_ID, AGL_ROLLOUT_ID
from agl.testing.ports import free_port
from agl.testing.processes import Processes

pytestmark = pytest.mark.anyio

SPANS = 60_000
"""Many small spans: what a request's spans cost beside its bytes shows most."""


def _protobuf(rollout_id: str, attempt_id: str, count: int) -> bytes:
    ids = [
        KeyValue(key=AGL_ROLLOUT_ID, value=AnyValue(string_value=rollout_id)),
        KeyValue(key=AGL_ATTEMPT_ID, value=AnyValue(string_value=attempt_id)),
    ]
    spans = [
        OtlpSpan(
            trace_id=bytes([7]) * 16,
            span_id=(i + 1).to_bytes(8, "big"),
            name=f"call {i}",
            start_time_unix_nano=1_700_000_000_000_000_000 + i,
            end_time_unix_nano=1_700_000_000_000_001_000 + i,
            attributes=[KeyValue(key="text", value=AnyValue(string_value="x" * 80))],
        )
        for i in range(count)
    ]
    resource = ResourceSpans(
        resource=Resource(attributes=ids), scope_spans=[ScopeSpans(spans=spans)]
    )
    return ExportTraceServiceRequest(resource_spans=[resource]).SerializeToString()


def _json(rollout_id: str, attempt_id: str, count: int) -> bytes:
    ids = [
        {"key": AGL_ROLLOUT_ID, "value": {"stringValue": rollout_id}},
        {"key": AGL_ATTEMPT_ID, "value": {"stringValue": attempt_id}},
    ]
    spans = [
        {
            "traceId": "07" * 16,
            "spanId": f"{i + 1:016x}",
            "name": f"call {i}",
            "startTimeUnixNano": str(1_700_000_000_000_000_000 + i),
            "endTimeUnixNano": str(1_700_000_000_000_001_000 + i),
            "attributes": [{"key": "text", "value": {"stringValue": "x" * 80}}],
        }
        for i in range(count)
    ]
    request = {
        "resourceSpans": [{"resource": {"attributes": ids}, "scopeSpans": [{"spans": spans}]}]
    }
    return json.dumps(request, separators=(",", ":")).encode()


def _reset_peak(pid: int) -> int:
    """Start ``pid``'s peak resident memory again from now; return its resident memory."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")
    return _memory_kb(pid)[0]


def _memory_kb(pid: int) -> tuple[int, int]:
    """(resident now, peak resident) of ``pid``, in kB."""
    fields = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
    )
    return int(fields["VmRSS"].split()[0]), int(fields["VmHWM"].split()[0])


@pytest.mark.skipif(
    not Path("/proc/self/clear_refs").exists(), reason="needs Linux's /proc/PID/clear_refs"
)
@pytest.mark.parametrize(
    ("build", "content_type"), [(_protobuf, "application/x-protobuf"), (_json, "application/json")]
)
async def test_an_export_peaks_the_server_at_a_few_times_its_size(
    tmp_path: Path, build: Callable[[str, str, int], bytes], content_type: str
) -> None:
    """Peak resident memory grows by less than 4 times the body (it grew 7-8 times when the
    body was parsed whole), measured after a small export of the same kind has loaded what
    the first one loads."""
    with Processes(tmp_path) as procs:
        port = free_port()
        server = await procs.store_server("store", db=f"sqlite:///{tmp_path / 'agl.db'}", port=port)
        url = f"http://127.0.0.1:{port}"
        async with agl.open_store(url) as store:
            await store.enqueue_rollouts([agl.RolloutRequest(input=i) for i in range(2)])
            warm, claim = await store.dequeue_rollouts(limit=2)
            headers = {"content-type": content_type}
            async with httpx.AsyncClient(timeout=600) as http:
                small = build(warm.rollout.rollout_id, warm.attempt.attempt_id, 100)
                (
                    await http.post(f"{url}/v1/traces", content=small, headers=headers)
                ).raise_for_status()
                body = build(claim.rollout.rollout_id, claim.attempt.attempt_id, SPANS)
                pid = server.process.pid
                before = _reset_peak(pid)
                answer = await http.post(f"{url}/v1/traces", content=body, headers=headers)
                assert answer.status_code == 200, answer.text
                _, peak = _memory_kb(pid)
            last = await store.query_spans(claim.rollout.rollout_id, after=SPANS - 1)
            assert [span.name for span in last] == [f"call {SPANS - 1}"]
    growth = (peak - before) * 1024
    assert growth < 4 * len(body), (
        f"{growth / 1e6:.1f} MB over {before / 1024:.0f} MB for a {len(body) / 1e6:.1f} MB body"
    )
