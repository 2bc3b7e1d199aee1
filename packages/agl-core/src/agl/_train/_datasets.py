"""Datasets: the tasks a trainer turns into rollouts, loaded from wherever they live.

:func:`load_tasks` accepts what people already have at hand and returns a plain list of JSON
values, one per task:

- a list (or any sequence) of rows, usually dicts;
- a Hugging Face ``datasets.Dataset`` or ``IterableDataset`` (duck-typed: agl never imports
  ``datasets``), whose rows come back as dicts;
- a path to a ``.jsonl`` / ``.ndjson`` file (one JSON value per line, blank lines skipped), a
  ``.json`` file holding an array, or a ``.parquet`` file (read with ``pyarrow``).

Each task becomes the input of a rollout and travels over HTTP, so every row is made
JSON-serialisable on the way in, where that is safe: NumPy scalars and arrays become Python
numbers and lists, dates and times become ISO 8601 strings, UUIDs become strings, tuples become
lists, and NaN becomes ``null`` (pandas and Parquet writers use NaN for a missing value).
Anything else (bytes, decimals, infinities, objects) is an :class:`~agl.InvalidInputError`
naming the row and field, so it fails at load time rather than halfway through training.

The whole dataset is held in memory as Python objects. Files are read a line (or a Parquet
batch) at a time, so the peak is the rows themselves plus one batch, never a second copy.
"""

from __future__ import annotations

import datetime
import json
import math
import os
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, TypeAlias

from pydantic import JsonValue

from agl._errors import AglError, InvalidInputError

__all__ = ["DatasetSource", "HuggingFaceDatasetLike", "load_tasks"]

_JSONL_SUFFIXES = (".jsonl", ".ndjson")
_PARQUET_BATCH_ROWS = 8192


class HuggingFaceDatasetLike(Protocol):
    """What :func:`load_tasks` needs from a Hugging Face dataset: features, and rows as dicts."""

    @property
    def features(self) -> Any:
        """The dataset's schema."""

    def __iter__(self) -> Iterator[Any]:
        """Yield the rows, as dicts."""


DatasetSource: TypeAlias = Sequence[Any] | str | os.PathLike[str] | HuggingFaceDatasetLike
"""What :func:`load_tasks` accepts: rows in memory, a Hugging Face dataset, or a file path."""


def load_tasks(source: DatasetSource) -> list[JsonValue]:
    """Return the rows of ``source`` as JSON values, ready to be rollout inputs.

    Args:
        source: A sequence of rows; a Hugging Face ``Dataset``/``IterableDataset``; or a path
            (``str`` or ``os.PathLike``) to a ``.jsonl``, ``.ndjson``, ``.json`` (an array) or
            ``.parquet`` file. An ``IterableDataset`` is read to its end, so it must be finite.

    Returns:
        One JSON value per row, in order. Rows are copied, never the caller's objects.

    Raises:
        InvalidInputError: ``source`` is of an unsupported type or file extension, the file is
            missing or malformed (the message names the file and line), or a row holds a value
            that cannot be made JSON (the message names the row index and field).
        AglError: a ``.parquet`` file was given and ``pyarrow`` is not installed.
    """
    if isinstance(source, str | os.PathLike):
        return _load_file(Path(source))
    if isinstance(source, bytes | bytearray):
        raise InvalidInputError(
            "a dataset source cannot be bytes; pass a path as str or pathlib.Path, or a list "
            "of rows",
            field="source",
            value=type(source).__name__,
        )
    if isinstance(source, Mapping):
        hint = (
            "; this looks like a DatasetDict: pick a split, e.g. source['train']"
            if hasattr(source, "column_names")
            else "; wrap a single row in a list"
        )
        raise InvalidInputError(
            f"a dataset source must be a sequence of rows, not a mapping "
            f"({type(source).__qualname__}){hint}",
            field="source",
            value=type(source).__qualname__,
        )
    if _is_huggingface_dataset(source):
        return _normalise_rows(iter(source))
    if isinstance(source, Sequence):
        return _normalise_rows(iter(source))
    raise InvalidInputError(
        f"unsupported dataset source of type {type(source).__qualname__}: expected a list of "
        "rows, a Hugging Face datasets.Dataset, or a path to a .jsonl, .json or .parquet file",
        field="source",
        value=type(source).__qualname__,
    )


def _is_huggingface_dataset(source: object) -> bool:
    return (
        hasattr(source, "features")
        and hasattr(source, "column_names")
        and isinstance(source, Iterable)
    )


def _normalise_rows(rows: Iterable[Any], start: int = 0) -> list[JsonValue]:
    return [_to_json(row, index, "") for index, row in enumerate(rows, start)]


def _load_file(path: Path) -> list[JsonValue]:
    suffix = path.suffix.lower()
    readers = {".json": _read_json, ".parquet": _read_parquet}
    readers.update(dict.fromkeys(_JSONL_SUFFIXES, _read_jsonl))
    reader = readers.get(suffix)
    if reader is None:
        raise InvalidInputError(
            f"cannot load a dataset from {str(path)!r}: unsupported extension "
            f"{suffix or '(none)'!r}; expected one of .jsonl, .ndjson, .json, .parquet",
            field="source",
            value=str(path),
        )
    if not path.is_file():
        what = "is a directory" if path.is_dir() else "does not exist"
        raise InvalidInputError(
            f"dataset file {str(path)!r} {what}", field="source", value=str(path)
        )
    return reader(path)


def _reject_infinity(constant: str) -> float | None:
    # Python's json module reads NaN/Infinity although they are not JSON. NaN means "missing"
    # to the tools that write it; an infinity has no JSON spelling at all.
    if constant == "NaN":
        return None
    raise ValueError(f"{constant} is not a JSON value")


