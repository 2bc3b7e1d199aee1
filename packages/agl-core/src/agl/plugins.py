"""Find agl's plugins, check them, and look up what they provide.

A plugin is a module of ``@agl.hookimpl`` functions (the hooks: :mod:`agl.hookspecs`) that a
distribution names in an entry point of group ``agl.plugins``, as pytest plugins do with
``pytest11``::

    [project.entry-points."agl.plugins"]
    langchain = "agl_langchain.plugin"

Nothing happens at ``import agl``. The first call that needs plugins loads them all, once per
process: core's built-in plugin ``agl`` first, then every entry point by name, then plugins
registered in code (:func:`register_plugin`). Loading imports each module, registers it with a
:class:`pluggy.PluginManager`, checks its hooks, and calls its provider hooks once. A plugin
with a misspelled or malformed hook makes every lookup raise :class:`PluginError`; one that
fails to import, raises, or returns the wrong thing is skipped with one warning on logger
``agl.plugins``. :func:`installed_plugins` (and ``agl plugins``) reports what happened to each.

Lookups: :func:`algorithm_classes` / :func:`load_algorithm`, :func:`instrumentor_factories` /
:func:`create_instrumentor`, :func:`store_factories`, :func:`credit_assigner_factories` /
:func:`load_credit_assigner`; lifecycle hooks fire through :func:`notify`.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import importlib.metadata
import inspect
import logging
import os
import re
import threading
import traceback
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Literal

import pluggy

from agl import hookspecs
from agl.errors import AglError, InvalidInputError
from agl.hookspecs import LIFECYCLE_HOOKS, PROVIDER_HOOKS

if TYPE_CHECKING:
    from agl.algorithm import Algorithm
    from agl.lightning.credit import CreditAssigner
    from agl.resources import Resource
    from agl.store.base import Store
    from agl.tracing import Tracer
    from agl.tracing.instrumentor import Instrumentor, InstrumentorFactory

__all__ = [
    "BUILTIN_PLUGIN",
    "DISABLE_ENV",
    "ENTRY_POINT_GROUP",
    "PluginError",
    "PluginInfo",
    "algorithm_classes",
    "create_instrumentor",
    "credit_assigner_factories",
    "disable_plugins",
    "hookimpl",
    "implemented",
    "installed_plugins",
    "instrumentor_factories",
    "load_algorithm",
    "load_credit_assigner",
    "notify",
    "plugin_manager",
    "register_plugin",
    "reset_plugins",
    "store_factories",
]

ENTRY_POINT_GROUP: Final = "agl.plugins"
"""The entry point group agl plugins register under."""

DISABLE_ENV: Final = "AGL_DISABLE_PLUGINS"
"""Environment variable naming plugins (entry point names, comma-separated) not to load."""

BUILTIN_PLUGIN: Final = "agl"
"""The name of core's own plugin, which provides the built-in names."""

hookimpl = pluggy.HookimplMarker(hookspecs.PROJECT_NAME)
"""Marks a function as the implementation of the hook it is named after (``agl.hookimpl``)."""

logger = logging.getLogger("agl.plugins")


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
        resource_types: The resource ``type`` tags it registers.
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


@dataclass(frozen=True)
class _Kind:
    """What one provider hook provides."""

    hook: str
    field: str
    """The :class:`PluginInfo` field listing the names."""
    label: str
    expected: str


_KINDS: Final = {
    kind.hook: kind
    for kind in (
        _Kind("agl_algorithms", "algorithms", "algorithm", "agl.Algorithm subclasses"),
        _Kind("agl_instrumentors", "instrumentors", "instrumentor", "factories taking a Tracer"),
        _Kind("agl_stores", "stores", "store scheme", "factories of stores"),
        _Kind("agl_credit_assigners", "credit_assigners", "credit assigner", "strategy factories"),
        _Kind("agl_resource_types", "resource_types", "resource type", "agl.Resource subclasses"),
    )
}
assert tuple(_KINDS) == PROVIDER_HOOKS


