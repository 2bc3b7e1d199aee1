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

from agl._plugins._info import DISABLE_ENV, PluginError, PluginInfo
from agl._plugins._manager import PluginManager, open_store
from agl._requirements import ENTRY_POINT_GROUP
from agl.hookspecs import hookimpl

__all__ = [
    "DISABLE_ENV",
    "ENTRY_POINT_GROUP",
    "PluginError",
    "PluginInfo",
    "PluginManager",
    "hookimpl",
    "open_store",
]
