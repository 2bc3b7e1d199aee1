"""The ``agl`` command line: the root app, with each command group from its own module."""

from __future__ import annotations

import typer

from agl.cli._dashboard import dashboard_command
from agl.cli._gateway import gateway_app
from agl.cli._metrics import metrics_app
from agl.cli._plugins import plugins_command
from agl.cli._rollouts import rollouts_app
from agl.cli._runner import runner_command
from agl.cli._store import store_app

__all__ = ["app", "main"]

app = typer.Typer(
    name="agl",
    help="Train any AI agent with RL, prompt optimization and fine-tuning.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
app.add_typer(store_app, name="store")
app.add_typer(gateway_app, name="gateway")
app.add_typer(rollouts_app, name="rollouts")
app.add_typer(metrics_app, name="metrics", help="Show or plot a run's metrics.")
app.command("runner")(runner_command)
app.command("plugins")(plugins_command)
app.command("dashboard")(dashboard_command)


@app.command()
def version() -> None:
    """Print agl's version."""
    from agl import __version__

    typer.echo(__version__)


def main() -> None:
    """Entry point of the ``agl`` script."""
    app()
