"""Tracing: agl's OpenTelemetry provider, rollout contexts and the span sender."""

from agl.tracing.exporter import SenderStats, SpanSender
from agl.tracing.tracer import RolloutBinding, Tracer, current_binding

__all__ = ["RolloutBinding", "SenderStats", "SpanSender", "Tracer", "current_binding"]
