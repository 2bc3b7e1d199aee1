"""What an instrumentor is: the object that makes a framework's activity show up as spans.

A runner builds one instrumentor per name it was asked to instrument, from the factory a plugin
registered (``agl_instrumentors``, see :mod:`agl.hookspecs`), passing its
:class:`~agl.tracing.Tracer`; it calls :meth:`Instrumentor.instrument` before the first rollout
and :meth:`Instrumentor.uninstrument` after the last. The contract, which
:mod:`agl.testing.instrumentor` checks:

- spans go to ``tracer.provider`` (never OpenTelemetry's global provider), started in the
  current context, so the tracer stamps each with the rollout it belongs to;
- ``instrument()`` twice is the same as once, ``uninstrument()`` without ``instrument()`` does
  nothing, and the pair can be repeated;
- after ``uninstrument()`` every patch and callback is gone and the framework records nothing.

:class:`PatchingInstrumentor` gives that contract for free to an instrumentor whose work is a
list of patches, each undone by a callback. :class:`ScriptInstrumentation` is the
``instrument(tracer)`` / ``uninstrument()`` pair adapters offer scripts that run their own
rollouts, and :func:`script_api` an adapter package's whole module-level API.
"""

from __future__ import annotations

import abc
import contextlib
import importlib
import threading
from collections.abc import Callable
from typing import (
    TYPE_CHECKING,
    Any,
    Generic,
    NamedTuple,
    Protocol,
    TypeAlias,
    TypeVar,
    runtime_checkable,
)

if TYPE_CHECKING:
    from agl.tracing._tracer import Tracer

__all__ = [
    "Instrumentor",
    "InstrumentorFactory",
    "PatchingInstrumentor",
    "ScriptAPI",
    "ScriptInstrumentation",
    "script_api",
]


@runtime_checkable
class Instrumentor(Protocol):
    """Turns one framework's activity into spans of the current rollout, reversibly."""

    @property
    def instrumented(self) -> bool:
        """Whether the framework is instrumented now."""
        ...

    def instrument(self) -> None:
        """Start recording; doing it again while instrumented does nothing."""
        ...

    def uninstrument(self) -> None:
        """Undo everything :meth:`instrument` did; doing it when not instrumented does nothing."""
        ...


InstrumentorFactory: TypeAlias = Callable[["Tracer"], Instrumentor]
"""Builds an instrumentor for a runner's tracer (what ``agl_instrumentors`` maps names to)."""


class PatchingInstrumentor(abc.ABC):
    """An instrumentor that is idempotent and reversible by construction.

    Subclasses implement :meth:`apply`: install each patch, callback or trace processor, and
    push what undoes it onto the given :class:`~contextlib.ExitStack`. ``uninstrument()``
    unwinds the stack (last patch first), even when :meth:`apply` failed half-way::

        class ShoutInstrumentor(PatchingInstrumentor):
            def apply(self, undo: contextlib.ExitStack) -> None:
                import shout  # the framework, imported only when instrumenting

                handler = SpanHandler(self.tracer.provider.get_tracer("agl_shout"))
                shout.callbacks.add(handler)
                undo.callback(shout.callbacks.remove, handler)

    Args:
        tracer: The runner's tracer; record spans through ``tracer.provider``.
    """

    def __init__(self, tracer: Tracer) -> None:
        self.tracer = tracer
        self._undo: contextlib.ExitStack | None = None

    @property
    def instrumented(self) -> bool:
        return self._undo is not None

    def instrument(self) -> None:
        if self._undo is not None:
            return
        undo = contextlib.ExitStack()
        try:
            self.apply(undo)
        except BaseException:
            undo.close()
            raise
        self._undo = undo

    def uninstrument(self) -> None:
        undo, self._undo = self._undo, None
        if undo is not None:
            undo.close()

    @abc.abstractmethod
    def apply(self, undo: contextlib.ExitStack) -> None:
        """Install the instrumentation; push the undoing of each step onto ``undo``."""


_I = TypeVar("_I", bound=Instrumentor)


class ScriptInstrumentation(Generic[_I]):
    """One instrumentor a script turns on for a tracer, and off again (adapters' module API).

    ::

        _script = ScriptInstrumentation(lambda tracer: MyInstrumentor(tracer))
        instrument, uninstrument = _script.instrument, _script.uninstrument

    :meth:`instrument` with the tracer already instrumented does nothing; with another tracer,
    it moves the tracing there. Thread safe.
    """

    def __init__(self, factory: Callable[[Tracer], _I]) -> None:
        self._factory = factory
        self._lock = threading.Lock()
        self._active: _I | None = None
        self._tracer: Tracer | None = None

    def instrument(self, tracer: Tracer) -> _I:
        """Trace the framework into ``tracer``'s rollouts until :meth:`uninstrument`.

        Returns:
            The instrumentor, for code that wants to manage it itself.
        """
        with self._lock:
            if self._active is not None and self._tracer is tracer:
                return self._active
            if self._active is not None:
                self._active.uninstrument()
                self._active = None
            instrumentor = self._factory(tracer)
            instrumentor.instrument()
            self._active, self._tracer = instrumentor, tracer
            return instrumentor

    def uninstrument(self) -> None:
        """Stop what :meth:`instrument` started (nothing happens if it is not active)."""
        with self._lock:
            if self._active is not None:
                self._active.uninstrument()
                self._active, self._tracer = None, None


class ScriptAPI(NamedTuple):
    """An adapter package's module-level functions (see :func:`script_api`)."""

    instrument: Callable[[Tracer], Any]
    uninstrument: Callable[[], None]
    getattr: Callable[[str], Any]


def script_api(instrumentor: str, framework: str) -> ScriptAPI:
    """The module-level API of an adapter package, with its instrumentor imported lazily.

    An adapter's ``__init__.py`` is then its docstring and one line, and ``import agl_shout``
    loads neither the framework nor its instrumentation::

        instrument, uninstrument, __getattr__ = script_api(
            "agl_shout.instrumentor:ShoutInstrumentor", "Shout"
        )

    Args:
        instrumentor: The instrumentor class, as ``"package.module:Class"``; the package's
            ``__getattr__`` gives it as ``package.Class``.
        framework: The framework's name, for the docstrings.

    Returns:
        ``instrument(tracer)`` and ``uninstrument()`` (a :class:`ScriptInstrumentation`) and
        the package's ``__getattr__``.
    """
    module, _, name = instrumentor.partition(":")
    package = module.rpartition(".")[0] or module

    def load() -> Any:
        return getattr(importlib.import_module(module), name)

    def build(tracer: Tracer) -> Any:
        from agl._requirements import warn_unmet_of_package

        warn_unmet_of_package(package, f"{package}.instrument")
        return load()(tracer)

    script: ScriptInstrumentation[Any] = ScriptInstrumentation(build)

    def instrument(tracer: Tracer) -> Any:
        return script.instrument(tracer)

    def uninstrument() -> None:
        script.uninstrument()

    def __getattr__(attribute: str) -> Any:
        if attribute == name:
            return load()
        raise AttributeError(f"module {package!r} has no attribute {attribute!r}")

    instrument.__doc__ = f"""Trace {framework} into ``tracer``'s rollouts until :func:`uninstrument`
    is called.

    Calling it again with the same tracer does nothing; with another tracer, it moves the
    tracing there.

    Returns:
        The :class:`{name}`, for code that wants to manage it itself.
    """
    uninstrument.__doc__ = "Stop what :func:`instrument` started (nothing if it is not active)."
    for function in (instrument, uninstrument, __getattr__):
        function.__module__ = package
    return ScriptAPI(instrument, uninstrument, __getattr__)
