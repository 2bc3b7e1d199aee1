"""verl's own advantage estimators on the converted batch, and agl's passing through."""

from __future__ import annotations

import math
import statistics

import pytest
import torch
from omegaconf import DictConfig, OmegaConf

from agl.lightning import GRPO, Group, Transition, TransitionBatch
from agl_verl.advantages import compute_advantages
from agl_verl.config import VerlConfigError
from agl_verl.dataproto import to_dataproto


def algorithm_config(estimator: str, **algorithm: object) -> DictConfig:
    return OmegaConf.create(
        {
            "algorithm": {
                "adv_estimator": estimator,
                "use_kl_in_reward": False,
                "gamma": 1.0,
                "lam": 1.0,
                "norm_adv_by_std_in_grpo": True,
                **algorithm,
            },
            "actor_rollout_ref": {"rollout": {"n": 3}},
        }
    )


def one_call_each(rewards: dict[str, list[float]]) -> TransitionBatch:
    """One sample per rollout: the single-turn case verl's estimators are written for."""
    samples = []
    for group, values in rewards.items():
        for index, reward in enumerate(values):
            samples.append(
                Transition(
                    agent=None,
                    prompt_ids=[1, 2],
                    response_ids=[3, 4, 5][: index + 1],
                    response_logprobs=None,
                    reward=reward,
                    advantage=0.0,
                    rollout_id=f"{group}-{index}",
                    group_id=group,
                )
            )
    return TransitionBatch(samples)


def first_token_advantages(data: object) -> list[float]:
    return [float(v) for v in data.batch["advantages"][:, 0]]  # type: ignore[attr-defined]


def test_verls_grpo_gives_the_group_normalised_reward_on_every_response_token() -> None:
    data = to_dataproto(
        one_call_each({"a": [1.0, 0.0, 0.0], "b": [2.0, 2.0, 5.0]}), advantages=False
    )

    out, metrics = compute_advantages(data, algorithm_config("grpo"))

    # group a: mean 1/3, sample std 0.5774; group b: mean 3, sample std 1.7321
    assert first_token_advantages(out) == pytest.approx(
        [1.1547, -0.5774, -0.5774, -0.5774, -0.5774, 1.1547], abs=1e-4
    )
    mask = out.batch["response_mask"].bool()
    # the same advantage on every response token of a sample, 0 on padding
    for row in range(len(out)):
        values = out.batch["advantages"][row][mask[row]]
        assert torch.allclose(values, values[0].expand_as(values))
        assert out.batch["advantages"][row][~mask[row]].abs().sum() == 0
    assert metrics == {}


def test_verls_grpo_equals_agls_when_every_rollout_makes_one_call() -> None:
    rewards = {"a": [1.0, 0.0, 0.0], "b": [0.2, 0.9, 0.4]}
    data = to_dataproto(one_call_each(rewards), advantages=False)
    verl_values = first_token_advantages(compute_advantages(data, algorithm_config("grpo"))[0])

    groups = [Group(key, values, [[v] for v in values]) for key, values in rewards.items()]
    agl_values = [call[0] for estimate in GRPO().estimate(groups) for call in estimate or []]
    assert verl_values == pytest.approx(agl_values, abs=1e-5)


def test_verls_rloo_leaves_each_sample_out_of_its_own_baseline() -> None:
    data = to_dataproto(one_call_each({"a": [3.0, 0.0, 0.0]}), advantages=False)

    out, _ = compute_advantages(data, algorithm_config("rloo"))

    # n / (n - 1) * (r - mean): 1.5 * (3 - 1) = 3, 1.5 * (0 - 1) = -1.5
    assert first_token_advantages(out) == pytest.approx([3.0, -1.5, -1.5], abs=1e-5)


def test_verl_counts_every_call_of_a_multi_call_rollout_agl_counts_the_rollout() -> None:
    """The single-turn assumption agl's credit assignment does not make."""
    samples = [
        # rollout r1 (reward 1) made three calls; rollout r2 (reward 0) made one
        *[
            Transition(None, [1], [2], None, 1.0, 0.0, "r1", "g", call_index=i, weight=1 / 3)
            for i in range(3)
        ],
        Transition(None, [1], [2], None, 0.0, 0.0, "r2", "g"),
    ]
    data = to_dataproto(TransitionBatch(samples), advantages=False)
    verl_values = first_token_advantages(compute_advantages(data, algorithm_config("grpo"))[0])
    # verl: four samples 1, 1, 1, 0 -> mean 0.75, std 0.5
    assert verl_values == pytest.approx([0.5, 0.5, 0.5, -1.5], abs=1e-4)
    # agl: two rollouts 1, 0 -> +-0.7071 for every call of each
    groups = [Group("g", [1.0, 0.0], [[1.0, 1.0, 1.0], [0.0]])]
    estimate = GRPO().estimate(groups)[0]
    assert estimate is not None
    assert [round(v, 4) for v in estimate[0]] == [0.7071] * 3
    assert round(estimate[1][0], 4) == -0.7071
    assert math.isclose(statistics.stdev([1.0, 0.0]), 0.7071, rel_tol=1e-4)


def test_agls_advantages_pass_through_untouched() -> None:
    batch = one_call_each({"a": [1.0, 0.0]})
    batch.transitions[0].advantage = 0.25
    batch.transitions[1].advantage = -0.25
    data = to_dataproto(batch)
    before = data.batch["advantages"].clone()

    out, _ = compute_advantages(data, algorithm_config("agl"))

    assert torch.equal(out.batch["advantages"], before)
    assert torch.equal(out.batch["token_level_rewards"], out.batch["token_level_scores"])


def test_agls_estimator_without_agls_advantages_is_an_error() -> None:
    data = to_dataproto(one_call_each({"a": [1.0, 0.0]}), advantages=False)
    with pytest.raises(VerlConfigError, match="advantages=True"):
        compute_advantages(data, algorithm_config("agl"))


def test_in_reward_kl_needs_reference_logprobs() -> None:
    data = to_dataproto(one_call_each({"a": [1.0, 0.0]}), advantages=False)
    with pytest.raises(VerlConfigError, match="ref_log_prob"):
        compute_advantages(data, algorithm_config("grpo", use_kl_in_reward=True))


def test_in_reward_kl_is_verls_penalty_on_the_token_rewards() -> None:
    from verl.trainer.ppo.core_algos import get_kl_controller

    data = to_dataproto(one_call_each({"a": [1.0, 0.0]}), advantages=False)
    data.batch["old_log_probs"] = torch.full(data.batch["responses"].shape, -1.0)
    data.batch["ref_log_prob"] = torch.full(data.batch["responses"].shape, -1.5)
    config = algorithm_config(
        "grpo", use_kl_in_reward=True, kl_penalty="kl", kl_ctrl={"type": "fixed", "kl_coef": 0.1}
    )

    out, metrics = compute_advantages(
        data, config, kl_controller=get_kl_controller(config.algorithm.kl_ctrl)
    )

    # kl = old - ref = 0.5 per token; reward -= 0.1 * 0.5 on every response token
    expected = out.batch["token_level_scores"] - 0.05 * out.batch["response_mask"]
    assert torch.allclose(out.batch["token_level_rewards"], expected)
    assert metrics["actor/reward_kl_penalty_coeff"] == pytest.approx(0.1)
