"""Transition batches: padded arrays in verl's layout, tensors, JSONL and Parquet files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from agl import AglError, InvalidInputError
from agl.lightning import DropReport, Transition, TransitionBatch


def sample(prompt: list[int], response: list[int], **fields: object) -> Transition:
    base: dict[str, object] = {
        "agent": "writer",
        "prompt_ids": prompt,
        "response_ids": response,
        "response_logprobs": [-0.5] * len(response),
        "reward": 1.0,
        "advantage": 0.5,
        "rollout_id": "r1",
        "group_id": "g1",
    }
    base.update(fields)
    return Transition(**base)  # type: ignore[arg-type]


BATCH = TransitionBatch(
    [
        sample([11, 12, 13], [21, 22]),
        sample(
            [14],
            [23, 5, 6, 24],
            response_mask=[1, 0, 0, 1],
            token_advantages=[0.25, 0.0, 0.0, -1.0],
            response_logprobs=None,
            reward=-2.0,
            agent="checker",
            weight=0.5,
        ),
    ]
)


def test_arrays_left_pad_prompts_and_right_pad_responses() -> None:
    arrays = BATCH.to_arrays(pad_token_id=0)

    assert arrays["prompts"].tolist() == [[11, 12, 13], [0, 0, 14]]
    assert arrays["responses"].tolist() == [[21, 22, 0, 0], [23, 5, 6, 24]]
    assert arrays["input_ids"].tolist() == [[11, 12, 13, 21, 22, 0, 0], [0, 0, 14, 23, 5, 6, 24]]
    assert arrays["attention_mask"].tolist() == [[1, 1, 1, 1, 1, 0, 0], [0, 0, 1, 1, 1, 1, 1]]
    assert arrays["position_ids"].tolist() == [[0, 1, 2, 3, 4, 4, 4], [0, 0, 0, 1, 2, 3, 4]]
    assert arrays["response_mask"].tolist() == [[1, 1, 0, 0], [1, 0, 0, 1]]
    assert arrays["advantages"].tolist() == [[0.5, 0.5, 0, 0], [0.25, 0, 0, -1.0]]
    assert arrays["token_rewards"].tolist() == [[0, 1.0, 0, 0], [0, 0, 0, -2.0]]
    assert arrays["old_logprobs"].tolist() == [[-0.5, -0.5, 0, 0], [0, 0, 0, 0]]
    assert arrays["has_logprobs"].tolist() == [True, False]
    assert arrays["weights"].tolist() == [1.0, 0.5]
    assert arrays["input_ids"].dtype == np.int64


def test_fixed_widths_and_over_long_samples() -> None:
    arrays = BATCH.to_arrays(max_prompt_length=5, max_response_length=6, pad_token_id=9)
    assert arrays["prompts"].shape == (2, 5)
    assert arrays["responses"][0].tolist() == [21, 22, 9, 9, 9, 9]
    with pytest.raises(InvalidInputError, match="max_response_length=3"):
        BATCH.to_arrays(max_response_length=3)


def test_tensors_need_torch() -> None:
    try:
        import torch
    except ImportError:
        with pytest.raises(AglError, match="needs torch"):
            BATCH.to_tensors()
        return
    tensors = BATCH.to_tensors()
    assert tensors["input_ids"].dtype == torch.int64
    assert tensors["advantages"].shape == (2, 4)


def test_jsonl_and_parquet_round_trip(tmp_path: Path) -> None:
    for path in (BATCH.to_jsonl(tmp_path / "t.jsonl"), BATCH.to_parquet(tmp_path / "t.parquet")):
        back = (
            TransitionBatch.from_jsonl(path)
            if path.suffix == ".jsonl"
            else TransitionBatch.from_parquet(path)
        )
        assert back.transitions == BATCH.transitions


def test_bad_records_name_what_is_wrong(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match="transition 0 has unknown fields \\['colour'\\]"):
        TransitionBatch.from_records([{"colour": "red"}])
    with pytest.raises(InvalidInputError, match="transition 0:"):
        TransitionBatch.from_records([{"agent": "a"}])
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"agent": "a"}\nnot json\n')
    with pytest.raises(InvalidInputError, match=r"broken\.jsonl:2: not JSON"):
        TransitionBatch.from_jsonl(broken)


def test_agents_filter_and_report() -> None:
    assert BATCH.agents == ["writer", "checker"]
    assert [t.agent for t in BATCH.for_agents("checker")] == ["checker"]
    report = DropReport(calls_seen=5, transitions=2)
    report.dropped_calls["no_token_ids"] += 3
    assert report.as_metrics()["transitions/dropped/no_token_ids"] == 3.0
    assert report.summary() == "2 samples from 5 calls; dropped: no_token_ids 3"
