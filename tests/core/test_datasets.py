"""Datasets: every supported source loads real data into JSON-safe rows, bad input fails clearly."""

from __future__ import annotations

import datetime
import decimal
import json
import sys
import uuid
from pathlib import Path

import numpy as np
import pytest
from pydantic import JsonValue

from agl import AglError, InvalidInputError, load_tasks

ROWS = [
    {"question": "1+1?", "answer": 2},
    {"question": "capital of France?", "answer": "Paris", "tags": ["geo", "easy"]},
]


def _round_trips(rows: list[JsonValue]) -> None:
    assert json.loads(json.dumps(rows, allow_nan=False)) == rows


def test_list_of_dicts_loads_as_copies() -> None:
    tasks = load_tasks(ROWS)
    assert tasks == ROWS
    assert tasks[0] is not ROWS[0]


def test_any_json_values_and_tuples_load() -> None:
    assert load_tasks(("a", 1, 2.5, None, True, [1, 2], (3, 4))) == [
        "a",
        1,
        2.5,
        None,
        True,
        [1, 2],
        [3, 4],
    ]


def test_empty_list_loads_empty() -> None:
    assert load_tasks([]) == []


def test_huggingface_dataset_rows_come_back_as_dicts() -> None:
    datasets = pytest.importorskip("datasets")
    dataset = datasets.Dataset.from_list(ROWS[:1] * 3)
    tasks = load_tasks(dataset)
    assert tasks == [{"question": "1+1?", "answer": 2}] * 3
    assert all(type(task) is dict for task in tasks)


def test_huggingface_dataset_with_numpy_format_is_converted() -> None:
    datasets = pytest.importorskip("datasets")
    dataset = datasets.Dataset.from_list([{"x": 1, "v": [1.5, 2.5]}]).with_format("numpy")
    tasks = load_tasks(dataset)
    assert tasks == [{"x": 1, "v": [1.5, 2.5]}]
    _round_trips(tasks)


def test_huggingface_iterable_dataset_loads() -> None:
    datasets = pytest.importorskip("datasets")
    dataset = datasets.Dataset.from_list(ROWS[:1] * 2).to_iterable_dataset()
    assert load_tasks(dataset) == [ROWS[0]] * 2


def test_huggingface_dataset_dict_asks_for_a_split() -> None:
    datasets = pytest.importorskip("datasets")
    splits = datasets.DatasetDict({"train": datasets.Dataset.from_list(ROWS[:1])})
    with pytest.raises(InvalidInputError, match=r"pick a split"):
        load_tasks(splits)


def test_jsonl_file_skips_blank_lines(tmp_path: Path) -> None:
    path = tmp_path / "tasks.jsonl"
    path.write_text(
        json.dumps(ROWS[0]) + "\n\n   \n" + json.dumps(ROWS[1]) + "\n" + '"a string row"\n',
        encoding="utf-8",
    )
    assert load_tasks(path) == [*ROWS, "a string row"]
    assert load_tasks(str(path)) == [*ROWS, "a string row"]


def test_jsonl_bad_line_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "tasks.jsonl"
    path.write_text(json.dumps(ROWS[0]) + "\n\n{'not': json}\n", encoding="utf-8")
    with pytest.raises(InvalidInputError) as caught:
        load_tasks(path)
    assert f"{path}:3:" in caught.value.message
    assert "not valid JSON" in caught.value.message


def test_jsonl_nan_is_null_and_infinity_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "tasks.jsonl"
    path.write_text('{"x": NaN}\n', encoding="utf-8")
    assert load_tasks(path) == [{"x": None}]
    path.write_text('{"x": 1}\n{"x": Infinity}\n', encoding="utf-8")
    with pytest.raises(InvalidInputError, match=r":2: not valid JSON \(Infinity"):
        load_tasks(path)


def test_jsonl_that_is_not_utf8_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "tasks.jsonl"
    path.write_bytes(b'{"x": 1}\n{"x": "\xff"}\n')
    with pytest.raises(InvalidInputError, match=r"tasks\.jsonl:2: not UTF-8"):
        load_tasks(path)


def test_json_file_with_an_array_loads(tmp_path: Path) -> None:
    path = tmp_path / "tasks.json"
    path.write_text(json.dumps(ROWS, indent=2), encoding="utf-8")
    assert load_tasks(path) == ROWS


def test_json_file_with_an_object_is_rejected(tmp_path: Path) -> None:
    path = tmp_path / "tasks.json"
    path.write_text(json.dumps({"data": ROWS}), encoding="utf-8")
    with pytest.raises(InvalidInputError, match=r"array of rows.*not an object"):
        load_tasks(path)


def test_malformed_json_file_names_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "tasks.json"
    path.write_text('[\n  {"a": 1},\n  {"a": }\n]', encoding="utf-8")
    with pytest.raises(InvalidInputError, match=r"line 3, column"):
        load_tasks(path)


