"""Metrics: one record per training step, written where people and tools can read it.

A :class:`MetricsLogger` owns a run directory and, for each :meth:`~MetricsLogger.log` call,
writes the step's metrics to:

- ``metrics.jsonl``: the source of truth, one JSON object per step
  (``{"step": 3, "time": 1718000000.5, "reward/mean": 0.42, ...}``), flushed at once so a
  crashing process loses nothing already logged. Non-finite values are written as ``null``.
- ``metrics.csv``: the same records for spreadsheets and pandas. Its columns are ``step``,
  ``time`` and every metric name in the order first seen; when a step brings a new name the
  file is rewritten from ``metrics.jsonl`` with the wider header (rare, and atomic), so the
  header always covers every row. Missing and non-finite values are empty cells.
- the console, as one compact line (``console=True``): step, reward, validation reward,
  kept/total transitions, loss, step time (:mod:`agl._train._step_line`); every figure with
  ``verbose=True``;
- TensorBoard scalars under ``run_dir/tensorboard`` (with ``tensorboardX``, or
  ``torch.utils.tensorboard`` when the ``tensorboard`` package is installed).

Opening a logger on a directory that already has ``metrics.jsonl`` appends to it, so a resumed
run keeps one history; a line torn by a crash mid-write is cut off first.

:func:`~agl._train._metrics_read.read_metrics` reads the records back and
:func:`~agl._train._metrics_read.plot_metrics` draws them with matplotlib.
"""

from __future__ import annotations

import csv
import importlib.util
import json
import math
import operator
import os
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Self, TextIO

from rich.console import Console

from agl._errors import AglError, ConflictError, InvalidInputError
from agl._train._metrics_read import METRICS_JSONL, RESERVED_KEYS, columns_of, read_metrics
from agl._train._step_line import compact_line, full_line

__all__ = ["MetricsLogger"]

METRICS_CSV = "metrics.csv"
TENSORBOARD_DIR = "tensorboard"


