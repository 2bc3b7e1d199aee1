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

_LOGPROB_CHUNK_ELEMENTS = 1 << 26
"""Logits per chunk of the log-softmax over the vocabulary (bounds its float32 copies to
256 MiB: 440 tokens of a 150k vocabulary, 28k of a tiny model's 2k)."""


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
    # log_softmax(x)[y] is minus the cross-entropy of x at y, whose fused backward (softmax
    # minus one-hot) writes the vocabulary-wide gradient once. Only a chunk of tokens is upcast
    # to float32 at a time; the chunks are ``split`` off the flattened tokens, whose backward
    # joins their gradients once, where slices would each fill a zero tensor as large as all
    # the logits.
    flat = logits.reshape(batch * width, logits.shape[-1])
    tokens = max(1, _LOGPROB_CHUNK_ELEMENTS // flat.shape[-1])
    if flat.shape[0] <= tokens:
        return _logprobs_at(flat, targets.reshape(-1), temperature).reshape(batch, width)
    pieces = [
        _logprobs_at(chunk, target, temperature)
        for chunk, target in zip(
            torch.split(flat, tokens), torch.split(targets.reshape(-1), tokens), strict=True
        )
    ]
    return torch.cat(pieces).reshape(batch, width)


def _logprobs_at(logits: torch.Tensor, targets: torch.Tensor, temperature: float) -> torch.Tensor:
    logits = logits.float()
    if temperature != 1.0:
        logits = logits / temperature
    return -torch.nn.functional.cross_entropy(logits, targets, reduction="none")