# --- the loaded state -------------------------------------------------------------------------


@dataclass
class _State:
    """Everything loading found: immutable once built, except the failure log of notify."""

    manager: pluggy.PluginManager
    plugins: list[PluginInfo]
    provided: dict[str, dict[str, Any]]
    """Provider hook → name (resource types: tag) → what the winning plugin gave."""
    providers: dict[tuple[str, str], str]
    """(provider hook, name) → the name of the plugin whose it is."""
    lifecycle: dict[str, list[tuple[str, Callable[..., Any], tuple[str, ...]]]]
    """Lifecycle hook → (plugin name, function, its argument names), in pluggy's call order."""
    lifecycle_args: dict[str, frozenset[str]]
    registered_tags: list[tuple[str, type[Resource]]]
    """Resource types this load added to the registry (undone by reset_plugins)."""
    failed_hooks: set[tuple[str, str]] = field(default_factory=set)

    def invalid(self) -> list[PluginInfo]:
        return [plugin for plugin in self.plugins if plugin.status == "invalid"]

    def provider(self, hook: str, name: str) -> PluginInfo:
        """The plugin that provides ``name`` through ``hook``."""
        plugin_name = self.providers[(hook, name)]
        return next(plugin for plugin in self.plugins if plugin.name == plugin_name)


