"""The plugin manager: the plugins in use (:class:`~agl._plugins._registry.PluginRegistry`)
and the names they provide turned into objects: algorithms, instrumentors, credit strategies,
stores and resource classes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from agl._errors import InvalidInputError
from agl._plugins._checks import show
from agl._plugins._info import PluginError
from agl._plugins._registry import PluginRegistry

if TYPE_CHECKING:
    from agl._resources import Resource
    from agl._train._algorithm import Algorithm
    from agl.lightning._credit import CreditAssigner
    from agl.store._base import Store
    from agl.tracing import Tracer
    from agl.tracing._instrumentor import Instrumentor, InstrumentorFactory

__all__ = ["PluginManager", "open_store"]


class PluginManager(PluginRegistry):
    """The plugins one trainer, runner or command uses, and the names they provide.

    Args:
        plugins: Plugins to use without installing them (modules or objects with
            ``@agl.hookimpl`` functions), after every installed one (so they cannot take
            their names); checked at once, as :meth:`add` does.
        disable: Entry point names not to load, besides those of ``AGL_DISABLE_PLUGINS``.
        entry_points: Load installed plugins (False: only the built-in one and ``plugins``).

    Raises:
        PluginError: one of ``plugins`` is invalid or would be skipped.
    """

    # --- names into objects -----------------------------------------------------------------

    def create_algorithm(self, name: str, *, field: str = "algorithm") -> Algorithm:
        """Build the algorithm published under ``name`` with its default settings.

        Raises:
            InvalidInputError: no plugin provides it, or its class does not build without
                arguments (the message says to build it yourself), or builds no algorithm.
            PluginError: a plugin is invalid.
        """
        from agl._train._algorithm import Algorithm

        cls = self.lookup("agl_algorithms", name)
        try:
            built: object = cls()
        except TypeError as exc:
            raise InvalidInputError(
                f"algorithm {name!r} ({cls.__module__}.{cls.__qualname__}) cannot be built "
                f"with default settings ({exc}); build it yourself and pass the object",
                field=field,
            ) from exc
        if not isinstance(built, Algorithm):
            raise InvalidInputError(
                f"algorithm {name!r} built a {type(built).__name__}, not an agl.Algorithm",
                field=field,
            )
        return built

    def create_instrumentor(self, name: str, tracer: Tracer) -> Instrumentor:
        """Build the instrumentor ``name`` for ``tracer`` (not yet instrumenting).

        Logs a warning naming each requirement of the plugin's distribution that what is
        installed does not meet (the framework it instruments may be a version it was not
        made for).

        Raises:
            InvalidInputError: no plugin provides it.
            PluginError: its factory built something that is not an instrumentor.
        """
        from agl.tracing._instrumentor import Instrumentor

        factory: InstrumentorFactory = self.lookup("agl_instrumentors", name)
        distribution = self.provider("agl_instrumentors", name).distribution
        if distribution is not None:
            from agl._requirements import warn_unmet

            warn_unmet(distribution, f"instrumentor {name!r}")
        instrumentor: object = factory(tracer)
        if not isinstance(instrumentor, Instrumentor):
            who = self.provider("agl_instrumentors", name).describe()
            raise PluginError(
                f"instrumentor {name!r} of plugin {who} built {show(instrumentor)}, "
                "which is not an Instrumentor (instrument(), uninstrument(), instrumented)",
                field="instrument",
                value=name,
            )
        return instrumentor

    def create_credit_assigner(self, name: str) -> CreditAssigner:
        """Build the credit-assignment strategy ``name`` with its default settings.

        Raises:
            InvalidInputError: no plugin provides it, or it built no strategy.
        """
        from agl.lightning._credit import credit_assigner

        return credit_assigner(self.lookup("agl_credit_assigners", name)(), name=name)

    def open_store(self, url: str, **options: Any) -> Store:
        """Open the store ``url`` names: a built-in scheme, or one a plugin provides.

        Raises:
            InvalidInputError: no one provides the URL's scheme, or its options are wrong.
            PluginError: the scheme's factory returned something that is not a store.
        """
        from agl.store._base import Store
        from agl.store._open import SCHEMES, open_store, scheme_of

        scheme = scheme_of(url)
        if scheme in SCHEMES:  # core's own: no plugin needed, nor checked
            return open_store(url, **options)
        store: object = open_store(url, schemes=self.provided("agl_stores"), **options)
        if not isinstance(store, Store):
            raise PluginError(
                f"the {scheme!r} store factory of plugin "
                f"{self.provider('agl_stores', scheme).describe()} returned "
                f"{type(store).__name__}, which is not an agl.Store",
                field="url",
                value=url,
            )
        return store

    def upgrade_resources(self, resources: Mapping[str, Resource]) -> dict[str, Resource]:
        """``resources`` with each generic one whose ``type`` a plugin provides validated into
        that plugin's class (what a store that does not know the type hands back)."""
        from agl._resources import GenericResource

        types = self.provided("agl_resource_types")
        return {
            name: types[value.type].model_validate(value.model_dump())
            if isinstance(value, GenericResource) and value.type in types
            else value
            for name, value in resources.items()
        }

    # --- the loop's hooks (see agl._train._algorithm.LoopHooks) ---------------------------

    def step_start(self, algorithm: str, step: int) -> None:
        """Fire ``agl_step_start``."""
        self.hook.agl_step_start(algorithm=algorithm, step=step)

    def step_end(self, algorithm: str, step: int, metrics: Mapping[str, float]) -> None:
        """Fire ``agl_step_end``."""
        self.hook.agl_step_end(algorithm=algorithm, step=step, metrics=metrics)


def open_store(url: str, *, plugins: PluginManager | None = None, **options: Any) -> Store:
    """Open the store ``url`` names, a plugin's scheme included (what the CLI does).

    Core's schemes open without looking at plugins; another scheme loads them (or uses
    ``plugins``) and opens through :meth:`PluginManager.open_store`.
    """
    from agl.store._open import SCHEMES, scheme_of
    from agl.store._open import open_store as open_builtin

    if plugins is None and scheme_of(url) in SCHEMES:
        return open_builtin(url, **options)
    return (plugins if plugins is not None else PluginManager()).open_store(url, **options)
