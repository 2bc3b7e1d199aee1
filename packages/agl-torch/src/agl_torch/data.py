"""Training samples as padded micro-batches: transitions for RL, chat conversations for SFT.

Every sample is one row ``[prompt | response]`` (SFT: the rendered conversation), right-padded,
and every per-token tensor is aligned with ``input_ids``: column ``t`` describes token ``t``,
the same layout as :func:`agl_torch.policy.token_logprobs`, so a loss multiplies them
element-wise. (:meth:`agl.lightning.TransitionBatch.to_arrays` left-pads prompts instead, as
verl wants; a model of our own has no use for a common response column, and right padding
needs no position-id bookkeeping.)

A batch is cut into micro-batches that each hold at most ``micro_batch_tokens`` tokens,
padding included (rows x longest row, what the forward pass costs): samples are sorted by
length, longest first, so each micro-batch pads little and the first one is the largest (an
out-of-memory error shows at once). A sample longer than the budget gets a micro-batch of its
own; samples are never truncated. The split depends only on the lengths, so it is the same on
every run.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import torch

from agl import InvalidInputError
from agl.lightning import Transition

__all__ = [
    "RLBatch",
    "SFTBatch",
    "SFTExample",
    "SFTExamples",
    "TrainOn",
    "rl_batches",
    "sft_batches",
    "sft_examples_from_messages",
    "sft_examples_from_transitions",
]

_GENERATION_TAG = re.compile(r"\{%-?\s*generation\s*-?%\}")


@dataclass(frozen=True)
class RLBatch:
    """One micro-batch of transitions; every ``[B, T]`` tensor is aligned with ``input_ids``.

    Attributes:
        input_ids: ``[B, T]`` prompt + response token ids, right-padded.
        attention_mask: ``[B, T]``, 1 on real tokens.
        response_mask: ``[B, T]`` bool, True on the tokens trained: response tokens the model
            produced (the transition's ``response_mask``), never prompt, observation or padding.
        old_logprobs: ``[B, T]`` float32, the behaviour policy's logprob of each trained token
            (the transition's ``response_logprobs``); NaN on the trained tokens of a transition
            without logprobs (:func:`~agl_torch.losses.policy_loss` treats those as on-policy);
            0 elsewhere.
        advantages: ``[B, T]`` float32, :meth:`~agl.lightning.Transition.per_token_advantages`
            on the response tokens, 0 elsewhere.
        weights: ``[B]`` float32, each transition's ``weight``.
        indices: The position of each row's transition in the batch given to
            :func:`rl_batches`.
        tokens: Real tokens (prompt and response, no padding).
        trained_tokens: True entries of ``response_mask``.
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    response_mask: torch.Tensor
    old_logprobs: torch.Tensor
    advantages: torch.Tensor
    weights: torch.Tensor
    indices: list[int]
    tokens: int
    trained_tokens: int


@dataclass(frozen=True)
class SFTExample:
    """One supervised sample: token ids and which of them the loss trains on.

    Attributes:
        input_ids: The whole sequence.
        labels_mask: 1 where the model learns to produce the token, 0 where it only reads it.
    """

    input_ids: list[int]
    labels_mask: list[int]

    def __post_init__(self) -> None:
        if len(self.labels_mask) != len(self.input_ids):
            raise InvalidInputError(
                f"labels_mask has {len(self.labels_mask)} entries for "
                f"{len(self.input_ids)} input_ids",
                field="labels_mask",
            )


@dataclass
class SFTExamples:
    """The examples built from conversations, and how many were dropped, by reason.

    Attributes:
        examples: The kept examples, in input order.
        dropped: ``too_long`` (more than ``max_length`` tokens once rendered),
            ``no_assistant_tokens`` (nothing to learn: no assistant turn).
    """

    examples: list[SFTExample]
    dropped: Counter[str] = field(default_factory=Counter)


@dataclass(frozen=True)
class SFTBatch:
    """One micro-batch of SFT examples, aligned with ``input_ids`` like :class:`RLBatch`.

    Attributes:
        input_ids: ``[B, T]`` token ids, right-padded.
        attention_mask: ``[B, T]``, 1 on real tokens.
        labels_mask: ``[B, T]`` bool, True on the tokens trained.
        indices: The position of each row's example in the sequence given to
            :func:`sft_batches`.
        tokens: Real tokens (no padding).
        trained_tokens: True entries of ``labels_mask``.
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    labels_mask: torch.Tensor
    indices: list[int]
    tokens: int
    trained_tokens: int


def rl_batches(
    transitions: Sequence[Transition],
    *,
    micro_batch_tokens: int,
    pad_id: int,
    device: torch.device | str | None = None,
) -> list[RLBatch]:
    """Lay transitions out as right-padded micro-batches of at most ``micro_batch_tokens``.

    Raises:
        InvalidInputError: a transition's logprobs, mask or token advantages do not have one
            entry per response token, or the budget is not positive.
    """
    for index, transition in enumerate(transitions):
        _check_lengths(index, transition)
    lengths = [len(t.prompt_ids) + len(t.response_ids) for t in transitions]
    batches = []
    for group in _micro_batches(lengths, micro_batch_tokens):
        ids, trained, old, advantages = [], [], [], []
        for index in group:
            transition = transitions[index]
            head = [0] * len(transition.prompt_ids)
            mask = transition.mask()
            logprobs = transition.response_logprobs
            ids.append(transition.prompt_ids + transition.response_ids)
            trained.append(head + mask)
            if logprobs is None:
                old.append(head + [float("nan") if keep else 0.0 for keep in mask])
            else:
                old.append(
                    head + [lp if keep else 0.0 for lp, keep in zip(logprobs, mask, strict=True)]
                )
            advantages.append(head + transition.per_token_advantages())
        input_ids, attention_mask, response_mask = _token_tensors(ids, trained, pad_id)
        batches.append(
            RLBatch(
                input_ids=input_ids.to(device),
                attention_mask=attention_mask.to(device),
                response_mask=response_mask.to(device),
                old_logprobs=_padded(old, 0.0, torch.float32).to(device),
                advantages=_padded(advantages, 0.0, torch.float32).to(device),
                weights=torch.tensor(
                    [transitions[i].weight for i in group], dtype=torch.float32, device=device
                ),
                indices=group,
                tokens=int(attention_mask.sum()),
                trained_tokens=int(response_mask.sum()),
            )
        )
    return batches


TrainOn = Literal["all", "last", "text"]
"""What SFT trains on in a conversation: ``"all"`` its assistant turns (a chat dataset's
conversations), only the ``"last"`` one (the reply to a recorded request, whose earlier
assistant turns are another agent's replies, or this agent's own, each already recorded as the
reply to its own request), or its whole ``"text"``: every token, the prompt's too, as a
language model is pretrained. A model built from scratch has read nothing; on ``"text"`` it
also learns what the prompts hold (the documents a search returned, a tool's results), which
teaches it to read them: after 40 epochs on ``"text"``, the agents_qa example's answerer gives
the name its research found a probability of 0.45 on new questions, 0.31 after 40 epochs on
its replies alone."""


def sft_examples_from_messages(
    tokenizer: Any,
    conversations: Iterable[Sequence[Mapping[str, Any]] | Mapping[str, Any]],
    *,
    tools: Sequence[Mapping[str, Any]] | None = None,
    max_length: int,
    train_on: TrainOn = "all",
) -> SFTExamples:
    """Render chat conversations with the tokenizer's template; train on assistant tokens.

    The tokens trained are those the template wraps in ``{% generation %}`` (the assistant
    turns: their text, tool calls and end-of-turn token), as
    ``apply_chat_template(..., return_assistant_tokens_mask=True)`` reports them; with
    ``train_on="last"``, those of the last assistant turn only; with ``train_on="text"``,
    every token (the template then needs no ``{% generation %}``). Samples that cannot be
    trained are dropped and counted in :attr:`SFTExamples.dropped`, never truncated.

    Args:
        tokenizer: A Hugging Face tokenizer whose chat template marks assistant turns with
            ``{% generation %}`` (the :mod:`agl_torch.tiny` template does).
        conversations: Each a list of OpenAI-format chat messages, or a dict with
            ``"messages"`` and optionally ``"tools"`` (which overrides ``tools``).
        tools: OpenAI-format tool definitions rendered into every conversation.
        max_length: Conversations longer than this many tokens are dropped.
        train_on: ``"all"`` assistant turns, the ``"last"`` one only, or the whole ``"text"``
            (see :data:`TrainOn`).

    Raises:
        InvalidInputError: the chat template has no ``{% generation %}`` block (unless
            ``train_on="text"``), a conversation is a dict without ``"messages"``, or
            ``train_on`` is none of the three.
    """
    if train_on not in ("all", "last", "text"):
        raise InvalidInputError(
            f"train_on must be 'all', 'last' or 'text' (got {train_on!r})", field="train_on"
        )
    whole = train_on == "text"
    if not whole and not _GENERATION_TAG.search(tokenizer.chat_template or ""):
        raise InvalidInputError(
            "the tokenizer's chat template does not mark assistant turns with "
            "{% generation %}, so the tokens to train on are unknown",
            field="tokenizer.chat_template",
        )
    kept = SFTExamples([])
    for index, conversation in enumerate(conversations):
        messages: Any = conversation
        conversation_tools = tools
        if isinstance(conversation, Mapping):
            if "messages" not in conversation:
                raise InvalidInputError(
                    f"conversation {index} is a dict without 'messages' (keys: "
                    f"{sorted(conversation)})",
                    field=f"conversations[{index}]",
                )
            messages = conversation["messages"]
            conversation_tools = conversation.get("tools", tools)
        encoded = tokenizer.apply_chat_template(
            list(messages),
            tools=conversation_tools,
            tokenize=True,
            return_dict=True,
            return_assistant_tokens_mask=not whole,
        )
        input_ids = list(encoded["input_ids"])
        labels_mask = [1] * len(input_ids) if whole else list(encoded["assistant_masks"])
        if train_on == "last":
            labels_mask = _last_turn(labels_mask)
        if len(input_ids) > max_length:
            kept.dropped["too_long"] += 1
        elif not any(labels_mask):
            kept.dropped["no_assistant_tokens"] += 1
        else:
            kept.examples.append(SFTExample(input_ids, labels_mask))
    return kept


def _last_turn(mask: list[int]) -> list[int]:
    """``mask`` with only its last run of ones kept (a turn's tokens are contiguous)."""
    end = len(mask)
    while end and not mask[end - 1]:
        end -= 1
    start = end
    while start and mask[start - 1]:
        start -= 1
    return [1 if start <= i < end else 0 for i in range(len(mask))]


def sft_examples_from_transitions(transitions: Iterable[Transition]) -> list[SFTExample]:
    """Supervised examples from transitions: learn each response's unmasked tokens as is."""
    return [
        SFTExample(t.prompt_ids + t.response_ids, [0] * len(t.prompt_ids) + t.mask())
        for t in transitions
    ]


def sft_batches(
    examples: Sequence[SFTExample],
    *,
    micro_batch_tokens: int,
    pad_id: int,
    device: torch.device | str | None = None,
) -> list[SFTBatch]:
    """Lay examples out as right-padded micro-batches of at most ``micro_batch_tokens``."""
    batches = []
    lengths = [len(example.input_ids) for example in examples]
    for group in _micro_batches(lengths, micro_batch_tokens):
        input_ids, attention_mask, labels_mask = _token_tensors(
            [examples[i].input_ids for i in group], [examples[i].labels_mask for i in group], pad_id
        )
        batches.append(
            SFTBatch(
                input_ids=input_ids.to(device),
                attention_mask=attention_mask.to(device),
                labels_mask=labels_mask.to(device),
                indices=group,
                tokens=int(attention_mask.sum()),
                trained_tokens=int(labels_mask.sum()),
            )
        )
    return batches


# --- helpers --------------------------------------------------------------------------------


def _check_lengths(index: int, transition: Transition) -> None:
    expected = len(transition.response_ids)
    for name, values in (
        ("response_logprobs", transition.response_logprobs),
        ("response_mask", transition.response_mask),
        ("token_advantages", transition.token_advantages),
    ):
        if values is not None and len(values) != expected:
            raise InvalidInputError(
                f"transition {index} has {len(values)} {name} for {expected} response tokens",
                field=f"transitions[{index}].{name}",
            )


def _micro_batches(lengths: Sequence[int], budget: int) -> list[list[int]]:
    """Group sample indices, longest first, so rows x longest row stays within ``budget``."""
    if budget < 1:
        raise InvalidInputError(
            f"micro_batch_tokens must be at least 1, got {budget}", field="micro_batch_tokens"
        )
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    groups: list[list[int]] = []
    for index in order:
        # The group's first sample is its longest: adding one more row costs that many tokens.
        if groups and (len(groups[-1]) + 1) * lengths[groups[-1][0]] <= budget:
            groups[-1].append(index)
        else:
            groups.append([index])
    return groups


def _token_tensors(
    ids: list[list[int]], trained: list[list[int]], pad_id: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``input_ids``, ``attention_mask`` and the trained-token mask of a group of rows."""
    input_ids = _padded(ids, pad_id, torch.long)
    attention_mask = _padded([[1] * len(row) for row in ids], 0, torch.long)
    mask = _padded(trained, 0, torch.long).bool()
    mask[:, 0] = False  # nothing predicts a sequence's first token
    return input_ids, attention_mask, mask


def _padded(rows: list[list[Any]], fill: float, dtype: torch.dtype) -> torch.Tensor:
    out = torch.full((len(rows), max(map(len, rows))), fill, dtype=dtype)
    for row, values in enumerate(rows):
        out[row, : len(values)] = torch.tensor(values, dtype=dtype)
    return out
