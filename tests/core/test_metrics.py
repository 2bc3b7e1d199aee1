"""Metrics: real files on disk, read back, plotted to a real PNG, and the CLI over them."""

from __future__ import annotations

import csv
import importlib.util
import io
import json
import math
import sys
from pathlib import Path

import pytest
import typer
from rich.console import Console
from typer.testing import CliRunner

from agl import AglError, ConflictError, InvalidInputError
from agl._train._metrics import MetricsLogger
from agl._train._metrics_read import plot_metrics, read_metrics
from agl.cli._metrics import metrics_app

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _jsonl_lines(run_dir: Path) -> list[dict[str, object]]:
    text = (run_dir / "metrics.jsonl").read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines()]


def _csv_rows(run_dir: Path) -> list[list[str]]:
    with (run_dir / "metrics.csv").open(encoding="utf-8", newline="") as file:
        return list(csv.reader(file))


def _log_curve(run_dir: Path, steps: int = 5) -> None:
    with MetricsLogger(run_dir, console=False, tensorboard=False) as logger:
        for step in range(steps):
            logger.log(step, {"reward/mean": step / 10, "loss": 1.0 / (step + 1)})


def test_jsonl_has_one_object_per_step(tmp_path: Path) -> None:
    _log_curve(tmp_path / "run", steps=3)
    lines = _jsonl_lines(tmp_path / "run")
    assert [line["step"] for line in lines] == [0, 1, 2]
    assert [line["reward/mean"] for line in lines] == [0.0, 0.1, 0.2]
    assert all(list(line) == ["step", "time", "reward/mean", "loss"] for line in lines)
    assert all(isinstance(line["time"], float) for line in lines)


def test_each_step_is_on_disk_before_close(tmp_path: Path) -> None:
    logger = MetricsLogger(tmp_path, console=False, tensorboard=False)
    try:
        logger.log(7, {"reward/mean": 0.5})
        assert _jsonl_lines(tmp_path)[0]["reward/mean"] == 0.5
        assert _csv_rows(tmp_path)[1][0] == "7"
        logger.log(8, {"reward/mean": 0.6})
        assert len(read_metrics(tmp_path)) == 2
        assert len(_csv_rows(tmp_path)) == 3
    finally:
        logger.close()


def test_csv_header_grows_when_new_metrics_appear(tmp_path: Path) -> None:
    with MetricsLogger(tmp_path, console=False, tensorboard=False) as logger:
        logger.log(0, {"a": 1})
        logger.log(1, {"a": 2, "b": 0.25})
        logger.log(2, {"b": 0.5})
    header, *rows = _csv_rows(tmp_path)
    assert header == ["step", "time", "a", "b"]
    assert [[row[0], row[2], row[3]] for row in rows] == [
        ["0", "1", ""],
        ["1", "2", "0.25"],
        ["2", "", "0.5"],
    ]
    assert not list(tmp_path.glob("*.tmp"))


def test_non_finite_values_are_null_and_never_crash(tmp_path: Path) -> None:
    np = pytest.importorskip("numpy")
    with MetricsLogger(tmp_path, console=False, tensorboard=False) as logger:
        logger.log(
            0,
            {
                "nan": math.nan,
                "inf": math.inf,
                "ninf": -math.inf,
                "np_nan": np.float32("nan"),
                "np_int": np.int64(4),
                "flag": True,
            },
        )
    raw = (tmp_path / "metrics.jsonl").read_text(encoding="utf-8")
    assert "NaN" not in raw
    assert "Infinity" not in raw
    (record,) = read_metrics(tmp_path)
    assert record["nan"] is None
    assert record["inf"] is None
    assert record["ninf"] is None
    assert record["np_nan"] is None
    assert record["np_int"] == 4
    assert record["flag"] == 1
    assert _csv_rows(tmp_path)[1][2:] == ["", "", "", "", "4", "1"]


