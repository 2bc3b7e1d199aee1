"""The adapter conformance suite: what every framework adapter package must do, as pytest tests.

:mod:`agl.testing.instrumentor` checks what an instrumentor records. This suite checks the
package around it, without calling a model: its plugin, its module-level API
(:func:`agl.tracing.script_api`), its light import, and that instrumenting is exclusive and
undone completely. An adapter passes by subclassing :class:`AdapterConformance` and naming
itself::

    from agl.testing.adapter import AdapterConformance

    class TestShoutAdapter(AdapterConformance):
        package = "agl_shout"
        plugin = "shout"
        instrumentor = "ShoutInstrumentor"
        framework_modules = ("shout",)
        patched = (("shout.client:Client", "_send"),)

Tests must not be deleted or overridden to make an adapter pass; ``test_suite_is_intact``
checks it, as the instrumentor suite does.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
from collections.abc import Iterator
from typing import Any, ClassVar

import pytest

import agl
from agl.store._memory import MemoryStore
from agl.testing._suite import check_suite_intact
from agl.tracing._adapter import OpenInferenceInstrumentor

__all__ = ["AdapterConformance"]

_MISSING = object()


class AdapterConformance:
    """Subclass me and set the class attributes below."""

    package: ClassVar[str]
    """The adapter's import package (``"agl_shout"``)."""
    plugin: ClassVar[str]
    """The name its plugin registers the instrumentor under (``instrument=["shout"]``)."""
    instrumentor: ClassVar[str]
    """The instrumentor class's name, exported by the package."""
    framework_modules: ClassVar[tuple[str, ...]]
    """Modules that ``import package`` and finding the instrumentor must not load."""
    patched: ClassVar[tuple[tuple[str, str], ...]] = ()
    """``("module:Owner", attribute)`` for every attribute instrumenting replaces (``"module"``
    alone for a module's own attribute)."""
    helpers: ClassVar[tuple[str, ...]] = ()
    """Other names the package exports beside the instrumentor and the script API
    (``agl_langchain.chat_model``)."""
    exclusive: ClassVar[bool] = True
    """Whether one tracer at a time can instrument the framework (openinference's are one per
    process)."""

    @pytest.fixture
    def tracers(self) -> Iterator[tuple[agl.Tracer, agl.Tracer]]:
        with agl.Tracer(MemoryStore()) as first, agl.Tracer(MemoryStore()) as second:
            yield first, second

    def _module(self) -> Any:
        return importlib.import_module(self.package)

    def _class(self) -> Any:
        return getattr(importlib.import_module(f"{self.package}.instrumentor"), self.instrumentor)

    def _patched_values(self) -> list[object]:
        values = []
        for owner_path, name in self.patched:
            module, _, owner = owner_path.partition(":")
            target: Any = importlib.import_module(module)
            for part in filter(None, owner.split(".")):
                target = getattr(target, part)
            values.append(vars(target).get(name, _MISSING))
        return values

    # --- the suite guards itself ----------------------------------------------------------------

    def test_suite_is_intact(self) -> None:
        """No suite test was deleted, or overridden without an xfail that gives a reason."""
        check_suite_intact(self, AdapterConformance, "adapter suite")

    # --- the package ----------------------------------------------------------------------------

    def test_the_public_surface(self) -> None:
        module = self._module()
        expected = sorted([self.instrumentor, "instrument", "uninstrument", *self.helpers])
        assert module.__all__ == expected
        assert getattr(module, self.instrumentor) is self._class()
        with pytest.raises(AttributeError, match="no attribute 'nope'"):
            module.nope  # noqa: B018

    def test_the_plugin_finds_the_instrumentor_without_loading_the_framework(self) -> None:
        """Every agl process resolving plugin names loads every plugin: it must stay light."""
        code = (
            "import sys\n"
            f"import {self.package}\n"
            "from agl.plugins import PluginManager\n"
            f"from {self.package}.instrumentor import {self.instrumentor}\n"
            "found = PluginManager().provided('agl_instrumentors')\n"
            f"assert found[{self.plugin!r}] is {self.instrumentor}, found\n"
            f"heavy = [m for m in {(*self.framework_modules, 'openinference.instrumentation')!r}\n"
            "         if m in sys.modules]\n"
            "assert not heavy, heavy\n"
        )
        subprocess.run([sys.executable, "-c", code], check=True, timeout=120)

    def test_instrument_and_uninstrument_for_a_script(
        self, tracers: tuple[agl.Tracer, agl.Tracer]
    ) -> None:
        module = self._module()
        first, second = tracers
        try:
            instrumentor = module.instrument(first)
            assert isinstance(instrumentor, self._class())
            assert _on(instrumentor)
            assert module.instrument(first) is instrumentor
            moved = module.instrument(second)
            assert moved.tracer is second
            assert _on(moved)
            assert not _on(instrumentor)
        finally:
            module.uninstrument()
        assert not _on(moved)
        module.uninstrument()  # nothing active: nothing happens

    # --- instrumenting --------------------------------------------------------------------------

    def test_one_tracer_at_a_time_traces_the_framework(
        self, tracers: tuple[agl.Tracer, agl.Tracer]
    ) -> None:
        if not self.exclusive:
            pytest.skip("this adapter's instrumentation is not one per process")
        first, second = (self._class()(tracer) for tracer in tracers)
        first.instrument()
        try:
            with pytest.raises(agl.AglError, match="already instrumented"):
                second.instrument()
            assert not _on(second)
            assert _on(first)
        finally:
            first.uninstrument()
        second.instrument()
        assert _on(second)
        second.uninstrument()

    def test_uninstrument_puts_the_framework_back_as_it_was(
        self, tracers: tuple[agl.Tracer, agl.Tracer]
    ) -> None:
        before = self._patched_values()
        instrumentor = self._class()(tracers[0])
        instrumentor.instrument()
        during = self._patched_values()
        unpatched = [
            place for place, a, b in zip(self.patched, before, during, strict=True) if a is b
        ]
        assert not unpatched, f"instrumenting did not patch {unpatched}"
        instrumentor.instrument()
        assert self._patched_values() == during  # not wrapped twice
        if isinstance(instrumentor, OpenInferenceInstrumentor):
            assert _openinference(instrumentor).is_instrumented_by_opentelemetry
        instrumentor.uninstrument()
        assert self._patched_values() == before
        if isinstance(instrumentor, OpenInferenceInstrumentor):
            assert not _openinference(instrumentor).is_instrumented_by_opentelemetry
        instrumentor.uninstrument()
        assert self._patched_values() == before


def _openinference(instrumentor: OpenInferenceInstrumentor) -> Any:
    module, _, name = instrumentor.instrumentation.partition(":")
    return getattr(importlib.import_module(module), name)()


def _on(instrumentor: Any) -> bool:
    """Whether it is instrumented (read afresh: a type checker would narrow the attribute)."""
    return bool(instrumentor.instrumented)
