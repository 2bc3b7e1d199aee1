"""Shared fixtures for agl-verl's tests."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real (tiny, random) Hugging Face model folder, built in code: verl's checks load its
    tokenizer and config."""
    from agl_torch.tiny import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("model"))
