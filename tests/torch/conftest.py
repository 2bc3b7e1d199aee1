"""Fixtures for agl-torch: one tiny model per test session, built in code (nothing downloaded)."""

from __future__ import annotations

from pathlib import Path

import pytest

CORPUS = [
    "What is 12*7? Use the calculator.",
    '<tool_call>{"name": "calculator", "arguments": {"expression": "12*7"}}</tool_call>',
    "The answer is 84.",
    "Hello! How can I help you today? Tell me a story about a fox.",
    "0 1 2 3 4 5 6 7 8 9 + - * / = ( ) . , ? !",
]


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-layer, 64-wide Llama with a BPE tokenizer and the ChatML tool template, on disk."""
    from agl_torch.tiny import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny-model"), corpus=CORPUS, seed=0)
