"""Losses against hand-computed numbers: PPO clipping on both sides, aggregations, KL kinds."""

from __future__ import annotations

import math

import pytest
import torch

from agl import InvalidInputError
from agl_torch.losses import (
    Aggregation,
    aggregate,
    kl_penalty,
    loss_normalizer,
    policy_loss,
    sft_loss,
)

# Two samples, three token columns; the last column of row 1 is masked out (and wild).
RATIOS = [[1.5, 0.5, 1.0], [1.1, 0.5, 1e6]]
ADVANTAGES = [[1.0, -1.0, 2.0], [1.0, 1.0, 5.0]]
MASK = [[1, 1, 1], [1, 1, 0]]
# Per token, max(-A r, -A clip(r, 0.8, 1.28)):
#   row 0: r 1.5, A +1 -> -1.28 (clipped high); r 0.5, A -1 -> 0.8 (clipped low); r 1, A 2 -> -2
#   row 1: r 1.1, A +1 -> -1.1; r 0.5, A +1 -> -0.5 (the unclipped branch is the pessimistic one)
ROW_SUMS = [-1.28 + 0.8 - 2.0, -1.1 - 0.5]


def inputs() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    old = torch.tensor([[-1.0, -2.0, -0.5], [-1.5, -0.7, -3.0]])
    logprobs = (old + torch.tensor(RATIOS).log()).requires_grad_()
    return logprobs, old, torch.tensor(ADVANTAGES), torch.tensor(MASK)


@pytest.mark.parametrize(
    ("aggregation", "weights", "expected"),
    [
        ("token-mean", None, sum(ROW_SUMS) / 5),
        ("sequence-mean", None, (ROW_SUMS[0] / 3 + ROW_SUMS[1] / 2) / 2),
        ("token-mean", [1.0, 0.5], (ROW_SUMS[0] + 0.5 * ROW_SUMS[1]) / (3 + 0.5 * 2)),
        ("sequence-mean", [1.0, 0.5], (ROW_SUMS[0] / 3 + 0.5 * ROW_SUMS[1] / 2) / 1.5),
    ],
)
def test_policy_loss_matches_hand_computation(
    aggregation: Aggregation, weights: list[float] | None, expected: float
) -> None:
    logprobs, old, advantages, mask = inputs()
    loss, metrics = policy_loss(
        logprobs,
        old,
        advantages,
        mask,
        aggregation=aggregation,
        weights=torch.tensor(weights) if weights is not None else None,
    )

    assert loss.item() == pytest.approx(expected, abs=1e-6)
    assert metrics["clip_frac"] == pytest.approx(2 / 5)
    assert metrics["ratio_mean"] == pytest.approx((1.5 + 0.5 + 1.0 + 1.1 + 0.5) / 5)
    assert metrics["ratio_max"] == pytest.approx(1.5)
    k3 = [r - 1 - math.log(r) for r in (1.5, 0.5, 1.0, 1.1, 0.5)]
    assert metrics["approx_kl"] == pytest.approx(sum(k3) / 5, abs=1e-6)
    assert metrics["tokens"] == 5


def test_clipped_tokens_get_no_gradient() -> None:
    logprobs, old, advantages, mask = inputs()
    loss, _ = policy_loss(logprobs, old, advantages, mask)
    loss.backward()

    assert logprobs.grad is not None
    # d/dlogp of -A r is -A r; divided by the 5 counted tokens.
    expected = torch.tensor([[0.0, 0.0, -2.0], [-1.1, -0.5, 0.0]]) / 5
    torch.testing.assert_close(logprobs.grad, expected)


@pytest.mark.parametrize("aggregation", ["token-mean", "sequence-mean"])
def test_micro_batch_losses_add_up_to_the_whole_batch(aggregation: Aggregation) -> None:
    logprobs, old, advantages, mask = inputs()
    weights = torch.tensor([1.0, 0.25])
    whole, _ = policy_loss(
        logprobs, old, advantages, mask, weights=weights, aggregation=aggregation
    )
    normalizer = loss_normalizer(mask, weights=weights, aggregation=aggregation)

    parts = [
        policy_loss(
            logprobs[row : row + 1],
            old[row : row + 1],
            advantages[row : row + 1],
            mask[row : row + 1],
            weights=weights[row : row + 1],
            normalizer=normalizer,
            aggregation=aggregation,
        )[0]
        for row in range(2)
    ]

    assert (parts[0] + parts[1]).item() == pytest.approx(whole.item(), abs=1e-7)


def test_unknown_behaviour_logprobs_count_as_on_policy() -> None:
    logprobs = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    old = torch.tensor([[float("nan"), float("nan")]])
    loss, metrics = policy_loss(logprobs, old, torch.tensor([[2.0, -1.0]]), torch.ones(1, 2))
    loss.backward()

    assert loss.item() == pytest.approx((-2.0 + 1.0) / 2)
    assert metrics["ratio_mean"] == 1.0
    assert metrics["clip_frac"] == 0.0
    assert logprobs.grad is not None
    torch.testing.assert_close(logprobs.grad, torch.tensor([[-1.0, 0.5]]))


