"""The provider view openinference-based adapters record through: spans normalized at their end."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agl.tracing.normalizing import NormalizingTracerProvider


def test_spans_get_the_normalized_attributes_before_they_are_exported() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    seen: list[dict[str, Any]] = []

    def normalize(name: str, attributes: Mapping[str, Any]) -> Mapping[str, Any]:
        seen.append(dict(attributes))
        return {"agl.agent.name": name.upper()} if name == "writer" else {}

    tracer = NormalizingTracerProvider(provider, normalize).get_tracer("test")
    with tracer.start_as_current_span("writer") as span:
        span.set_attribute("late", 1)  # set just before the end, as openinference does
    with tracer.start_as_current_span("other"):
        pass
    direct = provider.get_tracer("direct").start_span("untouched")
    direct.end()
    finished = {s.name: dict(s.attributes or {}) for s in exporter.get_finished_spans()}
    assert finished["writer"] == {"late": 1, "agl.agent.name": "WRITER"}
    assert finished["other"] == {}
    assert finished["untouched"] == {}
    assert seen == [{"late": 1}, {}]  # normalize sees the attributes as they are at the end