class _Registry:
    """The process's plugins: what code registered and disabled, and the loaded state."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.state: _State | None = None
        self.loading = False
        self.disabled: set[str] = set()
        self.registered: list[tuple[str, object]] = []

    def forget(self) -> None:
        """Drop the loaded state (and the resource types it registered); load again on use."""
        from agl.resources import _unregister_resource_type

        with self.lock:
            if self.state is not None:
                for tag, cls in self.state.registered_tags:
                    _unregister_resource_type(tag, cls)
            self.state = None


_registry = _Registry()


def _loaded() -> _State:
    """The loaded plugins, loading them on first use (whatever is wrong with them)."""
    state = _registry.state
    if state is not None:
        return state
    with _registry.lock:
        if _registry.state is None:
            if _registry.loading:
                raise PluginError(
                    "a plugin asked for agl's plugins while they were loading (when imported, "
                    "or from a provider hook); look them up later, when they are used"
                )
            _registry.loading = True
            try:
                _registry.state = _load()
            finally:
                _registry.loading = False
        return _registry.state


def _checked() -> _State:
    """The loaded plugins; raise :class:`PluginError` if any is invalid."""
    state = _loaded()
    invalid = state.invalid()
    if invalid:
        reasons = "; ".join(f"plugin {plugin.describe()}: {plugin.error}" for plugin in invalid)
        names = ",".join(plugin.name for plugin in invalid)
        raise PluginError(
            f"invalid agl plugin{'s' if len(invalid) > 1 else ''}: {reasons}. Fix "
            f"{'them' if len(invalid) > 1 else 'it'}, or disable with {DISABLE_ENV}={names}",
            field="plugins",
            value=names,
        )
    return state


# --- public API -------------------------------------------------------------------------------


def plugin_manager() -> pluggy.PluginManager:
    """Return the plugin manager holding every plugin in use (loading them on first use).

    Raises:
        PluginError: a plugin implements a hook that does not exist, or implements one wrongly.
    """
    return _checked().manager


def installed_plugins() -> list[PluginInfo]:
    """Return every plugin, in precedence order, with what it provides or why it is not used.

    The built-in plugin comes first, then installed plugins by entry point name, then those
    registered in code. Never raises for a plugin's sake: broken plugins are reported in
    :attr:`PluginInfo.status` and :attr:`PluginInfo.error`.
    """
    return list(_loaded().plugins)


def reset_plugins() -> None:
    """Forget the loaded plugins, plugins registered and disabled in code; load again on use.

    Resource types that plugins registered are unregistered. For tests, and for code that
    installs a plugin while running.
    """
    with _registry.lock:
        _registry.forget()
        _registry.disabled.clear()
        _registry.registered.clear()


def disable_plugins(*names: str) -> None:
    """Keep the named plugins (entry point names) from loading, as ``AGL_DISABLE_PLUGINS`` does.

    Plugins already loaded are reloaded without them on next use.
    """
    with _registry.lock:
        _registry.disabled.update(names)
        _registry.forget()


def register_plugin(plugin: object, name: str | None = None) -> None:
    """Use ``plugin`` (a module or object with ``@agl.hookimpl`` functions) without installing it.

    It comes after every installed plugin (so it cannot take their names) and is checked at
    once.

    Args:
        plugin: The module or object.
        name: The plugin's name (default: the module's ``__name__``).

    Raises:
        PluginError: the plugin is invalid or would be skipped (the error says why); it is
            not kept.
    """
    name = name or getattr(plugin, "__name__", None)
    if not isinstance(name, str) or not name:
        raise InvalidInputError("register_plugin needs a name for this plugin", field="name")
    with _registry.lock:
        _registry.registered.append((name, plugin))
        _registry.forget()
        info = next(p for p in reversed(_loaded().plugins) if p.name == name)
        if info.status in ("ok", "disabled"):
            return
        _registry.registered.pop()
        _registry.forget()
    raise PluginError(f"plugin {info.describe()} is {info.status}: {info.error}", value=name)


def algorithm_classes() -> dict[str, type[Algorithm]]:
    """Return every algorithm plugins provide: public name → class."""
    return dict(_checked().provided["agl_algorithms"])


def load_algorithm(name: str) -> type[Algorithm]:
    """Return the algorithm class published under ``name``.

    Raises:
        InvalidInputError: no plugin provides it (the message lists the names there are).
        PluginError: an installed plugin is invalid.
    """
    cls: type[Algorithm] = _lookup("agl_algorithms", name)
    return cls


def instrumentor_factories() -> dict[str, InstrumentorFactory]:
    """Return every instrumentor plugins provide: name → factory taking a tracer."""
    return dict(_checked().provided["agl_instrumentors"])


def create_instrumentor(name: str, tracer: Tracer) -> Instrumentor:
    """Build the instrumentor ``name`` for ``tracer`` (not yet instrumenting).

    Raises:
        InvalidInputError: no plugin provides it.
        PluginError: its factory built something without ``instrument``/``uninstrument``/
            ``instrumented``.
    """
    from agl.tracing.instrumentor import Instrumentor

    factory: InstrumentorFactory = _lookup("agl_instrumentors", name)
    instrumentor: object = factory(tracer)
    if not isinstance(instrumentor, Instrumentor):
        who = _checked().provider("agl_instrumentors", name)
        raise PluginError(
            f"instrumentor {name!r} of plugin {who.describe()} built {_show(instrumentor)}, "
            "which is not an Instrumentor (instrument(), uninstrument(), instrumented)",
            field="instrument",
            value=name,
        )
    return instrumentor


def store_factories() -> dict[str, Callable[..., Store]]:
    """Return every store backend: URL scheme → factory ``(url, **options) -> Store``."""
    return dict(_checked().provided["agl_stores"])


def credit_assigner_factories() -> dict[str, Callable[..., CreditAssigner]]:
    """Return every credit-assignment strategy: name → factory."""
    return dict(_checked().provided["agl_credit_assigners"])


def load_credit_assigner(name: str) -> Callable[..., CreditAssigner]:
    """Return the factory of the credit-assignment strategy ``name``.

    Raises:
        InvalidInputError: no plugin provides it.
    """
    factory: Callable[..., CreditAssigner] = _lookup("agl_credit_assigners", name)
    return factory


def implemented(*hook_names: str) -> bool:
    """Whether any plugin implements one of these lifecycle hooks (so firing them is useful).

    Raises:
        PluginError: an installed plugin is invalid.
    """
    state = _checked()
    for hook_name in hook_names:
        _lifecycle_hook(state, hook_name)
    return any(state.lifecycle[hook_name] for hook_name in hook_names)


def notify(hook_name: str, **kwargs: Any) -> None:
    """Call every implementation of a lifecycle hook; a plugin's exception never propagates.

    Each implementation is called on its own, in pluggy's order; one that raises is logged on
    ``agl.plugins`` (with its traceback, the first time for that plugin and hook; at debug
    level after that) and the others still run. Invalid plugins are not called.

    Raises:
        InvalidInputError: ``hook_name`` is not a lifecycle hook, or ``kwargs`` are not its
            arguments (the caller's mistake, not a plugin's).
    """
    state = _loaded()
    calls = _lifecycle_hook(state, hook_name)
    if not calls:
        return
    expected = state.lifecycle_args[hook_name]
    if kwargs.keys() != expected:
        raise InvalidInputError(
            f"{hook_name} takes {sorted(expected)}, got {sorted(kwargs)}",
            field="kwargs",
        )
    for plugin_name, function, argnames in calls:
        try:
            function(*(kwargs[argname] for argname in argnames))
        except Exception as exc:
            key = (plugin_name, hook_name)
            first = key not in state.failed_hooks
            state.failed_hooks.add(key)
            logger.log(
                logging.WARNING if first else logging.DEBUG,
                "agl plugin %r: %s raised %s%s",
                plugin_name,
                hook_name,
                _failure(exc),
                "; later failures of this hook are logged at debug level" if first else "",
                exc_info=first,
            )


def _lifecycle_hook(
    state: _State, hook_name: str
) -> list[tuple[str, Callable[..., Any], tuple[str, ...]]]:
    calls = state.lifecycle.get(hook_name)
    if calls is None:
        raise InvalidInputError(
            f"{hook_name!r} is not an agl lifecycle hook; they are {list(LIFECYCLE_HOOKS)}",
            field="hook_name",
            value=hook_name,
        )
    return calls


def _lookup(hook: str, name: str) -> Any:
    state = _checked()
    provided = state.provided[hook]
    if name in provided:
        return provided[name]
    kind = _KINDS[hook]
    message = f"no {kind.label} named {name!r}; available: {sorted(provided)}"
    close = difflib.get_close_matches(name, provided, n=1)
    if close:
        message += f" (did you mean {close[0]!r}?)"
    unused = [plugin for plugin in state.plugins if plugin.status != "ok"]
    if unused:
        message += "; not loaded: " + ", ".join(
            f"{plugin.name!r} ({plugin.status})" for plugin in unused
        )
    message += ". Installed plugins add more: `agl plugins` lists them"
    raise InvalidInputError(message, field=kind.label.replace(" ", "_"), value=name)


def _resource_type(tag: str) -> type[Resource] | None:
    """The class plugins registered for ``tag``, loading plugins on first need (never raises)."""
    try:
        state = _loaded()
    except PluginError:  # asked while loading: the tag is not known yet
        return None
    cls: type[Resource] | None = state.provided["agl_resource_types"].get(tag)
    return cls


# --- loading ----------------------------------------------------------------------------------


class _Skip(Exception):
    """The plugin cannot be used; the message says why."""


class _Invalid(Exception):
    """The plugin is written wrongly; the message says where."""


@dataclass(frozen=True)
class _Candidate:
    info: PluginInfo
    load: Callable[[], object]


def _load() -> _State:
    import agl

    manager = pluggy.PluginManager(hookspecs.PROJECT_NAME)
    manager.add_hookspecs(hookspecs)
    loader = _Loader(manager, _disabled_names())
    builtin = PluginInfo(
        BUILTIN_PLUGIN, "agl._builtin_plugin", "agl-core", agl.__version__, builtin=True
    )
    loader.add(_Candidate(builtin, lambda: importlib.import_module(builtin.module)))
    points = sorted(
        importlib.metadata.entry_points(group=ENTRY_POINT_GROUP),
        key=lambda point: (point.name, point.value),
    )
    for point in points:
        dist = point.dist
        info = PluginInfo(
            point.name,
            point.value,
            None if dist is None else dist.name,
            None if dist is None else dist.version,
        )
        loader.add(_Candidate(info, point.load))
    for name, plugin in _registry.registered:
        module = getattr(plugin, "__name__", type(plugin).__qualname__)
        loader.add(_Candidate(PluginInfo(name, str(module), None, None), _returning(plugin)))
    try:
        manager.check_pending()
    except pluggy.PluginValidationError as exc:  # the per-plugin checks should catch these
        raise PluginError(f"agl plugins: {exc}") from exc
    return loader.finish()


def _returning(plugin: object) -> Callable[[], object]:
    return lambda: plugin


def _disabled_names() -> dict[str, str]:
    """Plugin name → what disabled it."""
    names = dict.fromkeys(_registry.disabled, "disabled in code (agl.plugins.disable_plugins)")
    for name in os.environ.get(DISABLE_ENV, "").split(","):
        if name.strip():
            names[name.strip()] = f"disabled by {DISABLE_ENV}"
    return names


class _Loader:
    """Registers plugins one by one, in precedence order, and merges what they provide."""

    def __init__(self, manager: pluggy.PluginManager, disabled: dict[str, str]) -> None:
        self.manager = manager
        self.disabled = disabled
        self.plugins: list[PluginInfo] = []
        self.provided: dict[str, dict[str, Any]] = {hook: {} for hook in PROVIDER_HOOKS}
        self.providers: dict[tuple[str, str], str] = {}
        self.by_name: dict[str, PluginInfo] = {}
        self.registered_tags: list[tuple[str, type[Resource]]] = []

    def add(self, candidate: _Candidate) -> None:
        info = candidate.info
        reason = self.disabled.get(info.name)
        if reason is not None and not info.builtin:
            self.manager.set_blocked(info.name)
            logger.info("agl plugin %s is %s", info.describe(), reason)
            self.plugins.append(dataclasses.replace(info, status="disabled", error=reason))
            return
        if reason is not None:
            logger.warning("the built-in agl plugin cannot be disabled; %s names it", reason)
        plugin: object = None
        try:
            if self.manager.has_plugin(info.name) or self.manager.is_blocked(info.name):
                raise _Skip(f"another plugin already has the name {info.name!r}")
            try:
                plugin = candidate.load()
            except Exception as exc:
                raise _Skip(f"importing {info.module} failed: {_failure(exc)}") from exc
            self._register(info.name, plugin)
            provided = self._call_providers(plugin)
        except (_Skip, _Invalid) as exc:
            if plugin is not None and self.manager.get_plugin(info.name) is plugin:
                self.manager.unregister(name=info.name)
            if info.builtin:  # core's own plugin failing is a bug in agl, not a plugin problem
                raise AglError(f"agl's built-in plugin failed: {exc}") from exc
            status: PluginStatus = "invalid" if isinstance(exc, _Invalid) else "skipped"
            if status == "skipped":
                logger.warning("skipped agl plugin %s: %s", info.describe(), exc)
            self.plugins.append(dataclasses.replace(info, status=status, error=str(exc)))
            return
        self.plugins.append(self._merge(info, plugin, provided))

    def _register(self, name: str, plugin: object) -> None:
        unmarked = [
            attribute
            for attribute in dir(plugin)
            if attribute.startswith("agl_")
            and inspect.isroutine(getattr(plugin, attribute, None))
            and not hasattr(getattr(plugin, attribute), f"{hookspecs.PROJECT_NAME}_impl")
            and not hasattr(getattr(plugin, attribute), f"{hookspecs.PROJECT_NAME}_spec")
        ]
        if unmarked:
            raise _Invalid(f"{', '.join(unmarked)} is not marked @agl.hookimpl")
        try:
            self.manager.register(plugin, name=name)
        except pluggy.PluginValidationError as exc:
            lines = str(exc).splitlines()
            hook = re.search(r"for hook '(\w+)'", lines[0])
            where = f"{hook.group(1)}: " if hook else ""
            raise _Invalid(where + "; ".join(lines[1:])) from exc
        except ValueError as exc:  # pluggy: this object is already registered under a name
            raise _Skip(str(exc)) from exc
        problems = []
        for caller in self.manager.get_hookcallers(plugin) or []:
            impls = [impl for impl in caller.get_hookimpls() if impl.plugin is plugin]
            if not caller.has_spec():
                if all(impl.optionalhook for impl in impls):
                    continue
                problem = f"{caller.name} is not an agl hook"
                close = difflib.get_close_matches(caller.name, _all_hooks(), n=1)
                problems.append(problem + (f" (did you mean {close[0]}?)" if close else ""))
            elif any(impl.wrapper or impl.hookwrapper for impl in impls):
                problems.append(
                    f"{caller.name} is a hook wrapper; agl calls each plugin's implementation "
                    "on its own and takes no wrappers"
                )
        if problems:
            raise _Invalid("; ".join(problems))

    def _call_providers(self, plugin: object) -> dict[str, dict[str, Any]]:
        provided: dict[str, dict[str, Any]] = {}
        for hook in PROVIDER_HOOKS:
            caller = getattr(self.manager.hook, hook)
            for impl in caller.get_hookimpls():
                if impl.plugin is not plugin:
                    continue
                try:
                    value = impl.function()
                except Exception as exc:
                    raise _Skip(f"{hook}() raised {_failure(exc)}") from exc
                provided.setdefault(hook, {}).update(_check_provided(hook, value))
        return provided

    def _merge(
        self, info: PluginInfo, plugin: object, provided: dict[str, dict[str, Any]]
    ) -> PluginInfo:
        from agl.resources import register_resource_type, resource_types

        names: dict[str, list[str]] = {}
        ignored: list[str] = []
        registry = resource_types()
        for hook in PROVIDER_HOOKS:
            kind = _KINDS[hook]
            for name, value in provided.get(hook, {}).items():
                other_name = self.providers.get((hook, name))
                other = None if other_name is None else self.by_name[other_name]
                holder = registry.get(name) if hook == "agl_resource_types" else None
                if other is None and holder is not None and holder is not value:
                    ignored.append(f"{kind.label} {name!r} (registered by {holder.__qualname__})")
                    logger.warning(
                        "agl plugin %s: %s %r is already registered by %s; ignoring the plugin's",
                        info.describe(), kind.label, name, holder.__qualname__,
                    )  # fmt: skip
                    continue
                if other is not None:
                    ignored.append(f"{kind.label} {name!r} (plugin {other.name!r} has it)")
                    logger.warning(
                        "%s %r is provided by agl plugins %s and %s; using %r's",
                        kind.label, name, other.describe(), info.describe(), other.name,
                    )  # fmt: skip
                    continue
                if hook == "agl_resource_types" and holder is None:
                    register_resource_type(value)
                    self.registered_tags.append((name, value))
                self.provided[hook][name] = value
                self.providers[(hook, name)] = info.name
                names.setdefault(kind.field, []).append(name)
        hooks = tuple(
            hook
            for hook in LIFECYCLE_HOOKS
            if any(i.plugin is plugin for i in getattr(self.manager.hook, hook).get_hookimpls())
        )
        merged = dataclasses.replace(
            info,
            algorithms=tuple(names.get("algorithms", ())),
            instrumentors=tuple(names.get("instrumentors", ())),
            stores=tuple(names.get("stores", ())),
            credit_assigners=tuple(names.get("credit_assigners", ())),
            resource_types=tuple(names.get("resource_types", ())),
            hooks=hooks,
            ignored=tuple(ignored),
        )
        self.by_name[merged.name] = merged
        return merged

    def finish(self) -> _State:
        lifecycle = {}
        arguments = {}
        for hook in LIFECYCLE_HOOKS:
            caller = getattr(self.manager.hook, hook)
            assert caller.spec is not None
            arguments[hook] = frozenset(caller.spec.argnames)
            lifecycle[hook] = [
                (impl.plugin_name, impl.function, tuple(impl.argnames))
                for impl in reversed(caller.get_hookimpls())
            ]
        return _State(
            manager=self.manager,
            plugins=self.plugins,
            provided=self.provided,
            providers=self.providers,
            lifecycle=lifecycle,
            lifecycle_args=arguments,
            registered_tags=self.registered_tags,
        )


# --- checking what provider hooks return --------------------------------------------------------

_SCHEME = re.compile(r"[a-z][a-z0-9+.-]*")


def _check_provided(hook: str, value: object) -> dict[str, Any]:
    """Return what a provider hook gave, by name; raise :class:`_Skip` if it is malformed."""
    kind = _KINDS[hook]
    if value is None:
        return {}
    if hook == "agl_resource_types":
        return _check_resource_types(value)
    if not isinstance(value, Mapping):
        raise _Skip(f"{hook}() returned {_show(value)}, not a mapping of names to {kind.expected}")
    checked = {}
    for name, item in value.items():
        if not isinstance(name, str) or not name.strip():
            raise _Skip(f"{hook}() returned the name {name!r}; names are non-empty strings")
        problem = _problem(hook, name, item)
        if problem:
            raise _Skip(f"{hook}()[{name!r}] is {problem}")
        checked[name] = item
    return checked


def _problem(hook: str, name: str, item: object) -> str | None:
    if hook == "agl_algorithms":
        from agl.algorithm import Algorithm

        if not (isinstance(item, type) and issubclass(item, Algorithm)):
            return f"{_show(item)}, not a subclass of agl.Algorithm"
        if inspect.isabstract(item):
            missing = ", ".join(sorted(getattr(item, "__abstractmethods__", ())))
            return f"the abstract class {item.__qualname__} (it does not implement {missing})"
        return None
    if hook == "agl_stores" and not _SCHEME.fullmatch(name):
        return "not under a lowercase URL scheme (letters, digits, '+', '-', '.')"
    if not callable(item):
        return f"{_show(item)}, which is not callable"
    return None


def _check_resource_types(value: object) -> dict[str, type[Resource]]:
    from agl.resources import Resource

    hook = "agl_resource_types"
    if isinstance(value, str | bytes | Mapping) or not isinstance(value, Iterable):
        raise _Skip(f"{hook}() returned {_show(value)}, not a sequence of agl.Resource subclasses")
    checked: dict[str, type[Resource]] = {}
    for item in value:
        if not (isinstance(item, type) and issubclass(item, Resource)):
            raise _Skip(f"{hook}() returned {_show(item)}, not a subclass of agl.Resource")
        tag = item.model_fields["type"].default
        if not isinstance(tag, str) or not tag:
            raise _Skip(f"{hook}(): {item.__qualname__} has no string default for 'type'")
        if checked.get(tag, item) is not item:
            raise _Skip(f"{hook}() returned two classes for the type {tag!r}")
        checked[tag] = item
    return checked


def _show(value: object) -> str:
    """A short description of a value, for messages."""
    if isinstance(value, type):
        return f"the class {value.__module__}.{value.__qualname__}"
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"a {type(value).__name__} ({text})"


def _failure(exc: BaseException) -> str:
    """``Type: message (at file:line)``, the line being the innermost one of plugin code."""
    message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    text = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    frames = [
        frame
        for frame in traceback.extract_tb(exc.__traceback__)
        if not frame.filename.startswith("<") and frame.filename != __file__
    ]
    if frames and "importlib" not in frames[-1].filename:
        path = frames[-1].filename.replace(os.sep, "/").split("/")
        text += f" (at {'/'.join(path[-2:])}:{frames[-1].lineno})"
    return text


def _all_hooks() -> list[str]:
    return [*PROVIDER_HOOKS, *LIFECYCLE_HOOKS]
