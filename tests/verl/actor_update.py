"""Run agl-verl's training step with verl's real actor, in this process; print JSON.

Run by ``test_actor_update.py`` in a subprocess (it changes process-wide state: verl's
platform, a one-rank process group). It runs the actor worker verl's trainer uses
(``ActorRolloutRefWorker``, FSDP2 engine, verl's PPO loss) without Ray: the worker's methods
are what ``RayPPOTrainer`` calls on its worker group. :class:`agl_verl.engine.VerlEngine`
then runs its step on it: fitting the batch, verl's ``_compute_old_log_prob``, agl's
advantages, the PPO update, verl's metrics.

The policy is served by agl-torch's :class:`~agl_torch.server.PolicyServer` on the same
device, in place of verl's vLLM replicas: the step's "sleep the replicas" is recorded, and its
"update the replicas' weights" gathers the actor's full weights and swaps them into the server,
which answers with the new weight version.

On ``cuda``: verl's CUDA platform and a one-rank NCCL group. On ``cpu``: verl 0.9 knows only
GPU platforms, so the CPU one of ``verl_cpu_platform`` is set, with a one-rank gloo group.

Usage: ``python actor_update.py MODEL_DIR [cpu|cuda]``
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

for key, value in {
    "MASTER_ADDR": "127.0.0.1",
    "MASTER_PORT": "29500",
    "RANK": "0",
    "WORLD_SIZE": "1",
    "LOCAL_RANK": "0",
    "LOCAL_WORLD_SIZE": "1",
    "TOKENIZERS_PARALLELISM": "false",
    # verl registers its FSDP engines for GPU devices only; look them up as for CUDA.
    "VERL_ENGINE_DEVICE": "cuda",
}.items():
    os.environ.setdefault(key, value)

import torch  # noqa: E402


def install_cpu_platform() -> None:
    """verl's platform for CPU tensors and gloo (see ``verl_cpu_platform``)."""
    from verl.plugin.platform import set_platform
    from verl_cpu_platform import CPUPlatform

    set_platform(CPUPlatform())


class ServedReplica:
    """verl's checkpoint manager for one agl-torch policy server instead of vLLM replicas."""

    def __init__(self, server: Any, module: torch.nn.Module) -> None:
        self.server = server
        self.module = module
        self.calls: list[str] = []

    def sleep_replicas(self) -> None:
        # The server keeps serving during the update (it swaps weights between batches).
        self.calls.append("sleep")

    def update_weights(self, step: int) -> None:
        version = self.server.update_weights(get_full_state(self.module))
        self.calls.append(f"update_weights:{step}->v{version}")


def served_logprobs(server: Any, samples: list[Any]) -> list[float]:
    """The summed logprob the served model gives each sample's response."""
    from agl_torch.policy import token_logprobs

    model = server.engine.model
    sums = []
    for sample in samples:
        ids = torch.tensor([[*sample.prompt_ids, *sample.response_ids]], device=model.device)
        with torch.inference_mode():
            logprobs = token_logprobs(model, ids, torch.ones_like(ids))
        sums.append(float(logprobs[0, len(sample.prompt_ids) :].sum()))
    return sums


