"""The dataset classes verl's SFT trainer reads agl's files with (``data.custom_cls``).

Loaded inside verl's trainer processes (by :mod:`agl_verl.sft_trainer`'s config), from the files
:mod:`agl_verl.sft_data` writes: :class:`TokenSFTDataset` over token rows,
:class:`ChatSFTDataset` over conversation rows.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

import pandas as pd
import torch
from torch.utils.data import Dataset
from verl.utils.dataset.multiturn_sft_dataset import MultiTurnSFTDataset

__all__ = ["ChatSFTDataset", "TokenSFTDataset"]

TOKEN_COLUMNS = ("input_ids", "loss_mask")


def _read_columns(parquet_files: Any, columns: Sequence[str]) -> dict[str, list[Any]]:
    import pyarrow.parquet as pq

    files = [parquet_files] if isinstance(parquet_files, str | os.PathLike) else parquet_files
    merged: dict[str, list[Any]] = {name: [] for name in columns}
    for file in files:
        table = pq.read_table(os.fspath(file))
        missing = [name for name in columns if name not in table.column_names]
        if missing:
            raise ValueError(
                f"{os.fspath(file)} has no column {', '.join(missing)} (columns: "
                f"{table.column_names}); agl-verl writes it with its sft_data writers"
            )
        for name in columns:
            merged[name].extend(table.column(name).to_pylist())
    return merged


class TokenSFTDataset(Dataset):  # type: ignore[type-arg]
    """verl SFT dataset over token rows (:func:`write_token_rows`): no tokenization at all.

    Constructed by verl's SFT trainer with its usual arguments (``data.custom_cls``); yields
    what verl's own dataset yields with ``pad_mode: no_padding``: ``input_ids``,
    ``position_ids`` and ``loss_mask`` tensors, unpadded. Every row is checked when the
    dataset is built (lengths, ``data.max_length``), so a bad row stops the run before its
    first step, naming the row.
    """

    def __init__(
        self,
        parquet_files: Any,
        tokenizer: Any = None,
        config: Any = None,
        processor: Any = None,
        max_samples: int = -1,
    ) -> None:
        config = config or {}
        pad_mode = str(config.get("pad_mode", "no_padding"))
        if pad_mode != "no_padding":
            raise ValueError(
                f"data.pad_mode is {pad_mode!r}: agl's token rows are read unpadded "
                "(set data.pad_mode: no_padding)"
            )
        max_length = int(config.get("max_length", 1024))
        columns = _read_columns(parquet_files, TOKEN_COLUMNS)
        self.input_ids: list[list[int]] = columns["input_ids"]
        self.loss_mask: list[list[int]] = columns["loss_mask"]
        if max_samples > 0:
            self.input_ids = self.input_ids[:max_samples]
            self.loss_mask = self.loss_mask[:max_samples]
        for index, (ids, mask) in enumerate(zip(self.input_ids, self.loss_mask, strict=True)):
            if len(ids) != len(mask):
                raise ValueError(f"row {index}: {len(mask)} loss_mask entries for {len(ids)} ids")
            if len(ids) > max_length:
                raise ValueError(f"row {index} has {len(ids)} tokens, over data.max_length")

    def __len__(self) -> int:
        return len(self.input_ids)

    def __getitem__(self, item: int) -> dict[str, Any]:
        input_ids = torch.tensor(self.input_ids[item], dtype=torch.long)
        return {
            "input_ids": input_ids,
            "position_ids": torch.arange(input_ids.shape[0], dtype=torch.long),
            "loss_mask": torch.tensor(self.loss_mask[item], dtype=torch.long),
        }


class ChatSFTDataset(MultiTurnSFTDataset):  # type: ignore[misc]
    """verl's multi-turn SFT dataset over conversation rows (:func:`write_conversation_rows`).

    Everything is verl's :class:`MultiTurnSFTDataset` (chat template per turn, loss on
    assistant turns, its checks); only the ``messages`` and ``tools`` columns are decoded
    from JSON first.
    """

    messages: list[Any]
    tools: list[Any] | None
    messages_key: str

    def _read_files_and_process(self) -> None:
        super()._read_files_and_process()
        self.messages = [_decoded(value) for value in self.messages]
        if self.tools is not None:
            self.tools = [_decoded(value) for value in self.tools]

    def _build_messages(self, example: dict[str, Any]) -> Any:
        example = {**example, self.messages_key: _decoded(example[self.messages_key])}
        return super()._build_messages(example)


def _decoded(value: Any) -> Any:
    """A JSON column's value; a missing one (no tools for this row) is None."""
    if isinstance(value, str):
        return json.loads(value)
    return None if value is None or value is pd.NA else value
