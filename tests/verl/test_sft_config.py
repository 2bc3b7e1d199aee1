"""verl's SFT config as agl builds it, and the checks that run before any process starts."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from omegaconf import OmegaConf

from agl_verl.config import VerlConfigError
from agl_verl.sft_trainer import (
    AGL_SFT_DEFAULTS,
    build_sft_config,
    run_verl_sft,
    total_sft_steps,
    validate_sft_config,
)


@pytest.fixture
def data_file(tmp_path: Path) -> Path:
    path = tmp_path / "data.parquet"
    pq.write_table(pa.table({"input_ids": [[1, 2, 3]] * 8, "loss_mask": [[0, 1, 1]] * 8}), path)
    return path


def build(model_dir: Path, data_file: Path, overrides: object = None, **values: object):  # type: ignore[no-untyped-def]
    return build_sft_config(
        overrides,  # type: ignore[arg-type]
        model_path=str(model_dir),
        train_files=data_file,
        data="tokens",
        output_dir=data_file.parent / "out",
        **{"batch_size": 4, **values},  # type: ignore[arg-type]
    )


def test_verls_sft_config_with_agls_defaults_and_the_runs_values(
    model_dir: Path, data_file: Path
) -> None:
    config = build(model_dir, data_file, batch_size=4, max_length=128, epochs=3, lr=2e-5)
    # verl's own tree, as `python -m verl.trainer.sft_trainer` composes it
    for section in ("model", "engine", "optim", "checkpoint", "data", "trainer", "profiler"):
        assert section in config
    assert config.model.path == str(model_dir)
    assert config.data.train_files == str(data_file)
    assert config.data.train_batch_size == 4
    assert config.data.max_length == 128
    assert config.trainer.total_epochs == 3
    assert config.optim.lr == 2e-5
    assert config.trainer.default_local_dir == str(data_file.parent / "out")
    # agl's token rows are read by agl's dataset class
    assert config.data.custom_cls.path == "pkg://agl_verl.sft_datasets"
    assert config.data.custom_cls.name == "TokenSFTDataset"
    # agl's defaults land where documented
    assert "file" in config.trainer.logger
    assert "hf_model" in config.checkpoint.save_contents
    assert (
        config.data.micro_batch_size_per_gpu == AGL_SFT_DEFAULTS["data"]["micro_batch_size_per_gpu"]
    )
    validate_sft_config(config, n_samples=8)
    assert total_sft_steps(config, 8) == 2 * 3


def test_overrides_win_in_every_form(model_dir: Path, data_file: Path, tmp_path: Path) -> None:
    dotted = build(model_dir, data_file, {"optim.lr": 3e-6}, lr=1e-5)
    nested = build(model_dir, data_file, {"optim": {"lr": 3e-6}}, lr=1e-5)
    (tmp_path / "sft.yaml").write_text("optim:\n  lr: 3.0e-6\n", encoding="utf-8")
    from_file = build(model_dir, data_file, str(tmp_path / "sft.yaml"), lr=1e-5)
    text = build(model_dir, data_file, "trainer:\n  n_gpus_per_node: 8\n")
    assert dotted.optim.lr == nested.optim.lr == from_file.optim.lr == 3e-6
    assert text.trainer.n_gpus_per_node == 8
    chat = build_sft_config(model_path=str(model_dir), train_files=data_file, data="chat")
    assert chat.data.custom_cls.name == "ChatSFTDataset"


def test_an_unknown_key_is_refused_naming_verls_closest(model_dir: Path, data_file: Path) -> None:
    with pytest.raises(
        VerlConfigError, match=r"no key 'data\.train_batchsize'.*data\.train_batch_size"
    ):
        build(model_dir, data_file, {"data.train_batchsize": 8})
    with pytest.raises(VerlConfigError, match="data is 'images'"):
        build_sft_config(data="images")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("change", "n_samples", "message"),
    [
        ({"model.path": "/nowhere/model"}, 8, "model.path '/nowhere/model' is not a model folder"),
        (
            {"data.train_files": "/nowhere/data.parquet"},
            8,
            "'/nowhere/data.parquet' does not exist",
        ),
        ({"data.train_batch_size": 0}, 8, "data.train_batch_size must be a positive integer"),
        (
            {"data.train_batch_size": 6, "trainer.n_gpus_per_node": 4},
            8,
            "train_batch_size=6 does not split over 4 data-parallel ranks",
        ),
        ({"data.train_batch_size": 16}, 8, "8 training samples are fewer than"),
        ({"trainer.logger": ["console"]}, 8, "keep 'file' in it"),
        ({"data.pad_mode": "right"}, 8, "agl's token rows are read unpadded"),
        ({"engine.strategy": "bogus"}, 8, "engine: strategy bogus not supported"),
        ({"optim.lr_scheduler_type": "bogus"}, 8, "optim: .*FSDPOptimizerConfig"),
    ],
)
def test_a_config_that_cannot_run_is_refused_naming_the_key(
    model_dir: Path, data_file: Path, change: dict[str, object], n_samples: int, message: str
) -> None:
    config = build(model_dir, data_file, change)
    with pytest.raises(VerlConfigError, match=message):
        validate_sft_config(config, n_samples=n_samples)


def test_a_missing_value_is_named(model_dir: Path, data_file: Path) -> None:
    config = build(model_dir, data_file)
    OmegaConf.update(config, "data.train_files", "???", force_add=True)
    with pytest.raises(VerlConfigError, match=r"missing: data\.train_files"):
        validate_sft_config(config)


def test_torchrun_from_here_refuses_several_nodes_with_the_way_to_run_them(
    model_dir: Path, data_file: Path
) -> None:
    config = build(model_dir, data_file, {"trainer.nnodes": 2, "trainer.n_gpus_per_node": 8})
    with pytest.raises(VerlConfigError, match=r"launcher='ray'.*torchrun --nnodes 2"):
        run_verl_sft(config)
    with pytest.raises(VerlConfigError, match="launcher is 'slurm'"):
        run_verl_sft(config, launcher="slurm")  # type: ignore[arg-type]