def main(model_dir: str, device: str) -> dict[str, Any]:
    started = time.perf_counter()
    if device == "cpu":
        install_cpu_platform()
    else:
        torch.cuda.set_device(0)
    import torch.distributed as dist
    from transformers import AutoTokenizer
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer
    from verl.utils import tensordict_utils as tu
    from verl.workers.engine_workers import ActorRolloutRefWorker
    from verl.workers.utils.padding import left_right_2_no_padding, no_padding_2_padding

    from agl.lightning import GRPO, Group, Transition, TransitionBatch
    from agl_torch.server import PolicyServer
    from agl_verl.config import build_config
    from agl_verl.dataproto import to_dataproto
    from agl_verl.engine import VerlEngine, _LoopPosition

    if not dist.is_initialized():
        backend = "gloo" if device == "cpu" else "nccl"
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
    config = build_config(
        {
            "actor_rollout_ref.model.override_config": {"attn_implementation": "sdpa"},
            "actor_rollout_ref.model.use_remove_padding": False,
            "actor_rollout_ref.model.enable_gradient_checkpointing": False,
            # FSDP1 refuses CPU parameters; FSDP2 runs on a one-rank gloo group.
            "actor_rollout_ref.actor.strategy": "fsdp2",
            "actor_rollout_ref.actor.fsdp_config.use_torch_compile": False,
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 2,
            "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": 3,
            "actor_rollout_ref.actor.optim.lr": 1e-2,
            "trainer.device": device,
        },
        model_path=model_dir,
        batch_size=2,
        n_samples=2,
        max_prompt_length=32,
        max_response_length=16,
    )
    worker = ActorRolloutRefWorker(config=config.actor_rollout_ref, role="actor")
    worker.init_model()
    worker._dispatch_info = {"actor": [0]}  # one data-parallel rank
    setup_s = time.perf_counter() - started

    # Two tasks x two rollouts; both rollouts of task b made two calls.
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    ids = tokenizer.encode

    def call(prompt: str, response: str, rollout: str, group: str, **fields: Any) -> Transition:
        return Transition(
            agent="solver",
            prompt_ids=ids(prompt),
            response_ids=ids(response),
            response_logprobs=None,
            reward=0.0,
            advantage=0.0,
            rollout_id=rollout,
            group_id=group,
            step=1,
            **fields,
        )

    samples = [
        call("what is 2 + 3 ?", "5", "r1", "a"),
        call("what is 2 + 3 ?", "6", "r2", "a"),
        call("what is 7 - 4 ?", "calc(7-4)", "r3", "b", weight=0.5),
        call("what is 7 - 4 ? result 3", "3", "r3", "b", call_index=1, weight=0.5),
        call("what is 7 - 4 ?", "calc(7+4)", "r4", "b", weight=0.5),
        call("what is 7 - 4 ? result 11", "11", "r4", "b", call_index=1, weight=0.5),
    ]
    rewards = {"r1": 1.0, "r2": 0.0, "r3": 1.0, "r4": 0.0}
    groups = [
        Group("a", [1.0, 0.0], [[1.0], [0.0]]),
        Group("b", [1.0, 0.0], [[1.0, 1.0], [0.0, 0.0]]),
    ]
    estimates = [e for e in GRPO().estimate(groups) if e is not None]
    advantages = iter(a for estimate in estimates for rollout in estimate for a in rollout)
    for sample in samples:
        sample.reward = rewards[sample.rollout_id]
        sample.advantage = next(advantages)
    data = to_dataproto(
        TransitionBatch(samples),
        pad_token_id=tokenizer.pad_token_id or 0,
        max_prompt_length=32,
        max_response_length=16,
        weight_advantages=True,
        meta_info={"temperature": config.actor_rollout_ref.rollout.temperature},
    )

    def logprobs(batch: Any) -> torch.Tensor:
        packed = left_right_2_no_padding(batch.to_tensordict())
        tu.assign_non_tensor(packed, calculate_entropy=False, compute_loss=False)
        output = worker.compute_log_prob(packed)
        return no_padding_2_padding(tu.get(output, "log_probs"), packed).float()

    before_logprobs = logprobs(data)
    module = worker.actor.engine.module
    before = {name: p.detach().clone() for name, p in module.named_parameters()}
    server = PolicyServer(model_dir, device=device)
    server.start()
    served_before = served_logprobs(server, samples)

    # verl's trainer object with the worker in place of its Ray worker group (no __init__:
    # that would start Ray and build verl's datasets).
    trainer = RayPPOTrainer.__new__(RayPPOTrainer)
    trainer.config = config
    trainer.actor_rollout_wg = worker
    trainer.use_reference_policy = False
    trainer.use_critic = False
    trainer.use_prefix_grouper = False
    trainer.tokenizer = tokenizer
    trainer.checkpoint_manager = ServedReplica(server, module)
    trainer.train_dataloader = _LoopPosition(1)
    engine = VerlEngine(config, total_steps=1, steps_per_epoch=1)
    engine.trainer = trainer

    update_started = time.perf_counter()
    metrics = engine.update(data, step=1)
    update_s = time.perf_counter() - update_started

    after_logprobs = logprobs(data)
    mask = data.batch["response_mask"].float()
    changed = sum(
        not torch.equal(before[name], p.detach()) for name, p in module.named_parameters()
    )
    # The served model now holds exactly the actor's weights, and says so over HTTP.
    served = server.engine.model.state_dict()
    trained = get_full_state(module)
    served_equal = sum(torch.equal(served[name].cpu(), t.cpu()) for name, t in trained.items())
    import httpx

    reply = httpx.post(
        f"{server.url}/chat/completions",
        json={"model": "policy", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4},
        timeout=60,
    )
    served_after = served_logprobs(server, samples)
    server.stop()
    result = {
        "metrics": metrics,
        "replica_calls": trainer.checkpoint_manager.calls,
        "parameters": len(before),
        "changed": changed,
        "advantages": data.batch["advantages"][:, 0].tolist(),
        "logprob_delta": ((after_logprobs - before_logprobs) * mask).sum(-1).tolist(),
        "served_parameters": len(trained),
        "served_equal": served_equal,
        "served_version": reply.headers.get("x-agl-weight-version"),
        "served_delta": [a - b for a, b in zip(served_after, served_before, strict=True)],
        "device": str(next(module.parameters()).device),
        "served_device": str(server.engine.device),
        "setup_s": setup_s,
        "update_s": update_s,
        "samples": len(data),
    }
    dist.destroy_process_group()
    return result


def get_full_state(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(module, options=StateDictOptions(full_state_dict=True))


if __name__ == "__main__":
    print("RESULT " + json.dumps(main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "cpu")))
