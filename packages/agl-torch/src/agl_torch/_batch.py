"""One static batch: left-padded prefill, then decoding with the KV cache until every row is done.

Attention mask and position ids make the padding invisible, so a batched row computes what it
would alone. A row leaves the batch (and the cache) as soon as it finishes or its caller stops
listening; the batch ends when no row is left.

:class:`Completion` is public as :mod:`agl_torch.engine`'s.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from agl_torch._sampling import FinishReason, Sampler, SamplingParams, StopCheck, Token


@dataclass
class Completion:
    """A finished generation.

    Attributes:
        prompt_ids: The prompt, as given.
        token_ids: The generated tokens; a final EOS token is included.
        logprobs: One logprob per generated token (the raw distribution's, before temperature
            and top-p).
        top_logprobs: Per generated token, the most likely ``(id, logprob)``, best first.
        finish_reason: ``"stop"`` (EOS or a stop string) or ``"length"`` (``max_tokens`` or the
            model's maximum length).
        weight_version: The weights that produced every token.
        stop_reason: The stop string that ended the generation, if one did.
    """

    prompt_ids: list[int]
    token_ids: list[int]
    logprobs: list[float]
    top_logprobs: list[list[tuple[int, float]]]
    finish_reason: FinishReason
    weight_version: int
    stop_reason: str | None = None


Event = Token | Completion | BaseException
"""What a request's caller is sent: its tokens (when streaming), then its completion or error."""


@dataclass(eq=False)
class Request:
    """A request in the queue or in a batch; its output grows as the batch decodes."""

    prompt_ids: list[int]
    params: SamplingParams
    limit: int
    emit: Callable[[Event], None]
    stream: bool
    cancelled: bool = False
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    top_logprobs: list[list[tuple[int, float]]] = field(default_factory=list)


class Counter(Protocol):
    """Adds to the engine's stats (before the completions they count are emitted)."""

    def __call__(self, *, requests: int = 0, tokens: int = 0) -> None: ...


def run_batch(
    model: Any,
    batch: list[Request],
    *,
    device: torch.device,
    rng: torch.Generator,
    version: int,
    stops: StopCheck,
    count: Counter,
) -> None:
    """Prefill and decode ``batch`` on ``model`` (weights ``version``) until every row is done.

    Args:
        model: The causal LM, on ``device``.
        batch: The rows; each is sent its tokens (if streaming) and its completion.
        device: Where to run.
        rng: The random generator of the rows without a seed.
        version: The weight version the outputs are labelled with.
        stops: Says when a row is done.
        count: Counts the tokens and requests done.
    """
    width = max(len(r.prompt_ids) for r in batch)
    ids = torch.zeros((len(batch), width), dtype=torch.long)  # padding: masked out
    mask = torch.zeros((len(batch), width), dtype=torch.long)
    for row, request in enumerate(batch):
        ids[row, width - len(request.prompt_ids) :] = torch.tensor(request.prompt_ids)
        mask[row, width - len(request.prompt_ids) :] = 1
    ids, mask = ids.to(device), mask.to(device)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    out = model(
        input_ids=ids,
        attention_mask=mask,
        position_ids=positions,
        use_cache=True,
        logits_to_keep=1,
    )
    rows = list(batch)
    sampler = Sampler([r.params for r in rows], device, rng)
    while True:
        draw = sampler.sample(out.logits[:, -1, :])
        chosen = draw.chosen
        count(tokens=len(rows))
        keep = [
            i
            for i, step in enumerate(zip(draw.ids, draw.logprobs, draw.top_logprobs, strict=True))
            if _advance(rows[i], step, version, stops, count)
        ]
        if not keep:
            return
        cache = out.past_key_values
        if len(keep) < len(rows):
            index = torch.tensor(keep, device=device)
            cache.batch_select_indices(index)
            rows = [rows[i] for i in keep]
            mask, positions, chosen = mask[index], positions[index], chosen[index]
            sampler.select(keep)
        mask = torch.cat([mask, mask.new_ones((len(rows), 1))], dim=-1)
        positions = positions[:, -1:] + 1
        out = model(
            input_ids=chosen.unsqueeze(-1),
            attention_mask=mask,
            position_ids=positions,
            past_key_values=cache,
            use_cache=True,
        )


def _advance(
    request: Request,
    step: tuple[int, float, list[tuple[int, float]]],
    version: int,
    stops: StopCheck,
    count: Counter,
) -> bool:
    """Add a sampled token to ``request``; finish it if it is done. True if it goes on."""
    if request.cancelled:
        return False
    token, logprob, top = step
    request.token_ids.append(token)
    request.logprobs.append(logprob)
    request.top_logprobs.append(top)
    if request.stream:
        request.emit(Token(token, logprob, top, version))
    finish, stop_reason = stops(request.token_ids, request.params, request.limit)
    if finish is None:
        return True
    count(requests=1)
    request.emit(
        Completion(
            prompt_ids=request.prompt_ids,
            token_ids=request.token_ids,
            logprobs=request.logprobs,
            top_logprobs=request.top_logprobs,
            finish_reason=finish,
            weight_version=version,
            stop_reason=stop_reason,
        )
    )
    return False
