"""SFT data for verl's SFT trainer: the Parquet files agl writes from transitions and chats.

verl's SFT trainer reads Parquet files through a dataset class named in its config
(``data.custom_cls``). agl writes two kinds of file, each with its class:

- **token rows** (:func:`write_token_rows`, read by
  :class:`~agl_verl.sft_datasets.TokenSFTDataset`): ``input_ids`` and
  ``loss_mask`` per sample, from transitions: the exact token ids the engine produced, so
  nothing is re-tokenized; the loss is on each response's unmasked tokens;
- **conversation rows** (:func:`write_conversation_rows`, read by
  :class:`~agl_verl.sft_datasets.ChatSFTDataset`):
  OpenAI-format ``messages`` (and ``tools``) stored as JSON text, rendered by verl's own
  :class:`~verl.utils.dataset.multiturn_sft_dataset.MultiTurnSFTDataset` with the model's chat
  template, loss on assistant turns. JSON keeps each conversation as it was given (a Parquet
  struct column would add every other row's keys as nulls, which templates render).

Samples longer than ``max_length`` tokens or with nothing to learn are dropped when the file is
written, and counted, never truncated; so the trainer never meets one mid-run.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agl import InvalidInputError
from agl.lightning import Transition

__all__ = [
    "WrittenRows",
    "token_rows_from_transitions",
    "write_conversation_rows",
    "write_token_rows",
]


@dataclass
class WrittenRows:
    """What a writer put in its file.

    Attributes:
        path: The Parquet file.
        rows: Samples written.
        tokens: Tokens in them; ``trained_tokens``: those the loss is on (token rows only,
            0 for conversations, which verl renders).
        dropped: Samples left out, by reason: ``too_long``, ``no_trained_tokens`` (token rows),
            ``no_assistant_turn`` (conversations).
    """

    path: Path
    rows: int = 0
    tokens: int = 0
    trained_tokens: int = 0
    dropped: Counter[str] = field(default_factory=Counter)


def token_rows_from_transitions(
    transitions: Iterable[Transition],
) -> list[tuple[list[int], list[int]]]:
    """``(input_ids, loss_mask)`` per transition: prompt then response, loss on the response's
    unmasked tokens (observation tokens of merged trajectories stay unlearned)."""
    return [
        (t.prompt_ids + t.response_ids, [0] * len(t.prompt_ids) + t.mask()) for t in transitions
    ]


def write_token_rows(
    path: str | os.PathLike[str],
    rows: Iterable[tuple[Sequence[int], Sequence[int]]],
    *,
    max_length: int,
) -> WrittenRows:
    """Write ``(input_ids, loss_mask)`` samples to a Parquet file :class:`TokenSFTDataset` reads.

    Raises:
        InvalidInputError: a sample's mask does not have one entry per token, or holds other
            values than 0 and 1.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    written = WrittenRows(Path(path))
    ids_column: list[list[int]] = []
    mask_column: list[list[int]] = []
    for index, (input_ids, loss_mask) in enumerate(rows):
        _check_token_row(index, input_ids, loss_mask)
        if len(input_ids) > max_length:
            written.dropped["too_long"] += 1
        elif not any(loss_mask):
            written.dropped["no_trained_tokens"] += 1
        else:
            ids_column.append(list(input_ids))
            mask_column.append(list(loss_mask))
            written.tokens += len(input_ids)
            written.trained_tokens += sum(loss_mask)
    written.rows = len(ids_column)
    table = pa.table(
        {
            "input_ids": pa.array(ids_column, type=pa.list_(pa.int64())),
            "loss_mask": pa.array(mask_column, type=pa.list_(pa.int8())),
        }
    )
    written.path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, written.path)
    return written


def _check_token_row(index: int, input_ids: Sequence[int], loss_mask: Sequence[int]) -> None:
    if len(input_ids) != len(loss_mask):
        raise InvalidInputError(
            f"sample {index}: loss_mask has {len(loss_mask)} entries for {len(input_ids)} "
            "input_ids",
            field="loss_mask",
        )
    if any(value not in (0, 1) for value in loss_mask):
        raise InvalidInputError(f"sample {index}: loss_mask holds values other than 0 and 1")


def write_conversation_rows(
    path: str | os.PathLike[str],
    conversations: Iterable[Sequence[Mapping[str, Any]] | Mapping[str, Any]],
    *,
    tokenizer: Any,
    max_length: int,
    tools: Sequence[Mapping[str, Any]] | None = None,
) -> WrittenRows:
    """Write chat conversations to a Parquet file :class:`ChatSFTDataset` reads.

    Args:
        conversations: Each a list of OpenAI-format messages, or a dict with ``"messages"``
            and optionally ``"tools"`` (which overrides ``tools``).
        tokenizer: The model's tokenizer: conversations longer than ``max_length`` tokens once
            rendered with its chat template are dropped (counted), so verl's trainer (which
            stops the run on one) never meets them.
        tools: OpenAI-format tool definitions rendered into every conversation.

    Raises:
        InvalidInputError: a conversation is neither a list of messages nor a dict with
            ``"messages"``.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    written = WrittenRows(Path(path))
    messages_column: list[str] = []
    tools_column: list[str | None] = []
    for index, conversation in enumerate(conversations):
        messages, conversation_tools = _conversation(index, conversation, tools)
        if not any(message.get("role") == "assistant" for message in messages):
            written.dropped["no_assistant_turn"] += 1
            continue
        rendered = tokenizer.apply_chat_template(
            messages, tools=conversation_tools, tokenize=True, return_dict=True
        )
        length = len(rendered["input_ids"])
        if length > max_length:
            written.dropped["too_long"] += 1
            continue
        messages_column.append(json.dumps(messages))
        tools_column.append(None if conversation_tools is None else json.dumps(conversation_tools))
        written.tokens += length
    written.rows = len(messages_column)
    columns: dict[str, Any] = {"messages": pa.array(messages_column, type=pa.string())}
    if any(value is not None for value in tools_column):
        columns["tools"] = pa.array(tools_column, type=pa.string())
    written.path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(columns), written.path)
    return written


def _conversation(
    index: int,
    conversation: Sequence[Mapping[str, Any]] | Mapping[str, Any],
    tools: Sequence[Mapping[str, Any]] | None,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    messages: Any = conversation
    conversation_tools: Any = tools
    if isinstance(conversation, Mapping):
        if "messages" not in conversation:
            raise InvalidInputError(
                f"conversation {index} is a dict without 'messages' (keys: {sorted(conversation)})",
                field=f"conversations[{index}]",
            )
        messages = conversation["messages"]
        conversation_tools = conversation.get("tools", tools)
    if isinstance(messages, str | bytes) or not all(
        isinstance(message, Mapping) for message in messages
    ):
        raise InvalidInputError(
            f"conversation {index} is not a list of chat messages (dicts with 'role')",
            field=f"conversations[{index}]",
        )
    return (
        [dict(message) for message in messages],
        None if conversation_tools is None else [dict(tool) for tool in conversation_tools],
    )
