"""verl's SFT trainer, driven by agl: its config built and validated here, its processes launched.

:func:`build_sft_config` composes verl's ``sft_trainer_engine.yaml`` (the config of
``python -m verl.trainer.sft_trainer``), applies agl's defaults (:data:`AGL_SFT_DEFAULTS`),
the run's values and the user's overrides, with the same rules as :mod:`agl_verl.config`
(unknown keys are errors naming the closest ones verl has). :func:`validate_sft_config` checks
it before any process starts. :func:`run_verl_sft` runs verl's trainer on it:

- ``launcher="torchrun"``: verl's SPMD trainer (``verl.trainer.sft_trainer``) under
  ``torchrun`` on this machine, one process per GPU;
- ``launcher="ray"``: verl's Ray trainer (``verl.trainer.sft_trainer_ray``) on the Ray cluster
  ``RAY_ADDRESS`` names (or a local one): the way to use several nodes, the same cluster
  ``"lightningrl-verl"`` uses.

The trainer's metrics come back through verl's own file logger (a JSONL file agl reads while
the run goes, for progress); its checkpoints are verl's (``global_step_N/``), with a Hugging
Face copy of the model (``global_step_N/huggingface``) that vLLM and transformers load.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from omegaconf import DictConfig, OmegaConf

from agl import AglError
from agl_verl.config import (
    VerlConfigError,
    check_model_path,
    load_overrides,
    merge_layer,
    set_dotted,
    verl_defaults,
)
from agl_verl.sft_data import WrittenRows

__all__ = [
    "AGL_SFT_DEFAULTS",
    "SFTRun",
    "VerlSFTError",
    "build_sft_config",
    "run_verl_sft",
    "total_sft_steps",
    "validate_sft_config",
]

Launcher = Literal["torchrun", "ray"]
DataKind = Literal["tokens", "chat"]

DATASETS_MODULE = "pkg://agl_verl.sft_datasets"
DATASET_CLASSES: dict[str, str] = {"tokens": "TokenSFTDataset", "chat": "ChatSFTDataset"}
METRICS_FILE = "verl_metrics.jsonl"
LOG_FILE = "verl_sft.log"
CONFIG_FILE = "sft_config.yaml"

AGL_SFT_DEFAULTS: dict[str, Any] = {
    "data": {
        "train_batch_size": 32,
        "micro_batch_size_per_gpu": 4,
        "max_length": 2048,
        # agl drops over-long samples when it writes the data (counted), so none reaches the
        # trainer; an error there means a file written by hand.
        "truncation": "error",
        "pad_mode": "no_padding",
        "num_workers": 0,
    },
    "optim": {"lr": 1e-5},
    # A Hugging Face copy of the model with every checkpoint: what vLLM serves next.
    "checkpoint": {"save_contents": ["model", "optimizer", "extra", "hf_model"]},
    "trainer": {
        # agl reads the metrics from verl's file logger.
        "logger": ["console", "file"],
        "project_name": "agl",
        "experiment_name": "sft-verl",
        "total_epochs": 1,
        "nnodes": 1,
        "n_gpus_per_node": 1,
    },
}
"""What agl sets on top of verl's SFT defaults (each can be overridden)."""


class VerlSFTError(AglError):
    """verl's SFT trainer failed; the message holds the end of its log and the log's path."""


@dataclass
class SFTRun:
    """The outcome of one verl SFT run.

    Attributes:
        output_dir: ``trainer.default_local_dir``: checkpoints, config, log and metrics.
        steps: Optimizer steps verl reports it took.
        metrics: verl's metrics, one dict per step (``train/loss``, ``train/grad_norm``,
            ``train/lr``, ``train/global_tokens``, ``val/loss`` when validating, ...), each
            with its ``step``.
        checkpoint: The last checkpoint verl saved (``global_step_N``), or None.
        hf_model: Its Hugging Face model folder, when ``checkpoint.save_contents`` has
            ``hf_model`` (agl's default), or None.
        log: verl's output (stdout and stderr).
        seconds: Wall time of the run, process start-up included.
        written: What agl wrote for it to train on (rows, tokens, dropped samples), when agl
            wrote the data (:func:`agl_verl.sft.train_sft`).
    """

    output_dir: Path
    steps: int = 0
    metrics: list[dict[str, Any]] = field(default_factory=list)
    checkpoint: Path | None = None
    hf_model: Path | None = None
    log: Path | None = None
    seconds: float = 0.0
    written: WrittenRows | None = None

    def final(self, key: str) -> float | None:
        """The last value verl logged for ``key`` (``"train/loss"``, ...), or None."""
        for row in reversed(self.metrics):
            if key in row:
                return float(row[key])
        return None


