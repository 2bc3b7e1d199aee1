"""What a run shows on the console: progress bars, the ``Trainer.dev`` table, the run summary."""

from __future__ import annotations

import contextlib
import statistics
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from agl._results import RolloutResult

if TYPE_CHECKING:
    from agl._results import FitResult

__all__ = ["ProgressBars", "dev_table", "print_summary"]


class ProgressBars:
    """The run's :class:`~agl._train._context.Progress`: one rich bar per batch of rollouts.

    With ``enabled`` False or no console, the bars count and show nothing.
    """

    def __init__(self, console: Console | None, *, enabled: bool = True) -> None:
        self.console = console if enabled else None

    @contextlib.contextmanager
    def __call__(self, label: str, total: int) -> Iterator[Bar]:
        if self.console is None:
            yield Bar(None, None)
            return
        columns = (
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[stats]}"),
            TimeElapsedColumn(),
        )
        with Progress(*columns, console=self.console, transient=False) as progress:
            task = progress.add_task(label, total=total, stats="")
            yield Bar(progress, task)


class Bar:
    """One progress bar: rollouts done / failed / retried and the reward so far."""

    def __init__(self, progress: Progress | None, task: Any) -> None:
        self._progress = progress
        self._task = task
        self.failed = 0
        self.retried = 0
        self.rewards: list[float] = []

    def advance(self, result: RolloutResult) -> None:
        self.failed += not result.succeeded
        self.retried += result.retried
        if result.reward is not None:
            self.rewards.append(result.reward)
        if self._progress is None:
            return
        reward = f"reward {statistics.fmean(self.rewards):.3f}" if self.rewards else "reward -"
        stats = f"failed {self.failed} • retried {self.retried} • {reward}"
        self._progress.update(self._task, advance=1, stats=stats)


def dev_table(results: Sequence[RolloutResult]) -> Table:
    """``Trainer.dev``'s table: one row per rollout (input, status, reward, calls, error)."""
    table = Table(title="agl dev: one rollout per row", title_justify="left")
    table.add_column("rollout", no_wrap=True)
    for column in ("input", "status", "reward", "LLM calls", "error"):
        table.add_column(column, overflow="fold")
    for result in results:
        text = repr(result.rollout.input)
        table.add_row(
            result.rollout.rollout_id,
            text if len(text) <= 40 else text[:37] + "...",
            result.status.value,
            "-" if result.reward is None else f"{result.reward:g}",
            str(result.llm_calls),
            result.error or "",
        )
    return table


def print_summary(console: Console, result: FitResult) -> None:
    """The table that ends a run, then the run dir and the command to inspect it."""
    totals = result.totals
    table = Table(title="agl run summary", show_header=False, title_justify="left")
    table.add_row("time", f"{result.duration_s:.1f} s")
    table.add_row(
        "rollouts",
        f"{totals['rollouts']} ({totals['succeeded']} succeeded, {totals['failed']} failed, "
        f"{totals['cancelled']} cancelled, {totals['retried']} retried"
        + (f", {totals['timed_out']} past the step timeout" if totals.get("timed_out") else "")
        + ")",
    )
    for key in ("reward/mean", "val/reward/mean"):
        value = result.last(key)
        if value is not None:
            table.add_row(f"last {key}", f"{value:.4f}")
    console.print(table)
    from agl.store._checks import redact

    # Paths and commands on lines of their own that rich never breaks, so they copy whole.
    console.print(f"run dir: {result.run_dir}", soft_wrap=True, highlight=False)
    inspect = f"inspect: agl rollouts list --store {redact(result.store_url)}"
    console.print(inspect, soft_wrap=True, highlight=False)
