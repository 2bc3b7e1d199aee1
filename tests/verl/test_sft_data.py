"""The SFT files agl writes, read back through the dataset classes verl's SFT trainer uses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import torch
from transformers import AutoTokenizer

from agl import InvalidInputError
from agl.lightning import Transition
from agl_verl.sft_data import (
    token_rows_from_transitions,
    write_conversation_rows,
    write_token_rows,
)
from agl_verl.sft_datasets import ChatSFTDataset, TokenSFTDataset

VERL_DATA = {"pad_mode": "no_padding", "max_length": 256, "truncation": "error"}


def transition(prompt: list[int], response: list[int], **fields: Any) -> Transition:
    return Transition(
        agent="solver",
        prompt_ids=prompt,
        response_ids=response,
        response_logprobs=None,
        reward=1.0,
        advantage=0.0,
        rollout_id="r",
        group_id="g",
        step=1,
        **fields,
    )


def test_token_rows_keep_the_engines_ids_and_train_on_the_response_only(tmp_path: Path) -> None:
    rows = token_rows_from_transitions(
        [
            transition([5, 6, 7], [8, 9]),
            # a merged trajectory: the tool's observation tokens (11, 12) are not learned
            transition([5], [10, 11, 12, 13], response_mask=[1, 0, 0, 1]),
        ]
    )
    written = write_token_rows(tmp_path / "d.parquet", rows, max_length=16)
    assert (written.rows, written.tokens, written.trained_tokens) == (2, 10, 4)

    dataset = TokenSFTDataset(str(tmp_path / "d.parquet"), None, VERL_DATA)
    assert len(dataset) == 2
    first, second = dataset[0], dataset[1]
    assert first["input_ids"].tolist() == [5, 6, 7, 8, 9]
    assert first["loss_mask"].tolist() == [0, 0, 0, 1, 1]
    assert first["position_ids"].tolist() == [0, 1, 2, 3, 4]
    assert second["input_ids"].tolist() == [5, 10, 11, 12, 13]
    assert second["loss_mask"].tolist() == [0, 1, 0, 0, 1]
    assert first["input_ids"].dtype == torch.long


def test_token_rows_too_long_or_with_nothing_to_learn_are_dropped_and_counted(
    tmp_path: Path,
) -> None:
    written = write_token_rows(
        tmp_path / "d.parquet",
        [([1, 2, 3], [0, 1, 1]), ([1] * 9, [1] * 9), ([1, 2], [0, 0])],
        max_length=8,
    )
    assert written.rows == 1
    assert dict(written.dropped) == {"too_long": 1, "no_trained_tokens": 1}
    assert pq.read_table(tmp_path / "d.parquet").num_rows == 1


def test_a_token_row_whose_mask_does_not_match_is_refused_naming_it(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match="sample 1: loss_mask has 2 entries for 3"):
        write_token_rows(
            tmp_path / "d.parquet", [([1, 2], [0, 1]), ([1, 2, 3], [0, 1])], max_length=8
        )
    with pytest.raises(InvalidInputError, match="values other than 0 and 1"):
        write_token_rows(tmp_path / "d.parquet", [([1, 2], [0, 2])], max_length=8)
    assert not (tmp_path / "d.parquet").exists()


def test_the_token_dataset_refuses_rows_it_cannot_train_before_the_first_step(
    tmp_path: Path,
) -> None:
    write_token_rows(tmp_path / "d.parquet", [([1, 2, 3, 4], [0, 0, 1, 1])], max_length=8)
    with pytest.raises(ValueError, match=r"row 0 has 4 tokens, over data\.max_length"):
        TokenSFTDataset(str(tmp_path / "d.parquet"), None, {**VERL_DATA, "max_length": 3})
    with pytest.raises(ValueError, match="pad_mode is 'right'"):
        TokenSFTDataset(str(tmp_path / "d.parquet"), None, {**VERL_DATA, "pad_mode": "right"})
    write_conversation_rows(
        tmp_path / "chat.parquet",
        [[{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]],
        tokenizer=_Counting(),
        max_length=100,
    )
    with pytest.raises(ValueError, match="has no column input_ids"):
        TokenSFTDataset(str(tmp_path / "chat.parquet"), None, VERL_DATA)


class _Counting:
    """A tokenizer stand-in for the writer's length check only: one token per character."""

    def apply_chat_template(self, messages: Any, tools: Any = None, **_: Any) -> dict[str, Any]:
        return {"input_ids": list("".join(m["content"] for m in messages))}