class MetricsLogger:
    """Write per-step metrics to JSONL, CSV, the console and (optionally) TensorBoard.

    Use it as a context manager, or call :meth:`close` when done. Safe to call from several
    threads.

    Args:
        run_dir: The run's directory; created if missing.
        console: Print one line per step: ``True`` for a console on stderr, a
            :class:`rich.console.Console` to print there, ``False`` for silence.
        verbose: Print every figure of a step on its line, not only the compact summary.
        tensorboard: ``True`` to write TensorBoard scalars (an error if no writer library is
            installed), ``False`` never to, ``None`` to write them when ``tensorboardX`` or
            ``torch.utils.tensorboard`` is importable.

    Raises:
        AglError: ``tensorboard=True`` and no TensorBoard writer library is installed.
    """

    def __init__(
        self,
        run_dir: str | os.PathLike[str],
        *,
        console: bool | Console = True,
        verbose: bool = False,
        tensorboard: bool | None = None,
    ) -> None:
        self._verbose = verbose
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.jsonl_path = self.run_dir / METRICS_JSONL
        self.csv_path = self.run_dir / METRICS_CSV
        self._lock = threading.Lock()
        self._closed = False

        self._console: Console | None
        if isinstance(console, Console):
            self._console = console
        else:
            self._console = Console(stderr=True) if console else None

        writer_class = _tensorboard_writer_class(tensorboard)
        _cut_torn_tail(self.jsonl_path)
        previous = read_metrics(self.jsonl_path) if self.jsonl_path.exists() else []
        self._columns = columns_of(previous)
        self._csv_file: TextIO = self._rewrite_csv(previous)
        self._jsonl = self.jsonl_path.open("a", encoding="utf-8")
        self._tensorboard: Any = None
        if writer_class is not None:
            self._tensorboard = writer_class(str(self.run_dir / TENSORBOARD_DIR))

    @property
    def tensorboard_enabled(self) -> bool:
        """Whether this logger writes TensorBoard scalars."""
        return self._tensorboard is not None

    def log(self, step: int, metrics: Mapping[str, float | int]) -> None:
        """Record ``metrics`` for ``step`` everywhere this logger writes.

        Args:
            step: The training step (any integer; it need not increase).
            metrics: Metric name → number. Names are free-form (``"reward/mean"``), except
                ``step`` and ``time``, which the record itself uses. Values may be anything
                ``float()`` accepts but a string (NumPy and 0-d tensor scalars included);
                NaN and infinities are recorded as ``null``.

        Raises:
            InvalidInputError: ``step`` is not an integer, a name is empty or reserved, or a
                value is not a number.
            ConflictError: the logger was closed.
        """
        record = _make_record(step, metrics)
        with self._lock:
            if self._closed:
                raise ConflictError(f"cannot log step {step}: this MetricsLogger is closed")
            self._jsonl.write(json.dumps(record, allow_nan=False) + "\n")
            self._jsonl.flush()
            new_columns = [key for key in record if key not in self._columns]
            if new_columns:
                self._columns.extend(new_columns)
                self._csv_file.close()
                self._csv_file = self._rewrite_csv(read_metrics(self.jsonl_path))
            else:
                csv.writer(self._csv_file).writerow(_csv_row(record, self._columns))
                self._csv_file.flush()
            if self._tensorboard is not None:
                for key, value in metrics.items():
                    self._tensorboard.add_scalar(key, float(value), int(record["step"]))
                self._tensorboard.flush()
        if self._console is not None:
            line = full_line(record) if self._verbose else compact_line(record)
            self._console.print(line, highlight=False, soft_wrap=True)

    def rewind(self, step: int) -> list[dict[str, Any]]:
        """Drop every record after ``step`` (a run resuming from its step-``step`` checkpoint).

        The JSONL and CSV files keep the records up to ``step``, in order, so a resumed run
        logs its next steps once; TensorBoard files are left as they are (TensorBoard shows
        the newest value of a step). Returns the records kept.
        """
        with self._lock:
            if self._closed:
                raise ConflictError(f"cannot rewind to step {step}: this MetricsLogger is closed")
            self._jsonl.close()
            kept = [r for r in read_metrics(self.jsonl_path) if r.get("step", 0) <= step]
            partial = self.jsonl_path.with_name(self.jsonl_path.name + ".tmp")
            with partial.open("w", encoding="utf-8") as file:
                file.writelines(json.dumps(record, allow_nan=False) + "\n" for record in kept)
            os.replace(partial, self.jsonl_path)
            self._jsonl = self.jsonl_path.open("a", encoding="utf-8")
            self._csv_file.close()
            self._columns = columns_of(kept)
            self._csv_file = self._rewrite_csv(kept)
        return kept

    def close(self) -> None:
        """Close the files and the TensorBoard writer. Calling it again does nothing."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._jsonl.close()
            self._csv_file.close()
            if self._tensorboard is not None:
                self._tensorboard.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def _rewrite_csv(self, records: Iterable[Mapping[str, Any]]) -> TextIO:
        """Write the whole CSV from ``records`` atomically; return it open for appending."""
        partial = self.csv_path.with_name(self.csv_path.name + ".tmp")
        with partial.open("w", encoding="utf-8", newline="") as file:
            writer = csv.writer(file)
            writer.writerow(self._columns)
            writer.writerows(_csv_row(record, self._columns) for record in records)
        os.replace(partial, self.csv_path)
        return self.csv_path.open("a", encoding="utf-8", newline="")


def _make_record(step: int, metrics: Mapping[str, float | int]) -> dict[str, Any]:
    try:
        step = operator.index(step)
    except TypeError:
        raise InvalidInputError(
            f"step must be an integer, got {type(step).__qualname__} {step!r}",
            field="step",
            value=step,
        ) from None
    if not isinstance(metrics, Mapping):
        raise InvalidInputError(
            f"metrics must be a mapping of name to number, got {type(metrics).__qualname__}",
            field="metrics",
        )
    record: dict[str, Any] = {"step": step, "time": time.time()}
    for key, value in metrics.items():
        if not isinstance(key, str) or not key:
            raise InvalidInputError(
                f"metric names must be non-empty strings, got {key!r}", field="metrics", value=key
            )
        if key in RESERVED_KEYS:
            raise InvalidInputError(
                f"{key!r} cannot be a metric name: every record has its own {key!r} field",
                field=key,
                value=value,
            )
        record[key] = _number(key, value)
    return record


def _number(key: str, value: Any) -> int | float | None:
    """Return ``value`` as a JSON number, ``None`` if it is not finite."""
    if isinstance(value, bool):
        return int(value)
    if not isinstance(value, str | bytes):
        try:
            return operator.index(value)  # int, NumPy integers, integer 0-d tensors
        except TypeError:
            pass
        try:
            number = float(value)
        except (TypeError, ValueError):
            pass
        else:
            return number if math.isfinite(number) else None
    raise InvalidInputError(
        f"metric {key!r} must be a number, got {type(value).__qualname__} {value!r}",
        field=key,
        value=value,
    )


def _csv_row(record: Mapping[str, Any], columns: Sequence[str]) -> list[Any]:
    return ["" if record.get(column) is None else record[column] for column in columns]


def _cut_torn_tail(path: Path) -> None:
    """Drop a last line that a crash left without its newline, so appends start clean."""
    if not path.exists():
        return
    with path.open("r+b") as file:
        data = file.read()
        if data and not data.endswith(b"\n"):
            file.truncate(data.rfind(b"\n") + 1)


def _tensorboard_writer_class(wanted: bool | None) -> Any:
    """Return the ``SummaryWriter`` class to use, or ``None`` for no TensorBoard output."""
    if wanted is False:
        return None
    writer_class: Any = None
    try:
        from tensorboardX import SummaryWriter

        writer_class = SummaryWriter
    except ImportError:
        # torch.utils.tensorboard needs the `tensorboard` package; check before paying for
        # `import torch` just to find out.
        if importlib.util.find_spec("tensorboard") and importlib.util.find_spec("torch"):
            try:
                from torch.utils.tensorboard import SummaryWriter as TorchSummaryWriter

                writer_class = TorchSummaryWriter
            except ImportError:
                pass
    if writer_class is None and wanted:
        raise AglError(
            "tensorboard=True needs tensorboardX or torch with tensorboard, and neither is "
            "installed: pip install tensorboardX (or pip install 'agl-core[tensorboard]')"
        )
    return writer_class