@pytest.mark.parametrize(
    ("step", "metrics", "fragment"),
    [
        (1.5, {"a": 1}, "step must be an integer"),
        (1, {"a": "high"}, "metric 'a' must be a number"),
        (1, {"a": None}, "metric 'a' must be a number"),
        (1, {"step": 3}, "'step' cannot be a metric name"),
        (1, {"": 3}, "non-empty strings"),
    ],
)
def test_bad_input_is_named(tmp_path: Path, step: object, metrics: object, fragment: str) -> None:
    with MetricsLogger(tmp_path, console=False, tensorboard=False) as logger:
        with pytest.raises(InvalidInputError, match=fragment):
            logger.log(step, metrics)  # type: ignore[arg-type]
        logger.log(2, {"ok": 1})
    assert [record["step"] for record in read_metrics(tmp_path)] == [2]


def test_logging_after_close_is_a_conflict(tmp_path: Path) -> None:
    logger = MetricsLogger(tmp_path, console=False, tensorboard=False)
    logger.close()
    logger.close()
    with pytest.raises(ConflictError, match="closed"):
        logger.log(0, {"a": 1})


@pytest.mark.parametrize("width", [20, 200])
def test_console_line_is_compact_and_verbose_shows_everything(tmp_path: Path, width: int) -> None:
    figures = {"reward/mean": 0.123456, "loss": 0.5, "n": 8, "bad": math.nan}
    lines = []
    for verbose in (False, True):
        out = io.StringIO()
        console = Console(file=out, width=width, color_system=None)
        with MetricsLogger(
            tmp_path / str(verbose), console=console, verbose=verbose, tensorboard=False
        ) as logger:
            logger.log(3, figures)
        lines.append(out.getvalue())
    # One line whatever the console's width: the terminal wraps it, never rich mid-word.
    assert lines == [
        "step 3  reward 0.1235  loss 0.5\n",
        "step 3  reward/mean=0.1235  loss=0.5  n=8  bad=nan\n",
    ]


def test_reopening_appends_and_cuts_a_torn_line(tmp_path: Path) -> None:
    _log_curve(tmp_path, steps=2)
    with (tmp_path / "metrics.jsonl").open("a", encoding="utf-8") as file:
        file.write('{"step": 2, "ti')  # a crash mid-write
    assert len(read_metrics(tmp_path)) == 2
    with MetricsLogger(tmp_path, console=False, tensorboard=False) as logger:
        logger.log(2, {"reward/mean": 0.2, "extra": 1})
    assert [record["step"] for record in read_metrics(tmp_path)] == [0, 1, 2]
    header, *rows = _csv_rows(tmp_path)
    assert header == ["step", "time", "reward/mean", "loss", "extra"]
    assert len(rows) == 3


def test_read_metrics_names_a_bad_line(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 0}\nnot json\n{"step": 1}\n', encoding="utf-8")
    with pytest.raises(InvalidInputError, match=r"metrics\.jsonl:2:"):
        read_metrics(path)
    with pytest.raises(InvalidInputError, match="no metrics file"):
        read_metrics(tmp_path / "elsewhere")


def test_plot_writes_a_real_png(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    _log_curve(tmp_path / "run", steps=20)
    with MetricsLogger(tmp_path / "run", console=False, tensorboard=False) as logger:
        logger.log(20, {"reward/mean": math.nan})
    out = plot_metrics(tmp_path / "run", tmp_path / "plots" / "reward.png")
    assert out == tmp_path / "plots" / "reward.png"
    data = out.read_bytes()
    assert data.startswith(PNG_SIGNATURE)
    assert len(data) > 1000

    two = plot_metrics(
        tmp_path / "run" / "metrics.jsonl", tmp_path / "two.png", ["reward/mean", "loss"]
    )
    assert two.read_bytes().startswith(PNG_SIGNATURE)


def test_plot_names_a_missing_key(tmp_path: Path) -> None:
    _log_curve(tmp_path, steps=2)
    with pytest.raises(
        InvalidInputError, match=r"no metric named 'acc'.*available: reward/mean, loss"
    ):
        plot_metrics(tmp_path, tmp_path / "x.png", keys=["acc"])


def _tensorboard_available() -> bool:
    if importlib.util.find_spec("tensorboardX"):
        return True
    return bool(importlib.util.find_spec("tensorboard") and importlib.util.find_spec("torch"))


@pytest.mark.skipif(
    not _tensorboard_available(),
    reason="neither tensorboardX nor torch with tensorboard is installed",
)
def test_tensorboard_event_file_is_written(tmp_path: Path) -> None:
    with MetricsLogger(tmp_path, console=False, tensorboard=True) as logger:
        assert logger.tensorboard_enabled
        logger.log(0, {"reward/mean": 0.5, "bad": math.nan})
        logger.log(1, {"reward/mean": 0.7})
    events = list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))
    assert len(events) == 1
    assert events[0].stat().st_size > 0