def test_decoupled_ppo_matches_hand_computation() -> None:
    # One sample of three tokens: behaviour (the stale weights that sampled them), proximal
    # (the weights before this update) and current logprobs.
    behaviour = [-1.0, -2.0, -0.5]
    proximal = [-0.9, -1.0, -0.5]
    current = [-0.8, -1.2, -0.1]
    advantages = [1.0, 1.0, -1.0]
    expected_tokens = []
    for b, p, c, a in zip(behaviour, proximal, current, advantages, strict=True):
        r = math.exp(c - p)  # the trust region is around the proximal policy
        w = min(math.exp(p - b), 2.0)  # proximal / behaviour, truncated at 2
        expected_tokens.append(w * max(-a * r, -a * min(max(r, 0.8), 1.28)))
    # token 0: r=e^0.1, w=e^0.1; token 1: r=e^-0.2, w=e^1 -> 2; token 2: r=e^0.4 (A<0: unclipped)
    expected = sum(expected_tokens) / 3
    assert expected == pytest.approx(-0.45568, abs=1e-5)
    logprobs = torch.tensor([current], requires_grad=True)
    loss, stats = policy_loss(
        logprobs,
        torch.tensor([behaviour]),
        torch.tensor([advantages]),
        torch.ones(1, 3),
        proximal_logprobs=torch.tensor([proximal]),
        importance_cap=2.0,
    )
    assert loss.item() == pytest.approx(expected, abs=1e-6)
    assert stats["importance_max"] == pytest.approx(math.e, rel=1e-6)
    assert stats["importance_truncated"] == pytest.approx(1 / 3)
    assert stats["importance_mean"] == pytest.approx((math.exp(0.1) + math.e + 1) / 3, rel=1e-6)
    loss.backward()
    assert logprobs.grad is not None
    # The importance weight scales each token's gradient and carries none itself:
    # d loss / d current_t = -A_t * w_t * r_t / 3 on unclipped tokens.
    grad = logprobs.grad[0].tolist()
    assert grad[1] == pytest.approx(-1.0 * 2.0 * math.exp(-0.2) / 3, rel=1e-5)
    assert grad[2] == pytest.approx(1.0 * 1.0 * math.exp(0.4) / 3, rel=1e-5)
    # On-policy data (proximal == behaviour) gives exactly PPO-clip around the proximal policy.
    plain, _ = policy_loss(
        logprobs.detach(),
        torch.tensor([proximal]),
        torch.tensor([advantages]),
        torch.ones(1, 3),
    )
    decoupled, _ = policy_loss(
        logprobs.detach(),
        torch.tensor([proximal]),
        torch.tensor([advantages]),
        torch.ones(1, 3),
        proximal_logprobs=torch.tensor([proximal]),
    )
    assert decoupled.item() == pytest.approx(plain.item(), abs=1e-7)


def test_nothing_to_count_gives_zero() -> None:
    logprobs, old, advantages, _ = inputs()
    loss, metrics = policy_loss(logprobs, old, advantages, torch.zeros(2, 3))

    assert loss.item() == 0.0
    assert metrics["tokens"] == 0.0
    assert aggregate(torch.ones(2, 3), torch.zeros(2, 3), aggregation="sequence-mean").item() == 0


def test_kl_kinds_match_their_formulas() -> None:
    logprobs = torch.tensor([[-1.0, -2.0, -0.1, -40.0]])
    ref = torch.tensor([[-1.5, -1.0, -0.1, -5.0]])
    d = ref - logprobs

    torch.testing.assert_close(kl_penalty(logprobs, ref, "k1"), logprobs - ref)
    torch.testing.assert_close(kl_penalty(logprobs, ref, "k2"), 0.5 * (logprobs - ref) ** 2)
    torch.testing.assert_close(kl_penalty(logprobs, ref, "k3"), d.exp() - d - 1)
    low_var = kl_penalty(logprobs, ref, "low_var_kl")
    torch.testing.assert_close(low_var[:, :3], (d.exp() - d - 1)[:, :3])
    assert low_var[0, 3].item() == 10.0  # d = 35: clamped
    assert kl_penalty(ref, ref, "low_var_kl").abs().max().item() == 0.0


def test_unknown_choices_name_the_field() -> None:
    logprobs, old, advantages, mask = inputs()
    with pytest.raises(InvalidInputError, match="kl_kind") as error:
        kl_penalty(logprobs, old, "k4")
    assert error.value.field == "kl_kind"
    with pytest.raises(InvalidInputError, match="aggregation"):
        policy_loss(logprobs, old, advantages, mask, aggregation="mean")


def test_sft_loss_is_the_masked_negative_log_likelihood() -> None:
    logprobs = torch.tensor([[-9.0, -1.0, -2.0], [-3.0, -4.0, -99.0]])
    mask = torch.tensor([[0, 1, 1], [0, 1, 0]])

    assert sft_loss(logprobs, mask).item() == pytest.approx((1 + 2 + 4) / 3)
    assert sft_loss(logprobs, mask, normalizer=7).item() == pytest.approx(1.0)
