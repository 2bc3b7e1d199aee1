"""The line a training step prints to the console: compact by default, everything when verbose.

A step logs dozens of figures (``metrics.jsonl``, CSV and TensorBoard keep them all). People
watching a run read a few: the step, the reward (and the validation reward when there is one),
how many calls became transitions, the loss, and how long the step took::

    step 12  reward 0.625  val 0.700  kept 48/64  loss 0.0123  3.32 s

Trouble shows in red when there is some: ``failed`` rollouts, and ``prefix_mismatch``, calls
whose re-rendered history LightningRL could not merge (see :class:`agl.lightning.DropReport`).

:func:`compact_line` picks those out of a record by their names, whatever algorithm logged
them (several algorithms in one run each have their loss, labelled); a record with none of them
(a custom algorithm's own figures) shows its first few figures instead. :func:`full_line` is
every ``key=value`` of the record, for ``verbose``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.text import Text

__all__ = ["compact_line", "full_line"]

_RESERVED = ("step", "time")
_FALLBACK_FIGURES = 6


def full_line(record: Mapping[str, Any]) -> Text:
    """``step N  key=value  key=value …`` with every figure of the record."""
    line = _start(record)
    for key, value in record.items():
        if key not in _RESERVED:
            _add(line, key, format_number(value), separator="=")
    return line


def compact_line(record: Mapping[str, Any]) -> Text:
    """``step N  reward …  val …  kept k/n  loss …  t s``: the figures people read."""
    line = _start(record)
    figures = {k: v for k, v in record.items() if k not in _RESERVED}
    shown = 0
    reward = _first(figures, "reward/mean")
    if reward is not None:
        _add(line, "reward", format_number(reward))
        shown += 1
    val = _first(figures, "val/reward/mean")
    if val is not None:
        _add(line, "val", format_number(val))
        shown += 1
    failed = _sum(figures, "rollouts/failed")
    if failed:
        _add(line, "failed", format_number(failed), style="red")
    kept, calls = _sum(figures, "transitions/kept"), _sum(figures, "transitions/calls")
    if kept is not None and calls is not None:
        _add(line, "kept", f"{format_number(kept)}/{format_number(calls)}")
        shown += 1
    mismatch = _sum(figures, "transitions/prefix_mismatch")
    if mismatch:
        _add(line, "prefix_mismatch", format_number(mismatch), style="red")
    for label, loss in _losses(figures):
        _add(line, f"{label} loss" if label else "loss", format_number(loss))
        shown += 1
    seconds = figures.get("time/step_s")
    if isinstance(seconds, int | float):
        line.append(f"  {seconds:.3g} s", style="dim")
        shown += 1
    if not shown:
        for key, value in list(figures.items())[:_FALLBACK_FIGURES]:
            _add(line, key, format_number(value), separator="=")
    return line


def format_number(value: int | float | None) -> str:
    """A figure as people read it: ``nan`` for missing, four significant digits for floats."""
    if value is None:
        return "nan"
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer()):
        return str(int(value))
    return f"{value:.4g}"


def _start(record: Mapping[str, Any]) -> Text:
    line = Text()
    line.append(f"step {record['step']}", style="bold")
    return line


def _add(line: Text, name: str, value: str, separator: str = " ", style: str = "cyan") -> None:
    line.append("  ")
    line.append(name, style=style)
    line.append(separator + value)


def _first(figures: Mapping[str, Any], name: str) -> float | None:
    """``name``, else the first ``<label>/name`` (a labelled algorithm's); a training figure
    is never read from a validation one."""
    value = figures.get(name)
    if isinstance(value, int | float):
        return float(value)
    training = not name.startswith("val/")
    for key, value in figures.items():
        if training and key.startswith("val/"):
            continue
        if key.endswith("/" + name) and isinstance(value, int | float):
            return float(value)
    return None


def _sum(figures: Mapping[str, Any], name: str) -> float | None:
    """The sum of ``name`` and every ``<label>/name`` (validation figures left out)."""
    values = [
        float(value)
        for key, value in figures.items()
        if (key == name or (key.endswith("/" + name) and not key.startswith("val/")))
        and isinstance(value, int | float)
    ]
    return sum(values) if values else None


def _losses(figures: Mapping[str, Any]) -> list[tuple[str, float]]:
    """Each algorithm's loss: ``loss`` or ``<label>/loss``; else verl's ``actor/pg_loss``."""
    found = [
        (key.removesuffix("loss").rstrip("/"), float(value))
        for key, value in figures.items()
        if (key == "loss" or key.endswith("/loss"))
        and not key.startswith("val/")
        and isinstance(value, int | float)
    ]
    if not found:
        found = [
            ("", float(value))
            for key, value in figures.items()
            if key.endswith("pg_loss") and isinstance(value, int | float)
        ][:1]
    return found
