"""verl's configuration, as verl's own config: built, overridden and validated before any GPU work.

:func:`build_config` composes verl's ``ppo_trainer.yaml`` with Hydra exactly as
``python -m verl.trainer.main_ppo`` does, applies agl's defaults (:data:`AGL_DEFAULTS`), then the
values agl derives from the run (model path, batch size, samples per task, lengths), then the
user's overrides: a nested dict, a dict of dotted keys (``{"actor_rollout_ref.actor.optim.lr":
1e-6}``), a YAML file, or a YAML string. Keys verl does not know are an error that names the
key and the closest ones verl has, never silently ignored; only under the mappings verl leaves
empty for free-form settings (``actor_rollout_ref.model.override_config``, an engine's
``engine_kwargs``, ...) can new keys be added.

:func:`validate_config` runs agl's checks and verl's own ``validate_config``; every failure
is a :class:`VerlConfigError` naming the key and the fix.
"""

from __future__ import annotations

import difflib
import importlib.util
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException

from agl import AglError

__all__ = [
    "AGL_DEFAULTS",
    "AGL_ESTIMATORS",
    "VerlConfigError",
    "build_config",
    "check_model_path",
    "load_overrides",
    "merge_layer",
    "set_dotted",
    "validate_config",
    "verl_defaults",
]

AGL_ESTIMATORS = ("agl",)
"""Advantage estimators agl computes itself (LightningRL's credit assignment), besides verl's."""

AGL_DEFAULTS: dict[str, Any] = {
    "trainer": {
        # agl runs the step loop: the classic trainer's engine (worker groups, checkpoint engine,
        # vLLM replicas), not verl 0.9's TransferQueue trainer, whose loop owns generation.
        "use_v1": False,
        "logger": ["console"],
        # agl validates with its own rollouts (val tasks through the agent), not verl's.
        "val_before_train": False,
        "test_freq": -1,
        "nnodes": 1,
        "n_gpus_per_node": 1,
        "total_epochs": 1,
        "project_name": "agl",
        "experiment_name": "lightningrl-verl",
    },
    "data": {
        # agl feeds tasks to agents; verl's parquet dataset is not used.
        "train_files": None,
        "val_files": None,
        "train_batch_size": 8,
        "max_prompt_length": 2048,
        "max_response_length": 1024,
        "dataloader_num_workers": 0,
    },
    "actor_rollout_ref": {
        "hybrid_engine": True,
        "actor": {
            "ppo_mini_batch_size": 8,
            "ppo_micro_batch_size_per_gpu": 4,
            "use_kl_loss": False,
            "optim": {"lr": 1e-6},
        },
        "ref": {"log_prob_micro_batch_size_per_gpu": 4},
        "rollout": {
            "name": "vllm",
            "mode": "async",
            "n": 4,
            "tensor_model_parallel_size": 1,
            "gpu_memory_utilization": 0.5,
            "log_prob_micro_batch_size_per_gpu": 4,
            "calculate_log_probs": True,
            "agent": {"num_workers": 1},
        },
    },
    "algorithm": {"adv_estimator": "agl", "use_kl_in_reward": False},
    # A critic (verl's GAE) starts from the policy's weights unless told otherwise.
    "critic": {
        "model": {"path": "${actor_rollout_ref.model.path}"},
        "ppo_micro_batch_size_per_gpu": 4,
    },
    # Rewards come from the agents (emit_reward); a reward model, if enabled, uses the engine of
    # the rollout unless told otherwise.
    "reward": {"reward_model": {"rollout": {"name": "${actor_rollout_ref.rollout.name}"}}},
}
"""What agl sets on top of verl's defaults (each can be overridden)."""


class VerlConfigError(AglError):
    """A verl configuration that cannot run; the message names the key and the fix."""


