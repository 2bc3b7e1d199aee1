"""Shared fixtures for agl-verl's tests."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real (tiny, random) Hugging Face model folder, built in code: verl's checks load its
    tokenizer and config."""
    from agl_torch.tiny import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("model"))


@pytest.fixture(scope="session")
def verl_on_cpu() -> dict[str, Any]:
    """What runs verl's SFT trainer processes on CPU: the environment that loads the CPU
    platform of ``verl_cpu_platform`` (verl's hook for other hardware), and the config
    overrides for CPU (FSDP2 over gloo, PyTorch attention, no flash-attn padding removal)."""
    path = os.pathsep.join(
        p for p in (str(Path(__file__).parent), os.environ.get("PYTHONPATH")) if p
    )
    return {
        "env": {
            "PYTHONPATH": path,
            "VERL_USE_EXTERNAL_MODULES": "verl_cpu_platform",
            "VERL_PLATFORM": "cpu",
            # verl registers its FSDP engines for GPU devices only; look them up as for CUDA.
            "VERL_ENGINE_DEVICE": "cuda",
        },
        "config": {
            "trainer.device": "cpu",
            "engine.strategy": "fsdp2",
            "model.use_remove_padding": False,
            "model.override_config": {"attn_implementation": "sdpa"},
        },
    }
