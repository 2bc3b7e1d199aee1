"""ScriptInstrumentation: the instrument(tracer) / uninstrument() pair adapters give scripts."""

from __future__ import annotations

from typing import Any

import pytest

from agl.tracing._instrumentor import ScriptInstrumentation, script_api


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


def test_script_api_loads_the_instrumentor_only_when_asked() -> None:
    instrument, uninstrument, getattr_ = script_api(f"{__name__}:_Recorder", "Recorder")
    assert instrument.__module__ == (__name__.rpartition(".")[0] or __name__)
    assert "Trace Recorder into" in (instrument.__doc__ or "")
    assert getattr_("_Recorder") is _Recorder
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        getattr_("nope")
    tracer = object()
    active = instrument(tracer)
    assert isinstance(active, _Recorder)
    assert active.instrumented
    assert instrument(tracer) is active
    uninstrument()
    assert not active.instrumented