def test_tensorboard_auto_matches_what_is_installed(tmp_path: Path) -> None:
    with MetricsLogger(tmp_path, console=False) as logger:
        assert logger.tensorboard_enabled == _tensorboard_available()
    with MetricsLogger(tmp_path, console=False, tensorboard=False) as logger:
        assert not logger.tensorboard_enabled


def _cli() -> typer.Typer:
    app = typer.Typer()
    app.add_typer(metrics_app, name="metrics")
    return app


@pytest.mark.parametrize("columns", ["30", "200"])
def test_cli_show_names_the_run_on_one_unbroken_line(tmp_path: Path, columns: str) -> None:
    # A run directory longer than the terminal is wide: the line is never broken by rich
    # (it used to be a table title, wrapped mid-word at the table's width).
    run_dir = tmp_path / ("a-long-run-directory-name-" * 4)
    _log_curve(run_dir, steps=12)
    result = CliRunner(env={"COLUMNS": columns}).invoke(
        _cli(), ["metrics", "show", str(run_dir), "-n", "3"]
    )
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[0] == f"{run_dir}: 12 steps logged"


def test_cli_show_prints_the_last_steps(tmp_path: Path) -> None:
    _log_curve(tmp_path, steps=12)
    # The table is laid out for the terminal: this test says how wide its terminal is.
    result = CliRunner(env={"COLUMNS": "200"}).invoke(
        _cli(), ["metrics", "show", str(tmp_path), "-n", "3"]
    )
    assert result.exit_code == 0, result.output
    assert "12 steps logged" in result.output
    assert "reward/mean" in result.output
    assert "loss" in result.output
    for step in ("9", "10", "11"):
        assert f" {step} " in result.output
    assert " 8 " not in result.output
    assert "1.1" in result.output  # reward/mean at step 11


def test_cli_show_selected_keys(tmp_path: Path) -> None:
    _log_curve(tmp_path, steps=2)
    result = CliRunner(env={"COLUMNS": "200"}).invoke(
        _cli(), ["metrics", "show", str(tmp_path), "--key", "loss"]
    )
    assert result.exit_code == 0, result.output
    assert "loss" in result.output
    assert "reward/mean" not in result.output


def test_cli_plot_writes_a_png(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    _log_curve(tmp_path, steps=4)
    out = tmp_path / "curve.png"
    result = CliRunner().invoke(
        _cli(),
        [
            "metrics",
            "plot",
            str(tmp_path),
            "--out",
            str(out),
            "--key",
            "reward/mean",
            "--key",
            "loss",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "wrote" in result.output
    assert out.read_bytes().startswith(PNG_SIGNATURE)


def test_cli_reports_errors_without_a_traceback(tmp_path: Path) -> None:
    result = CliRunner().invoke(_cli(), ["metrics", "show", str(tmp_path / "missing")])
    assert result.exit_code == 2
    assert "no metrics file" in result.output
    assert "Traceback" not in result.output


def test_missing_optional_libraries_give_install_hints(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A None entry in sys.modules makes `import` fail as if the library were not installed.
    for name in (
        "tensorboardX",
        "tensorboard",
        "matplotlib.figure",
        "matplotlib.backends.backend_agg",
    ):
        monkeypatch.setitem(sys.modules, name, None)
    with MetricsLogger(tmp_path, console=False) as logger:
        assert not logger.tensorboard_enabled
        logger.log(0, {"reward/mean": 1.0})
    with pytest.raises(AglError, match=r"pip install tensorboardX"):
        MetricsLogger(tmp_path, console=False, tensorboard=True)
    with pytest.raises(AglError, match=r"pip install matplotlib"):
        plot_metrics(tmp_path, tmp_path / "x.png")
