"""Reading a run's metrics back (:func:`read_metrics`) and drawing them (:func:`plot_metrics`).

What :class:`~agl._train._metrics.MetricsLogger` wrote: ``metrics.jsonl`` in the run
directory, one JSON object per step, non-finite values as ``null``.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from agl._errors import AglError, InvalidInputError

__all__ = [
    "METRICS_JSONL",
    "RESERVED_KEYS",
    "columns_of",
    "jsonl_path",
    "plot_metrics",
    "read_metrics",
]

METRICS_JSONL = "metrics.jsonl"
RESERVED_KEYS = ("step", "time")
"""The fields every record has besides its metrics."""


def read_metrics(source: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Return the records a :class:`MetricsLogger` wrote, in the order written.

    Args:
        source: A run directory or the path of its ``metrics.jsonl``.

    Returns:
        One dict per logged step: ``step``, ``time`` and the metrics, with ``None`` where a
        value was not finite. A last line torn by a crash mid-write is left out.

    Raises:
        InvalidInputError: there is no such file, or a line other than the last is not a JSON
            object (the message names the file and line).
    """
    path = jsonl_path(source)
    with path.open("rb") as file:
        lines = file.read().decode("utf-8", errors="replace").split("\n")
    records: list[dict[str, Any]] = []
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            if lineno == len(lines):  # no newline after it: the write was cut short
                break
            raise InvalidInputError(
                f"{path}:{lineno}: not a JSON object", field="source", value=line
            ) from None
        if not isinstance(record, dict):
            raise InvalidInputError(
                f"{path}:{lineno}: expected a JSON object per line, got {type(record).__name__}",
                field="source",
                value=line,
            )
        records.append(record)
    return records


def plot_metrics(
    source: str | os.PathLike[str],
    out_png: str | os.PathLike[str],
    keys: Sequence[str] = ("reward/mean",),
) -> Path:
    """Draw each metric in ``keys`` against the step, one panel per key, into a PNG file.

    Steps where a value was not finite show as gaps.

    Args:
        source: A run directory or the path of its ``metrics.jsonl``.
        out_png: Where to write the image; its directory is created if missing.
        keys: The metric names to draw.

    Returns:
        The path of the PNG written.

    Raises:
        InvalidInputError: ``keys`` is empty, or names a metric no record has (the message
            lists those that exist), or ``source`` has no metrics file.
        AglError: matplotlib is not installed.
    """
    if isinstance(keys, str):
        keys = (keys,)
    if not keys:
        raise InvalidInputError("plot_metrics needs at least one metric key", field="keys")
    records = read_metrics(source)
    available = [key for key in columns_of(records) if key not in RESERVED_KEYS]
    missing = [key for key in keys if key not in available]
    if missing:
        raise InvalidInputError(
            f"no metric named {', '.join(map(repr, missing))} in {jsonl_path(source)}; "
            f"available: {', '.join(available) or '(none)'}",
            field="keys",
            value=missing[0],
        )
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise AglError(
            "plotting metrics needs matplotlib, which is not installed: pip install matplotlib "
            "(or pip install 'agl-core[plot]')"
        ) from None

    figure = Figure(figsize=(7.0, 1.0 + 2.4 * len(keys)), layout="constrained")
    FigureCanvasAgg(figure)  # render with Agg, whatever backend pyplot may be using
    axes = figure.subplots(len(keys), 1, sharex=True, squeeze=False)[:, 0]
    for ax, key in zip(axes, keys, strict=True):
        points = [(record["step"], record[key]) for record in records if key in record]
        steps = [step for step, _ in points]
        values = [math.nan if value is None else value for _, value in points]
        ax.plot(steps, values, marker="." if len(points) < 50 else None)
        ax.set_ylabel(key)
        ax.grid(visible=True, alpha=0.3)
    axes[-1].set_xlabel("step")
    figure.suptitle(jsonl_path(source).parent.name)

    out = Path(out_png)
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out, format="png", dpi=100)
    return out


def columns_of(records: Iterable[Mapping[str, Any]]) -> list[str]:
    """``step``, ``time``, then every metric name in the order first seen."""
    columns = dict.fromkeys(RESERVED_KEYS)
    for record in records:
        columns.update(dict.fromkeys(record))
    return list(columns)


def jsonl_path(source: str | os.PathLike[str]) -> Path:
    """The ``metrics.jsonl`` of a run directory, or ``source`` itself if it is that file."""
    path = Path(source)
    if path.is_dir():
        path = path / METRICS_JSONL
    if not path.is_file():
        raise InvalidInputError(
            f"no metrics file at {str(path)!r}: expected a run directory holding "
            f"{METRICS_JSONL}, or the path of one",
            field="source",
            value=str(source),
        )
    return path
