"""Advantages for a converted batch: agl's credit assignment, or any of verl's estimators.

With ``algorithm.adv_estimator: agl`` (agl-verl's default) the advantages are the ones
LightningRL computed (rollout-level group baselines, per-step rewards, merged trajectories),
already in the batch; verl's estimators (``grpo``, ``rloo``, ``gae`` with a critic, ...) stay
available and run on the same batch exactly as in verl's own trainer, grouping samples by
``uid`` (the rollout group). Note that verl's outcome estimators treat every sample as its own
trajectory: in a multi-call agent, each call then counts as a separate sample of its group.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig

from agl_verl.config import AGL_ESTIMATORS, VerlConfigError

if TYPE_CHECKING:
    from verl import DataProto

__all__ = ["compute_advantages"]


def compute_advantages(
    data: DataProto, config: DictConfig, *, kl_controller: Any = None
) -> tuple[DataProto, dict[str, float]]:
    """Fill ``advantages`` and ``returns`` as ``config.algorithm`` says; return metrics too.

    ``token_level_rewards`` gets verl's in-reward KL penalty first when
    ``algorithm.use_kl_in_reward`` is set (``ref_log_prob`` must be in the batch, and
    ``kl_controller`` is verl's controller).

    Raises:
        VerlConfigError: agl's advantages were asked for but the batch has none, or the
            in-reward KL has no reference logprobs.
    """
    from verl.trainer.ppo.ray_trainer import apply_kl_penalty, compute_advantage

    algorithm = config.algorithm
    metrics: dict[str, float] = {}
    if algorithm.use_kl_in_reward:
        if "ref_log_prob" not in data.batch.keys() or kl_controller is None:  # noqa: SIM118
            raise VerlConfigError(
                "algorithm.use_kl_in_reward needs the reference policy's logprobs "
                "(ref_log_prob) and a KL controller"
            )
        data, kl_metrics = apply_kl_penalty(
            data, kl_ctrl=kl_controller, kl_penalty=algorithm.kl_penalty
        )
        metrics.update({k: float(v) for k, v in kl_metrics.items()})
    else:
        data.batch["token_level_rewards"] = data.batch["token_level_scores"]
    estimator = str(algorithm.adv_estimator)
    if estimator in AGL_ESTIMATORS:
        if "advantages" not in data.batch.keys():  # noqa: SIM118
            raise VerlConfigError(
                "algorithm.adv_estimator is 'agl' but the batch has no advantages: build it with "
                "to_dataproto(..., advantages=True)"
            )
        return data, metrics
    data = compute_advantage(
        data,
        adv_estimator=estimator,
        gamma=algorithm.gamma,
        lam=algorithm.lam,
        num_repeat=config.actor_rollout_ref.rollout.n,
        norm_adv_by_std_in_grpo=algorithm.get("norm_adv_by_std_in_grpo", True),
        config=algorithm,
    )
    return data, metrics
