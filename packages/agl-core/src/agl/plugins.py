"""agl's plugin manager: find plugins, check them, and turn names into objects.

A plugin is a module of ``@agl.hookimpl`` functions (the hooks: :mod:`agl.hookspecs`) that a
distribution names in an entry point of group ``agl.plugins``, as pytest plugins do with
``pytest11``::

    [project.entry-points."agl.plugins"]
    langchain = "agl_langchain.plugin"

There is no process-wide plugin state. Whoever resolves names (the :class:`~agl.Trainer`, the
:class:`~agl.Runner`, the CLI) owns a :class:`PluginManager`, and everything below them takes
objects. Building one registers core's built-in plugin ``agl`` first, then every entry point by
name (less those ``AGL_DISABLE_PLUGINS`` names), then the plugins given in code, checking each
and calling its provider hooks once. A plugin with a misspelled or malformed hook makes every
lookup raise :class:`PluginError`; one that fails to import, raises, or returns the wrong thing
is skipped with one warning on logger ``agl.plugins``. :meth:`PluginManager.installed` (and
``agl plugins``) reports what happened to each.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.metadata
import logging
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Final, Literal

import pluggy

from agl import hookspecs
from agl._errors import AglError, InvalidInputError
from agl._plugin_checks import (
    KINDS,
    Invalid,
    Skip,
    check_hooks,
    check_marked,
    check_provided,
    failure,
    registration_problem,
    show,
)
from agl._requirements import ENTRY_POINT_GROUP
from agl.hookspecs import LIFECYCLE_HOOKS, PROVIDER_HOOKS, hookimpl

if TYPE_CHECKING:
    from agl._resources import Resource
    from agl._train._algorithm import Algorithm
    from agl.lightning._credit import CreditAssigner
    from agl.store._base import Store
    from agl.tracing import Tracer
    from agl.tracing._instrumentor import Instrumentor, InstrumentorFactory

__all__ = [
    "DISABLE_ENV",
    "ENTRY_POINT_GROUP",
    "PluginError",
    "PluginInfo",
    "PluginManager",
    "hookimpl",
    "open_store",
]

DISABLE_ENV: Final = "AGL_DISABLE_PLUGINS"
"""Environment variable naming plugins (entry point names, comma-separated) not to load."""

BUILTIN: Final = "agl"
"""The name of core's own plugin, which provides the built-in names."""

logger = logging.getLogger(__name__)


class PluginError(AglError):
    """A plugin is wrong in a way that must be fixed (a misspelled or malformed hook), or a
    plugin's factory built something that is not what its hook promises."""


PluginStatus = Literal["ok", "skipped", "invalid", "disabled"]


@dataclass(frozen=True)
class PluginInfo:
    """One plugin: where it comes from, what it provides, and whether it is in use.

    Attributes:
        name: The entry point's name (``"agl"`` for core's built-in plugin).
        module: The entry point's value, the module it names.
        distribution: The distribution that declares the entry point, if known.
        version: That distribution's version, if known.
        error: Why the plugin is not in use: what failed (``"ExceptionType: message"``, for
            a skipped or invalid plugin), or what disabled it. None when it is in use.
        status: ``"ok"``; ``"skipped"`` (it failed to import, a hook raised or returned the
            wrong type; the rest of agl works without it); ``"invalid"`` (a hook is misspelled
            or malformed: agl refuses to run until it is fixed or disabled); ``"disabled"``.
        builtin: Whether this is core's own plugin.
        algorithms / instrumentors / stores / credit_assigners: The names it provides.
        resource_types: The resource ``type`` tags it provides.
        hooks: The lifecycle hooks it implements.
        ignored: What it provides that an earlier plugin already did (and so is not used).
    """

    name: str
    module: str
    distribution: str | None
    version: str | None
    error: str | None = None
    status: PluginStatus = "ok"
    builtin: bool = False
    algorithms: tuple[str, ...] = ()
    instrumentors: tuple[str, ...] = ()
    stores: tuple[str, ...] = ()
    credit_assigners: tuple[str, ...] = ()
    resource_types: tuple[str, ...] = ()
    hooks: tuple[str, ...] = ()
    ignored: tuple[str, ...] = ()

    def describe(self) -> str:
        """``'name' (distribution version)``, for messages."""
        origin = self.distribution or self.module
        if self.distribution and self.version:
            origin += f" {self.version}"
        return f"{self.name!r} ({origin})"