def build_sft_config(
    overrides: Mapping[str, Any] | str | os.PathLike[str] | None = None,
    *,
    model_path: str | None = None,
    train_files: str | os.PathLike[str] | list[str] | None = None,
    val_files: str | os.PathLike[str] | list[str] | None = None,
    data: DataKind | None = None,
    output_dir: str | os.PathLike[str] | None = None,
    batch_size: int | None = None,
    micro_batch_size: int | None = None,
    max_length: int | None = None,
    epochs: int | None = None,
    lr: float | None = None,
) -> DictConfig:
    """verl's full SFT config: verl defaults, agl defaults, the run's values, the overrides.

    Args:
        overrides: The user's settings, as in :func:`agl_verl.config.load_overrides`; they
            win over everything.
        model_path: ``model.path``.
        train_files / val_files: ``data.train_files`` / ``data.val_files`` (Parquet).
        data: Which of agl's files they are: ``"tokens"`` (:func:`write_token_rows`) or
            ``"chat"`` (:func:`write_conversation_rows`); sets ``data.custom_cls``. None keeps
            verl's own dataset (``messages`` columns as verl's examples write them).
        output_dir: ``trainer.default_local_dir``.
        batch_size / micro_batch_size / max_length / epochs / lr: ``data.train_batch_size``,
            ``data.micro_batch_size_per_gpu``, ``data.max_length``, ``trainer.total_epochs``,
            ``optim.lr``.

    Raises:
        VerlConfigError: an override names a key verl does not have, or is not valid YAML.
    """
    config = verl_defaults("sft_trainer_engine")
    config = merge_layer(config, OmegaConf.create(AGL_SFT_DEFAULTS), "agl defaults")
    derived: dict[str, Any] = {}
    values: dict[str, Any] = {
        "model.path": model_path,
        "data.train_files": _files(train_files),
        "data.val_files": _files(val_files),
        "trainer.default_local_dir": None if output_dir is None else os.fspath(output_dir),
        "data.train_batch_size": batch_size,
        "data.micro_batch_size_per_gpu": micro_batch_size,
        "data.max_length": max_length,
        "trainer.total_epochs": epochs,
        "optim.lr": lr,
    }
    if data is not None:
        if data not in DATASET_CLASSES:
            raise VerlConfigError(f"data is {data!r}: expected one of {sorted(DATASET_CLASSES)}")
        values["data.custom_cls.path"] = DATASETS_MODULE
        values["data.custom_cls.name"] = DATASET_CLASSES[data]
    for key, value in values.items():
        if value is not None:
            set_dotted(derived, key, value)
    config = merge_layer(config, OmegaConf.create(derived), "agl-verl settings")
    return merge_layer(config, load_overrides(overrides), "verl SFT config overrides")


def _files(files: str | os.PathLike[str] | list[str] | None) -> str | list[str] | None:
    if files is None:
        return None
    if isinstance(files, str | os.PathLike):
        return os.fspath(files)
    return [os.fspath(f) for f in files]


