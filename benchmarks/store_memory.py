"""The store server's memory under large requests, as deployed (issue: unbounded memory).

Starts ``agl store serve`` over a SQLite file in a process of its own and measures the rise of
its peak resident memory (``VmHWM``, reset before each step through ``/proc/PID/clear_refs``,
Linux only) while it:

1. **takes one OTLP/HTTP export** of ``--otlp-mb`` MB (``--otlp-spans`` spans with a large
   attribute each), as an OpenTelemetry exporter sends it, in each encoding of
   ``--encodings`` (protobuf, JSON), each in a fresh server after a small export of the same
   kind, and prints the peak's rise as a multiple of the body; with ``--baseline REVISION``,
   also with the server of that git revision, beside this checkout's (before and after);
2. **serves one rollout's ``--spans`` spans** to a client reading them all
   (:meth:`HttpStore.query_spans <agl.store.HttpStore.query_spans>`, which follows the
   server's pages of 1,000 spans).

Run (from ``benchmarks/``): ``uv run --no-sync python store_memory.py --baseline 691cf57`` (a
revision that parsed the request whole; a few minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

import agl
from agl._spans import new_span_id, new_trace_id
from store_scale import serve  # the same server, started the same way


def memory_mb(pid: int) -> tuple[float, float]:
    """(current, peak) resident memory of ``pid`` in MB."""
    fields = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
    )
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


def reset_peak(pid: int) -> float:
    Path(f"/proc/{pid}/clear_refs").write_text("5")  # the peak starts again from now
    return memory_mb(pid)[0]


def otlp_body(rollout_id: str, attempt_id: str, count: int, megabytes: float) -> bytes:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
    from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

    from agl import semconv

    size = max(1, int(megabytes * 1e6 / count) - 60)
    ids = [
        KeyValue(key=semconv.AGL_ROLLOUT_ID, value=AnyValue(string_value=rollout_id)),
        KeyValue(key=semconv.AGL_ATTEMPT_ID, value=AnyValue(string_value=attempt_id)),
    ]
    trace = bytes.fromhex(new_trace_id())
    spans = [
        Span(
            trace_id=trace,
            span_id=bytes.fromhex(new_span_id()),
            name=f"call {i}",
            start_time_unix_nano=time.time_ns(),
            end_time_unix_nano=time.time_ns(),
            attributes=[KeyValue(key="text", value=AnyValue(string_value="x" * size))],
        )
        for i in range(count)
    ]
    resource = ResourceSpans(scope_spans=[ScopeSpans(spans=spans)])
    resource.resource.attributes.extend(ids)
    return ExportTraceServiceRequest(resource_spans=[resource]).SerializeToString()


def otlp_json_body(rollout_id: str, attempt_id: str, count: int, megabytes: float) -> bytes:
    """The same export in OTLP/JSON (hex ids, camelCase, 64-bit integers as strings)."""
    from agl import semconv

    size = max(1, int(megabytes * 1e6 / count) - 200)
    trace = new_trace_id()
    now = str(time.time_ns())
    spans = [
        {
            "traceId": trace,
            "spanId": new_span_id(),
            "name": f"call {i}",
            "kind": 1,
            "startTimeUnixNano": now,
            "endTimeUnixNano": now,
            "attributes": [{"key": "text", "value": {"stringValue": "x" * size}}],
        }
        for i in range(count)
    ]
    ids = [
        {"key": semconv.AGL_ROLLOUT_ID, "value": {"stringValue": rollout_id}},
        {"key": semconv.AGL_ATTEMPT_ID, "value": {"stringValue": attempt_id}},
    ]
    request = {
        "resourceSpans": [{"resource": {"attributes": ids}, "scopeSpans": [{"spans": spans}]}]
    }
    return json.dumps(request, separators=(",", ":")).encode()


BODIES = {
    "protobuf": (otlp_body, "application/x-protobuf"),
    "json": (otlp_json_body, "application/json"),
}


async def add_spans(store: agl.Store, rollout_id: str, attempt_id: str, total: int) -> None:
    for first in range(0, total, 1000):
        await store.add_spans(
            [
                agl.Span.create(
                    rollout_id=rollout_id,
                    attempt_id=attempt_id,
                    name=f"step {first + i}",
                    attributes={"i": first + i, "text": "y" * 1000},
                )
                for i in range(min(1000, total - first))
            ]
        )


async def export(args: argparse.Namespace, db: Path, encoding: str, label: str) -> None:
    """One export into a fresh server, after a small one of the same encoding (so what the
    first request of a kind loads, such as the protobuf modules, is not counted)."""
    process, url = serve(db, "--db")  # the option's name at every revision
    pid = process.pid
    try:
        # Rollouts are made and read through the file itself: the server of another revision
        # may not speak this client's HTTP API.
        store = agl.open_store(f"sqlite:///{db}")
        async with store, httpx.AsyncClient(timeout=600) as http:
            await store.enqueue_rollouts([agl.RolloutRequest(input=i) for i in range(2)])
            warm, claim = await store.dequeue_rollouts(limit=2, worker_id="bench")
            build, content_type = BODIES[encoding]
            headers = {"content-type": content_type}
            small = build(warm.rollout.rollout_id, warm.attempt.attempt_id, 100, 0.1)
            (await http.post(f"{url}/v1/traces", content=small, headers=headers)).raise_for_status()
            rollout_id = claim.rollout.rollout_id
            body = build(rollout_id, claim.attempt.attempt_id, args.otlp_spans, args.otlp_mb)
            base = reset_peak(pid)
            started = time.perf_counter()
            answer = await http.post(f"{url}/v1/traces", content=body, headers=headers)
            answer.raise_for_status()
            took = time.perf_counter() - started
            peak = memory_mb(pid)[1]
            last = await store.query_spans(rollout_id, after=args.otlp_spans - 1)
            assert len(last) == 1, "the export's spans were not all stored"
            megabytes = len(body) / 1e6
            print(
                f"{label}: OTLP {encoding} export of {megabytes:.1f} MB ({args.otlp_spans:,} "
                f"spans): {took:.1f} s, server peak {peak:.0f} MB ({peak - base:+.0f} MB over its "
                f"{base:.0f} MB before: {(peak - base) / megabytes:.1f}x the body)",
                flush=True,
            )
    finally:
        process.terminate()
        process.wait(30)


@contextlib.contextmanager
def serving_from(revision: str | None) -> Iterator[str]:
    """Servers started inside run agl-core's source at ``revision`` (a git revision, exported to
    a temp folder and put first on ``PYTHONPATH``), or this checkout's (None)."""
    if revision is None:
        yield "now"
        return
    with tempfile.TemporaryDirectory() as folder:
        source = "packages/agl-core/src"
        archive = subprocess.run(
            ["git", "-C", str(Path(__file__).resolve().parent.parent), "archive", revision, source],
            check=True,
            capture_output=True,
        ).stdout
        subprocess.run(["tar", "-x", "-C", folder], input=archive, check=True)
        before = os.environ.get("PYTHONPATH")
        os.environ["PYTHONPATH"] = str(Path(folder) / source)
        try:
            yield f"at {revision}"
        finally:
            if before is None:
                del os.environ["PYTHONPATH"]
            else:
                os.environ["PYTHONPATH"] = before


