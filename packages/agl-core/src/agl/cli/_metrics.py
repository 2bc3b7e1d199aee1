"""``agl metrics``: look at a run's metrics from the command line."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from agl._errors import AglError
from agl.cli._common import fail

metrics_app = typer.Typer(
    help="Show or plot the metrics a training run logged.", no_args_is_help=True
)

_RUN_DIR = typer.Argument(
    help="A run directory (holding metrics.jsonl), or the path of a metrics.jsonl file.",
    show_default=False,
)


@metrics_app.command("show")
def show(
    run_dir: Annotated[Path, _RUN_DIR],
    last: Annotated[int, typer.Option("--last", "-n", min=1, help="How many steps to show.")] = 10,
    key: Annotated[
        list[str] | None,
        typer.Option("--key", "-k", help="Only this metric; repeat for several. Default: all."),
    ] = None,
) -> None:
    """Print the last steps' metrics as a table."""
    from agl._train._metrics_read import read_metrics

    try:
        records = read_metrics(run_dir)
    except AglError as exc:
        fail(exc, 2)
    columns = key or list(dict.fromkeys(k for r in records for k in r if k not in ("step", "time")))
    table = Table()
    table.add_column("step", justify="right", style="bold")
    for column in columns:
        table.add_column(column, justify="right")
    for record in records[-last:]:
        table.add_row(str(record.get("step")), *(_cell(record, column) for column in columns))
    console = Console()
    # The path on a line of its own that rich never breaks (a table title is wrapped at the
    # table's width, mid-word): the terminal wraps it, and a copied path stays whole.
    heading = Text(f"{run_dir}: {len(records)} steps logged", style="bold")
    console.print(heading, soft_wrap=True, highlight=False)
    console.print(table)


@metrics_app.command("plot")
def plot(
    run_dir: Annotated[Path, _RUN_DIR],
    out: Annotated[Path, typer.Option("--out", "-o", help="PNG file to write.")],
    key: Annotated[
        list[str] | None,
        typer.Option(
            "--key", "-k", help="Metric to draw; repeat for several. [default: reward/mean]"
        ),
    ] = None,
) -> None:
    """Draw metrics against the step into a PNG file."""
    from agl._train._metrics_read import plot_metrics

    try:
        written = plot_metrics(run_dir, out, keys=key or ("reward/mean",))
    except AglError as exc:
        fail(exc, 2)
    Console().print(f"wrote [cyan]{escape(str(written))}[/]")


def _cell(record: dict[str, Any], column: str) -> str:
    if column not in record:
        return ""
    value = record[column]
    if value is None:
        return "nan"
    if isinstance(value, float) and math.isfinite(value):
        return f"{value:.4g}"
    return str(value)