def validate_sft_config(config: DictConfig, *, n_samples: int | None = None) -> None:
    """Check that verl's SFT trainer can run ``config``, before any process starts.

    agl's checks (each names the key to change), then verl's own: its config dataclasses are
    built from the config exactly as its trainer builds them (the model's config and
    tokenizer are loaded).

    Args:
        config: From :func:`build_sft_config`.
        n_samples: Samples in the training data, when known (a run with fewer than one batch
            would take no step: verl drops the incomplete last batch).

    Raises:
        VerlConfigError: what is wrong and how to fix it.
    """
    missing = sorted(OmegaConf.missing_keys(config))
    if missing:
        raise VerlConfigError(f"verl SFT config values are missing: {', '.join(missing)}")
    check_model_path("model.path", config.model.path)
    train_files = config.data.train_files
    files = [train_files] if isinstance(train_files, str) else list(train_files or [])
    if config.data.val_files:
        val = config.data.val_files
        files += [val] if isinstance(val, str) else list(val)
    if not files:
        raise VerlConfigError("data.train_files is not set: give the Parquet file to train on")
    for file in files:
        if "://" not in str(file) and not Path(os.path.expanduser(str(file))).is_file():
            raise VerlConfigError(f"data file {str(file)!r} does not exist")
    for key in (
        "data.train_batch_size",
        "data.micro_batch_size_per_gpu",
        "data.max_length",
        "trainer.total_epochs",
        "trainer.n_gpus_per_node",
        "trainer.nnodes",
    ):
        value = OmegaConf.select(config, key)
        if not isinstance(value, int) or value < 1:
            raise VerlConfigError(f"{key} must be a positive integer, got {value!r}")
    n_gpus = int(config.trainer.n_gpus_per_node) * int(config.trainer.nnodes)
    batch = int(config.data.train_batch_size)
    if batch % n_gpus:
        raise VerlConfigError(
            f"data.train_batch_size={batch} does not split over {n_gpus} data-parallel ranks "
            f"(trainer.n_gpus_per_node x trainer.nnodes): make it a multiple of {n_gpus}"
        )
    if n_samples is not None and n_samples < batch:
        raise VerlConfigError(
            f"{n_samples} training samples are fewer than data.train_batch_size={batch}: no "
            "step would run (verl drops the incomplete last batch); lower the batch size"
        )
    if "file" not in list(config.trainer.logger):
        raise VerlConfigError(
            f"trainer.logger is {list(config.trainer.logger)}: keep 'file' in it, agl reads "
            "verl's metrics from that logger"
        )
    name = OmegaConf.select(config, "data.custom_cls.name")
    if name == DATASET_CLASSES["tokens"] and config.data.pad_mode != "no_padding":
        raise VerlConfigError(
            f"data.pad_mode is {config.data.pad_mode!r}: agl's token rows are read unpadded "
            "(no_padding)"
        )
    _verl_validate_sft(config)


def _verl_validate_sft(config: DictConfig) -> None:
    from verl.utils.config import omega_conf_to_dataclass

    for section in ("model", "engine", "optim", "checkpoint"):
        try:
            omega_conf_to_dataclass(config[section])
        except Exception as exc:  # verl raises assertions, ValueErrors, OSErrors alike
            cause = exc.__cause__ if exc.__cause__ is not None else exc
            # verl's dataclasses often assert without a message: then say where it failed.
            detail = str(cause) or " ".join(str(exc).split("\n")[:2])
            raise VerlConfigError(f"verl rejected the SFT config's {section}: {detail}") from exc


def total_sft_steps(config: DictConfig, n_samples: int) -> int:
    """Optimizer steps verl's SFT trainer takes on ``n_samples`` samples."""
    if config.trainer.total_training_steps is not None:
        return int(config.trainer.total_training_steps)
    per_epoch = n_samples // int(config.data.train_batch_size)
    return per_epoch * int(config.trainer.total_epochs)


