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

import difflib
import logging
import os
import threading
import traceback
from collections.abc import Callable
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
                from agl._plugin_loader import load

                _registry.state = load()
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


def create_algorithm(name: str, *, field: str = "algorithm") -> Algorithm:
    """Build the algorithm published under ``name`` with its default settings.

    This is what ``agl.Trainer(algorithm="name")`` and ``{"agent": "name"}`` do.

    Raises:
        InvalidInputError: no plugin provides it, or its class does not build without
            arguments (the message says to build it yourself), or builds no algorithm.
        PluginError: an installed plugin is invalid.
    """
    from agl.algorithm import Algorithm

    cls = load_algorithm(name)
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
