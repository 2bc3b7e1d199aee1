"""agl-torch's settings objects: checked when built, taken whole by the algorithms."""

from __future__ import annotations

from pathlib import Path

import pytest

import agl
from agl_torch import (
    CheckpointSettings,
    LearnerSettings,
    LightningRLTorch,
    LoraSettings,
    ServingSettings,
    SFTTorch,
)


@pytest.mark.parametrize(
    ("build", "field", "message"),
    [
        (lambda: LearnerSettings(lr=0), "lr", r"LearnerSettings\.lr must be a number > 0"),
        (lambda: LearnerSettings(ppo_epochs=0), "ppo_epochs", "an integer >= 1"),
        (lambda: LearnerSettings(aggregation="mean"), "aggregation", "one of token-mean"),  # type: ignore[arg-type]
        (lambda: LearnerSettings(kl_kind="k9"), "kl_kind", "one of k1, k2, k3"),  # type: ignore[arg-type]
        (lambda: LearnerSettings(betas=(0.9, 1.5)), "betas", r"two numbers in \[0, 1\)"),
        (lambda: LearnerSettings(lora={"r": 4}), "lora", "a LoraSettings or None, got dict"),  # type: ignore[arg-type]
        (lambda: LearnerSettings(max_grad_norm=0), "max_grad_norm", "> 0 or None"),
        (lambda: LearnerSettings(off_policy="vtrace"), "off_policy", "one of auto, ppo"),  # type: ignore[arg-type]
        (lambda: LearnerSettings(importance_cap=0), "importance_cap", "> 0 or None"),
        (lambda: LoraSettings(r=0), "r", r"LoraSettings\.r must be an integer >= 1"),
        (lambda: ServingSettings(model_name=""), "model_name", "a non-empty string"),
        (lambda: ServingSettings(max_batch_size=0), "max_batch_size", ">= 1"),
        (lambda: CheckpointSettings(keep=0), "keep", r"CheckpointSettings\.keep"),
        (lambda: CheckpointSettings(every=-1), "every", ">= 0"),
    ],
)
def test_a_bad_setting_is_refused_when_built_naming_its_field(
    build: object, field: str, message: str
) -> None:
    with pytest.raises(agl.InvalidInputError, match=message) as caught:
        build()  # type: ignore[operator]
    assert caught.value.field == field


def test_off_policy_auto_corrects_when_the_loop_trains_on_stale_data(tmp_path: Path) -> None:
    assert LightningRLTorch(tmp_path).learner_settings().off_policy == "ppo"
    overlapped = LightningRLTorch(tmp_path, loop={"max_staleness": 1})
    assert overlapped.learner.off_policy == "auto"
    assert overlapped.learner_settings().off_policy == "decoupled"
    chosen = LightningRLTorch(tmp_path, loop={"max_staleness": 1}, learner={"off_policy": "ppo"})
    assert chosen.learner_settings().off_policy == "ppo"


def test_the_algorithms_take_the_groups_whole_or_as_mappings(tmp_path: Path) -> None:
    learner = LearnerSettings(lr=1e-3, lora=LoraSettings(r=4))
    rl = LightningRLTorch(tmp_path, learner=learner, sampling={"max_tokens": 32})
    assert rl.learner is learner
    assert rl.loop == agl.LoopSettings(n_samples=8)  # the RL default: a GRPO group of 8
    assert rl.sampling.parameters() == {"temperature": 1.0, "max_tokens": 32}
    assert rl.checkpoints == CheckpointSettings()
    sft = SFTTorch(tmp_path, loop={"batch_size": 2}, serving={"model_name": "student"})
    assert sft.loop == agl.LoopSettings(n_samples=4, batch_size=2)
    assert sft.policy.serving.model_name == "student"
    with pytest.raises(agl.InvalidInputError, match="learner must be a LearnerSettings"):
        LightningRLTorch(tmp_path, learner=1e-3)  # type: ignore[arg-type]
    with pytest.raises(agl.InvalidInputError, match="ServingSettings has no field 'devices'"):
        SFTTorch(tmp_path, serving={"devices": "cpu"})
    with pytest.raises(TypeError, match="unexpected keyword argument 'lr'"):
        LightningRLTorch(tmp_path, lr=1e-3)  # type: ignore[call-arg]