class PluginManager(pluggy.PluginManager):
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

    def __init__(
        self,
        plugins: Iterable[object] = (),
        *,
        disable: Iterable[str] = (),
        entry_points: bool = True,
    ) -> None:
        super().__init__(hookspecs.PROJECT_NAME)
        self.add_hookspecs(hookspecs)
        self._infos: list[PluginInfo] = []
        self._provided: dict[str, dict[str, Any]] = {hook: {} for hook in PROVIDER_HOOKS}
        self._providers: dict[tuple[str, str], PluginInfo] = {}
        self._failed_hooks: set[tuple[str, str]] = set()
        self._disabled = dict.fromkeys(disable, "disabled in code")
        for name in os.environ.get(DISABLE_ENV, "").split(","):
            if name.strip():
                self._disabled[name.strip()] = f"disabled by {DISABLE_ENV}"
        from agl import __version__

        builtin = PluginInfo(BUILTIN, "agl._builtin_plugin", "agl-core", __version__, builtin=True)
        self._load(builtin, lambda: importlib.import_module(builtin.module))
        if entry_points:
            found = importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)
            for point in sorted(found, key=lambda point: (point.name, point.value)):
                dist = point.dist
                info = PluginInfo(
                    point.name,
                    point.value,
                    None if dist is None else dist.name,
                    None if dist is None else dist.version,
                )
                self._load(info, point.load)
        for plugin in plugins:
            self.add(plugin)
        try:
            self.check_pending()
        except pluggy.PluginValidationError as exc:  # the per-plugin checks should catch these
            raise PluginError(f"agl plugins: {exc}") from exc

    # --- adding plugins ---------------------------------------------------------------------

    def add(self, plugin: object, name: str | None = None) -> PluginInfo:
        """Use ``plugin`` (a module or object with ``@agl.hookimpl`` functions), checked at once.

        Args:
            plugin: The module or object.
            name: The plugin's name (default: the module's ``__name__``, as pluggy names it).

        Raises:
            PluginError: the plugin is invalid or would be skipped (the error says why); it is
                not kept.
        """
        name = name or self.get_canonical_name(plugin)
        module = str(getattr(plugin, "__name__", type(plugin).__qualname__))
        info = self._load(PluginInfo(name, module, None, None), lambda: plugin)
        if info.status not in ("ok", "disabled"):
            self._infos.remove(info)
            message = f"plugin {info.describe()} is {info.status}: {info.error}"
            raise PluginError(message, value=name)
        return info

    def _load(self, info: PluginInfo, load: Callable[[], object]) -> PluginInfo:
        reason = self._disabled.get(info.name)
        if reason is not None and not info.builtin:
            self.set_blocked(info.name)
            logger.info("agl plugin %s is %s", info.describe(), reason)
            return self._keep(replace(info, status="disabled", error=reason))
        plugin: object = None
        try:
            if self.has_plugin(info.name) or self.is_blocked(info.name):
                raise Skip(f"another plugin already has the name {info.name!r}")
            try:
                plugin = load()
            except Exception as exc:
                raise Skip(f"importing {info.module} failed: {failure(exc)}") from exc
            check_marked(plugin)
            try:
                self.register(plugin, name=info.name)
            except pluggy.PluginValidationError as exc:
                raise registration_problem(exc) from exc
            except ValueError as exc:  # pluggy: this object is already registered under a name
                raise Skip(str(exc)) from exc
            check_hooks(self, plugin)
            provided = self._call_providers(plugin)
        except (Skip, Invalid) as exc:
            if plugin is not None and self.get_plugin(info.name) is plugin:
                self.unregister(name=info.name)
            if info.builtin:  # core's own plugin failing is a bug in agl, not a plugin problem
                raise AglError(f"agl's built-in plugin failed: {exc}") from exc
            status: PluginStatus = "invalid" if isinstance(exc, Invalid) else "skipped"
            if status == "skipped":
                logger.warning("skipped agl plugin %s: %s", info.describe(), exc)
            return self._keep(replace(info, status=status, error=str(exc)))
        self._guard_lifecycle(info.name, plugin)
        return self._keep(self._merge(info, plugin, provided))

    def _keep(self, info: PluginInfo) -> PluginInfo:
        self._infos.append(info)
        return info

    def _call_providers(self, plugin: object) -> dict[str, dict[str, Any]]:
        provided: dict[str, dict[str, Any]] = {}
        for hook in PROVIDER_HOOKS:
            for impl in getattr(self.hook, hook).get_hookimpls():
                if impl.plugin is plugin:  # one plugin's answer, so a failure is its own
                    try:
                        value = impl.function()
                    except Exception as exc:
                        raise Skip(f"{hook}() raised {failure(exc)}") from exc
                    provided.setdefault(hook, {}).update(check_provided(hook, value))
        return provided

    def _merge(
        self, info: PluginInfo, plugin: object, provided: dict[str, dict[str, Any]]
    ) -> PluginInfo:
        names: dict[str, list[str]] = {}
        ignored: list[str] = []
        for hook, values in provided.items():
            kind = KINDS[hook]
            for name, value in values.items():
                other = self._providers.get((hook, name))
                if other is not None:
                    ignored.append(f"{kind.label} {name!r} (plugin {other.name!r} has it)")
                    logger.warning(
                        "%s %r is provided by agl plugins %s and %s; using %r's",
                        kind.label, name, other.describe(), info.describe(), other.name,
                    )  # fmt: skip
                    continue
                self._provided[hook][name] = value
                self._providers[(hook, name)] = info
                names.setdefault(kind.field, []).append(name)
        hooks = tuple(
            hook
            for hook in LIFECYCLE_HOOKS
            if any(impl.plugin is plugin for impl in getattr(self.hook, hook).get_hookimpls())
        )
        return replace(
            info,
            algorithms=tuple(names.get("algorithms", ())),
            instrumentors=tuple(names.get("instrumentors", ())),
            stores=tuple(names.get("stores", ())),
            credit_assigners=tuple(names.get("credit_assigners", ())),
            resource_types=tuple(names.get("resource_types", ())),
            hooks=hooks,
            ignored=tuple(ignored),
        )

    def _guard_lifecycle(self, name: str, plugin: object) -> None:
        """Make each lifecycle hook of ``plugin`` log its exceptions instead of raising them,
        so one plugin's failure neither stops the run nor the other plugins' calls."""
        for hook in LIFECYCLE_HOOKS:
            for impl in getattr(self.hook, hook).get_hookimpls():
                if impl.plugin is plugin:
                    impl.function = self._guarded(name, hook, impl.function)

    def _guarded(self, name: str, hook: str, function: Callable[..., Any]) -> Callable[..., None]:
        def guarded(*args: Any) -> None:
            try:
                function(*args)
            except Exception as exc:
                first = (name, hook) not in self._failed_hooks
                self._failed_hooks.add((name, hook))
                logger.log(
                    logging.WARNING if first else logging.DEBUG,
                    "agl plugin %r: %s raised %s%s",
                    name, hook, failure(exc),
                    "; later failures of this hook are logged at debug level" if first else "",
                    exc_info=first,
                )  # fmt: skip

        return guarded

    # --- what there is ----------------------------------------------------------------------

    def installed(self) -> list[PluginInfo]:
        """Every plugin, in precedence order, with what it provides or why it is not used.

        The built-in plugin comes first, then installed plugins by entry point name, then
        those given in code. Never raises for a plugin's sake: broken plugins are reported in
        :attr:`PluginInfo.status` and :attr:`PluginInfo.error`.
        """
        return list(self._infos)

    def check(self) -> None:
        """Raise :class:`PluginError` if a plugin is invalid (every lookup calls this)."""
        invalid = [plugin for plugin in self._infos if plugin.status == "invalid"]
        if invalid:
            reasons = "; ".join(f"plugin {plugin.describe()}: {plugin.error}" for plugin in invalid)
            names = ",".join(plugin.name for plugin in invalid)
            raise PluginError(
                f"invalid agl plugin{'s' if len(invalid) > 1 else ''}: {reasons}. Fix "
                f"{'them' if len(invalid) > 1 else 'it'}, or disable with {DISABLE_ENV}={names}",
                field="plugins",
                value=names,
            )

    def implements(self, *hooks: str) -> bool:
        """Whether a plugin in use implements one of these lifecycle hooks."""
        unknown = sorted(set(hooks) - set(LIFECYCLE_HOOKS))
        if unknown:
            raise InvalidInputError(
                f"{unknown} are not agl lifecycle hooks; they are {list(LIFECYCLE_HOOKS)}",
                field="hooks",
            )
        return any(getattr(self.hook, hook).get_hookimpls() for hook in hooks)

    def provided(self, hook: str) -> dict[str, Any]:
        """What plugins provide through a provider hook: name (resource types: tag) → value."""
        self.check()
        return dict(self._provided[hook])

    def provider(self, hook: str, name: str) -> PluginInfo:
        """The plugin that provides ``name`` through ``hook``."""
        return self._providers[(hook, name)]

    def lookup(self, hook: str, name: str) -> Any:
        """What the plugin that provides ``name`` through ``hook`` gave.

        Raises:
            InvalidInputError: no plugin provides it (the message lists the names there are).
            PluginError: a plugin is invalid.
        """
        provided = self.provided(hook)
        if name in provided:
            return provided[name]
        kind = KINDS[hook]
        message = f"no {kind.label} named {name!r}; available: {sorted(provided)}"
        close = difflib.get_close_matches(name, provided, n=1)
        if close:
            message += f" (did you mean {close[0]!r}?)"
        unused = [plugin for plugin in self._infos if plugin.status != "ok"]
        if unused:
            message += "; not loaded: " + ", ".join(
                f"{plugin.name!r} ({plugin.status})" for plugin in unused
            )
        message += ". Installed plugins add more: `agl plugins` lists them"
        raise InvalidInputError(message, field=kind.label.replace(" ", "_"), value=name)

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