def run_verl_sft(
    config: DictConfig,
    *,
    launcher: Launcher = "torchrun",
    nproc_per_node: int | None = None,
    env: Mapping[str, str] | None = None,
    total_steps: int | None = None,
    on_step: Callable[[int, int | None, dict[str, Any]], None] | None = None,
    poll_interval: float = 0.5,
) -> SFTRun:
    """Run verl's SFT trainer on ``config`` (validate it first) and wait for it.

    Args:
        config: From :func:`build_sft_config`; ``trainer.default_local_dir`` receives the
            checkpoints and agl's files (the config as run, verl's log, its metrics).
        launcher: ``"torchrun"`` (this machine, ``nproc_per_node`` processes, default
            ``trainer.n_gpus_per_node``) or ``"ray"`` (verl's Ray trainer on the cluster
            ``RAY_ADDRESS`` names; several nodes).
        env: Extra environment variables for verl's processes.
        total_steps: Steps expected, passed to ``on_step`` (for a progress bar).
        on_step: Called with (step, total_steps, metrics) as verl logs each step.

    Raises:
        VerlConfigError: the launcher cannot run this config.
        VerlSFTError: verl's trainer exited with an error (the message ends with its log).
    """
    output_dir = Path(os.path.expanduser(str(config.trainer.default_local_dir))).absolute()
    output_dir.mkdir(parents=True, exist_ok=True)
    config_path = output_dir / CONFIG_FILE
    OmegaConf.save(config, config_path)
    metrics_path = output_dir / METRICS_FILE
    log_path = output_dir / LOG_FILE
    command = _command(config, config_path, launcher, nproc_per_node)
    process_env = {
        **os.environ,
        "TOKENIZERS_PARALLELISM": "false",
        # verl's processes run on this interpreter, not under `uv run`: Ray must not try to
        # rebuild a uv project around the output folder it starts in.
        "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0",
        **dict(env or {}),
        "VERL_FILE_LOGGER_PATH": str(metrics_path),
    }
    started = time.perf_counter()
    result = SFTRun(output_dir, log=log_path)
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            command,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=process_env,
            start_new_session=True,
        )
        try:
            reader = _MetricsReader(metrics_path)
            while True:
                code = process.poll()
                for row in reader.new_rows():
                    result.metrics.append(row)
                    if on_step is not None:
                        on_step(int(row["step"]), total_steps, row)
                if code is not None:
                    break
                time.sleep(poll_interval)
        finally:
            if process.poll() is None:
                _stop(process)
    result.seconds = time.perf_counter() - started
    if process.returncode != 0:
        raise VerlSFTError(
            f"verl's SFT trainer exited with code {process.returncode}; the end of its log "
            f"({log_path}):\n{_tail(log_path)}"
        )
    result.steps = max((int(row["step"]) for row in result.metrics), default=0)
    result.checkpoint = _latest_checkpoint(output_dir)
    if result.checkpoint is not None and (result.checkpoint / "huggingface").is_dir():
        result.hf_model = result.checkpoint / "huggingface"
    return result


def _command(
    config: DictConfig, config_path: Path, launcher: str, nproc_per_node: int | None
) -> list[str]:
    if launcher == "ray":
        return [sys.executable, "-m", "agl_verl.sft_main", "--ray", str(config_path)]
    if launcher != "torchrun":
        raise VerlConfigError(f"launcher is {launcher!r}: expected 'torchrun' or 'ray'")
    if int(config.trainer.nnodes) > 1:
        raise VerlConfigError(
            f"trainer.nnodes={config.trainer.nnodes}: torchrun from here runs on this machine "
            "only; use launcher='ray' on a Ray cluster spanning the nodes, or start "
            f"`torchrun --nnodes {config.trainer.nnodes} --nproc_per_node "
            f"{config.trainer.n_gpus_per_node} --rdzv_backend c10d --rdzv_endpoint HEAD:29400 "
            f"-m agl_verl.sft_main {config_path}` on every node"
        )
    n = nproc_per_node or int(config.trainer.n_gpus_per_node)
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={n}",
        "-m",
        "agl_verl.sft_main",
        str(config_path),
    ]


class _MetricsReader:
    """Reads verl's file logger as it grows: ``{"step": N, "data": {...}}`` per line."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0

    def new_rows(self) -> list[dict[str, Any]]:
        """The rows of the lines completed since the last call."""
        if not self.path.is_file():
            return []
        with self.path.open("rb") as file:
            file.seek(self.offset)
            chunk = file.read()
        complete = chunk[: chunk.rfind(b"\n") + 1]
        self.offset += len(complete)
        rows = []
        for line in complete.decode("utf-8").splitlines():
            entry = json.loads(line)
            rows.append({"step": entry.get("step", 0), **_finite(entry.get("data") or {})})
        return rows


def _finite(data: Mapping[str, Any]) -> dict[str, Any]:
    return {
        key: value
        for key, value in data.items()
        if not (isinstance(value, float) and not math.isfinite(value))
    }


def _latest_checkpoint(output_dir: Path) -> Path | None:
    tracker = output_dir / "latest_checkpointed_iteration.txt"
    if not tracker.is_file():
        return None
    step = tracker.read_text(encoding="utf-8").strip()
    path = output_dir / f"global_step_{step}"
    return path if path.is_dir() else None


def _stop(process: subprocess.Popen[bytes]) -> None:
    """Stop verl's processes (torchrun and its workers share a session)."""
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=20)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def _tail(path: Path, lines: int = 40) -> str:
    text = path.read_text(encoding="utf-8", errors="replace").splitlines()
    return "\n".join(text[-lines:])
