"""Losses over per-token tensors: PPO-clip policy loss, KL penalties, SFT negative log-likelihood.

Every function takes ``[B, T]`` tensors aligned with ``input_ids`` (see
:func:`agl_torch.policy.token_logprobs`) and a mask of the tokens that count, and reduces them
with :func:`aggregate`:

- ``"token-mean"``: every trained token weighs the same, ``sum_bt w_b m_bt x_bt / N`` with
  ``N = sum_bt w_b m_bt``;
- ``"sequence-mean"``: every sample weighs the same, whatever its length, ``sum_b w_b
  mean_t(x_bt) / N`` with ``N = sum_b w_b`` over samples that have a trained token.

``w_b`` is the sample's weight (:attr:`agl.lightning.Transition.weight`, 1 without weights).
The denominator ``N`` can be given: a learner that splits a batch into micro-batches passes
each of them the whole batch's :func:`loss_normalizer`, so the micro-batch losses (and their
gradients) add up to exactly those of the whole batch.
"""

from __future__ import annotations

import math

import torch

from agl_torch.settings import AGGREGATIONS, KL_KINDS, Aggregation, KLKind, check_choice

__all__ = [
    "AGGREGATIONS",
    "KL_KINDS",
    "Aggregation",
    "KLKind",
    "aggregate",
    "check_choice",
    "kl_penalty",
    "loss_normalizer",
    "policy_loss",
    "sft_loss",
]

_MAX_LOG_RATIO = 20.0
"""Log-ratios are clamped to +-this before ``exp`` (as verl does), so one wild token cannot
overflow the loss."""


def loss_normalizer(
    mask: torch.Tensor,
    *,
    aggregation: Aggregation = "token-mean",
    weights: torch.Tensor | None = None,
) -> float:
    """The denominator :func:`aggregate` divides by for this batch (see the module docstring).

    Sum it over the micro-batches of a batch and pass the total to each of them.
    """
    check_choice(aggregation, AGGREGATIONS, "aggregation")
    counted = mask.bool()
    per_sample = counted.sum(dim=1) if aggregation == "token-mean" else counted.any(dim=1)
    per_sample = per_sample.to(torch.float64)
    if weights is not None:
        per_sample = per_sample * weights.to(torch.float64)
    return float(per_sample.sum())


def aggregate(
    values: torch.Tensor,
    mask: torch.Tensor,
    *,
    aggregation: Aggregation = "token-mean",
    weights: torch.Tensor | None = None,
    normalizer: float | None = None,
) -> torch.Tensor:
    """Reduce per-token ``values`` ``[B, T]`` to a scalar over the masked tokens.

    Args:
        values: Per-token values; whatever they hold outside the mask is ignored.
        mask: ``[B, T]``, nonzero where a token counts.
        aggregation: ``"token-mean"`` or ``"sequence-mean"`` (module docstring).
        weights: ``[B]`` sample weights (default: all 1).
        normalizer: The denominator; default: :func:`loss_normalizer` of this batch. A zero
            denominator (nothing to count) gives a zero result.
    """
    if normalizer is None:
        normalizer = loss_normalizer(mask, aggregation=aggregation, weights=weights)
    counted = mask.bool()
    per_sample = torch.where(counted, values, torch.zeros_like(values)).sum(dim=1)
    if aggregation == "sequence-mean":
        per_sample = per_sample / counted.sum(dim=1).clamp(min=1)
    if weights is not None:
        per_sample = per_sample * weights.to(per_sample.dtype)
    return per_sample.sum() / (normalizer if normalizer > 0 else 1.0)


def policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    proximal_logprobs: torch.Tensor | None = None,
    importance_cap: float | None = None,
    clip_low: float = 0.2,
    clip_high: float = 0.28,
    aggregation: Aggregation = "token-mean",
    weights: torch.Tensor | None = None,
    normalizer: float | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The PPO-clip policy-gradient loss, with importance ratios against the behaviour policy.

    For each masked token, with ``r = exp(logprobs - old_logprobs)`` the ratio of the current
    policy's probability to the sampling policy's and ``A`` its advantage::

        loss_t = max(-A * r, -A * clip(r, 1 - clip_low, 1 + clip_high))

    then :func:`aggregate` reduces ``loss_t`` to a scalar. Minimising it raises the probability
    of positive-advantage tokens and lowers that of negative ones, but stops pushing once the
    ratio left the trust region in the advantage's direction (the clipped branch has zero
    gradient). GRPO is this loss with group-normalized advantages and no critic; the asymmetric
    default ``clip_high > clip_low`` is DAPO's "clip-higher", which keeps low-probability tokens
    able to grow.

    Behaviour logprobs that are NaN (a sample whose engine returned no logprobs) are replaced
    by the detached current logprobs: the token is treated as on-policy (``r = 1``, never
    clipped, gradient ``-A * grad log p``, i.e. REINFORCE).

    **Off-policy data** (asynchronous training, ``LoopSettings(max_staleness=k)``): the
    behaviour policy may be several updates older than the weights trained, and a trust region
    around it no longer bounds the update. With ``proximal_logprobs`` the loss is decoupled
    PPO (Hilton et al., 2022, "Batch size-invariance for policy optimization", as AReaL
    applies it to asynchronous RL, Fu et al., 2025): the ratio is taken against a proximal
    policy (the weights before this update), ``r = exp(logprobs - proximal_logprobs)``, and
    each token is weighted by the importance weight of proximal over behaviour policy, ``w =
    exp(proximal_logprobs - old_logprobs)`` (no gradient), truncated at ``importance_cap``
    (truncated importance sampling, as in IMPALA's V-trace, Espeholt et al., 2018)::

        loss_t = min(w, importance_cap) * max(-A * r, -A * clip(r, 1 - clip_low, 1 + clip_high))

    On-policy data has ``w = 1`` and the loss is plain PPO-clip around the current weights.

    Args:
        logprobs: ``[B, T]`` current-policy logprobs (with gradient).
        old_logprobs: ``[B, T]`` behaviour logprobs, NaN where unknown.
        advantages: ``[B, T]`` per-token advantages.
        mask: ``[B, T]``, nonzero on trained tokens.
        proximal_logprobs: ``[B, T]`` logprobs of the proximal policy (no gradient), for
            decoupled PPO; None takes the ratio against the behaviour policy.
        importance_cap: Truncates the importance weights of decoupled PPO (None: no cap).
        clip_low / clip_high: The trust region ``[1 - clip_low, 1 + clip_high]``.
        aggregation / weights / normalizer: As for :func:`aggregate`.

    Returns:
        ``(loss, metrics)``. Metrics are plain (unweighted) means over the masked tokens:
        ``clip_frac`` (tokens whose clipped branch was taken), ``approx_kl`` (the k3 estimate
        ``r - 1 - log r`` of KL(behaviour or proximal || current)), ``ratio_mean``,
        ``ratio_max``, and ``tokens`` (how many were counted); with ``proximal_logprobs`` also
        ``importance_mean``, ``importance_max`` (before truncation) and
        ``importance_truncated`` (the share of tokens whose weight was truncated).
    """
    counted = mask.bool()
    old = torch.where(torch.isnan(old_logprobs), logprobs.detach(), old_logprobs)
    importance = None
    if proximal_logprobs is not None:
        # Unknown behaviour logprobs: the token counts as sampled by the proximal policy.
        behaviour = torch.where(torch.isnan(old_logprobs), proximal_logprobs, old_logprobs)
        log_weight = (proximal_logprobs - behaviour).masked_fill(~counted, 0.0)
        importance = torch.exp(log_weight.clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO)).detach()
        old = proximal_logprobs.detach()
    log_ratio = (logprobs - old).masked_fill(~counted, 0.0)
    log_ratio = log_ratio.clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO)
    ratio = torch.exp(log_ratio)
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1.0 - clip_low, 1.0 + clip_high)
    per_token = torch.maximum(unclipped, clipped)
    if importance is not None:
        capped = importance if importance_cap is None else importance.clamp(max=importance_cap)
        per_token = per_token * capped
    loss = aggregate(
        per_token, counted, aggregation=aggregation, weights=weights, normalizer=normalizer
    )
    with torch.no_grad():
        tokens = counted.sum().float()
        denominator = tokens.clamp(min=1.0)
        detached = ratio.detach()
        statistics = torch.stack(
            [
                ((clipped > unclipped) & counted).sum() / denominator,
                ((detached - 1.0 - log_ratio.detach()) * counted).sum() / denominator,
                (detached * counted).sum() / denominator,
                detached.masked_fill(~counted, 0.0).max(),
                tokens,
            ]
        ).tolist()
    names = ("clip_frac", "approx_kl", "ratio_mean", "ratio_max", "tokens")
    metrics = dict(zip(names, statistics, strict=True))
    if importance is not None:
        with torch.no_grad():
            cap = math.inf if importance_cap is None else importance_cap
            metrics["importance_mean"] = float((importance * counted).sum() / denominator)
            metrics["importance_max"] = float(importance.masked_fill(~counted, 0.0).max())
            truncated = ((importance > cap) & counted).sum() / denominator
            metrics["importance_truncated"] = float(truncated)
    return loss, metrics


def kl_penalty(
    logprobs: torch.Tensor, ref_logprobs: torch.Tensor, kind: KLKind = "low_var_kl"
) -> torch.Tensor:
    """A per-token estimate of KL(current || reference) from tokens the current policy sampled.

    With ``d = ref_logprobs - logprobs``:

    - ``"k1"``: ``-d`` (unbiased, high variance, can be negative);
    - ``"k2"``: ``d**2 / 2`` (biased, low variance);
    - ``"k3"``: ``exp(d) - d - 1`` (unbiased, never negative);
    - ``"low_var_kl"``: k3 as verl computes it, ``d`` clamped to +-20 and the result to
      [-10, 10], so a rare token far off the reference cannot dominate the loss.

    Returns:
        A ``[B, T]`` tensor; mask and reduce it with :func:`aggregate`.
    """
    check_choice(kind, KL_KINDS, "kl_kind")
    difference = ref_logprobs - logprobs
    if kind == "k1":
        return -difference
    if kind == "k2":
        return 0.5 * difference.square()
    if kind == "k3":
        return torch.exp(difference) - difference - 1.0
    difference = difference.clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO)
    return (torch.exp(difference) - difference - 1.0).clamp(-10.0, 10.0)


def sft_loss(
    logprobs: torch.Tensor, mask: torch.Tensor, normalizer: float | None = None
) -> torch.Tensor:
    """The negative log-likelihood of the masked tokens, token-mean (``normalizer``: see
    :func:`aggregate`; default the number of masked tokens)."""
    return -aggregate(logprobs, mask, normalizer=normalizer)
