"""Transitions -> verl's DataProto, field by field, and verl's own code reading the result."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from verl import DataProto

from agl import InvalidInputError
from agl.lightning import Transition, TransitionBatch
from agl_verl.dataproto import to_dataproto

PAD = 0


def sample(**fields: object) -> Transition:
    base: dict[str, object] = {
        "agent": "writer",
        "prompt_ids": [11, 12],
        "response_ids": [21, 22],
        "response_logprobs": [-0.1, -0.2],
        "reward": 1.0,
        "advantage": 0.5,
        "rollout_id": "ro-1",
        "group_id": "task-0",
        "step": 3,
        "attempt_id": "at-1",
    }
    base.update(fields)
    return Transition(**base)  # type: ignore[arg-type]


@pytest.fixture
def batch() -> TransitionBatch:
    return TransitionBatch(
        [
            # one call: a 3-token prompt, a 2-token response
            sample(prompt_ids=[11, 12, 13], response_ids=[21, 22], response_logprobs=[-0.1, -0.2]),
            # a merged trajectory: response, tool result (masked out), response
            sample(
                prompt_ids=[14],
                response_ids=[31, 32, 90, 91, 33],
                response_logprobs=[-0.3, -0.4, 0.0, 0.0, -0.5],
                response_mask=[1, 1, 0, 0, 1],
                reward=0.0,
                advantage=-0.5,
                rollout_id="ro-2",
                attempt_id="at-2",
                call_index=0,
                n_calls=2,
                weight=1.0,
            ),
            # the second sample of rollout 3 (two samples: weight 1/2)
            sample(
                prompt_ids=[15, 16],
                response_ids=[41],
                response_logprobs=[-0.6],
                reward=2.0,
                advantage=1.5,
                rollout_id="ro-3",
                group_id="task-1",
                attempt_id="at-3",
                call_index=1,
                weight=0.5,
                agent="checker",
            ),
        ]
    )


def test_every_tensor_field_is_laid_out_as_verls_rollout_lays_it_out(
    batch: TransitionBatch,
) -> None:
    data = to_dataproto(batch, pad_token_id=PAD)

    assert isinstance(data, DataProto)
    assert len(data) == 3
    tensors = data.batch
    # prompts: left-padded to the longest prompt (3)
    assert tensors["prompts"].tolist() == [[11, 12, 13], [PAD, PAD, 14], [PAD, 15, 16]]
    # responses: right-padded to the longest response (5)
    assert tensors["responses"].tolist() == [
        [21, 22, PAD, PAD, PAD],
        [31, 32, 90, 91, 33],
        [41, PAD, PAD, PAD, PAD],
    ]
    assert torch.equal(
        tensors["input_ids"], torch.cat([tensors["prompts"], tensors["responses"]], dim=1)
    )
    assert tensors["attention_mask"].tolist() == [
        [1, 1, 1, 1, 1, 0, 0, 0],
        [0, 0, 1, 1, 1, 1, 1, 1],
        [0, 1, 1, 1, 0, 0, 0, 0],
    ]
    # positions count real tokens from 0; left padding sits at 0
    assert tensors["position_ids"].tolist() == [
        [0, 1, 2, 3, 4, 4, 4, 4],
        [0, 0, 0, 1, 2, 3, 4, 5],
        [0, 0, 1, 2, 2, 2, 2, 2],
    ]
    # the tool result inside the merged trajectory is not trained on
    assert tensors["response_mask"].tolist() == [
        [1, 1, 0, 0, 0],
        [1, 1, 0, 0, 1],
        [1, 0, 0, 0, 0],
    ]
    # the reward sits on the last response token, as verl's reward managers put it
    assert tensors["token_level_scores"].tolist() == [
        [0.0, 1.0, 0.0, 0.0, 0.0],
        [0.0, 0.0, 0.0, 0.0, 0.0],
        [2.0, 0.0, 0.0, 0.0, 0.0],
    ]
    assert torch.equal(tensors["token_level_rewards"], tensors["token_level_scores"])
    torch.testing.assert_close(
        tensors["rollout_log_probs"],
        torch.tensor([[-0.1, -0.2, 0, 0, 0], [-0.3, -0.4, 0, 0, -0.5], [-0.6, 0, 0, 0, 0]]),
    )
    # agl's advantages on every sampled token, 0 elsewhere
    torch.testing.assert_close(
        tensors["advantages"],
        torch.tensor([[0.5, 0.5, 0, 0, 0], [-0.5, -0.5, 0, 0, -0.5], [1.5, 0, 0, 0, 0]]),
    )
    assert torch.equal(tensors["returns"], tensors["advantages"])
    # weighted: a sample of a rollout that made two counts half
    weighted = to_dataproto(batch, weight_advantages=True).batch["advantages"]
    assert weighted[2].tolist() == [0.75, 0, 0, 0, 0]
    assert torch.equal(weighted[:2], tensors["advantages"][:2])
    for key in ("prompts", "responses", "input_ids", "attention_mask", "position_ids"):
        assert tensors[key].dtype == torch.int64, key
    assert tensors["response_mask"].dtype == torch.int64
    for key in ("token_level_scores", "rollout_log_probs", "advantages"):
        assert tensors[key].dtype == torch.float32, key


def test_non_tensor_fields_name_the_group_rollout_and_agent(batch: TransitionBatch) -> None:
    data = to_dataproto(batch, meta_info={"temperature": 1.0})

    extra = data.non_tensor_batch
    assert extra["uid"].tolist() == ["task-0", "task-0", "task-1"]
    assert extra["agl_rollout_id"].tolist() == ["ro-1", "ro-2", "ro-3"]
    assert extra["agl_attempt_id"].tolist() == ["at-1", "at-2", "at-3"]
    assert extra["agl_agent"].tolist() == ["writer", "writer", "checker"]
    assert extra["agl_call_index"].tolist() == [0, 0, 1]
    assert extra["agl_n_calls"].tolist() == [1, 2, 1]
    assert extra["agl_weight"].tolist() == [1.0, 1.0, 0.5]
    assert data.meta_info == {"agl_step": 3, "temperature": 1.0}
    data.check_consistency()


def test_fixed_widths_pad_to_verls_lengths_and_never_truncate(batch: TransitionBatch) -> None:
    data = to_dataproto(batch, max_prompt_length=6, max_response_length=8)
    assert tuple(data.batch["prompts"].shape) == (3, 6)
    assert tuple(data.batch["responses"].shape) == (3, 8)
    assert tuple(data.batch["input_ids"].shape) == (3, 14)

    with pytest.raises(InvalidInputError, match="max_response_length=4"):
        to_dataproto(batch, max_response_length=4)


def test_without_agl_advantages_the_batch_is_left_for_verls_estimators(
    batch: TransitionBatch,
) -> None:
    data = to_dataproto(batch, advantages=False)
    assert "advantages" not in data.batch.keys()  # noqa: SIM118
    assert "returns" not in data.batch.keys()  # noqa: SIM118


def test_logprobs_are_left_out_unless_every_sample_has_them(batch: TransitionBatch) -> None:
    batch.transitions[1].response_logprobs = None
    data = to_dataproto(batch)
    assert "rollout_log_probs" not in data.batch.keys()  # noqa: SIM118


def test_an_empty_step_says_what_was_dropped() -> None:
    empty = TransitionBatch([])
    empty.report.calls_seen = 4
    empty.report.dropped_calls["zero_variance_group"] = 4
    with pytest.raises(InvalidInputError, match="zero_variance_group 4"):
        to_dataproto(empty)


def test_verls_padding_removal_and_metrics_read_the_batch(batch: TransitionBatch) -> None:
    """The conversions verl's workers apply to every batch, and its per-step metrics."""
    from verl.trainer.ppo.metric_utils import compute_data_metrics
    from verl.workers.utils.padding import left_right_2_no_padding, no_padding_2_padding

    data = to_dataproto(batch)
    packed = left_right_2_no_padding(data.to_tensordict())
    # the packed (nested) input holds exactly the real tokens of each row
    rows = [row.tolist() for row in packed["input_ids"].unbind(0)]
    assert rows == [[11, 12, 13, 21, 22], [14, 31, 32, 90, 91, 33], [15, 16, 41]]
    # a per-token output (a logprob at position t scores token t + 1) comes back in the
    # padded response layout: here, an output that names the token each position predicts
    predicted = torch.nested.nested_tensor(
        [torch.tensor([*row[1:], 0], dtype=torch.float32) for row in rows], layout=torch.jagged
    )
    back = no_padding_2_padding(predicted, packed)
    assert back.tolist() == [
        [21, 22, 0, 0, 0],
        [31, 32, 90, 91, 33],
        [41, 0, 0, 0, 0],
    ]

    metrics = compute_data_metrics(batch=data, use_critic=False)
    assert metrics["critic/score/mean"] == pytest.approx(1.0)  # (1 + 0 + 2) / 3
    assert metrics["response_length/mean"] == pytest.approx((2 + 5 + 1) / 3)
    assert metrics["prompt_length/mean"] == pytest.approx((3 + 1 + 2) / 3)
    assert np.isfinite(metrics["critic/advantages/mean"])