async def run(args: argparse.Namespace, folder: Path) -> None:
    for encoding in args.encodings.split(","):
        for revision in ([args.baseline] if args.baseline else []) + [None]:
            with serving_from(revision) as label:
                await export(args, folder / f"{encoding}-{revision or 'now'}.db", encoding, label)
    process, url = serve(folder / "reads.db")
    pid = process.pid
    try:
        async with agl.open_store(url) as store:
            await store.enqueue_rollouts([agl.RolloutRequest(input=0)])
            [second] = await store.dequeue_rollouts(worker_id="bench")
            rollout_id, attempt_id = second.rollout.rollout_id, second.attempt.attempt_id
            await add_spans(store, rollout_id, attempt_id, args.spans)
            base = reset_peak(pid)
            started = time.perf_counter()
            spans = await store.query_spans(rollout_id)
            took = time.perf_counter() - started
            peak = memory_mb(pid)[1]
            assert len(spans) == args.spans, len(spans)
            print(
                f"reading one rollout's {args.spans:,} spans (about 1.1 KB each): {took:.1f} s, "
                f"server peak {peak:.0f} MB ({peak - base:+.0f} MB over its {base:.0f} MB "
                f"before)",
                flush=True,
            )
    finally:
        process.terminate()
        process.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--otlp-mb", type=float, default=25.6)
    parser.add_argument("--otlp-spans", type=int, default=20_000)
    parser.add_argument("--spans", type=int, default=100_000)
    parser.add_argument("--encodings", default="protobuf,json", help="comma-separated")
    parser.add_argument(
        "--baseline",
        metavar="REVISION",
        help="also measure each export with the server of this git revision (e.g. main)",
    )
    args = parser.parse_args()
    if not Path("/proc/self/clear_refs").exists():
        raise SystemExit("needs Linux's /proc/PID/clear_refs to measure peaks")
    with tempfile.TemporaryDirectory() as folder:
        asyncio.run(run(args, Path(folder)))


if __name__ == "__main__":
    main()