def config_dir() -> Path:
    """verl's ``trainer/config`` folder (found without importing verl, which takes seconds)."""
    spec = importlib.util.find_spec("verl")
    if spec is None or not spec.submodule_search_locations:
        raise VerlConfigError("verl is not installed: pip install agl-verl")
    return Path(next(iter(spec.submodule_search_locations))) / "trainer" / "config"


def verl_defaults(config_name: str = "ppo_trainer") -> DictConfig:
    """One of verl's trainer configs, Hydra-composed as verl's entry point composes it
    (``ppo_trainer`` for ``main_ppo``, ``sft_trainer_engine`` for the SFT trainer)."""
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(config_dir()), version_base=None):
        config: DictConfig = compose(config_name=config_name)
    return config


def load_overrides(overrides: Mapping[str, Any] | str | os.PathLike[str] | None) -> DictConfig:
    """User overrides as an OmegaConf tree.

    Accepts a nested mapping, a mapping of dotted keys, a path to a YAML file, or YAML text.
    """
    if overrides is None:
        return OmegaConf.create({})
    if isinstance(overrides, DictConfig):
        return overrides
    if isinstance(overrides, Mapping):
        nested: dict[str, Any] = {}
        for key, value in overrides.items():
            if not isinstance(key, str):
                raise VerlConfigError(f"verl config keys are strings, got {key!r}")
            set_dotted(nested, key, value)
        return OmegaConf.create(nested)
    text: str
    path = Path(overrides)
    if isinstance(overrides, os.PathLike) or (
        "\n" not in str(overrides) and str(overrides).endswith((".yaml", ".yml"))
    ):
        if not path.is_file():
            raise VerlConfigError(f"verl config file {str(path)!r} does not exist")
        text = path.read_text(encoding="utf-8")
    else:
        text = str(overrides)
    import yaml

    try:
        loaded = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise VerlConfigError(f"verl config overrides are not valid YAML: {exc}") from exc
    if loaded is None:
        return OmegaConf.create({})
    if not isinstance(loaded, Mapping):
        raise VerlConfigError("verl config overrides must be a mapping of keys to values")
    return load_overrides(loaded)


def set_dotted(tree: dict[str, Any], key: str, value: Any) -> None:
    """Set ``key`` (dotted: ``"a.b.c"``) in the nested dict ``tree``."""
    *parents, last = key.split(".")
    node = tree
    for part in parents:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise VerlConfigError(f"verl config key {key!r} sets a value under a non-mapping")
        node = child
    if isinstance(value, Mapping) and isinstance(node.get(last), dict):
        for sub_key, sub_value in value.items():
            set_dotted(node[last], str(sub_key), sub_value)
    elif isinstance(value, Mapping):
        node[last] = {}
        for sub_key, sub_value in value.items():
            set_dotted(node[last], str(sub_key), sub_value)
    else:
        node[last] = value


def merge_layer(base: DictConfig, layer: DictConfig, origin: str) -> DictConfig:
    """``layer`` merged over ``base``; a key ``base`` lacks raises (see :func:`_check_keys`),
    the error naming ``origin``."""
    _check_keys(base, layer, origin, "")
    try:
        with open_dict(base):
            merged = OmegaConf.merge(base, layer)
    except OmegaConfBaseException as exc:
        raise VerlConfigError(f"{origin}: {exc}".split("\n", 1)[0]) from exc
    assert isinstance(merged, DictConfig)
    OmegaConf.set_struct(merged, True)
    return merged


def _check_keys(base: DictConfig, layer: DictConfig, origin: str, prefix: str) -> None:
    """Every key of ``layer`` must exist in ``base``, except under a mapping verl leaves
    empty for free-form settings (``model.override_config``, ``engine_kwargs``, ...)."""
    for key in layer.keys():  # noqa: SIM118 (DictConfig: `in` skips '???' values)
        name = f"{prefix}{key!s}"
        if key not in base.keys():  # noqa: SIM118
            # (`in base` alone is False for verl's mandatory "???" values)
            if len(base) == 0:
                continue
            raise VerlConfigError(_unknown_key_message(base, name, origin))
        child = layer._get_node(key)
        target = base._get_node(key)
        if isinstance(child, DictConfig) and isinstance(target, DictConfig) and len(target):
            _check_keys(target, child, origin, f"{name}.")