CONVERSATIONS: list[Any] = [
    [
        {"role": "user", "content": "what is 2 + 3 ?"},
        {"role": "assistant", "content": "5"},
    ],
    {
        "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "what is 7 - 4 ?"},
            {"role": "assistant", "content": "3"},
            {"role": "user", "content": "and times 2 ?"},
            {"role": "assistant", "content": "6"},
        ],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "calc",
                    "parameters": {"type": "object", "properties": {"expr": {"type": "string"}}},
                },
            }
        ],
    },
]


def test_conversations_go_through_verls_multi_turn_dataset_loss_on_assistant_turns(
    tmp_path: Path, model_dir: Path
) -> None:
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    written = write_conversation_rows(
        tmp_path / "chat.parquet", CONVERSATIONS, tokenizer=tokenizer, max_length=512
    )
    assert written.rows == 2
    assert not written.dropped

    dataset = ChatSFTDataset(str(tmp_path / "chat.parquet"), tokenizer, VERL_DATA)
    assert len(dataset) == 2
    for item, answers, prompts in ((0, ["5"], ["2 + 3"]), (1, ["3", "6"], ["7 - 4", "times"])):
        sample = dataset[item]
        ids, mask = sample["input_ids"], sample["loss_mask"].bool()
        learned = tokenizer.decode(ids[mask])
        read = tokenizer.decode(ids[~mask])
        for answer in answers:
            assert answer in learned
        for prompt in prompts:
            assert prompt in read
            assert prompt not in learned
        # verl renders the whole conversation as the chat template does
        whole = tokenizer.apply_chat_template(
            dataset.messages[item],
            tools=(dataset.tools or [None] * 2)[item],
            tokenize=True,
            return_dict=True,
        )
        assert ids.tolist() == list(whole["input_ids"])


def test_conversations_keep_their_own_tools_exactly(tmp_path: Path, model_dir: Path) -> None:
    """JSON rows, so one conversation's tool schema gains no null keys from another's."""
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    other_tools = [
        {
            "type": "function",
            "function": {
                "name": "search",
                "description": "web",
                "parameters": {"type": "object", "properties": {"query": {"type": "string"}}},
            },
        }
    ]
    conversations = [
        CONVERSATIONS[1],
        {"messages": CONVERSATIONS[0], "tools": other_tools},
    ]
    write_conversation_rows(
        tmp_path / "chat.parquet", conversations, tokenizer=tokenizer, max_length=512
    )
    dataset = ChatSFTDataset(str(tmp_path / "chat.parquet"), tokenizer, VERL_DATA)
    assert dataset.tools == [CONVERSATIONS[1]["tools"], other_tools]
    assert dataset.messages[1] == CONVERSATIONS[0]


def test_conversations_that_cannot_train_are_dropped_and_counted(
    tmp_path: Path, model_dir: Path
) -> None:
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    long_answer = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "a long answer " * 40},
    ]
    no_answer = [{"role": "user", "content": "q"}]
    written = write_conversation_rows(
        tmp_path / "chat.parquet",
        [CONVERSATIONS[0], long_answer, no_answer],
        tokenizer=tokenizer,
        max_length=64,
    )
    assert written.rows == 1
    assert dict(written.dropped) == {"too_long": 1, "no_assistant_turn": 1}


def test_a_conversation_that_is_not_one_is_refused_naming_it(
    tmp_path: Path, model_dir: Path
) -> None:
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    with pytest.raises(InvalidInputError, match="conversation 1 is a dict without 'messages'"):
        write_conversation_rows(
            tmp_path / "c.parquet",
            [CONVERSATIONS[0], {"prompt": "q"}],
            tokenizer=tokenizer,
            max_length=64,
        )
    with pytest.raises(InvalidInputError, match="conversation 0 is not a list of chat messages"):
        write_conversation_rows(
            tmp_path / "c.parquet", ["just text"], tokenizer=tokenizer, max_length=64
        )
