"""Padded micro-batches: alignment of every per-token tensor with input_ids, budget splits, and
SFT masks that cover exactly the assistant turns."""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any

import pytest
import torch

from agl import InvalidInputError
from agl.lightning import Transition, TransitionBatch
from agl_torch.data import (
    SFTExample,
    rl_batches,
    sft_batches,
    sft_examples_from_messages,
    sft_examples_from_transitions,
)
from agl_torch.tiny import END_OF_TURN


def transition(prompt: list[int], response: list[int], **fields: Any) -> Transition:
    base: dict[str, Any] = {
        "agent": "writer",
        "prompt_ids": prompt,
        "response_ids": response,
        "response_logprobs": [-0.1 * (i + 1) for i in range(len(response))],
        "reward": 1.0,
        "advantage": 0.5,
        "rollout_id": "r1",
        "group_id": "g1",
    }
    base.update(fields)
    return Transition(**base)


MERGED = transition(
    [11, 12],
    [21, 5, 6, 22, 23],
    response_mask=[1, 0, 0, 1, 1],
    token_advantages=[0.25, 0.0, 0.0, -1.0, -1.0],
    response_logprobs=[-0.5, 0.0, 0.0, -0.25, -0.75],
    weight=0.5,
)


def test_one_transition_position_by_position() -> None:
    (batch,) = rl_batches([transition([1, 2, 3], [4]), MERGED], micro_batch_tokens=100, pad_id=0)

    assert batch.indices == [1, 0]  # longest first
    assert batch.input_ids.tolist() == [[11, 12, 21, 5, 6, 22, 23], [1, 2, 3, 4, 0, 0, 0]]
    assert batch.attention_mask.tolist() == [[1] * 7, [1, 1, 1, 1, 0, 0, 0]]
    # Column t describes token t: the prompt (2 tokens) shifts the response by 2 columns.
    assert batch.response_mask[0].tolist() == [False, False, True, False, False, True, True]
    assert batch.old_logprobs[0].tolist() == [0.0, 0.0, -0.5, 0.0, 0.0, -0.25, -0.75]
    assert batch.advantages[0].tolist() == [0.0, 0.0, 0.25, 0.0, 0.0, -1.0, -1.0]
    assert batch.response_mask[1].tolist() == [False, False, False, True, False, False, False]
    assert batch.old_logprobs[1, 3].item() == pytest.approx(-0.1)
    assert batch.advantages[1].tolist() == [0, 0, 0, 0.5, 0, 0, 0]
    assert batch.weights.tolist() == [0.5, 1.0]
    assert (batch.tokens, batch.trained_tokens) == (11, 4)
    assert batch.input_ids.dtype == torch.long
    assert batch.old_logprobs.dtype == torch.float32


def test_transitions_without_logprobs_have_nan_on_trained_tokens_only() -> None:
    no_logprobs = transition([1, 2], [3, 4, 5], response_logprobs=None, response_mask=[1, 0, 1])
    (batch,) = rl_batches(TransitionBatch([no_logprobs]), micro_batch_tokens=100, pad_id=0)

    old = batch.old_logprobs[0].tolist()
    assert old[:2] == [0.0, 0.0]
    assert math.isnan(old[2])
    assert old[3] == 0.0
    assert math.isnan(old[4])


def test_micro_batches_stay_within_the_token_budget() -> None:
    lengths = [3, 9, 4, 4, 7, 2, 12]
    samples = [transition([1] * (n - 1), [2]) for n in lengths]
    batches = rl_batches(samples, micro_batch_tokens=16, pad_id=0)

    # Longest first; a group costs rows x its first row: 12 and 9 alone, 7 + 4 (2 x 7),
    # then 4 + 3 + 2 (3 x 4).
    assert [b.indices for b in batches] == [[6], [1], [4, 2], [3, 0, 5]]
    for batch in batches:
        rows, width = batch.input_ids.shape
        assert rows * width <= 16 or rows == 1
    assert sorted(i for b in batches for i in b.indices) == list(range(len(lengths)))
    assert rl_batches(samples, micro_batch_tokens=16, pad_id=0)[2].indices == [4, 2]


def test_oversized_sample_gets_a_micro_batch_of_its_own_and_is_not_truncated() -> None:
    (batch,) = rl_batches([transition([1] * 30, [2] * 10)], micro_batch_tokens=8, pad_id=0)
    assert batch.input_ids.shape == (1, 40)


def test_bad_lengths_and_budgets_name_the_field() -> None:
    bad = transition([1], [2, 3], response_logprobs=[-1.0])
    with pytest.raises(InvalidInputError) as error:
        rl_batches([transition([1], [2]), bad], micro_batch_tokens=8, pad_id=0)
    assert error.value.field == "transitions[1].response_logprobs"
    with pytest.raises(InvalidInputError) as error:
        rl_batches([transition([1], [2])], micro_batch_tokens=0, pad_id=0)
    assert error.value.field == "micro_batch_tokens"
    assert rl_batches([], micro_batch_tokens=8, pad_id=0) == []


# --- SFT ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


