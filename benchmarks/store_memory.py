"""The store server's memory under large requests, as deployed (issue: unbounded memory).

Starts ``agl store serve`` over a SQLite file in a process of its own and measures the rise of
its peak resident memory (``VmHWM``, reset before each step through ``/proc/PID/clear_refs``,
Linux only) while it:

1. **takes one OTLP/HTTP export** of ``--otlp-mb`` MB (protobuf, ``--otlp-spans`` spans with a
   large attribute each), as an OpenTelemetry exporter sends it;
2. **serves one rollout's ``--spans`` spans** to a client reading them all
   (:meth:`HttpStore.query_spans <agl.store.HttpStore.query_spans>`, which follows the
   server's pages of 1,000 spans).

Run: ``uv run --no-sync python benchmarks/store_memory.py`` (about a minute on 2 cores).
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
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


async def run(args: argparse.Namespace, db: Path) -> None:
    process, url = serve(db)
    pid = process.pid
    try:
        async with agl.open_store(url) as store:
            await store.enqueue_rollouts([agl.RolloutRequest(input=i) for i in range(2)])
            first, second = await store.dequeue_rollouts(limit=2, worker_id="bench")
            body = otlp_body(
                first.rollout.rollout_id, first.attempt.attempt_id, args.otlp_spans, args.otlp_mb
            )
            base = reset_peak(pid)
            started = time.perf_counter()
            async with httpx.AsyncClient(timeout=600) as http:
                answer = await http.post(
                    f"{url}/v1/traces",
                    content=body,
                    headers={"content-type": "application/x-protobuf"},
                )
            answer.raise_for_status()
            took = time.perf_counter() - started
            peak = memory_mb(pid)[1]
            print(
                f"OTLP export of {len(body) / 1e6:.1f} MB ({args.otlp_spans:,} spans): "
                f"{took:.1f} s, server peak {peak:.0f} MB ({peak - base:+.0f} MB over its "
                f"{base:.0f} MB before)",
                flush=True,
            )

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
    args = parser.parse_args()
    if not Path("/proc/self/clear_refs").exists():
        raise SystemExit("needs Linux's /proc/PID/clear_refs to measure peaks")
    with tempfile.TemporaryDirectory() as folder:
        asyncio.run(run(args, Path(folder) / "store.db"))


if __name__ == "__main__":
    main()
