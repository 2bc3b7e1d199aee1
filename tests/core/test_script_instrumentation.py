"""ScriptInstrumentation: the instrument(tracer) / uninstrument() pair adapters give scripts."""

from __future__ import annotations

from typing import Any

from agl.tracing._instrumentor import ScriptInstrumentation


class _Recorder:
    def __init__(self, tracer: Any) -> None:
        self.tracer = tracer
        self.instrumented = False

    def instrument(self) -> None:
        self.instrumented = True

    def uninstrument(self) -> None:
        self.instrumented = False


def test_same_tracer_keeps_it_another_moves_it_and_uninstrument_stops_it() -> None:
    script: ScriptInstrumentation[Any] = ScriptInstrumentation(_Recorder)
    first, second = object(), object()
    a = script.instrument(first)  # type: ignore[arg-type]
    assert a.instrumented
    assert script.instrument(first) is a  # type: ignore[arg-type]
    b = script.instrument(second)  # type: ignore[arg-type]
    assert b is not a
    assert b.tracer is second
    assert not a.instrumented
    assert b.instrumented
    script.uninstrument()
    assert not b.instrumented
    script.uninstrument()  # nothing active: nothing happens
