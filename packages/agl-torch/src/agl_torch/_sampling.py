"""How a request samples: its parameters, the tokens it draws, and when it stops.

:class:`Sampler` draws the next token of every row of a batch at once, each row with its own
:class:`SamplingParams`: greedy at temperature 0, else temperature and top-p, from a random
generator of the row's own when it has a ``seed`` (so its output does not depend on what it is
batched with). The logprob reported for each token is the log-softmax of the raw logits, before
temperature and top-p. :class:`StopCheck` says when a row is done.

:class:`SamplingParams` and :class:`Token` are public as :mod:`agl_torch.engine`'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, NoReturn

import torch

from agl import InvalidInputError

FinishReason = Literal["stop", "length"]


@dataclass(frozen=True)
class SamplingParams:
    """How one request samples.

    Attributes:
        max_tokens: The most tokens to generate; ``None`` for as many as the model's maximum
            length leaves after the prompt.
        temperature: Softmax temperature; 0 samples greedily (the most likely token).
        top_p: Nucleus sampling: sample among the most likely tokens whose probabilities add up
            to ``top_p``.
        stop: Stop once the generated text contains one of these strings (the tokens that
            completed it are kept, so the text still decodes from the token ids).
        seed: Seeds a random generator of the request's own: the same seed gives the same
            output, whatever the request is batched with.
        top_logprobs: How many of the most likely tokens to report at each step, with their
            logprobs.
    """

    max_tokens: int | None = None
    temperature: float = 1.0
    top_p: float = 1.0
    stop: Sequence[str] = ()
    seed: int | None = None
    top_logprobs: int = 0

    def __post_init__(self) -> None:
        if self.max_tokens is not None and self.max_tokens < 1:
            invalid("max_tokens", self.max_tokens, "a positive integer")
        if not self.temperature >= 0:
            invalid("temperature", self.temperature, "a number >= 0")
        if not 0 < self.top_p <= 1:
            invalid("top_p", self.top_p, "a number in (0, 1]")
        if self.top_logprobs < 0:
            invalid("top_logprobs", self.top_logprobs, "an integer >= 0")
        if isinstance(self.stop, str) or not all(isinstance(s, str) and s for s in self.stop):
            invalid("stop", self.stop, "a list of non-empty strings")


@dataclass(frozen=True)
class Token:
    """One generated token, as a stream reports it.

    Attributes:
        id: The token id.
        logprob: Its logprob under the model's raw distribution.
        top_logprobs: The ``top_logprobs`` most likely ``(id, logprob)`` at this step, best
            first.
        weight_version: The weights that produced it.
    """

    id: int
    logprob: float
    top_logprobs: list[tuple[int, float]]
    weight_version: int


class Sampler:
    """Per-row sampling for a batch: greedy or temperature + top-p, shared or own generators.

    Args:
        params: Each row's parameters.
        device: Where the batch's logits are.
        rng: The generator of the rows without a seed.
        version: The weight version the tokens are labelled with.
    """

    def __init__(
        self,
        params: Sequence[SamplingParams],
        device: torch.device,
        rng: torch.Generator,
        version: int,
    ) -> None:
        self.version = version
        self.temperature = torch.tensor([p.temperature for p in params], device=device)
        self.top_p = torch.tensor([p.top_p for p in params], device=device)
        self.top_k = [p.top_logprobs for p in params]
        self.generators = [_generator(p.seed, device) for p in params]
        self.rng = rng

    def select(self, index: torch.Tensor, keep: Sequence[int]) -> None:
        """Keep only the rows ``keep`` (``index`` as a tensor)."""
        self.temperature, self.top_p = self.temperature[index], self.top_p[index]
        self.top_k = [self.top_k[i] for i in keep]
        self.generators = [self.generators[i] for i in keep]

    def sample(self, logits: torch.Tensor) -> list[Token]:
        """One token per row from ``logits`` (rows x vocabulary)."""
        logits = logits.float()
        logprobs = torch.log_softmax(logits, dim=-1)
        chosen = logits.argmax(dim=-1)
        greedy = self.temperature == 0
        if not bool(greedy.all()):
            scaled = logits / torch.where(greedy, 1.0, self.temperature).unsqueeze(-1)
            probs = _top_p(torch.softmax(scaled, dim=-1), self.top_p)
            # The exponential race: argmax(p / E), E ~ Exp(1), draws from p (as vLLM samples).
            noise = torch.empty_like(probs).exponential_(generator=self.rng)
            for row, generator in enumerate(self.generators):
                if generator is not None:
                    noise[row].exponential_(generator=generator)
            sampled = (probs / noise.clamp_(min=torch.finfo(noise.dtype).tiny)).argmax(dim=-1)
            chosen = torch.where(greedy, chosen, sampled)
        chosen_logprobs = logprobs.gather(-1, chosen.unsqueeze(-1)).squeeze(-1).tolist()
        k = max(self.top_k)
        top: list[list[tuple[int, float]]] = [[] for _ in self.top_k]
        if k:
            values, indices = logprobs.topk(min(k, logprobs.shape[-1]), dim=-1)
            for row, (vals, ids) in enumerate(zip(values.tolist(), indices.tolist(), strict=True)):
                top[row] = list(zip(ids, vals, strict=True))[: self.top_k[row]]
        return [
            Token(token, logprob, top[row], self.version)
            for row, (token, logprob) in enumerate(
                zip(chosen.tolist(), chosen_logprobs, strict=True)
            )
        ]


class StopCheck:
    """Says whether a generation is done: an EOS token, a stop string, or its token limit.

    Args:
        model: The model: its generation config's EOS tokens end a generation.
        tokenizer: Its EOS token ends a generation too; decodes the text for stop strings.
    """

    def __init__(self, model: Any, tokenizer: Any) -> None:
        self.eos_token_ids = _eos_ids(model, tokenizer)
        self.tokenizer = tokenizer

    def __call__(
        self, token_ids: Sequence[int], params: SamplingParams, limit: int
    ) -> tuple[FinishReason | None, str | None]:
        """``(finish_reason, stop_string)`` once ``token_ids`` are done, else ``(None, None)``."""
        if token_ids[-1] in self.eos_token_ids:
            return "stop", None
        if params.stop:
            text = self.tokenizer.decode(token_ids, skip_special_tokens=True)
            stop = next((s for s in params.stop if s in text), None)
            if stop is not None:
                return "stop", stop
        if len(token_ids) >= limit:
            return "length", None
        return None, None


def invalid(name: str, value: Any, expected: str) -> NoReturn:
    """Raise the error for argument ``name``: its value, and what was expected instead."""
    raise InvalidInputError(f"{name} must be {expected} (got {value!r})", field=name, value=value)


def _eos_ids(model: Any, tokenizer: Any) -> frozenset[int]:
    ids: set[int] = set()
    config = getattr(model, "generation_config", None)
    for value in (getattr(tokenizer, "eos_token_id", None), getattr(config, "eos_token_id", None)):
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, list | tuple):
            ids.update(int(v) for v in value)
    return frozenset(ids)


def _top_p(probs: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Zero the tail of each row beyond its nucleus (the first token always stays)."""
    if bool((top_p >= 1).all()):
        return probs
    ordered, order = probs.sort(dim=-1, descending=True)
    outside = ordered.cumsum(dim=-1) - ordered > top_p.unsqueeze(-1)
    return torch.zeros_like(probs).scatter_(-1, order, ordered.masked_fill(outside, 0.0))


def _generator(seed: int | None, device: torch.device) -> torch.Generator | None:
    if seed is None:
        return None
    generator = torch.Generator(device)
    generator.manual_seed(seed)
    return generator