def test_parquet_file_loads_with_conversions(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    when = datetime.datetime(2024, 5, 1, 12, 30, tzinfo=datetime.UTC)
    table = pa.table(
        {
            "question": ["a", "b"],
            "answer": pa.array([1, 2], type=pa.int64()),
            "score": [0.5, float("nan")],
            "created": pa.array([when, None], type=pa.timestamp("us", tz="UTC")),
            "day": pa.array([datetime.date(2024, 5, 1), datetime.date(2024, 5, 2)]),
            "tags": [["x"], []],
        }
    )
    path = tmp_path / "tasks.parquet"
    pq.write_table(table, path)
    tasks = load_tasks(path)
    assert tasks == [
        {
            "question": "a",
            "answer": 1,
            "score": 0.5,
            "created": "2024-05-01T12:30:00+00:00",
            "day": "2024-05-01",
            "tags": ["x"],
        },
        {
            "question": "b",
            "answer": 2,
            "score": None,
            "created": None,
            "day": "2024-05-02",
            "tags": [],
        },
    ]
    _round_trips(tasks)


def test_parquet_rows_are_numbered_across_batches(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    blobs: list[bytes | None] = [None] * 9000
    blobs[8500] = b"raw"
    table = pa.table({"i": list(range(9000)), "blob": pa.array(blobs, type=pa.binary())})
    path = tmp_path / "big.parquet"
    pq.write_table(table, path, row_group_size=1000)
    with pytest.raises(InvalidInputError) as caught:
        load_tasks(path)
    assert caught.value.field == "rows[8500].blob"  # counted on past the first batch
    assert "base64" in caught.value.message


def test_corrupt_parquet_file_is_an_input_error(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    path = tmp_path / "broken.parquet"
    path.write_bytes(b"this is not parquet")
    with pytest.raises(InvalidInputError, match=r"cannot read as Parquet"):
        load_tasks(path)


def test_non_json_values_are_converted_where_safe() -> None:
    ident = uuid.uuid4()
    row = {
        "i": np.int64(3),
        "f": np.float32(0.5),
        "b": np.bool_(True),
        "arr": np.array([[1, 2], [3, 4]]),
        "when": datetime.datetime(2024, 1, 2, 3, 4, 5),
        "t": datetime.time(7, 8),
        "np_when": np.datetime64("2024-01-02T03:04:05.123456789", "ns"),
        "np_days": np.array(["2024-01-02", "NaT"], dtype="datetime64[D]"),
        "id": ident,
        "nested": {"deep": [np.float64("nan"), (1, 2)]},
    }
    (task,) = load_tasks([row])
    assert task == {
        "i": 3,
        "f": 0.5,
        "b": True,
        "arr": [[1, 2], [3, 4]],
        "when": "2024-01-02T03:04:05",
        "t": "07:08:00",
        "np_when": "2024-01-02T03:04:05.123456789",
        "np_days": ["2024-01-02", None],
        "id": str(ident),
        "nested": {"deep": [None, [1, 2]]},
    }
    assert isinstance(task, dict)
    assert type(task["i"]) is int
    _round_trips([task])


@pytest.mark.parametrize(
    ("row", "field", "fragment"),
    [
        ({"a": {"b": [1, decimal.Decimal("1.5")]}}, "rows[1].a.b[1]", "Decimal"),
        ({"x": float("inf")}, "rows[1].x", "infinity"),
        ({"x": b"raw"}, "rows[1].x", "base64"),
        ({1: "int key"}, "rows[1]", "keys must be strings"),
        ({"d": np.timedelta64(5, "s")}, "rows[1].d", "seconds"),
        (object(), "rows[1]", "the row itself"),
        ({"s": {1, 2}}, "rows[1].s", "set"),
    ],
)
def test_unconvertible_values_name_row_and_field(row: object, field: str, fragment: str) -> None:
    with pytest.raises(InvalidInputError) as caught:
        load_tasks([{"fine": 1}, row])
    assert caught.value.field == field
    assert "dataset row 1" in caught.value.message
    assert fragment in caught.value.message


@pytest.mark.parametrize(
    ("source", "fragment"),
    [
        (42, "unsupported dataset source of type int"),
        ({"question": "q"}, "not a mapping"),
        (b"tasks.jsonl", "cannot be bytes"),
        ((row for row in ROWS), "unsupported dataset source of type generator"),
    ],
)
def test_unsupported_sources_are_named(source: object, fragment: str) -> None:
    with pytest.raises(InvalidInputError, match=fragment):
        load_tasks(source)  # type: ignore[arg-type]


def test_unsupported_extension_is_named(tmp_path: Path) -> None:
    path = tmp_path / "tasks.csv"
    path.write_text("a,b\n1,2\n", encoding="utf-8")
    with pytest.raises(InvalidInputError, match=r"unsupported extension '\.csv'"):
        load_tasks(path)


def test_missing_file_and_directory_are_named(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match="does not exist"):
        load_tasks(tmp_path / "nope.jsonl")
    folder = tmp_path / "dir.jsonl"
    folder.mkdir()
    with pytest.raises(InvalidInputError, match="is a directory"):
        load_tasks(folder)


def test_parquet_without_pyarrow_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "tasks.parquet"
    path.write_bytes(b"PAR1")
    # A None entry in sys.modules makes `import` fail as if pyarrow were not installed.
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    with pytest.raises(AglError, match=r"pip install pyarrow"):
        load_tasks(path)