def _read_jsonl(path: Path) -> list[JsonValue]:
    rows: list[JsonValue] = []
    with path.open("rb") as file:
        for lineno, raw in enumerate(file, 1):
            try:
                text = raw.decode("utf-8-sig" if lineno == 1 else "utf-8")
            except UnicodeDecodeError as exc:
                raise InvalidInputError(
                    f"{path}:{lineno}: not UTF-8 text ({exc.reason} at byte {exc.start})",
                    field="source",
                    value=str(path),
                ) from None
            if not text.strip():
                continue
            try:
                rows.append(json.loads(text, parse_constant=_reject_infinity))
            except ValueError as exc:
                detail = (
                    f"{exc.msg} at column {exc.colno}"
                    if isinstance(exc, json.JSONDecodeError)
                    else str(exc)
                )
                raise InvalidInputError(
                    f"{path}:{lineno}: not valid JSON ({detail})",
                    field="source",
                    value=text.strip(),
                ) from None
    return rows


def _read_json(path: Path) -> list[JsonValue]:
    try:
        with path.open(encoding="utf-8-sig") as file:
            data = json.load(file, parse_constant=_reject_infinity)
    except UnicodeDecodeError as exc:
        raise InvalidInputError(
            f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})",
            field="source",
            value=str(path),
        ) from None
    except ValueError as exc:
        detail = (
            f"{exc.msg} at line {exc.lineno}, column {exc.colno}"
            if isinstance(exc, json.JSONDecodeError)
            else str(exc)
        )
        raise InvalidInputError(
            f"{path}: not valid JSON ({detail})", field="source", value=str(path)
        ) from None
    if not isinstance(data, list):
        raise InvalidInputError(
            f"{path}: a .json dataset must hold an array of rows at the top level, not "
            f"{_json_type_name(data)}; for one row per line use a .jsonl file",
            field="source",
            value=str(path),
        )
    return data


def _read_parquet(path: Path) -> list[JsonValue]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise AglError(
            f"reading {path} needs pyarrow, which is not installed: pip install pyarrow "
            "(or pip install 'agl-core[parquet]')"
        ) from None
    import pyarrow as pa

    rows: list[JsonValue] = []
    try:
        parquet_file = pq.ParquetFile(path)
        for batch in parquet_file.iter_batches(batch_size=_PARQUET_BATCH_ROWS):
            rows.extend(_normalise_rows(batch.to_pylist(), start=len(rows)))
    except pa.ArrowException as exc:
        raise InvalidInputError(
            f"{path}: cannot read as Parquet ({exc})", field="source", value=str(path)
        ) from None
    return rows


def _to_json(value: Any, row: int, field: str) -> JsonValue:
    """Return ``value`` as plain JSON types, or raise naming ``row`` and ``field``."""
    if value is None or isinstance(value, str | bool):
        return value
    if isinstance(value, int):
        return int(value)  # an IntEnum or NumPy-backed int subclass becomes a plain int
    if isinstance(value, float):
        if math.isfinite(value):
            return float(value)
        if math.isnan(value):
            return None
        raise _not_json(value, row, field, "infinity has no JSON representation")
    if isinstance(value, Mapping):
        result: dict[str, JsonValue] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise _not_json(
                    key, row, field, f"object keys must be strings, got {type(key).__qualname__}"
                )
            result[key] = _to_json(item, row, f"{field}.{key}" if field else key)
        return result
    if isinstance(value, list | tuple):
        return [_to_json(item, row, f"{field}[{i}]") for i, item in enumerate(value)]
    if isinstance(value, datetime.date | datetime.time):  # datetime.datetime is a date
        text = value.isoformat()
        return None if text == "NaT" else text  # pandas.NaT subclasses datetime
    if isinstance(value, uuid.UUID):
        return str(value)
    if type(value).__module__.partition(".")[0] == "numpy":
        return _numpy_to_json(value, row, field)
    hint = ""
    if isinstance(value, bytes | bytearray):
        hint = "decode it to text or base64-encode it before loading"
    raise _not_json(value, row, field, hint)


def _numpy_to_json(value: Any, row: int, field: str) -> JsonValue:
    dtype = getattr(value, "dtype", None)
    kind = getattr(dtype, "kind", None)
    if kind == "M":  # datetime64: .tolist() would give integers for nanosecond units
        converted = value.astype(str).tolist()
        return _to_json(_nat_to_none(converted), row, field)
    if kind == "m":
        raise _not_json(value, row, field, "convert durations to numbers of seconds first")
    if hasattr(value, "tolist"):
        return _to_json(value.tolist(), row, field)
    raise _not_json(value, row, field, "")


def _nat_to_none(value: Any) -> Any:
    if isinstance(value, list):
        return [_nat_to_none(item) for item in value]
    return None if value == "NaT" else value


def _not_json(value: Any, row: int, field: str, hint: str) -> InvalidInputError:
    where = f"field {field!r}" if field else "the row itself"
    reason = hint or (
        "expected str, int, float, bool, None, a list or a dict with string keys; convert it "
        "before loading"
    )
    return InvalidInputError(
        f"dataset row {row}: {where} holds {type(value).__qualname__} {_short_repr(value)}, "
        f"which is not JSON-serialisable: {reason}",
        field=f"rows[{row}].{field}" if field else f"rows[{row}]",
        value=value,
    )


def _short_repr(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _json_type_name(value: Any) -> str:
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, str):
        return "a string"
    if value is None:
        return "null"
    return f"a {type(value).__name__}"
