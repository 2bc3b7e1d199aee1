"""verl's configuration: built from verl's own YAML, overridden, validated before any GPU work."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from agl_verl.config import AGL_DEFAULTS, VerlConfigError, build_config, validate_config

CONFIGS = Path(__file__).parents[2] / "packages" / "agl-verl" / "configs"


def test_verls_defaults_agls_defaults_run_values_then_overrides(model_dir: Path) -> None:
    config = build_config(
        {"actor_rollout_ref.actor.optim.lr": 3e-6, "trainer": {"project_name": "mine"}},
        model_path=str(model_dir),
        batch_size=16,
        n_samples=8,
        max_prompt_length=1024,
    )
    # verl's own defaults are there (a key agl does not touch)
    assert config.actor_rollout_ref.actor.clip_ratio == 0.2
    assert config.actor_rollout_ref.actor.strategy == "fsdp"
    # agl's defaults
    assert config.trainer.use_v1 is False
    assert config.algorithm.adv_estimator == "agl"
    assert config.actor_rollout_ref.rollout.name == "vllm"
    # the run's values
    assert config.actor_rollout_ref.model.path == str(model_dir)
    assert config.data.train_batch_size == 16
    assert config.actor_rollout_ref.rollout.n == 8
    assert config.data.max_prompt_length == 1024
    assert config.actor_rollout_ref.rollout.prompt_length == 1024  # verl's interpolation
    # the user's overrides, dotted or nested
    assert config.actor_rollout_ref.actor.optim.lr == 3e-6
    assert config.trainer.project_name == "mine"
    validate_config(config, n_gpus_available=1)


def test_overrides_can_be_yaml_text_or_a_yaml_file(model_dir: Path, tmp_path: Path) -> None:
    text = "algorithm:\n  adv_estimator: grpo\ntrainer:\n  save_freq: 5\n"
    from_text = build_config(text, model_path=str(model_dir))
    path = tmp_path / "overrides.yaml"
    path.write_text(text)
    from_file = build_config(path, model_path=str(model_dir))
    from_string_path = build_config(str(path), model_path=str(model_dir))
    for config in (from_text, from_file, from_string_path):
        assert config.algorithm.adv_estimator == "grpo"
        assert config.trainer.save_freq == 5


def test_user_overrides_win_over_the_run_values(model_dir: Path) -> None:
    config = build_config(
        {"data.train_batch_size": 32, "actor_rollout_ref.actor.ppo_mini_batch_size": 8},
        model_path=str(model_dir),
        batch_size=16,
    )
    assert config.data.train_batch_size == 32
    assert config.actor_rollout_ref.actor.ppo_mini_batch_size == 8


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            {"actor_rollout_ref.actor.optim.lrr": 1e-6},
            "no key 'actor_rollout_ref.actor.optim.lrr'; "
            "did you mean actor_rollout_ref.actor.optim.lr",
        ),
        ({"trainer": {"n_gpu_per_node": 2}}, "did you mean trainer.n_gpus_per_node"),
        ("trainer:\n  logger: [console\n", "not valid YAML"),
        ("- just\n- a list\n", "must be a mapping"),
        ("missing-file.yaml", "does not exist"),
    ],
)
def test_bad_overrides_name_what_is_wrong(model_dir: Path, overrides: object, message: str) -> None:
    with pytest.raises(VerlConfigError, match=message.replace("[", r"\[")):
        build_config(overrides, model_path=str(model_dir))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"trainer.n_gpus_per_node": 8}, "asks for 8 GPUs .* the Ray cluster has 1"),
        ({"trainer.use_v1": True}, "trainer.use_v1 is True; agl-verl needs False"),
        ({"actor_rollout_ref.rollout.name": "hf"}, "rollout.name is 'hf'"),
        ({"actor_rollout_ref.rollout.mode": "sync"}, "rollout.mode is 'sync'"),
        ({"actor_rollout_ref.rollout.calculate_log_probs": False}, "calculate_log_probs"),
        ({"algorithm.adv_estimator": "grpoo"}, "'grpoo' is neither agl's nor one of verl's"),
        (
            {"actor_rollout_ref.rollout.tensor_model_parallel_size": 2},
            "tensor_model_parallel_size=2 must divide trainer.n_gpus_per_node=1",
        ),
        (
            {"actor_rollout_ref.actor.ppo_mini_batch_size": 64},
            r"verl rejected the config: train_batch_size \(8\) must be >= "
            r"actor.ppo_mini_batch_size \(64\)",
        ),
        (
            {"algorithm.adv_estimator": "gae", "critic.ppo_micro_batch_size_per_gpu": None},
            "verl rejected the config: .*critic.micro_batch_size_per_gpu",
        ),
        (
            {
                "actor_rollout_ref.rollout.log_prob_micro_batch_size": 2,
                "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": 2,
            },
            "verl rejected the config: .*You have set both",
        ),
    ],
)
def test_validation_fails_before_any_gpu_work_with_the_key_to_change(
    model_dir: Path, overrides: dict[str, object], message: str
) -> None:
    config = build_config(overrides, model_path=str(model_dir), batch_size=8, n_samples=2)
    with pytest.raises(VerlConfigError, match=message):
        validate_config(config, n_gpus_available=1)


def test_a_model_path_must_be_a_model_folder(tmp_path: Path) -> None:
    with pytest.raises(VerlConfigError, match="not a model folder"):
        validate_config(build_config(model_path=str(tmp_path)))
    with pytest.raises(VerlConfigError, match=r"model\.path is not set"):
        validate_config(build_config({"actor_rollout_ref.model.path": ""}))
    # a hub id is left to verl (it downloads on the GPU machine)
    validate_config(build_config(model_path="Qwen/Qwen2.5-0.5B-Instruct"))


def test_verls_own_estimators_are_accepted(model_dir: Path) -> None:
    for estimator in ("grpo", "rloo", "reinforce_plus_plus", "gae"):
        validate_config(
            build_config({"algorithm.adv_estimator": estimator}, model_path=str(model_dir))
        )


@pytest.mark.parametrize("name", ["1gpu.yaml", "8gpu.yaml", "2nodes.yaml"])
def test_the_shipped_recipes_are_valid_verl_configs(model_dir: Path, name: str) -> None:
    config = build_config(CONFIGS / name, model_path=str(model_dir))
    gpus = int(config.trainer.n_gpus_per_node) * int(config.trainer.nnodes)
    validate_config(config, n_gpus_available=gpus)
    assert OmegaConf.select(config, "actor_rollout_ref.rollout.name") == "vllm"


def test_every_agl_default_lands_in_verls_tree_as_given() -> None:
    config = build_config()

    def leaves(tree: dict[str, object], prefix: str = "") -> list[tuple[str, object]]:
        out: list[tuple[str, object]] = []
        for key, value in tree.items():
            if isinstance(value, dict):
                out += leaves(value, f"{prefix}{key}.")
            else:
                out.append((f"{prefix}{key}", value))
        return out

    for key, value in leaves(AGL_DEFAULTS):
        if isinstance(value, str) and value.startswith("${"):
            continue  # an interpolation: resolved against another key
        assert OmegaConf.select(config, key) == value, key
    # the interpolated ones follow the keys they name
    assert config.reward.reward_model.rollout.name == config.actor_rollout_ref.rollout.name
    assert config.critic.model.path == config.actor_rollout_ref.model.path
