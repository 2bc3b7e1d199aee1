"""verl's trainer engine, driven one step at a time by agl instead of verl's generation loop.

:class:`VerlEngine` builds what ``python -m verl.trainer.main_ppo`` builds (Ray, the
actor/rollout/reference worker group with FSDP, the critic when an estimator needs one, the
vLLM replicas, the checkpoint engine that syncs weights into them) with verl's own classes, and
exposes the three things agl's loop needs:

- :meth:`~VerlEngine.start`: start everything, load the latest checkpoint, load the weights
  into the vLLM replicas, and return their OpenAI-compatible addresses (the gateway's
  upstreams);
- :meth:`~VerlEngine.update`: one training step on a batch agl built from its rollouts: put
  the replicas to sleep (their GPU memory goes to training), recompute old logprobs,
  reference logprobs and values as configured, compute advantages, update the critic and the
  actor, save a checkpoint when due, and sync the new weights into the (woken) replicas;
- :meth:`~VerlEngine.close`.

What happens in :meth:`~VerlEngine.update` follows ``RayPPOTrainer.fit`` after its generation
step, calling the same methods, so verl's configuration means what verl's documentation says.
It needs GPUs: on a machine without one, :meth:`~VerlEngine.start` fails before Ray schedules
anything, naming what is missing.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig, OmegaConf, open_dict

from agl_verl.advantages import compute_advantages
from agl_verl.batching import fit_batch
from agl_verl.config import VerlConfigError, validate_config

if TYPE_CHECKING:
    from verl import DataProto

__all__ = ["VerlEngine"]

logger = logging.getLogger(__name__)


class _LoopPosition:
    """Stands where verl's trainer keeps its dataloader: agl's loop owns the data, so verl's
    checkpoints record only how many steps the run has done (``data.pt``)."""

    def __init__(self, steps_per_epoch: int) -> None:
        self.steps_per_epoch = max(1, steps_per_epoch)
        self.step = 0

    def __len__(self) -> int:
        return self.steps_per_epoch

    def state_dict(self) -> dict[str, int]:
        return {"agl_step": self.step}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.step = int(state.get("agl_step", 0))


class VerlEngine:
    """verl's workers and vLLM replicas, trained by agl one batch at a time.

    Args:
        config: verl's full config (:func:`agl_verl.config.build_config`).
        total_steps: Training steps in the run (the learning-rate schedule's length).
        steps_per_epoch: Steps in one pass over the training tasks.
    """

    def __init__(self, config: DictConfig, *, total_steps: int, steps_per_epoch: int) -> None:
        self.config = config
        self.total_steps = total_steps
        self.steps_per_epoch = steps_per_epoch
        self.trainer: Any = None
        self.addresses: list[str] = []
        self.resumed_step = 0
        self._started_ray = False

    # --- lifecycle ----------------------------------------------------------------------------

    def start(self) -> list[str]:
        """Start Ray (unless running), the workers and the replicas; return the replicas'
        OpenAI base URLs (``http://host:port/v1``).

        Raises:
            VerlConfigError: the config cannot run on this Ray cluster (too few GPUs, ...).
        """
        import ray
        from verl.trainer.constants_ppo import get_ppo_ray_runtime_env

        config = self.config
        if not ray.is_initialized():
            init_kwargs = OmegaConf.to_container(
                config.ray_kwargs.get("ray_init", {}), resolve=True
            )
            assert isinstance(init_kwargs, dict)
            runtime_env = OmegaConf.to_container(
                OmegaConf.merge(
                    get_ppo_ray_runtime_env(config), init_kwargs.pop("runtime_env", None) or {}
                )
            )
            ray.init(**{str(k): v for k, v in init_kwargs.items()}, runtime_env=runtime_env)
            self._started_ray = True
        validate_config(config, n_gpus_available=int(ray.cluster_resources().get("GPU", 0)))
        OmegaConf.resolve(config)
        self.trainer = self._build_trainer()
        self.trainer.init_workers()
        self.trainer.global_steps = 0
        self.trainer._load_checkpoint()
        self.resumed_step = int(self.trainer.global_steps)
        # Load the actor's weights into the replicas and wake them for the first rollouts.
        self.trainer.checkpoint_manager.update_weights(self.resumed_step)
        # verl reports "host:port"; the gateway's upstreams are OpenAI base URLs.
        self.addresses = [
            (address if address.startswith("http") else f"http://{address}").rstrip("/") + "/v1"
            for address in self.trainer.llm_server_manager.server_addresses
        ]
        return self.addresses

    def _build_trainer(self) -> Any:
        from verl.trainer.main_ppo_v0 import BaseTaskRunner
        from verl.trainer.ppo.ray_trainer import RayPPOTrainer
        from verl.trainer.ppo.utils import need_critic
        from verl.utils.config import omega_conf_to_dataclass

        config = self.config
        runner = BaseTaskRunner()
        actor_cls, worker_group_cls = runner.add_actor_rollout_worker(config)
        if need_critic(config):
            runner.add_critic_worker(config)
        runner.add_reward_model_resource_pool(config)
        runner.add_ref_policy_worker(config, actor_cls)
        pools = runner.init_resource_pool_mgr(config)
        model = omega_conf_to_dataclass(config.actor_rollout_ref.model)
        steps_per_epoch = self.steps_per_epoch
        total_steps = self.total_steps

        class AglRayPPOTrainer(RayPPOTrainer):  # type: ignore[misc,unused-ignore]
            """verl's trainer without verl's datasets: agl's loop owns the tasks."""

            def _create_dataloader(self, *args: Any, **kwargs: Any) -> None:
                self.train_dataloader = _LoopPosition(steps_per_epoch)
                self.total_training_steps = total_steps
                with open_dict(self.config):
                    if OmegaConf.select(self.config, "actor_rollout_ref.actor.optim"):
                        self.config.actor_rollout_ref.actor.optim.total_training_steps = total_steps
                    if OmegaConf.select(self.config, "critic.optim"):
                        self.config.critic.optim.total_training_steps = total_steps

        return AglRayPPOTrainer(
            config=config,
            tokenizer=model.tokenizer,
            processor=model.processor,
            role_worker_mapping=runner.role_worker_mapping,
            resource_pool_manager=pools,
            ray_worker_group_cls=worker_group_cls,
        )

    def close(self) -> None:
        """Stop verl's background writer and, if :meth:`start` started Ray, shut Ray down
        (which ends the worker and replica actors); a Ray cluster that was already running is
        left running."""
        trainer, self.trainer = self.trainer, None
        if trainer is not None:
            try:
                trainer._shutdown_dump_executor()
            except Exception:  # pragma: no cover - best effort at shutdown
                logger.exception("stopping verl's dump executor failed")
        if self._started_ray:
            import ray

            self._started_ray = False
            ray.shutdown()

    @property
    def pad_token_id(self) -> int:
        tokenizer = self.trainer.tokenizer if self.trainer is not None else None
        pad = getattr(tokenizer, "pad_token_id", None)
        if pad is None:
            pad = getattr(tokenizer, "eos_token_id", None)
        return int(pad or 0)

    # --- one step -----------------------------------------------------------------------------

    def update(self, data: DataProto, step: int) -> dict[str, float]:
        """Train on ``data`` (from :func:`agl_verl.dataproto.to_dataproto`); return metrics.

        The replicas sleep during the update and serve the new weights when it returns.
        """
        if self.trainer is None:
            raise VerlConfigError("VerlEngine.update() before start()")
        trainer = self.trainer
        config = self.config
        metrics: dict[str, float] = {}
        timing: dict[str, float] = {}
        trainer.global_steps = step
        trainer.train_dataloader.step = step
        with _timed(timing, "sleep_replicas"):
            trainer.checkpoint_manager.sleep_replicas()
        try:
            batch = self._train(data, step, metrics, timing)
        finally:
            # Whatever happened, the replicas serve again (with new weights if there are any).
            with _timed(timing, "update_weights"):
                trainer.checkpoint_manager.update_weights(step)
        if batch is not None:
            from verl.trainer.ppo.metric_utils import (
                compute_data_metrics,
                compute_timing_metrics,
            )

            metrics.update(compute_data_metrics(batch=batch, use_critic=trainer.use_critic))
            timing["step"] = sum(timing.values())
            metrics.update(compute_timing_metrics(batch=batch, timing_raw=timing))
        metrics.update({f"timing_s/{key}": value for key, value in timing.items()})
        if config.trainer.get("rollout_data_dir"):
            logger.info("rollout_data_dir is ignored: agl keeps every rollout in its store")
        return {key: float(value) for key, value in metrics.items() if _is_number(value)}

    def _train(
        self, data: DataProto, step: int, metrics: dict[str, float], timing: dict[str, float]
    ) -> DataProto | None:
        import torch
        from verl.utils.metric import reduce_metrics

        trainer = self.trainer
        config = self.config
        actor = config.actor_rollout_ref.actor
        mini_batches = max(1, int(config.data.train_batch_size) // int(actor.ppo_mini_batch_size))
        fitted = fit_batch(
            data,
            dp_size=trainer._get_dp_size(trainer.actor_rollout_wg, "actor"),
            mini_batches=mini_batches,
            micro_batch_size=self._micro_batch_size(),
            seed=step,
        )
        metrics["verl/samples"] = float(len(data))
        metrics["verl/dropped_for_dp"] = float(fitted.dropped)
        if fitted.data is None:
            metrics["verl/skipped_update"] = 1.0
            return None
        batch = fitted.data
        batch.meta_info["temperature"] = config.actor_rollout_ref.rollout.temperature
        if config.trainer.balance_batch:
            trainer._balance_batch(batch, metrics=metrics)
        batch.meta_info["global_token_num"] = torch.sum(
            batch.batch["attention_mask"], dim=-1
        ).tolist()
        batch.meta_info["images_seqlens"] = []
        correction = config.algorithm.get("rollout_correction", None)
        if correction and correction.get("bypass_mode", False):
            from verl.trainer.ppo.rollout_corr_helper import apply_bypass_mode

            apply_bypass_mode(
                batch=batch, rollout_corr_config=correction, policy_loss_config=actor.policy_loss
            )
        else:
            with _timed(timing, "old_log_prob"):
                old_log_prob, _ = trainer._compute_old_log_prob(batch)
                old_log_prob.batch.pop("entropys")
                batch = batch.union(old_log_prob)
        if trainer.use_reference_policy:
            with _timed(timing, "ref"):
                batch = batch.union(trainer._compute_ref_log_prob(batch))
        if trainer.use_critic:
            with _timed(timing, "values"):
                batch = batch.union(trainer._compute_values(batch))
        with _timed(timing, "adv"):
            batch = self._advantages(batch, metrics)
        if trainer.use_critic:
            with _timed(timing, "update_critic"):
                critic = trainer._update_critic(batch)
            metrics.update(reduce_metrics(critic.meta_info["metrics"]))
        if config.trainer.critic_warmup <= step:
            with _timed(timing, "update_actor"):
                output = self._update_actor(batch, fitted.mini_batch_size)
            metrics.update(reduce_metrics(output))
            save_freq = int(config.trainer.save_freq)
            if save_freq > 0 and (step % save_freq == 0 or step >= self.total_steps):
                with _timed(timing, "save_checkpoint"):
                    trainer._save_checkpoint()
        return batch

    def _micro_batch_size(self) -> int:
        """The per-GPU micro-batch every pass over the batch splits into (verl asserts each
        pass's share divides evenly): the lcm of the passes' sizes; 1 with dynamic batching."""
        ref = self.config.actor_rollout_ref
        if ref.actor.use_dynamic_bsz:
            return 1
        sizes = [
            ref.actor.ppo_micro_batch_size_per_gpu,
            ref.rollout.log_prob_micro_batch_size_per_gpu,
        ]
        if self.trainer is not None and self.trainer.use_reference_policy:
            sizes.append(ref.ref.log_prob_micro_batch_size_per_gpu)
        return math.lcm(*(int(size) for size in sizes if size))

    def _advantages(self, batch: DataProto, metrics: dict[str, float]) -> DataProto:
        """Advantages (agl's or verl's), then verl's rollout correction when configured."""
        config = self.config
        batch, kl_metrics = compute_advantages(
            batch, config, kl_controller=getattr(self.trainer, "kl_ctrl_in_reward", None)
        )
        metrics.update(kl_metrics)
        correction = config.algorithm.get("rollout_correction", None)
        if (
            correction is not None
            and not correction.get("bypass_mode", False)
            and "rollout_log_probs" in batch.batch.keys()  # noqa: SIM118
        ):
            from verl.trainer.ppo.rollout_corr_helper import (
                compute_rollout_correction_and_add_to_batch,
            )

            batch, is_metrics = compute_rollout_correction_and_add_to_batch(batch, correction)
            metrics.update(is_metrics)
        return batch

    def _update_actor(self, batch: DataProto, mini_batch_size: int) -> dict[str, Any]:
        """verl's ``RayPPOTrainer._update_actor`` with mini-batches sized for this step's
        sample count (an agent's calls per rollout vary, so the count does too)."""
        from verl.utils import tensordict_utils as tu
        from verl.utils.py_functional import rename_dict
        from verl.workers.utils.padding import left_right_2_no_padding

        config = self.config
        actor = config.actor_rollout_ref.actor
        batch.meta_info["multi_turn"] = config.actor_rollout_ref.rollout.multi_turn.enable
        batch_td = left_right_2_no_padding(batch.to_tensordict())
        tu.assign_non_tensor(
            batch_td,
            calculate_entropy=bool(actor.calculate_entropy or actor.entropy_coeff != 0.0),
            distillation_use_topk=False,
            distillation_only=False,
            global_batch_size=mini_batch_size,
            mini_batch_size=mini_batch_size,
            epochs=actor.ppo_epochs,
            seed=actor.data_loader_seed,
            dataloader_kwargs={"shuffle": actor.shuffle},
            compute_loss=True,
        )
        output = self.trainer.actor_rollout_wg.update_actor(batch_td)
        metrics: dict[str, Any] = rename_dict(tu.get(output, "metrics"), "actor/")
        if "actor/mfu" in metrics:
            metrics["perf/mfu/actor"] = metrics.pop("actor/mfu")
        return metrics


@contextmanager
def _timed(timing: dict[str, float], name: str) -> Iterator[None]:
    started = time.perf_counter()
    try:
        yield
    finally:
        timing[name] = timing.get(name, 0.0) + time.perf_counter() - started


def _is_number(value: Any) -> bool:
    try:
        float(value)
    except (TypeError, ValueError):
        return False
    return True