def _unknown_key_message(parent: DictConfig, key: str, origin: str) -> str:
    parent_key, _, leaf = key.rpartition(".")
    known = [str(k) for k in parent.keys()]  # noqa: SIM118
    close = difflib.get_close_matches(leaf, known, n=3)
    hint = (
        f"; did you mean {', '.join(f'{parent_key}.{c}'.lstrip('.') for c in close)}?"
        if close
        else ""
    )
    return f"{origin}: verl's config has no key {key!r}{hint}"


def build_config(
    overrides: Mapping[str, Any] | str | os.PathLike[str] | None = None,
    *,
    model_path: str | None = None,
    batch_size: int | None = None,
    n_samples: int | None = None,
    max_prompt_length: int | None = None,
    max_response_length: int | None = None,
) -> DictConfig:
    """verl's full trainer config: verl defaults, agl defaults, the run's values, the overrides.

    Args:
        overrides: The user's settings (see :func:`load_overrides`); they win over everything.
        model_path: ``actor_rollout_ref.model.path`` (a local folder or a hub id).
        batch_size: Tasks per step (``data.train_batch_size``).
        n_samples: Rollouts per task (``actor_rollout_ref.rollout.n``).
        max_prompt_length / max_response_length: Longest prompt / response trained on
            (``data.max_prompt_length`` / ``data.max_response_length``).

    Raises:
        VerlConfigError: an override names a key verl does not have, or is not valid YAML.
    """
    config = verl_defaults()
    config = merge_layer(config, OmegaConf.create(AGL_DEFAULTS), "agl defaults")
    derived: dict[str, Any] = {}
    if model_path is not None:
        set_dotted(derived, "actor_rollout_ref.model.path", model_path)
    if batch_size is not None:
        set_dotted(derived, "data.train_batch_size", batch_size)
        # verl requires ppo_mini_batch_size <= train_batch_size; one mini-batch per step unless
        # the user asks for more.
        set_dotted(derived, "actor_rollout_ref.actor.ppo_mini_batch_size", batch_size)
    if n_samples is not None:
        set_dotted(derived, "actor_rollout_ref.rollout.n", n_samples)
    if max_prompt_length is not None:
        set_dotted(derived, "data.max_prompt_length", max_prompt_length)
    if max_response_length is not None:
        set_dotted(derived, "data.max_response_length", max_response_length)
    config = merge_layer(config, OmegaConf.create(derived), "agl-verl settings")
    config = merge_layer(config, load_overrides(overrides), "verl config overrides")
    if OmegaConf.select(config, "critic.enable") is None:
        # verl's own rule (a critic exactly for GAE), said once here rather than warned about.
        config.critic.enable = str(config.algorithm.adv_estimator) == "gae"
    return config


