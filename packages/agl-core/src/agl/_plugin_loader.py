"""Loading agl's plugins: import, validate and merge what each provides (see :mod:`agl.plugins`).

:func:`load` builds the plugin manager and checks every plugin as it is added: a misspelled or
malformed hook makes the plugin *invalid* (an error when plugins are used), a plugin that fails
to import, raises or returns the wrong kind of object is *skipped* with one log line, and a
name two plugins provide goes to the first.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import importlib.metadata
import inspect
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pluggy

from agl import hookspecs
from agl.errors import AglError
from agl.hookspecs import LIFECYCLE_HOOKS, PROVIDER_HOOKS
from agl.plugins import (
    _KINDS,
    BUILTIN_PLUGIN,
    DISABLE_ENV,
    ENTRY_POINT_GROUP,
    PluginError,
    PluginInfo,
    PluginStatus,
    _failure,
    _registry,
    _show,
    _State,
    logger,
)

if TYPE_CHECKING:
    from agl.resources import Resource


class _Skip(Exception):
    """The plugin cannot be used; the message says why."""


class _Invalid(Exception):
    """The plugin is written wrongly; the message says where."""


@dataclass(frozen=True)
class _Candidate:
    info: PluginInfo
    load: Callable[[], object]


def load() -> _State:
    """Load every plugin: the built-in one, the entry points, and those code registered."""
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


def _all_hooks() -> list[str]:
    return [*PROVIDER_HOOKS, *LIFECYCLE_HOOKS]
