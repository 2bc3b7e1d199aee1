"""``agl plugins``: what each installed plugin provides, or why it is not in use."""

from __future__ import annotations

import typer

from agl.cli._common import JsonOption, console, print_json


def plugins_command(as_json: JsonOption = False) -> None:
    """List the plugins: what each provides, or why it is not in use.

    Plugins are entry points in group agl.plugins; the built-in plugin 'agl' comes first.
    Exits with 1 when a plugin is invalid (agl refuses to run until it is fixed or disabled).
    """
    import dataclasses

    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from agl.plugins import DISABLE_ENV, ENTRY_POINT_GROUP, PluginManager

    found = PluginManager().installed()
    invalid = [plugin.name for plugin in found if plugin.status == "invalid"]
    if as_json:
        data = {"group": ENTRY_POINT_GROUP, "plugins": [dataclasses.asdict(p) for p in found]}
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
    if invalid:
        console.print(
            f"[red]error:[/] agl refuses to run with invalid plugins; fix them or set "
            f"{DISABLE_ENV}={','.join(invalid)}"
        )
        raise typer.Exit(1)
