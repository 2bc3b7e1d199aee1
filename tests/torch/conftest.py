"""Fixtures for agl-torch: one tiny model per test session, built in code (nothing downloaded)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    import torch

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


@pytest.fixture(scope="session")
def forward_logprobs() -> Callable[[Any, Sequence[int], Sequence[int]], torch.Tensor]:
    """The reference logprobs served tokens are checked against: one plain forward pass.

    The returned function ``(model, prompt, tokens)`` runs ``model`` once over prompt + tokens
    (unpadded, no KV cache) and returns the log-softmax of its logits at each of the tokens'
    positions (tokens x vocabulary).
    """
    import torch

    def forward(model: Any, prompt: Sequence[int], tokens: Sequence[int]) -> torch.Tensor:
        ids = torch.tensor([[*prompt, *tokens]])
        with torch.inference_mode():
            logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float()
        return torch.log_softmax(logits, dim=-1)

    return forward


@pytest.fixture(scope="session")
def tokenizer(tiny_model_dir: Path) -> Any:
    """The tiny model's tokenizer."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


@pytest.fixture(scope="session")
def reference(tiny_model_dir: Path) -> Any:
    """A copy of the tiny model that engines and servers under test never touch."""
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
