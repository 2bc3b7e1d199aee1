"""Find the plugins installed for agl.

A plugin is a distribution that declares an entry point in the ``agl.plugins`` group naming a
module, as pytest plugins do with ``pytest11``::

    [project.entry-points."agl.plugins"]
    langchain = "agl_langchain.plugin"
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Final

__all__ = ["ENTRY_POINT_GROUP", "PluginInfo", "installed_plugins"]

ENTRY_POINT_GROUP: Final = "agl.plugins"
"""The entry point group agl plugins register under."""


@dataclass(frozen=True)
class PluginInfo:
    """One installed plugin: its entry point, who ships it, and whether its module imports.

    Attributes:
        name: The entry point's name.
        module: The entry point's value, the module it names.
        distribution: The distribution that declares the entry point, if known.
        version: That distribution's version, if known.
        error: ``"ExceptionType: message"`` when importing the module failed, else None.
    """

    name: str
    module: str
    distribution: str | None
    version: str | None
    error: str | None = None


def installed_plugins() -> list[PluginInfo]:
    """Return the plugins installed in this environment, by name, importing each module.

    A module that fails to import is reported in :attr:`PluginInfo.error` instead of raising,
    so one broken plugin does not hide the others.
    """
    found = []
    for point in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda p: (p.name, p.value)):
        error = None
        try:
            point.load()
        except Exception as exc:  # a plugin's import may fail in any way
            error = f"{type(exc).__name__}: {exc}"
        dist = point.dist
        found.append(
            PluginInfo(
                name=point.name,
                module=point.value,
                distribution=None if dist is None else dist.name,
                version=None if dist is None else dist.version,
                error=error,
            )
        )
    return found
