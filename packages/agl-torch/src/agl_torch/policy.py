"""The policy: a Hugging Face causal LM, how it is loaded, and the logprobs of its tokens.

Everything the learner computes starts from one quantity, the logprob the policy gives each
token of a sequence given the tokens before it. :func:`token_logprobs` returns it aligned with
``input_ids`` (column ``t`` scores token ``t``), the same layout :mod:`agl_torch.data` uses for
behaviour logprobs, advantages and masks, so losses combine the four element-wise with no
shifting. The vocabulary dimension is reduced to one number per token a chunk at a time, so
behaviour and reference logprobs (computed without gradient) never need a float32 copy of the
whole ``[B, T, V]`` logits of a half-precision model.
"""

from __future__ import annotations

import contextlib
import inspect
import os
from collections.abc import Iterator
from typing import Any

import torch

__all__ = ["default_device", "load_policy", "quiet_progress_bars", "token_logprobs"]

_LOGPROB_CHUNK_TOKENS = 4096
"""Tokens per chunk of the logsumexp over the vocabulary (bounds the float32 upcast)."""


def default_device() -> torch.device:
    """The first CUDA device when there is one, else the CPU."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


@contextlib.contextmanager
def quiet_progress_bars(*, logs: bool = False) -> Iterator[None]:
    """Silence transformers' (and the Hub's) progress bars inside the block, then restore.

    Args:
        logs: Silence transformers' log messages below errors too.
    """
    from transformers.utils import logging

    enabled = logging.is_progress_bar_enabled()
    verbosity = logging.get_verbosity()
    logging.disable_progress_bar()
    if logs:
        logging.set_verbosity_error()
    try:
        yield
    finally:
        if logs:
            logging.set_verbosity(verbosity)
        if enabled:
            logging.enable_progress_bar()


def load_policy(
    path: str | os.PathLike[str],
    *,
    device: torch.device | str | None = None,
    dtype: torch.dtype | None = None,
    tokenizer: Any = None,
    quiet: bool = False,
) -> tuple[Any, Any]:
    """Load a causal LM and its tokenizer from a Hugging Face folder (or Hub name).

    Args:
        path: What ``AutoModelForCausalLM.from_pretrained`` accepts.
        device: Where the weights go (default: :func:`default_device`).
        dtype: The weights' dtype (default: as saved in the folder's config).
        tokenizer: The tokenizer to return instead of loading the folder's.
        quiet: Silence transformers' log messages below errors too, not only its progress
            bars (for a server's log).

    Returns:
        ``(model, tokenizer)``; the model is in eval mode.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    with quiet_progress_bars(logs=quiet):
        if tokenizer is None:
            tokenizer = AutoTokenizer.from_pretrained(path)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype or "auto")
    model.to(device if device is not None else default_device())
    model.eval()
    return model, tokenizer


def token_logprobs(
    model: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    *,
    temperature: float = 1.0,
    needed: torch.Tensor | None = None,
) -> torch.Tensor:
    """The logprob of every token given the tokens before it, aligned with ``input_ids``.

    Column ``t >= 1`` holds ``log p(input_ids[:, t] | input_ids[:, :t])`` under ``model`` (its
    logits divided by ``temperature``, as a sampler with that temperature sees them). A row's
    first token, which nothing predicts, and padding hold 0. Padding may be on either side:
    position ids are counted over the attended tokens only.

    With ``needed`` (the tokens the caller reads: SFT's labels, RL's response), only those hold
    logprobs and the rest 0, and the vocabulary logits are computed only at the columns some
    row needs (the model's ``logits_to_keep``, when it takes one): a prompt's or a tool
    result's tokens cost the transformer's layers but not the output layer, often most of the
    work of a small model.

    Differentiable; call it under ``torch.no_grad()`` for behaviour or reference logprobs.

    Args:
        model: A causal LM returning ``.logits`` of shape ``[B, T, V]`` (a PEFT model too).
        input_ids: ``[B, T]`` token ids.
        attention_mask: ``[B, T]``, 1 on real tokens, 0 on padding.
        temperature: Divides the logits.
        needed: ``[B, T]`` bool, True on the tokens whose logprobs are wanted (all if None).

    Returns:
        A float32 ``[B, T]`` tensor.
    """
    if input_ids.shape[0] == 0 or input_ids.shape[1] < 2:
        return torch.zeros(input_ids.shape, dtype=torch.float32, device=input_ids.device)
    positions = (attention_mask.long().cumsum(dim=1) - 1).clamp(min=0)
    inputs = {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "position_ids": positions,
        "use_cache": False,
    }
    unread = (attention_mask == 0) | (positions == 0)
    if needed is not None:
        unread = unread | ~needed.bool()
    if needed is None or not _keeps_logits(model):
        logits = model(**inputs).logits[:, :-1]
        logprobs = _gathered(logits, input_ids[:, 1:], temperature)
        logprobs = torch.nn.functional.pad(logprobs, (1, 0))
    else:
        # the logits at column t predict token t + 1
        columns = needed.bool()[:, 1:].any(dim=0).nonzero().squeeze(-1)
        logprobs = torch.zeros(input_ids.shape, dtype=torch.float32, device=input_ids.device)
        if columns.numel():
            logits = model(**inputs, logits_to_keep=columns).logits
            kept = _gathered(logits, input_ids[:, columns + 1], temperature)
            logprobs = logprobs.index_copy(1, columns + 1, kept)
    return logprobs.masked_fill(unread, 0.0)


def _keeps_logits(model: Any) -> bool:
    """Whether the model's forward takes ``logits_to_keep`` (a PEFT model: its base's)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return "logits_to_keep" in inspect.signature(base.forward).parameters


def _gathered(logits: torch.Tensor, targets: torch.Tensor, temperature: float) -> torch.Tensor:
    """``log_softmax(logits / temperature)`` at ``targets``, ``[B, W]`` float32."""
    batch, width = targets.shape
    rows = min(batch, max(1, _LOGPROB_CHUNK_TOKENS // width))
    columns = min(width, max(1, _LOGPROB_CHUNK_TOKENS // rows))
    # log_softmax(x)[y] = x[y] - logsumexp(x): one number per token leaves the vocabulary
    # dimension, and only a chunk of tokens is upcast to float32 at a time.
    blocks = []
    for row in range(0, batch, rows):
        pieces = []
        for column in range(0, width, columns):
            chunk = logits[row : row + rows, column : column + columns].float()
            if temperature != 1.0:
                chunk = chunk / temperature
            target = targets[row : row + rows, column : column + columns, None]
            pieces.append(chunk.gather(-1, target).squeeze(-1) - chunk.logsumexp(dim=-1))
        blocks.append(torch.cat(pieces, dim=1))
    return torch.cat(blocks)
