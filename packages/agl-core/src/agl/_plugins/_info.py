"""What the plugin manager reports about each plugin, and the error a plugin's mistake raises."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

from agl._errors import AglError

__all__ = ["BUILTIN", "DISABLE_ENV", "PluginError", "PluginInfo", "PluginStatus"]

DISABLE_ENV: Final = "AGL_DISABLE_PLUGINS"
"""Environment variable naming plugins (entry point names, comma-separated) not to load."""

BUILTIN: Final = "agl"
"""The name of core's own plugin, which provides the built-in names."""


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
