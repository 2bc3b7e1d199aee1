"""``agl plugins``: what each installed plugin provides, or why it is not in use."""

from __future__ import annotations

import importlib.metadata
from typing import TYPE_CHECKING

import typer
from rich.markup import escape

from agl.cli._common import JsonOption, console, print_json

if TYPE_CHECKING:
    from agl._requirements import UnmetRequirement
    from agl.plugins import PluginInfo


def plugins_command(as_json: JsonOption = False) -> None:
    """List the plugins: what each provides, or why it is not in use.

    Plugins are entry points in group agl.plugins; the built-in plugin 'agl' comes first.
    Exits with 1 when a plugin is invalid (agl refuses to run until it is fixed or disabled).
    Each plugin's distribution has its declared requirements checked against what is
    installed: one that is not met (another install moved a pinned package, say) is named
    with the versions it allows and the one installed, or "missing".
    """
    import dataclasses

    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from agl.plugins import DISABLE_ENV, ENTRY_POINT_GROUP, PluginManager

    found = PluginManager().installed()
    invalid = [plugin.name for plugin in found if plugin.status == "invalid"]
    unmet = {plugin.name: _unmet(plugin) for plugin in found}
    if as_json:
        data = {
            "group": ENTRY_POINT_GROUP,
            "plugins": [
                {
                    **dataclasses.asdict(plugin),
                    "unmet_requirements": [
                        {"name": u.name, "specifier": u.specifier, "installed": u.installed}
                        for u in unmet[plugin.name]
                    ],
                }
                for plugin in found
            ],
        }
        print_json(data)
    else:
        table = Table(caption=f"{len(found)} plugin(s); entry point group {ENTRY_POINT_GROUP!r}")
        for column in ("name", "module", "distribution", "provides", "status"):
            table.add_column(column, overflow="fold")
        for plugin in found:
            provides = Text()
            for label, names in (
                ("algorithms", plugin.algorithms),
                ("instrumentors", plugin.instrumentors),
                ("stores", plugin.stores),
                ("credit assigners", plugin.credit_assigners),
                ("resource types", plugin.resource_types),
                ("hooks", plugin.hooks),
            ):
                if names:
                    provides.append(f"{label}: {', '.join(names)}\n")
            status = Text(
                plugin.status if plugin.error is None else f"{plugin.status}: {plugin.error}",
                style={"ok": "green", "disabled": "yellow"}.get(plugin.status, "red"),
            )
            for note in plugin.ignored:
                status.append(f"\nignored: {note}", style="yellow")
            for requirement in unmet[plugin.name]:
                status.append(f"\nrequirement not met: {requirement}", style="red")
            provides.rstrip()
            distribution = " ".join(filter(None, (plugin.distribution, plugin.version)))
            table.add_row(
                Text(plugin.name),
                Text(plugin.module),
                Text(distribution or "-"),
                provides if provides.plain else Text("-"),
                status,
            )
        Console().print(table)
    for plugin in found:
        if unmet[plugin.name]:
            console.print(
                f"[yellow]warning:[/] plugin {escape(plugin.describe())} may fail: its "
                f"requirements are not met: {escape('; '.join(map(str, unmet[plugin.name])))}. "
                "Install versions it allows.",
                highlight=False,
            )
    if invalid:
        console.print(
            f"[red]error:[/] agl refuses to run with invalid plugins; fix them or set "
            f"{DISABLE_ENV}={','.join(invalid)}"
        )
        raise typer.Exit(1)


def _unmet(plugin: PluginInfo) -> tuple[UnmetRequirement, ...]:
    """What the plugin's distribution requires and is not installed (none for a disabled
    plugin, or one given in code)."""
    from agl._requirements import unmet_requirements

    if plugin.distribution is None or plugin.status == "disabled":
        return ()
    try:
        return unmet_requirements(plugin.distribution)
    except importlib.metadata.PackageNotFoundError:
        return ()