TOOL_CALL = {
    "type": "function",
    "function": {"name": "calculator", "arguments": '{"expression": "12*7"}'},
}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "calculator",
            "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}},
        },
    }
]
CONVERSATION = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "What is 12*7?"},
    {"role": "assistant", "content": None, "tool_calls": [TOOL_CALL]},
    {"role": "tool", "content": "84"},
    {"role": "assistant", "content": "The answer is 84."},
]


def test_sft_mask_is_exactly_the_assistant_turns(tokenizer: Any) -> None:
    built = sft_examples_from_messages(
        tokenizer, [{"messages": CONVERSATION, "tools": TOOLS}], max_length=512
    )

    (example,) = built.examples
    trained = [t for t, keep in zip(example.input_ids, example.labels_mask, strict=True) if keep]
    call = '<tool_call>{"name": "calculator", "arguments": {"expression": "12*7"}}</tool_call>'
    assert tokenizer.decode(trained) == f"{call}{END_OF_TURN}The answer is 84.{END_OF_TURN}"
    # The tools were rendered into the prompt, which is not trained.
    assert "calculator(expression)" in tokenizer.decode(example.input_ids)
    assert not built.dropped


def test_sft_drops_and_counts_what_cannot_be_trained(tokenizer: Any) -> None:
    short = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}]
    built = sft_examples_from_messages(
        tokenizer,
        [short, {"messages": CONVERSATION, "tools": TOOLS}, [{"role": "user", "content": "Hi"}]],
        max_length=30,
    )

    assert len(built.examples) == 1
    assert built.dropped == {"too_long": 1, "no_assistant_tokens": 1}


def test_sft_needs_a_template_that_marks_assistant_turns(tokenizer: Any) -> None:
    unmarked = copy.deepcopy(tokenizer)
    unmarked.chat_template = tokenizer.chat_template.replace("{% generation %}", "").replace(
        "{% endgeneration %}", ""
    )
    with pytest.raises(InvalidInputError, match="generation"):
        sft_examples_from_messages(unmarked, [CONVERSATION], max_length=512)
    with pytest.raises(InvalidInputError, match="messages") as error:
        sft_examples_from_messages(tokenizer, [{"conversation": []}], max_length=512)
    assert error.value.field == "conversations[0]"


def test_sft_from_transitions_trains_the_unmasked_response() -> None:
    (example,) = sft_examples_from_transitions([MERGED])
    assert example.input_ids == [11, 12, 21, 5, 6, 22, 23]
    assert example.labels_mask == [0, 0, 1, 0, 0, 1, 1]
    with pytest.raises(InvalidInputError, match="labels_mask"):
        SFTExample([1, 2], [1])


def test_sft_batches_pad_right_and_never_train_the_first_token() -> None:
    examples = [SFTExample([7, 8, 9], [1, 1, 1]), SFTExample([1, 2, 3, 4], [0, 0, 1, 1])]
    (batch,) = sft_batches(examples, micro_batch_tokens=64, pad_id=0)

    assert batch.indices == [1, 0]
    assert batch.input_ids.tolist() == [[1, 2, 3, 4], [7, 8, 9, 0]]
    assert batch.attention_mask.tolist() == [[1, 1, 1, 1], [1, 1, 1, 0]]
    # Nothing predicts a sequence's first token: its label is dropped.
    assert batch.labels_mask.tolist() == [[False, False, True, True], [False, True, True, False]]
    assert (batch.tokens, batch.trained_tokens) == (7, 4)


def test_sft_can_train_on_the_last_assistant_turn_only(tokenizer: Any) -> None:
    built = sft_examples_from_messages(
        tokenizer, [{"messages": CONVERSATION, "tools": TOOLS}], max_length=512, train_on="last"
    )

    (example,) = built.examples
    trained = [t for t, keep in zip(example.input_ids, example.labels_mask, strict=True) if keep]
    assert tokenizer.decode(trained) == f"The answer is 84.{END_OF_TURN}"
    with pytest.raises(InvalidInputError, match="'all', 'last' or 'text'") as error:
        sft_examples_from_messages(tokenizer, [CONVERSATION], max_length=512, train_on="first")  # type: ignore[arg-type]
    assert error.value.field == "train_on"


def test_sft_can_train_on_the_whole_text(tokenizer: Any) -> None:
    rendered = tokenizer.apply_chat_template(CONVERSATION, tools=TOOLS, tokenize=False)
    built = sft_examples_from_messages(
        tokenizer, [{"messages": CONVERSATION, "tools": TOOLS}], max_length=512, train_on="text"
    )

    (example,) = built.examples
    # Every token: the system prompt, the tools, the user's turn and the tool's result too.
    assert example.labels_mask == [1] * len(example.input_ids)
    assert tokenizer.decode(example.input_ids) == rendered
    # A template without {% generation %} marks nothing, which the whole text does not need;
    # a conversation with no assistant turn is text to learn as well.
    unmarked = copy.deepcopy(tokenizer)
    unmarked.chat_template = tokenizer.chat_template.replace("{% generation %}", "").replace(
        "{% endgeneration %}", ""
    )
    question = [{"role": "user", "content": "What is 12*7?"}]
    built = sft_examples_from_messages(unmarked, [question], max_length=512, train_on="text")
    assert len(built.examples) == 1
    assert not built.dropped
