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
from typing import Any, Literal, NamedTuple, NoReturn

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


class Draw(NamedTuple):
    """One step's tokens for every row of a batch.

    Attributes:
        chosen: The token ids, on the device (the next step's input).
        ids: The same ids, on the host.
        logprobs: Each row's token logprob under the raw distribution.
        top_logprobs: Each row's ``top_logprobs`` most likely ``(id, logprob)``, best first.
    """

    chosen: torch.Tensor
    ids: list[int]
    logprobs: list[float]
    top_logprobs: list[list[tuple[int, float]]]


class Sampler:
    """Per-row sampling for a batch: greedy or temperature + top-p, shared or own generators.

    A step costs one device-to-host copy for the whole batch (three with top logprobs), whatever
    the rows ask for: which rows are greedy, use top-p or have a seed is known on the host from
    their parameters, never read back from the device. A batch of greedy rows takes the fast
    path (an argmax, no softmax of the scaled logits and no noise).

    Args:
        params: Each row's parameters.
        device: Where the batch's logits are.
        rng: The generator of the rows without a seed.
    """

    def __init__(
        self,
        params: Sequence[SamplingParams],
        device: torch.device,
        rng: torch.Generator,
    ) -> None:
        self.rng = rng
        self._device = device
        self._params = list(params)
        self.generators = [_generator(p.seed, device) for p in params]
        self._rows_changed()

    def _rows_changed(self) -> None:
        params, device = self._params, self._device
        self.top_k = [p.top_logprobs for p in params]
        self._greedy = all(p.temperature == 0 for p in params)
        self._nucleus = any(p.top_p < 1 for p in params)
        self._unseeded = any(g is None for g in self.generators)
        if not self._greedy:
            self.temperature = torch.tensor([p.temperature for p in params], device=device)
            self.top_p = torch.tensor([p.top_p for p in params], device=device)

    def select(self, keep: Sequence[int]) -> None:
        """Keep only the rows ``keep``."""
        self._params = [self._params[i] for i in keep]
        self.generators = [self.generators[i] for i in keep]
        self._rows_changed()

    def sample(self, logits: torch.Tensor) -> Draw:
        """One token per row from ``logits`` (rows x vocabulary)."""
        logits = logits.float()
        chosen = logits.argmax(dim=-1)
        if not self._greedy:
            chosen = self._draw(logits, chosen)
        # log_softmax(x)[i] = x[i] - logsumexp(x): the chosen and top logprobs, without
        # writing out the log-softmax of the whole vocabulary.
        normalizer = logits.logsumexp(dim=-1)
        chosen_logprobs = logits.gather(-1, chosen.unsqueeze(-1)).squeeze(-1) - normalizer
        # float64 holds every token id exactly: both columns come back in one copy.
        ids, logprobs = torch.stack([chosen.double(), chosen_logprobs.double()]).tolist()
        k = max(self.top_k)
        top: list[list[tuple[int, float]]] = [[] for _ in self.top_k]
        if k:
            values, indices = logits.topk(min(k, logits.shape[-1]), dim=-1)
            values = values - normalizer.unsqueeze(-1)
            for row, (vals, toks) in enumerate(zip(values.tolist(), indices.tolist(), strict=True)):
                top[row] = list(zip(toks, vals, strict=True))[: self.top_k[row]]
        return Draw(chosen, [int(token) for token in ids], logprobs, top)

    def _draw(self, logits: torch.Tensor, greedy_choice: torch.Tensor) -> torch.Tensor:
        """Sample the rows with a temperature; the greedy rows keep ``greedy_choice``."""
        greedy = self.temperature == 0
        scaled = logits / torch.where(greedy, 1.0, self.temperature).unsqueeze(-1)
        probs = torch.softmax(scaled, dim=-1)
        if self._nucleus:
            probs = _top_p(probs, self.top_p)
        # The exponential race: argmax(p / E), E ~ Exp(1), draws from p (as vLLM samples).
        noise = torch.empty_like(probs)
        if self._unseeded:
            noise.exponential_(generator=self.rng)
        for row, generator in enumerate(self.generators):
            if generator is not None:
                noise[row].exponential_(generator=generator)
        sampled = (probs / noise.clamp_(min=torch.finfo(noise.dtype).tiny)).argmax(dim=-1)
        return torch.where(greedy, greedy_choice, sampled)


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
    ordered, order = probs.sort(dim=-1, descending=True)
    outside = ordered.cumsum(dim=-1) - ordered > top_p.unsqueeze(-1)
    return torch.zeros_like(probs).scatter_(-1, order, ordered.masked_fill(outside, 0.0))


def _generator(seed: int | None, device: torch.device) -> torch.Generator | None:
    if seed is None:
        return None
    generator = torch.Generator(device)
    generator.manual_seed(seed)
    return generator
