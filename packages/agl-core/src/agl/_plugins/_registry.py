"""The plugins in use: loading them, checking them, and keeping what they provide.

:class:`PluginRegistry` is the part of :class:`agl.plugins.PluginManager` that reads plugins:
core's built-in plugin first, then every entry point by name (less those disabled), then the
plugins given in code, each checked (:mod:`agl._plugins._checks`) and its provider hooks
called once; lifecycle hooks are wrapped so that one plugin's failure is logged, not raised.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.metadata
import logging
import os
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

import pluggy

from agl import hookspecs
from agl._errors import AglError, InvalidInputError
from agl._plugins._checks import (
    KINDS,
    Invalid,
    Skip,
    check_hooks,
    check_marked,
    check_provided,
    failure,
    registration_problem,
)
from agl._plugins._info import BUILTIN, DISABLE_ENV, PluginError, PluginInfo, PluginStatus
from agl._requirements import ENTRY_POINT_GROUP
from agl.hookspecs import LIFECYCLE_HOOKS, PROVIDER_HOOKS

__all__ = ["PluginRegistry"]

logger = logging.getLogger("agl.plugins")


class PluginRegistry(pluggy.PluginManager):
    """The plugins in use, loaded and checked, and what their provider hooks answered.

    The part of :class:`agl.plugins.PluginManager` that reads plugins (its arguments are
    documented there); the manager turns the names they provide into objects.
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
