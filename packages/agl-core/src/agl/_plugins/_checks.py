"""What :mod:`agl.plugins` checks about a plugin: its hooks, and what its provider hooks return.

Plain functions over values, no plugin state: a check that fails raises :class:`Skip` (the
plugin cannot be used; the rest of agl works without it) or :class:`Invalid` (the plugin is
written wrongly and must be fixed or disabled).
"""

from __future__ import annotations

import difflib
import inspect
import os
import re
import traceback
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import pluggy

from agl.hookspecs import LIFECYCLE_HOOKS, PROJECT_NAME, PROVIDER_HOOKS


class Skip(Exception):
    """The plugin cannot be used; the message says why."""


class Invalid(Exception):
    """The plugin is written wrongly; the message says where."""


@dataclass(frozen=True)
class Kind:
    """What one provider hook provides."""

    hook: str
    field: str
    """The :class:`agl.plugins.PluginInfo` field listing the names."""
    label: str
    expected: str


KINDS: Final = {
    kind.hook: kind
    for kind in (
        Kind("agl_algorithms", "algorithms", "algorithm", "agl.Algorithm subclasses"),
        Kind("agl_instrumentors", "instrumentors", "instrumentor", "factories taking a Tracer"),
        Kind("agl_stores", "stores", "store scheme", "factories of stores"),
        Kind("agl_credit_assigners", "credit_assigners", "credit assigner", "strategy factories"),
        Kind("agl_resource_types", "resource_types", "resource type", "agl.Resource subclasses"),
    )
}
assert tuple(KINDS) == PROVIDER_HOOKS

_SCHEME = re.compile(r"[a-z][a-z0-9+.-]*")


def check_marked(plugin: object) -> None:
    """Raise :class:`Invalid` if an ``agl_*`` function of ``plugin`` is not a marked hook."""
    unmarked = [
        attribute
        for attribute in dir(plugin)
        if attribute.startswith("agl_")
        and inspect.isroutine(getattr(plugin, attribute, None))
        and not hasattr(getattr(plugin, attribute), f"{PROJECT_NAME}_impl")
        and not hasattr(getattr(plugin, attribute), f"{PROJECT_NAME}_spec")
    ]
    if unmarked:
        raise Invalid(f"{', '.join(unmarked)} is not marked @agl.hookimpl")


def registration_problem(exc: pluggy.PluginValidationError) -> Invalid:
    """pluggy's refusal of a malformed hook, as one line naming the hook."""
    lines = str(exc).splitlines()
    hook = re.search(r"for hook '(\w+)'", lines[0])
    return Invalid((f"{hook.group(1)}: " if hook else "") + "; ".join(lines[1:]))


def check_hooks(manager: pluggy.PluginManager, plugin: object) -> None:
    """Raise :class:`Invalid` if ``plugin`` implements a hook agl lacks, or a wrapper."""
    problems = []
    for caller in manager.get_hookcallers(plugin) or []:
        impls = [impl for impl in caller.get_hookimpls() if impl.plugin is plugin]
        if not caller.has_spec():
            if all(impl.optionalhook for impl in impls):
                continue
            close = difflib.get_close_matches(caller.name, [*PROVIDER_HOOKS, *LIFECYCLE_HOOKS], 1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            problems.append(f"{caller.name} is not an agl hook{hint}")
        elif any(impl.wrapper or impl.hookwrapper for impl in impls):
            problems.append(
                f"{caller.name} is a hook wrapper; agl calls each plugin's implementation "
                "on its own and takes no wrappers"
            )
    if problems:
        raise Invalid("; ".join(problems))


def check_provided(hook: str, value: object) -> dict[str, Any]:
    """What a provider hook returned, by name; raise :class:`Skip` if it is malformed."""
    kind = KINDS[hook]
    if value is None:
        return {}
    if hook == "agl_resource_types":
        return _check_resource_types(value)
    if not isinstance(value, Mapping):
        raise Skip(f"{hook}() returned {show(value)}, not a mapping of names to {kind.expected}")
    checked = {}
    for name, item in value.items():
        if not isinstance(name, str) or not name.strip():
            raise Skip(f"{hook}() returned the name {name!r}; names are non-empty strings")
        problem = _problem(hook, name, item)
        if problem:
            raise Skip(f"{hook}()[{name!r}] is {problem}")
        checked[name] = item
    return checked


def _problem(hook: str, name: str, item: object) -> str | None:
    if hook == "agl_algorithms":
        from agl._train._algorithm import Algorithm

        if not (isinstance(item, type) and issubclass(item, Algorithm)):
            return f"{show(item)}, not a subclass of agl.Algorithm"
        if inspect.isabstract(item):
            missing = ", ".join(sorted(getattr(item, "__abstractmethods__", ())))
            return f"the abstract class {item.__qualname__} (it does not implement {missing})"
        return None
    if hook == "agl_stores" and not _SCHEME.fullmatch(name):
        return "not under a lowercase URL scheme (letters, digits, '+', '-', '.')"
    if not callable(item):
        return f"{show(item)}, which is not callable"
    return None


def _check_resource_types(value: object) -> dict[str, Any]:
    from agl._resources import Resource

    hook = "agl_resource_types"
    if isinstance(value, str | bytes | Mapping) or not isinstance(value, Iterable):
        raise Skip(f"{hook}() returned {show(value)}, not a sequence of agl.Resource subclasses")
    checked: dict[str, Any] = {}
    for item in value:
        if not (isinstance(item, type) and issubclass(item, Resource)):
            raise Skip(f"{hook}() returned {show(item)}, not a subclass of agl.Resource")
        tag = item.model_fields["type"].default
        if not isinstance(tag, str) or not tag:
            raise Skip(f"{hook}(): {item.__qualname__} has no string default for 'type'")
        if checked.get(tag, item) is not item:
            raise Skip(f"{hook}() returned two classes for the type {tag!r}")
        checked[tag] = item
    return checked


def show(value: object) -> str:
    """A short description of a value, for messages."""
    if isinstance(value, type):
        return f"the class {value.__module__}.{value.__qualname__}"
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"a {type(value).__name__} ({text})"


def failure(exc: BaseException) -> str:
    """``Type: message (at file:line)``, the line being the innermost one of plugin code."""
    message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    text = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    ours = (__file__, os.path.join(os.path.dirname(__file__), "_registry.py"))
    frames = [
        frame
        for frame in traceback.extract_tb(exc.__traceback__)
        if not frame.filename.startswith("<") and frame.filename not in ours
    ]
    if frames and "importlib" not in frames[-1].filename:
        path = frames[-1].filename.replace(os.sep, "/").split("/")
        text += f" (at {'/'.join(path[-2:])}:{frames[-1].lineno})"
    return text