def validate_config(config: DictConfig, *, n_gpus_available: int | None = None) -> None:
    """Check that ``config`` can run with agl, before anything starts on a GPU.

    agl's checks come first (each names the key to change), then verl's own
    ``verl.utils.config.validate_config``.

    Args:
        config: From :func:`build_config`.
        n_gpus_available: GPUs the Ray cluster has (None: not checked).

    Raises:
        VerlConfigError: what is wrong and how to fix it.
    """
    missing = sorted(OmegaConf.missing_keys(config))
    if missing:
        raise VerlConfigError(f"verl config values are missing: {', '.join(missing)}")
    check_model_path("actor_rollout_ref.model.path", config.actor_rollout_ref.model.path)
    _expect(config, "trainer.use_v1", False, "agl-verl drives the classic trainer's engine")
    _expect(config, "actor_rollout_ref.hybrid_engine", True, "verl 0.9 trains hybrid only")
    _expect(config, "actor_rollout_ref.rollout.mode", "async", "agents call vLLM's HTTP server")
    name = config.actor_rollout_ref.rollout.name
    if name not in ("vllm", "sglang"):
        raise VerlConfigError(
            f"actor_rollout_ref.rollout.name is {name!r}: agl's gateway needs an engine that "
            "serves the OpenAI API with token ids (vllm or sglang)"
        )
    if not config.actor_rollout_ref.rollout.calculate_log_probs:
        raise VerlConfigError(
            "actor_rollout_ref.rollout.calculate_log_probs is false: agl needs the engine's "
            "logprobs (the behaviour policy of each sampled token)"
        )
    _check_estimator(str(config.algorithm.adv_estimator))
    for key in ("data.train_batch_size", "actor_rollout_ref.rollout.n"):
        value = OmegaConf.select(config, key)
        if not isinstance(value, int) or value < 1:
            raise VerlConfigError(f"{key} must be a positive integer, got {value!r}")
    n_gpus = int(config.trainer.n_gpus_per_node) * int(config.trainer.nnodes)
    if n_gpus < 1:
        raise VerlConfigError("trainer.n_gpus_per_node * trainer.nnodes must be at least 1")
    if n_gpus_available is not None and n_gpus > n_gpus_available:
        raise VerlConfigError(
            f"the config asks for {n_gpus} GPUs (trainer.n_gpus_per_node="
            f"{config.trainer.n_gpus_per_node} x trainer.nnodes={config.trainer.nnodes}) but "
            f"the Ray cluster has {n_gpus_available}"
        )
    tp = int(config.actor_rollout_ref.rollout.tensor_model_parallel_size)
    if tp < 1 or int(config.trainer.n_gpus_per_node) % tp:
        raise VerlConfigError(
            f"actor_rollout_ref.rollout.tensor_model_parallel_size={tp} must divide "
            f"trainer.n_gpus_per_node={config.trainer.n_gpus_per_node}"
        )
    _verl_validate(config)


def check_model_path(key: str, model_path: Any) -> None:
    """A model is named, and a local path to one is a Hugging Face model folder."""
    if not model_path:
        raise VerlConfigError(f"{key} is not set: give the model to train")
    local = Path(os.path.expanduser(str(model_path)))
    if (str(model_path).startswith(("/", ".", "~")) or local.exists()) and not (
        local / "config.json"
    ).is_file():
        raise VerlConfigError(
            f"{key} {str(model_path)!r} is not a model folder (no config.json there)"
        )


def _expect(config: DictConfig, key: str, wanted: Any, why: str) -> None:
    value = OmegaConf.select(config, key)
    if value != wanted:
        raise VerlConfigError(f"{key} is {value!r}; agl-verl needs {wanted!r} ({why})")


def _check_estimator(name: str) -> None:
    if name in AGL_ESTIMATORS:
        return
    from verl.trainer.ppo import core_algos

    try:
        core_algos.get_adv_estimator_fn(name)
    except (ValueError, KeyError) as exc:
        known = sorted({*AGL_ESTIMATORS, *(e.value for e in core_algos.AdvantageEstimator)})
        raise VerlConfigError(
            f"algorithm.adv_estimator {name!r} is neither agl's nor one of verl's: "
            f"expected one of {known}"
        ) from exc


def _verl_validate(config: DictConfig) -> None:
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config as verl_validate

    checked = config.copy()
    if checked.algorithm.adv_estimator in AGL_ESTIMATORS:
        # verl decides whether a critic is needed from the estimator; agl's needs none.
        checked.algorithm.adv_estimator = "grpo"
    try:
        verl_validate(
            config=checked,
            use_reference_policy=need_reference_policy(checked),
            use_critic=need_critic(checked),
        )
    except Exception as exc:  # verl raises assertions, ValueErrors and Hydra's errors alike
        cause = exc.__cause__ if exc.__cause__ is not None else exc
        raise VerlConfigError(f"verl rejected the config: {cause}") from exc
